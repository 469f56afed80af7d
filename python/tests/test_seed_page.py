"""The API page (the project's seed) run verbatim: its example code blocks execute, and every
signature block matches the Python signature of the function it documents."""

import inspect
import os
import re

import pytest

import tensorplay
import tensorplay.library

HERE = os.path.dirname(__file__)
SHARED = os.path.join(HERE, "..", "..", "..", "shared", "seed", "000_f17eb0d7938851bd.txt")


def page_text():
    path = SHARED if os.path.exists(SHARED) else os.path.join(HERE, "seed_api_page.txt")
    with open(path, encoding="utf-8") as f:
        return f.read().replace("&#x2192;", "→").replace("&#64;", "@")


def code_blocks():
    """``(is_python_signature, text)`` for every fenced block of the page."""
    return [(m.group(1) == "python", m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", page_text(), re.S)]


def test_page_has_blocks():
    kinds = [is_sig for is_sig, _ in code_blocks()]
    assert kinds.count(True) >= 17
    assert kinds.count(False) >= 1


def test_example_blocks_run(ns):
    examples = [text for sig, text in code_blocks() if not sig]
    assert examples
    for text in examples:
        # The page's op names are process-wide; give this run its own namespace.
        code = text.replace('"mylib::', f'"{ns}::')
        scope = {"tensorplay": tensorplay}
        exec(compile(code, "<api page>", "exec"), scope)
        ws = scope["weighted_sum"]
        x = tensorplay.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = tensorplay.tensor([0.5, 0.5, 2.0])
        y = ws(x, w)
        assert y.item() == pytest.approx(7.5)
        y.backward()
        assert x.grad.tolist() == [0.5, 0.5, 2.0]


def _params(sig_text):
    """Parses the page's ``name(params) → ret`` into ``[(name, kind, default_text)]``."""
    inner = sig_text[sig_text.index("(") + 1:]
    depth, cur, parts = 0, "", []
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                parts.append(cur)
                break
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    out, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    pending = []
    for p in (p.strip() for p in parts):
        if not p:
            continue
        if p == "/":
            pending = [(n, inspect.Parameter.POSITIONAL_ONLY, d) for n, _, d in pending]
            out.extend(pending)
            pending = []
            continue
        if p == "*":
            out.extend(pending)
            pending = []
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        name = p.split(":")[0].split("=")[0].strip()
        default = p.split("=", 1)[1].strip() if "=" in p else None
        pending.append((name, kind, default))
    out.extend(pending)
    return out


def _signature_blocks():
    for sig, text in code_blocks():
        if not sig:
            continue
        text = " ".join(text.split())
        m = re.match(r"(?:class )?tensorplay\.library\.(\w+)\(", text)
        if m:
            yield m.group(1), None, text
        else:
            yield "Library", text.split("(")[0], text


@pytest.mark.parametrize("name,method,text", list(_signature_blocks()))
def test_signature_matches_page(name, method, text):
    obj = getattr(tensorplay.library, name)
    if method:
        obj = getattr(obj, method)
    sig = inspect.signature(obj)
    ours = [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]
    page = _params(text)
    assert [n for n, _, _ in ours] == [n for n, _, _ in page], text
    for (n, kind, default), (_, pkind, pdefault) in zip(ours, page):
        assert kind == pkind, f"{name}.{n}: {kind} vs page {pkind}"
        if pdefault is None:
            assert default is inspect.Parameter.empty, f"{name}.{n} should have no default"
        else:
            assert eval(pdefault) == default, f"{name}.{n}: default {default!r} vs page {pdefault}"
