"""tensorplay.optim and tensorplay.optim.lr_scheduler: PyTorch's behaviour, checked against update
rules written out by hand here (always) and against PyTorch itself (when it is importable)."""

import math

import pytest

import tensorplay as tp

X0 = [0.5, -1.25, 2.0, 0.75]
# The gradient of each step: loss = sum(c_k * w) + 0.5 * sum(w^2), so grad = c_k + w.
COEFS = [[1.0, -2.0, 0.5, 3.0], [-0.5, 1.5, 2.5, -1.0], [2.0, 0.25, -1.5, 0.5], [0.1, 0.2, 0.3, 0.4]]


def _loss(w, c, lib):
    return (w * lib.tensor(c)).sum() + 0.5 * (w * w).sum()


def _run(opt_cls, steps=4, **kw):
    w = tp.tensor(X0, requires_grad=True)
    opt = opt_cls([w], **kw)
    for c in COEFS[:steps]:
        opt.zero_grad()
        _loss(w, c, tp).backward()
        opt.step()
    return w.detach().tolist(), opt


# -- hand-written reference updates (PyTorch's documented algorithms, in Python floats) ----------

def _ref_sgd(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, steps=4):
    w, buf = list(X0), None
    for c in COEFS[:steps]:
        g = [ck + wk for ck, wk in zip(c, w)]
        if maximize:
            g = [-x for x in g]
        if weight_decay:
            g = [gk + weight_decay * wk for gk, wk in zip(g, w)]
        if momentum:
            if buf is None:
                buf = list(g)
            else:
                buf = [momentum * b + (1 - dampening) * gk for b, gk in zip(buf, g)]
            g = [gk + momentum * b for gk, b in zip(g, buf)] if nesterov else list(buf)
        w = [wk - lr * gk for wk, gk in zip(w, g)]
    return w


def _ref_adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False,
              decoupled=False, steps=4):
    b1, b2 = betas
    w = list(X0)
    m, v, vmax = [0.0] * 4, [0.0] * 4, [0.0] * 4
    for t, c in enumerate(COEFS[:steps], start=1):
        g = [ck + wk for ck, wk in zip(c, w)]
        if maximize:
            g = [-x for x in g]
        if decoupled:
            w = [wk * (1 - lr * weight_decay) for wk in w]
        elif weight_decay:
            g = [gk + weight_decay * wk for gk, wk in zip(g, w)]
        m = [b1 * mk + (1 - b1) * gk for mk, gk in zip(m, g)]
        v = [b2 * vk + (1 - b2) * gk * gk for vk, gk in zip(v, g)]
        vmax = [max(a, b) for a, b in zip(vmax, v)]
        vv = vmax if amsgrad else v
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        w = [wk - lr / bc1 * mk / (math.sqrt(vk) / math.sqrt(bc2) + eps) for wk, mk, vk in zip(w, m, vv)]
    return w


def _close(a, b, tol=2e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert abs(x - y) <= tol * (1 + abs(y)), (a, b)


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
    dict(lr=0.1, momentum=0.5, maximize=True),
]
ADAM_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    dict(lr=0.05, amsgrad=True),
    dict(lr=0.1, maximize=True, weight_decay=0.05),
]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_matches_hand_computed_steps(kw):
    got, _ = _run(tp.optim.SGD, **kw)
    _close(got, _ref_sgd(**kw))


@pytest.mark.parametrize("kw", ADAM_CASES)
def test_adam_matches_hand_computed_steps(kw):
    got, _ = _run(tp.optim.Adam, **kw)
    _close(got, _ref_adam(**kw))


@pytest.mark.parametrize("kw", ADAM_CASES + [dict(lr=0.1, weight_decay=0.5, amsgrad=True)])
def test_adamw_matches_hand_computed_steps(kw):
    kw = dict(kw)
    kw.setdefault("weight_decay", 1e-2)
    got, _ = _run(tp.optim.AdamW, **kw)
    _close(got, _ref_adam(decoupled=True, **kw))
    # Adam(decoupled_weight_decay=True) is AdamW, as in PyTorch.
    again, _ = _run(tp.optim.Adam, decoupled_weight_decay=True, **kw)
    assert again == got


@pytest.mark.parametrize("name,kw", [("SGD", k) for k in SGD_CASES] + [("Adam", k) for k in ADAM_CASES]
                         + [("AdamW", k) for k in ADAM_CASES])
