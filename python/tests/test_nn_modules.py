"""``tensorplay.nn`` module classes: registration by attribute, traversal, modes, state dicts
with PyTorch's keys and errors, ``to``, and each layer against PyTorch (same weights, same
inputs) when ``torch`` is importable."""

import math

import pytest

import tensorplay as tp
from tensorplay import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
        self.register_buffer("scratch", tp.zeros(1), persistent=False)

    def forward(self, x):
        return self.head(nn.functional.max_pool2d(self.bn(self.conv(x)).relu(), 2))


TORCH_KEYS = ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
              "bn.num_batches_tracked", "head.1.weight", "head.1.bias"]


def test_registration_and_traversal():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                                      "head.1.weight", "head.1.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ["scratch", "bn.running_mean", "bn.running_var",
                                                   "bn.num_batches_tracked"]
    assert [type(m).__name__ for m in net.children()] == ["Conv2d", "BatchNorm2d", "Sequential"]
    assert len(list(net.modules())) == 6
    assert list(net.state_dict()) == TORCH_KEYS  # the non-persistent buffer is left out
    # Re-assigning a plain value removes nothing else; None keeps the parameter slot.
    net.conv.bias = None
    assert "conv.bias" not in dict(net.named_parameters())
    with pytest.raises(TypeError, match="parameter 'weight'"):
        net.conv.weight = tp.zeros(1)
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, shared)
    assert len(list(seq.parameters())) == 2  # shared parameters once
    with pytest.raises(AttributeError, match="super"):
        class Bad(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(1, 1)

        Bad()


def test_train_eval_zero_grad_and_call():
    net = Net()
    assert net.training and net.bn.training
    net.eval()
    assert not net.training and not net.head[1].training
    net.train()
    out = net(tp.randn(2, 3, 8, 8))
    assert out.shape == (2, 5)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(tp.ones(1))


def test_batchnorm_running_stats_and_modes():
    bn = nn.BatchNorm2d(2, momentum=0.5)
    x = tp.randn(4, 2, 3, 3) * 3.0 + 1.0
    bn(x)
    assert bn.num_batches_tracked.item() == 1
    mean = x.mean([0, 2, 3]).tolist()
    assert bn.running_mean.tolist() == pytest.approx([0.5 * m for m in mean], rel=1e-5)
    bn.eval()
    y = bn(x)  # running statistics now: output differs from batch-normalized
    assert abs(y.mean().item()) > 1e-3
    cumulative = nn.BatchNorm2d(2, momentum=None)
    cumulative(x)
    assert cumulative.running_mean.tolist() == pytest.approx(mean, rel=1e-5)


def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    missing, unexpected = b.load_state_dict(a.state_dict())
    assert (missing, unexpected) == ([], [])
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert va.tolist() == vb.tolist(), k
    sd = a.state_dict()
    del sd["bn.bias"]
    sd["extra.weight"] = tp.zeros(1)
    sd["conv.weight"] = tp.zeros(1, 2)
    with pytest.raises(RuntimeError) as e:
        b.load_state_dict(sd)
    msg = str(e.value)
    assert '"extra.weight"' in msg and '"bn.bias"' in msg and "size mismatch for conv.weight" in msg
    sd["conv.weight"] = a.conv.weight.detach()
    result = b.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["bn.bias"] and result.unexpected_keys == ["extra.weight"]


def test_to_dtype_and_init_bounds():
    lin = nn.Linear(16, 4)
    bound = 1 / math.sqrt(16)
    assert max(abs(v) for row in lin.weight.tolist() for v in row) <= bound
    lin.to(tp.float64)
    assert lin.weight.dtype == tp.float64 and isinstance(lin.weight, nn.Parameter)
    assert lin(tp.ones(2, 16, dtype=tp.float64)).dtype == tp.float64
    bn = nn.BatchNorm2d(3).double()
    assert bn.running_mean.dtype == tp.float64 and bn.num_batches_tracked.dtype == tp.int64
    with pytest.raises(TypeError):
        lin.to(3)


def test_parameter_is_a_leaf_tensor_sharing_storage():
    t = tp.zeros(3)
    p = nn.Parameter(t)
    assert isinstance(p, tp.Tensor) and p.requires_grad and p.grad_fn is None
    with tp.no_grad():
        p.fill_(2.0)
    assert t.tolist() == [2.0, 2.0, 2.0]
    assert not nn.Parameter(tp.ones(1), requires_grad=False).requires_grad
    with pytest.raises(TypeError, match="data must be a Tensor"):
        nn.Parameter([1.0])


def test_layer_argument_errors():
    with pytest.raises(ValueError, match="dropout probability"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="inplace"):
        nn.Dropout(0.1, inplace=True)
    drop = nn.Dropout(0.5)
    x = tp.ones(1000)
    y = drop(x)
    zeros = sum(1 for v in y.tolist() if v == 0.0)
    assert 350 < zeros < 650 and max(y.tolist()) == 2.0
    assert drop.eval()(x).tolist() == x.tolist()
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")
    with pytest.raises(ValueError, match="4D input"):
        nn.BatchNorm2d(2)(tp.ones(2, 2))
    assert len(nn.Sequential(nn.ReLU(), nn.GELU())[1:]) == 1


# -- against PyTorch --------------------------------------------------------------------------


def _close(got, want, rel=1e-4, abs=1e-5):
    """Same shape and values (flattened) between a tensorplay and a torch tensor."""
    assert tuple(got.shape) == tuple(want.shape)
    assert got.reshape(-1).tolist() == pytest.approx(want.detach().reshape(-1).tolist(), rel=rel, abs=abs)


def _copy_into_torch(torch, ours, theirs):
    sd = {k: torch.tensor(v.tolist()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd)


@pytest.mark.parametrize("make", [
    lambda nn_: nn_.Linear(6, 3),
    lambda nn_: nn_.LayerNorm(6),
    lambda nn_: nn_.Sequential(nn_.Linear(6, 8), nn_.GELU(), nn_.Linear(8, 2), nn_.ReLU()),
    lambda nn_: nn_.Sequential(nn_.Linear(6, 8), nn_.GELU(approximate="tanh"), nn_.Flatten(0)),
])
def test_dense_layers_against_torch(make):
    torch = pytest.importorskip("torch")
    ours, theirs = make(nn), make(torch.nn)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    _copy_into_torch(torch, ours, theirs)
    x = tp.randn(5, 6)
    _close(ours(x), theirs(torch.tensor(x.tolist())))


def test_cnn_against_torch_train_then_eval():
    torch = pytest.importorskip("torch")
    ours = Net()

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5))

        def forward(self, x):
            return self.head(torch.nn.functional.max_pool2d(self.bn(self.conv(x)).relu(), 2))

    theirs = TNet()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    sd = {k: torch.tensor(v.tolist()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd)
    x = tp.randn(2, 3, 8, 8)
    tx = torch.tensor(x.tolist())
    for mode in ("train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        _close(ours(x), theirs(tx), abs=1e-4)
    for k, v in theirs.state_dict().items():
        _close(ours.state_dict()[k], v, rel=1e-5, abs=1e-6)


def test_embedding_and_maxpool_against_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Embedding(7, 3, padding_idx=2)
    assert ours.weight[2].tolist() == [0.0, 0.0, 0.0]
    theirs = torch.nn.Embedding(7, 3, padding_idx=2)
    _copy_into_torch(torch, ours, theirs)
    idx = [[0, 2, 6], [1, 1, 2]]
    _close(ours(tp.tensor(idx)), theirs(torch.tensor(idx)))
    x = tp.randn(1, 2, 5, 5)
    got = nn.MaxPool2d(2, stride=1, padding=1)(x)
    want = torch.nn.MaxPool2d(2, stride=1, padding=1)(torch.tensor(x.tolist()))
    _close(got, want)


def test_save_file_load_file_round_trip(tmp_path):
    net = Net()
    path = str(tmp_path / "net.safetensors")
    tp.save_file(net.state_dict(), path)
    back = tp.load_file(path)
    assert sorted(back) == sorted(TORCH_KEYS)  # sorted by name: the format keeps no order
    other = Net()
    other.load_state_dict(back)
    for k, v in net.state_dict().items():
        assert other.state_dict()[k].tolist() == v.tolist(), k
    assert back["bn.num_batches_tracked"].dtype == tp.int64
    with pytest.raises(TypeError, match=r"tensors\['x'\] must be a Tensor"):
        tp.save_file({"x": 1.0}, path)
    with pytest.raises(Exception, match="load_safetensors"):
        tp.load_file(str(tmp_path / "missing.safetensors"))


def test_load_file_reads_pytorch_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    lin = torch.nn.Linear(3, 2)
    path = str(tmp_path / "lin.safetensors")
    st.save_file(lin.state_dict(), path)
    ours = nn.Linear(3, 2)
    ours.load_state_dict(tp.load_file(path))
    x = tp.randn(4, 3)
    _close(ours(x), lin(torch.tensor(x.tolist())))
