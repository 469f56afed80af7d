"""``tensorplay.library`` from Python: every page function, Python kernels run from the Rust
dispatcher eagerly, under autograd, vmap, autocast and compile, and the page's exception types."""

from typing import Optional, Sequence

import pytest

import tensorplay as tp
from tensorplay import library


def test_custom_op_decorator_and_positional(ns):
    @library.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: tp.Tensor, factor: float) -> tp.Tensor:
        return x * factor

    assert isinstance(scale, library.CustomOpDef)
    assert scale.schema == f"{ns}::scale(Tensor x, float factor) -> Tensor"
    assert scale(tp.ones(2), 3.0).tolist() == [3.0, 3.0]
    assert scale(tp.ones(2), factor=2).tolist() == [2.0, 2.0]  # keyword, int widened to float

    def body(x):
        return x + 1

    inc = library.custom_op(f"{ns}::inc", body, mutates_args=())
    assert inc(tp.zeros(2)).tolist() == [1.0, 1.0]
    # The op is reachable through the generic call path too.
    assert tp._C._call(f"{ns}::inc", (tp.zeros(1),)).tolist() == [1.0]


def test_custom_op_mutates_args(ns):
    @library.custom_op(f"{ns}::fill2_", mutates_args=("out",))
    def fill2_(out: tp.Tensor) -> None:
        out.fill_(2.0)

    assert "Tensor(a!) out" in fill2_.schema
    buf = tp.zeros(3)
    assert fill2_(buf) is None
    assert buf.tolist() == [2.0, 2.0, 2.0]


def test_register_kernel_per_device_and_set_kernel_enabled(ns):
    @library.custom_op(f"{ns}::which", mutates_args=())
    def which(x: tp.Tensor) -> tp.Tensor:
        return x * 0

    @which.register_kernel("cpu")
    def _(x):
        return x * 0 + 1

    assert which(tp.zeros(1)).item() == 1.0
    with which.set_kernel_enabled("cpu", False):
        assert which(tp.zeros(1)).item() == 0.0
    assert which(tp.zeros(1)).item() == 1.0
    assert library.get_kernel(which, "cpu")(tp.zeros(1)).item() == 1.0
    assert library.get_kernel(f"{ns}::which", "default")(tp.zeros(1)).item() == 0.0


def test_get_kernel_lookup_error(ns):
    library.define(f"{ns}::nokernel(Tensor x) -> Tensor")
    with pytest.raises(LookupError):
        library.get_kernel(f"{ns}::nokernel", "cpu")


def test_define_impl_and_library(ns):
    library.define(f"{ns}::twice", "(Tensor x) -> Tensor")

    @library.impl(f"{ns}::twice", "CompositeExplicitAutograd")
    def twice(x):
        return x * 2

    assert tp._C._call(f"{ns}::twice", (tp.ones(2),)).tolist() == [2.0, 2.0]

    lib = library.Library(f"{ns}_lib", "DEF")
    assert lib.define("add3(Tensor a, Tensor b, Tensor c) -> Tensor") is None
    lib.impl("add3", lambda a, b, c: a + b + c, device_type="CPU")
    out = tp._C._call(f"{ns}_lib::add3", (tp.ones(1), tp.ones(1), tp.ones(1)))
    assert out.item() == 3.0
    with pytest.raises(RuntimeError, match="fallback"):
        lib.fallback("CPU")


def test_register_fake_and_impl_abstract(ns):
    @library.custom_op(f"{ns}::rowsum", mutates_args=())
    def rowsum(x: tp.Tensor) -> tp.Tensor:
        # Reads data (item): under compile it cannot be traced, so it runs as an opaque node.
        return tp.tensor([float(sum(r)) for r in x.tolist()])

    calls = []

    @rowsum.register_fake
    def _(x):
        calls.append(x.shape)
        return tp.empty(x.shape[0], dtype=x.dtype)

    f = tp.compile(lambda x: rowsum(x) * 2)
    assert f(tp.ones(3, 4)).tolist() == [8.0, 8.0, 8.0]
    assert calls, "the fake kernel ran during capture"
    assert f(tp.ones(2, 5)).tolist() == [10.0, 10.0]

    library.define(f"{ns}::neg2(Tensor x) -> Tensor")
    library.impl(f"{ns}::neg2", "CPU", lambda x: -x)
    assert library.impl_abstract(f"{ns}::neg2", lambda x: tp.empty(*x.shape)) is not None