def test_matches_pytorch(name, kw):
    torch = pytest.importorskip("torch")
    got, _ = _run(getattr(tp.optim, name), **kw)
    w = torch.tensor(X0, requires_grad=True)
    opt = getattr(torch.optim, name)([w], **kw)
    for c in COEFS:
        opt.zero_grad()
        _loss(w, c, torch).backward()
        opt.step()
    _close(got, w.detach().tolist(), tol=1e-6)


def test_param_groups_as_dicts_and_mutable_lr():
    a = tp.tensor([1.0, 2.0], requires_grad=True)
    b = tp.tensor([3.0], requires_grad=True)
    opt = tp.optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1, momentum=0.0)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["params"][0] is b
    assert opt.param_groups[0]["momentum"] == 0.0 and opt.param_groups[1]["nesterov"] is False
    (a.sum() + b.sum()).backward()
    opt.step()
    _close(a.detach().tolist(), [0.9, 1.9])
    _close(b.detach().tolist(), [2.5])
    opt.param_groups[0]["lr"] = 1.0  # takes effect at the next step
    opt.step()
    _close(a.detach().tolist(), [-0.1, 0.9])
    _close(b.detach().tolist(), [2.0])
    c = tp.tensor([0.0], requires_grad=True)
    opt.add_param_group({"params": [c], "lr": 2.0})
    (c * 3.0).sum().backward()
    opt.step()
    _close(c.detach().tolist(), [-6.0])
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})


def test_other_options_changed_between_steps():
    w = tp.tensor(X0, requires_grad=True)
    opt = tp.optim.SGD([w], lr=0.1)
    _loss(w, COEFS[0], tp).backward()
    opt.param_groups[0]["weight_decay"] = 0.5
    opt.param_groups[0]["maximize"] = True
    opt.step()
    g = [c + x for c, x in zip(COEFS[0], X0)]
    _close(w.detach().tolist(), [x - 0.1 * (-gk + 0.5 * x) for x, gk in zip(X0, g)])
    assert w.grad.tolist() == pytest.approx(g)  # maximize leaves .grad as it was
    opt.param_groups[0]["momentum"] = -1.0
    with pytest.raises(ValueError, match="momentum"):
        opt.step()


def test_zero_grad_and_skipped_parameters():
    a = tp.tensor([1.0], requires_grad=True)
    b = tp.tensor([1.0], requires_grad=True)
    opt = tp.optim.Adam([a, b], lr=0.1)
    (a * 2.0).sum().backward()
    opt.step()  # b has no gradient: skipped, no state
    assert b.tolist() == [1.0]
    assert list(opt.state_dict()["state"]) == [0]
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and a.grad.tolist() == [0.0]
    opt.zero_grad()
    assert a.grad is None


def test_step_with_closure_returns_loss():
    w = tp.tensor([2.0], requires_grad=True)
    opt = tp.optim.SGD([w], lr=0.25)
    calls = []

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        calls.append(1)
        return loss

    with tp.no_grad():  # the closure runs with grad enabled all the same
        loss = opt.step(closure)
    assert calls == [1] and loss.item() == 4.0
    assert w.tolist() == [1.0]


def test_state_dict_round_trip():
    w1 = tp.tensor(X0, requires_grad=True)
    opt1 = tp.optim.Adam([w1], lr=0.05, amsgrad=True)
    for c in COEFS[:2]:
        opt1.zero_grad()
        _loss(w1, c, tp).backward()
        opt1.step()
    sd = opt1.state_dict()
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert sd["state"][0]["step"].item() == 2.0
    assert sd["param_groups"][0]["params"] == [0] and sd["param_groups"][0]["betas"] == (0.9, 0.999)
    w2 = tp.tensor(w1.detach().tolist(), requires_grad=True)
    opt2 = tp.optim.Adam([w2], lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.05
    for w, o in ((w1, opt1), (w2, opt2)):
        o.zero_grad()
        _loss(w, COEFS[2], tp).backward()
        o.step()
    assert w1.tolist() == w2.tolist()
    _close(w1.detach().tolist(), _ref_adam(lr=0.05, amsgrad=True, steps=3))
    # A state for other shapes is refused and the optimizer keeps its own.
    other = tp.optim.Adam([tp.zeros(3, requires_grad=True)], lr=0.05, amsgrad=True)
    with pytest.raises(ValueError):
        other.load_state_dict(sd)
    assert other.state_dict()["state"] == {}
    with pytest.raises(ValueError, match="number of parameter groups"):
        other.load_state_dict({"state": {}, "param_groups": []})


def test_argument_errors():
    w = tp.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="lr"):
        tp.optim.SGD([w], lr=-1.0)
    with pytest.raises(ValueError, match="nesterov|Nesterov"):
        tp.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        tp.optim.Adam([w], betas=(1.5, 0.9))
    with pytest.raises(ValueError, match="empty parameter list"):
        tp.optim.Adam([])
    with pytest.raises(ValueError, match="non-leaf"):
        tp.optim.SGD([w * 2.0], lr=0.1)
    with pytest.raises(TypeError):
        tp.optim.SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="differentiable"):
        tp.optim.Adam([w], differentiable=True)


