"""Shared pytest fixtures: unique op namespaces per test (the op registry is process-wide)."""

import itertools

import pytest

_counter = itertools.count()


@pytest.fixture
def ns():
    """A fresh namespace name for the ops a test defines."""
    return f"pytest{next(_counter)}"