def test_register_autograd(ns):
    @library.custom_op(f"{ns}::mysin", mutates_args=())
    def mysin(x: tp.Tensor) -> tp.Tensor:
        return tp.sin(x.detach())  # opaque to autograd without a formula

    seen = {}

    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.note = "kept"
        seen["needs"] = ctx.needs_input_grad

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        assert ctx.note == "kept"
        return grad * tp.cos(x)

    library.register_autograd(mysin, backward, setup_context=setup_context)
    x = tp.tensor([0.0, 1.0], requires_grad=True)
    mysin(x).sum().backward()
    assert x.grad.tolist() == pytest.approx([1.0, 0.5403023])
    assert seen["needs"] == (True,)


def test_register_autograd_through_compile(ns):
    @library.custom_op(f"{ns}::cube", mutates_args=())
    def cube(x: tp.Tensor) -> tp.Tensor:
        return x.detach() ** 3

    cube.register_fake(lambda x: tp.empty(*x.shape))
    cube.register_autograd(lambda ctx, g: g * 3 * ctx.saved_tensors[0] ** 2,
                           setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]))
    f = tp.compile(lambda x: cube(x).sum())
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    f(x).backward()
    assert x.grad.tolist() == [3.0, 12.0]


def test_register_vmap(ns):
    @library.custom_op(f"{ns}::rownorm", mutates_args=())
    def rownorm(x: tp.Tensor) -> tp.Tensor:
        return (x * x).sum()

    used = []

    @rownorm.register_vmap
    def _(info, in_dims, x):
        used.append(info.batch_size)
        xb = x if in_dims[0] == 0 else x.transpose(0, in_dims[0])
        return (xb * xb).sum(1), 0

    out = tp.vmap(rownorm)(tp.ones(4, 3))
    assert out.tolist() == [3.0] * 4 and used == [4]


def test_register_autocast(ns):
    @library.custom_op(f"{ns}::dtype_of", mutates_args=())
    def dtype_of(x: tp.Tensor) -> tp.Tensor:
        return x * 1

    library.register_autocast(dtype_of, "cpu", tp.bfloat16)
    with tp.autocast("cpu", dtype=tp.bfloat16):
        assert dtype_of(tp.ones(2)).dtype == tp.bfloat16
    assert dtype_of(tp.ones(2)).dtype == tp.float32


def test_infer_schema():
    def f(x, n: int, scale: float = 1.0, flag: bool = False, *args, out: Optional[tp.Tensor] = None,
          sizes: Sequence[int] = (), ts: list[tp.Tensor] = (), **kw) -> tp.Tensor:
        pass

    s = library.infer_schema(f, mutates_args=())
    assert s == ("(Tensor x, SymInt n, float scale=1.0, bool flag=False, *, Tensor? out=None, "
                 "SymInt[] sizes=[], Tensor[] ts=[]) -> Tensor")

    def g(a: tp.Tensor, b: tp.Tensor) -> None:
        pass

    assert library.infer_schema(g, mutates_args=("b",), op_name="ns::g") == "ns::g(Tensor a, Tensor(a!) b) -> ()"
    with pytest.raises(ValueError):
        library.infer_schema(g, mutates_args=("zzz",))

    def h(a: dict):
        pass

    with pytest.raises(ValueError):
        library.infer_schema(h, mutates_args=())


def test_opcheck(ns):
    @library.custom_op(f"{ns}::good", mutates_args=())
    def good(x: tp.Tensor) -> tp.Tensor:
        return x * 2

    good.register_fake(lambda x: tp.empty(*x.shape))
    assert library.opcheck(good, (tp.randn(3),)) == {}

    @library.custom_op(f"{ns}::badfake", mutates_args=())
    def badfake(x: tp.Tensor) -> tp.Tensor:
        return x * 2

    badfake.register_fake(lambda x: tp.empty(1))
    failures = library.opcheck(badfake, (tp.randn(3),), raise_exception=False, test_utils="test_faketensor")
    assert "test_faketensor" in failures
    with pytest.raises(RuntimeError, match="opcheck of .* failed"):
        library.opcheck(badfake, (tp.randn(3),), test_utils="test_faketensor")


def test_triton_op_with_wrap_triton(ns):
    class Launcher:
        """A grid-indexable launcher: ``k[grid](x, out)`` writes ``2 * x`` into ``out``."""

        def __getitem__(self, grid):
            def run(x, out):
                out.copy_(x * 2)

            return run

    k = library.wrap_triton(Launcher())
    assert library.wrap_triton(k) is k

    @library.triton_op(f"{ns}::double", mutates_args=())
    def double(x: tp.Tensor) -> tp.Tensor:
        out = tp.empty(*x.shape)
        k[(1,)](x, out)
        return out

    double.register_fake(lambda x: tp.empty(*x.shape))
    assert double(tp.ones(3)).tolist() == [2.0] * 3
    f = tp.compile(lambda x: double(x) + 1)
    assert f(tp.ones(3)).tolist() == [3.0] * 3