# -- schedulers --------------------------------------------------------------------------------

def _lrs(make_sched, opt_cls=tp.optim.SGD, steps=12, lib=tp, **opt_kw):
    w = lib.zeros(1, requires_grad=True)
    opt = getattr(lib.optim, opt_cls.__name__)([w], **opt_kw)
    sched = make_sched(lib.optim.lr_scheduler, opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out, sched, opt


SCHEDULES = {
    "step": lambda S, o: S.StepLR(o, step_size=3, gamma=0.5),
    "linear": lambda S, o: S.LinearLR(o, start_factor=0.25, total_iters=4),
    "cosine": lambda S, o: S.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
    "onecycle": lambda S, o: S.OneCycleLR(o, max_lr=1.0, total_steps=13),
    "sequential": lambda S, o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=3), S.CosineAnnealingLR(o, T_max=6)], milestones=[3]),
    "chained": lambda S, o: S.ChainedScheduler([S.StepLR(o, 2, 0.9), S.LinearLR(o, 0.5, total_iters=3)]),
}


def test_schedulers_match_closed_forms():
    lrs, sched, _ = _lrs(SCHEDULES["step"], lr=1.0)
    assert lrs == [1.0 * 0.5 ** (k // 3) for k in range(13)]
    assert sched.get_last_lr() == [lrs[-1]] and sched.last_epoch == 12 and sched.base_lrs == [1.0]
    lrs, _, _ = _lrs(SCHEDULES["linear"], lr=0.2)
    _close(lrs, [0.2 * (0.25 + 0.75 * min(k, 4) / 4) for k in range(13)], tol=1e-12)
    lrs, _, opt = _lrs(SCHEDULES["cosine"], lr=0.5, steps=5)
    _close(lrs, [0.01 + 0.49 * (1 + math.cos(math.pi * k / 5)) / 2 for k in range(6)], tol=1e-12)
    assert opt.param_groups[0]["initial_lr"] == 0.5


def test_one_cycle_cycles_momentum():
    # 10 steps: the peak is at step 0.3 * 10 - 1 = 2, where beta1 is at base_momentum.
    make = lambda S, o: S.OneCycleLR(o, max_lr=1.0, total_steps=10)  # noqa: E731
    lrs, _, opt = _lrs(make, opt_cls=tp.optim.Adam, steps=2)
    assert lrs[0] == pytest.approx(1.0 / 25)
    assert lrs[2] == pytest.approx(1.0)
    assert opt.param_groups[0]["betas"][0] == pytest.approx(0.85)
    assert opt.param_groups[0]["betas"][1] == 0.999


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedulers_match_pytorch(name):
    torch = pytest.importorskip("torch")
    for cls in (tp.optim.SGD, tp.optim.Adam):
        kw = dict(lr=0.3, momentum=0.9) if cls is tp.optim.SGD else dict(lr=0.3)
        ours, _, opt = _lrs(SCHEDULES[name], opt_cls=cls, **kw)
        theirs, _, topt = _lrs(SCHEDULES[name], opt_cls=cls, lib=torch, **kw)
        _close(ours, theirs, tol=1e-12)
        key = "momentum" if cls is tp.optim.SGD else "betas"
        assert opt.param_groups[0][key] == pytest.approx(topt.param_groups[0][key])


def test_handed_over_scheduler_cannot_step_alone():
    w = tp.zeros(1, requires_grad=True)
    opt = tp.optim.SGD([w], lr=1.0)
    a = tp.optim.lr_scheduler.StepLR(opt, 2)
    tp.optim.lr_scheduler.ChainedScheduler([a])
    with pytest.raises(RuntimeError, match="handed to"):
        a.step()
    with pytest.raises(ValueError, match="milestones"):
        tp.optim.lr_scheduler.SequentialLR(opt, [tp.optim.lr_scheduler.StepLR(opt, 2)], milestones=[1])


def test_compiled_training_step_with_adam():
    w = tp.tensor(X0, requires_grad=True)
    opt = tp.optim.Adam([w], lr=0.1)

    @tp.compile
    def loss_fn(w, c):
        return (w * c).sum() + 0.5 * (w * w).sum()

    for c in COEFS:
        opt.zero_grad()
        loss_fn(w, tp.tensor(c)).backward()
        opt.step()
    _close(w.detach().tolist(), _ref_adam(lr=0.1))
    assert opt.num_compiled >= 1


def test_docstring_examples_run():
    import doctest

    from tensorplay.optim import adam, lr_scheduler, optimizer, sgd

    for m in (sgd, adam, lr_scheduler, optimizer):
        r = doctest.testmod(m)
        assert r.attempted > 0 and r.failed == 0, m.__name__


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduler_state_dict_resumes_the_schedule(name):
    # Five steps, then a restart: a fresh optimizer and scheduler loaded from the two state
    # dicts continue exactly as the uninterrupted pair does.
    S = tp.optim.lr_scheduler

    def make():
        opt = tp.optim.SGD([tp.zeros(1, requires_grad=True)], lr=0.3, momentum=0.9)
        return opt, SCHEDULES[name](S, opt)

    opt, sched = make()
    for _ in range(5):
        opt.step()
        sched.step()
    osd, ssd = opt.state_dict(), sched.state_dict()
    assert ssd["last_epoch"] == 5 and len(ssd["_last_lr"]) == 1
    assert ("_schedulers" in ssd) == (name in ("sequential", "chained"))
    opt2, sched2 = make()
    opt2.load_state_dict(osd)
    sched2.load_state_dict(ssd)
    assert sched2.state_dict() == ssd and sched2.last_epoch == 5
    for _ in range(5):
        for o, s in ((opt, sched), (opt2, sched2)):
            o.step()
            s.step()
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
        assert sched2.get_last_lr() == sched.get_last_lr()


def test_scheduler_load_state_dict_refuses_what_does_not_fit():
    S = tp.optim.lr_scheduler
    w = tp.zeros(1, requires_grad=True)
    opt = tp.optim.SGD([w], lr=1.0)
    a = S.StepLR(opt, step_size=2)
    assert a.step_size == 2 and a.gamma == 0.1
    for _ in range(3):
        opt.step()
        a.step()
    sd = a.state_dict()
    # Other hyper-parameters, another group count, another nesting, wrong types: refused,
    # and the scheduler keeps its own progress.
    b = S.StepLR(tp.optim.SGD([w], lr=1.0), step_size=3)
    with pytest.raises(ValueError, match="step_size=2"):
        b.load_state_dict(sd)
    two = tp.optim.SGD([{"params": [w]}, {"params": [tp.zeros(1, requires_grad=True)]}], lr=1.0)
    c = S.StepLR(two, step_size=2)
    with pytest.raises(ValueError, match="one per parameter group"):
        c.load_state_dict(sd)
    assert c.last_epoch == 0 and b.last_epoch == 0
    chained = S.ChainedScheduler([S.StepLR(tp.optim.SGD([w], lr=1.0), 2)])
    with pytest.raises(ValueError, match="nested scheduler states"):
        chained.load_state_dict(sd)
    with pytest.raises(TypeError, match="must be a dict"):
        a.load_state_dict([1, 2])
    with pytest.raises(ValueError, match="last_epoch"):
        a.load_state_dict({"base_lrs": [1.0], "_last_lr": [1.0]})
    with pytest.raises(TypeError, match="wrong type"):
        a.load_state_dict(dict(sd, base_lrs=["x"]))
    assert a.state_dict() == sd


def test_optimizer_state_is_keyed_by_parameter():
    w, v = tp.zeros(2, requires_grad=True), tp.zeros(3, requires_grad=True)
    opt = tp.optim.Adam([w, v], lr=0.1)
    (w * 3.0).sum().backward()
    opt.step()
    assert list(opt.state) == [w]
    assert opt.state[v] == {}
    assert opt.state[w]["step"].item() == 1.0
    # The buffers are the optimizer's own tensors, as in PyTorch.
    opt.state[w]["exp_avg"].fill_(0.0)
    assert opt.state_dict()["state"][0]["exp_avg"].tolist() == [0.0, 0.0]


def test_one_cycle_state_dict_names_every_hyper_parameter():
    S = tp.optim.lr_scheduler
    opt = tp.optim.SGD([tp.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    sd = S.OneCycleLR(opt, max_lr=1.0, total_steps=10, div_factor=10.0).state_dict()
    assert sd["total_steps"] == 10 and sd["_div_factor"] == 10.0 and sd["_max_lrs"] == [1.0]
    other = S.OneCycleLR(tp.optim.SGD([tp.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9),
                         max_lr=1.0, total_steps=10)
    with pytest.raises(ValueError, match="_div_factor=10.0"):
        other.load_state_dict(sd)