def test_errors(ns):
    with pytest.raises(ValueError):
        library.custom_op("not a name", lambda x: x, mutates_args=())
    with pytest.raises(TypeError):
        library.custom_op(f"{ns}::x", 42, mutates_args=())

    @library.custom_op(f"{ns}::boom", mutates_args=())
    def boom(x: tp.Tensor) -> tp.Tensor:
        raise KeyError("from the kernel")

    boom.register_fake(lambda x: tp.empty_like(x))
    with pytest.raises(KeyError, match="from the kernel"):
        boom(tp.ones(1))
    with pytest.raises(KeyError, match="from the kernel"):
        tp.compile(lambda x: boom(x) + 1)(tp.ones(2))
    with pytest.raises(TypeError):
        boom(tp.ones(1), tp.ones(1))


def test_failed_registration_leaves_registry(ns):
    @library.custom_op(f"{ns}::keep", mutates_args=())
    def keep(x: tp.Tensor) -> tp.Tensor:
        return x + 1

    with pytest.raises(Exception):
        library.register_fake(keep, lambda x: x, allow_override=True, lib=object())
    assert keep(tp.zeros(1)).item() == 1.0


def test_register_kernel_composite_spellings(ns):
    """Issue 31 item 1: every ``Composite…`` spelling is the device-agnostic slot."""

    @library.custom_op(f"{ns}::comp", mutates_args=(), device_types="cpu")
    def comp(x: tp.Tensor) -> tp.Tensor:
        return x + 1

    comp.register_kernel("CompositeExplicitAutograd", lambda x: x + 2)
    with comp.set_kernel_enabled("cpu", False):
        assert comp(tp.zeros(1)).item() == 2.0

    library.define(f"{ns}::comp2(Tensor x) -> Tensor")

    @library.register_kernel(f"{ns}::comp2", ["CompositeImplicitAutograd"])
    def _(x):
        return x + 3

    assert tp._C._call(f"{ns}::comp2", (tp.zeros(1),)).item() == 3.0
    assert library.get_kernel(f"{ns}::comp2", "default")(tp.zeros(1)).item() == 3.0
    with pytest.raises(ValueError, match="Composite"):
        library.register_kernel(f"{ns}::comp2", "CPU", lambda x: x)


def test_keyword_only_tensor_parameters(ns):
    """Issue 31 item 2: keyword-only tensors, called by keyword (PyTorch's out= convention)."""
    library.define(f"{ns}::kw(Tensor x, *, Tensor y) -> Tensor")

    @library.impl(f"{ns}::kw", "CompositeExplicitAutograd")
    def _(x, *, y):
        return x * y

    x, y = tp.ones(2), tp.ones(2) * 3
    assert tp._C._call(f"{ns}::kw", (x,), {"y": y}).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError):
        tp._C._call(f"{ns}::kw", (x, y))

    library.define(f"{ns}::f(Tensor x, *, Tensor(a!) out) -> ()")

    @library.impl(f"{ns}::f", "CompositeExplicitAutograd")
    def _(x, *, out):
        out.copy_(x * 2)

    out = tp.zeros(2)
    tp._C._call(f"{ns}::f", (x,), {"out": out})
    assert out.tolist() == [2.0, 2.0]

    # custom_op infers keyword-only tensors from the signature and accepts them too.
    @library.custom_op(f"{ns}::kwop", mutates_args=())
    def kwop(x: tp.Tensor, *, w: tp.Tensor) -> tp.Tensor:
        return x + w

    assert kwop.schema == f"{ns}::kwop(Tensor x, *, Tensor w) -> Tensor"
    assert kwop(x, w=y).tolist() == [4.0, 4.0]


def test_get_ctx_dynamic_sizes_in_fake_kernels(ns):
    @tp.library.custom_op(f"{ns}::nonzero", mutates_args=())
    def nonzero(x: tp.Tensor) -> tp.Tensor:
        idx = [i for i, v in enumerate(x.tolist()) if v != 0]
        return tp.tensor(idx, dtype=tp.int64).reshape(len(idx), 1)

    seen = []

    @nonzero.register_fake
    def _(x):
        ctx = tp.library.get_ctx()
        n = ctx.new_dynamic_size(max=x.numel())
        m = ctx.new_dynamic_size(min=3)
        seen.append((ctx.op, n, m))
        assert n.id != m.id and (n.min, n.max) == (0, x.numel()) and m.max is None
        assert repr(n) == f"u{n.id}"
        with pytest.raises(ValueError, match="max"):
            ctx.new_dynamic_size(min=4, max=2)
        return tp.empty(n, 1, dtype=tp.int64, device=x.device)

    with pytest.raises(LookupError, match="get_ctx"):
        tp.library.get_ctx()
    x = tp.tensor([0.0, 1.0, 2.0, 0.0, 3.0])
    assert nonzero(x).tolist() == [[1], [2], [4]]
    assert seen == []  # eager calls run the real kernel only
    # A meta input runs the fake kernel: the dynamic size's hint is 2 (min raised to 2).
    fake = nonzero(tp.empty(5, device="meta"))
    assert fake.shape == (2, 1) and fake.device.type == "meta"
    assert seen[0][0] == f"{ns}::nonzero" and int(seen[0][1]) == 2 and int(seen[0][2]) == 3
    # Capped at max for a one-element input.
    assert nonzero(tp.empty(1, device="meta")).shape == (1, 1)
    # Sizes are concrete in the Rust compiler's graphs: a compiled graph checks the real
    # kernel's shapes against the fake kernel's, so a data-dependent size that differs from the
    # hint is a clear error there (until symbolic sizes land), not a wrong result.
    f = tp.compile(lambda x: nonzero(x * 1.0))
    with pytest.raises(ValueError, match="fake kernel"):
        f(x)


def test_custom_op_call_passes_and_returns_the_same_tensor_objects(ns):
    # As in PyTorch, one tensor has one Python object: the kernel sees the caller's objects and
    # the caller gets the kernel's result object back (no fresh wrappers on the fast path).
    seen = {}

    @library.custom_op(f"{ns}::ident", mutates_args=())
    def ident(x: tp.Tensor, y: tp.Tensor) -> tp.Tensor:
        seen["x"], seen["y"] = x, y
        seen["out"] = x + y
        return seen["out"]

    a, b = tp.ones(2), tp.zeros(2)
    out = ident(a, b)
    assert seen["x"] is a and seen["y"] is b
    assert out is seen["out"]
    # A scalar where a tensor goes is wrapped in Rust: a new object, still the right values.
    assert ident(a, 2.0).tolist() == [3.0, 3.0]
    assert seen["x"] is a and seen["y"] is not a
    # The generic call path reuses the objects too; the keyword path gets correct values.
    assert tp._C._call(f"{ns}::ident", (a, b)) is seen["out"]
    assert ident(a, y=b).tolist() == [1.0, 1.0]


def test_custom_op_fast_path_errors_and_nesting(ns):
    @library.custom_op(f"{ns}::boom", mutates_args=())
    def boom(x: tp.Tensor) -> tp.Tensor:
        raise KeyError("from the kernel")

    with pytest.raises(KeyError, match="from the kernel"):
        boom(tp.ones(1))
    with pytest.raises(TypeError):
        boom(tp.ones(1), tp.ones(1), tp.ones(1))
    with pytest.raises(TypeError):
        boom(tp.ones(1), nope=1)

    @library.custom_op(f"{ns}::outer", mutates_args=())
    def outer(x: tp.Tensor) -> tp.Tensor:
        return inner(x * 3) + 1

    @library.custom_op(f"{ns}::inner", mutates_args=())
    def inner(x: tp.Tensor) -> tp.Tensor:
        return x * 2

    assert outer(tp.ones(2)).tolist() == [7.0, 7.0]
    # Outputs that are returned twice, and inputs returned as they came (a view is not the input).
    @library.custom_op(f"{ns}::pair", mutates_args=())
    def pair(x: tp.Tensor) -> tuple[tp.Tensor, tp.Tensor]:
        y = x + 1
        return y, y * 2

    p, q = pair(tp.ones(1))
    assert (p.item(), q.item()) == (2.0, 4.0)


def test_needs_input_grad_without_setup_context(ns):
    seen = {}

    @library.custom_op(f"{ns}::mulc", mutates_args=())
    def mulc(x: tp.Tensor, y: tp.Tensor) -> tp.Tensor:
        return x * y

    def backward(ctx, g):
        seen["needs"] = ctx.needs_input_grad
        seen["saved"] = ctx.saved_tensors
        return g * 2.0, None

    mulc.register_autograd(backward)
    x = tp.ones(2, requires_grad=True)
    mulc(x, tp.ones(2)).sum().backward()
    assert seen["needs"] == (True, False)
    assert seen["saved"] == ()
    assert x.grad.tolist() == [2.0, 2.0]


def test_custom_op_from_threads(ns):
    import threading

    @library.custom_op(f"{ns}::twice", mutates_args=())
    def twice(x: tp.Tensor) -> tp.Tensor:
        return x * 2

    errors = []

    def work():
        try:
            for _ in range(200):
                assert twice(tp.ones(3)).tolist() == [2.0, 2.0, 2.0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
