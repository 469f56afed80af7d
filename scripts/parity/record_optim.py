#!/usr/bin/env python3
"""Records PyTorch optimizer, scheduler and clipping trajectories (`tests/data/optim_parity.json`).

Every case runs 100 steps of one optimizer configuration (optionally with parameter groups, an
LR scheduler and gradient clipping) in f32 on three small parameters. Initial values and
gradients are exact dyadic fractions given by formulas that `tests/optim_parity.rs` computes
the same way, so neither side needs the other's data: the file holds only the configurations
and PyTorch's results. Parameter 1 gets no gradient (`.grad = None`) every third step, so its
per-parameter state (Adam's step count) falls behind the others'.

Recorded per case: the learning rate of every group before each step (with a scheduler), the total norm that
`clip_grad_norm_` returned (when clipping), every parameter element after the steps listed in
CHECKPOINTS, and after the last step each parameter's step count and state buffers (parameters
numbered across the groups in order, as PyTorch's `state_dict()` numbers them).

PyTorch runs its single-tensor implementations (`foreach=False`), the reference TensorPlay
follows operation by operation. Regenerate (PyTorch installed outside the repository):

    PYTHONPATH=/path/to/torch-site python3 scripts/parity/record_optim.py > tests/data/optim_parity.json
"""

import json
import sys

import torch

torch.set_num_threads(1)

STEPS = 100
CHECKPOINTS = [1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 60, 75, 90, 100]
SHAPES = [[3, 4], [5], [1]]


def init_value(param, j):
    """Initial element `j` (flat) of parameter `param`: a multiple of 1/8 in [-9/8, 9/8]."""
    return ((j * 7 + param * 13 + 3) % 19 - 9) / 8.0


def grad_value(step, param, j):
    """Gradient element `j` of parameter `param` at `step` (1-based): a dyadic fraction."""
    base = ((step * 13 + j * 7 + param * 5) % 23 - 11) / 8.0
    return base * (1.0 + (step % 5) / 4.0) * [1.0, 0.5, 2.0][param]


def has_grad(step, param):
    return not (param == 1 and step % 3 == 0)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32(x):
    return float(torch.tensor(x, dtype=torch.float32))


def make_optimizer(kind, groups):
    pg = [{"params": g["params"], **g["options"]} for g in groups]
    cls = {
        "sgd": torch.optim.SGD,
        "adam": torch.optim.Adam,
        "adamw": torch.optim.AdamW,
        "rmsprop": torch.optim.RMSprop,
    }[kind]
    return cls(pg, foreach=False)


def make_scheduler(opt, s):
    if s is None:
        return None
    k = s["kind"]
    lr = torch.optim.lr_scheduler
    if k == "step":
        return lr.StepLR(opt, step_size=s["step_size"], gamma=s["gamma"])
    if k == "cosine":
        return lr.CosineAnnealingLR(opt, T_max=s["t_max"], eta_min=s["eta_min"])
    if k == "linear":
        return lr.LinearLR(opt, start_factor=s["start"], end_factor=s["end"], total_iters=s["total"])
    if k == "one_cycle":
        return lr.OneCycleLR(opt, max_lr=s["max_lr"], total_steps=s["total"])
    if k == "sequential":
        inner = [make_scheduler(opt, x) for x in s["schedulers"]]
        return lr.SequentialLR(opt, inner, milestones=s["milestones"])
    if k == "chained":
        inner = [make_scheduler(opt, x) for x in s["schedulers"]]
        return lr.ChainedScheduler(inner, optimizer=opt)
    raise ValueError(k)


def run(case):
    params = [
        torch.tensor([init_value(i, j) for j in range(numel(s))], dtype=torch.float32)
        .reshape(s)
        .requires_grad_(True)
        for i, s in enumerate(SHAPES)
    ]
    groups = [
        {"params": [params[i] for i in g["params"]], "options": g["options"]}
        for g in case["groups"]
    ]
    opt = make_optimizer(case["optimizer"], groups)
    sched = make_scheduler(opt, case.get("scheduler"))
    clip = case.get("clip")
    out = {"lrs": [], "norms": [], "checkpoints": {}}
    for step in range(1, STEPS + 1):
        for i, p in enumerate(params):
            if has_grad(step, i):
                g = [grad_value(step, i, j) for j in range(p.numel())]
                p.grad = torch.tensor(g, dtype=torch.float32).reshape(p.shape)
            else:
                p.grad = None
        if sched is not None:
            out["lrs"].append([g["lr"] for g in opt.param_groups])
        if clip is not None:
            if clip["kind"] == "norm":
                n = torch.nn.utils.clip_grad_norm_(
                    params, clip["max_norm"], norm_type=clip["norm_type"], foreach=False
                )
                out["norms"].append(float(n))
            else:
                torch.nn.utils.clip_grad_value_(params, clip["value"], foreach=False)
        opt.step()
        if sched is not None:
            sched.step()
        if step in CHECKPOINTS:
            out["checkpoints"][str(step)] = [
                [float(x) for x in p.detach().reshape(-1)] for p in params
            ]
    # Numbered as PyTorch's `state_dict()` numbers parameters: across the groups in order.
    state = []
    for p in [p for g in opt.param_groups for p in g["params"]]:
        st = opt.state.get(p, {})
        entry = {}
        for k, v in st.items():
            if k == "step":
                entry["step"] = float(v)
            elif torch.is_tensor(v):
                entry[k] = [float(x) for x in v.reshape(-1)]
        state.append(entry)
    out["state"] = state
    return out


def adam(**kw):
    return kw


CASES = [
    {"name": "sgd", "optimizer": "sgd", "groups": [{"params": [0, 1, 2], "options": {"lr": 0.1}}]},
    {
        "name": "sgd_momentum_dampening_wd",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}}],
    },
    {
        "name": "sgd_nesterov",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 1e-3}}],
    },
    {"name": "adam", "optimizer": "adam", "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01}}]},
    {
        "name": "adam_wd_amsgrad",
        "optimizer": "adam",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}}],
    },
    {
        "name": "adam_low_beta1",
        "optimizer": "adam",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.02, "betas": [0.3, 0.9], "eps": 1e-6}}],
    },
    {"name": "adamw", "optimizer": "adamw", "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01}}]},
    {
        "name": "adamw_amsgrad",
        "optimizer": "adamw",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}}],
    },
    {"name": "rmsprop", "optimizer": "rmsprop", "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01}}]},
    {
        "name": "rmsprop_centered_momentum_wd",
        "optimizer": "rmsprop",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.01}}],
    },
    {
        "name": "rmsprop_low_alpha_centered",
        "optimizer": "rmsprop",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.005, "alpha": 0.3, "centered": True}}],
    },
    {
        "name": "adam_groups",
        "optimizer": "adam",
        "groups": [
            {"params": [0], "options": {"lr": 0.01}},
            {"params": [1, 2], "options": {"lr": 0.05, "weight_decay": 0.1, "betas": [0.8, 0.99]}},
        ],
    },
    {
        "name": "sgd_groups",
        "optimizer": "sgd",
        "groups": [
            {"params": [0, 2], "options": {"lr": 0.05, "momentum": 0.9}},
            {"params": [1], "options": {"lr": 0.1}},
        ],
    },
    {
        "name": "sgd_step_lr",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.1, "momentum": 0.9}}],
        "scheduler": {"kind": "step", "step_size": 10, "gamma": 0.5},
    },
    {
        "name": "adam_cosine",
        "optimizer": "adam",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.05}}],
        "scheduler": {"kind": "cosine", "t_max": 30, "eta_min": 1e-3},
    },
    {
        "name": "adamw_linear_warmup",
        "optimizer": "adamw",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.02}}],
        "scheduler": {"kind": "linear", "start": 0.1, "end": 1.0, "total": 10},
    },
    {
        "name": "sgd_one_cycle",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.1, "momentum": 0.9}}],
        "scheduler": {"kind": "one_cycle", "max_lr": 0.5, "total": 100},
    },
    {
        "name": "adam_one_cycle_groups",
        "optimizer": "adam",
        "groups": [
            {"params": [0, 1], "options": {"lr": 0.01}},
            {"params": [2], "options": {"lr": 0.01}},
        ],
        "scheduler": {"kind": "one_cycle", "max_lr": [0.05, 0.02], "total": 100},
    },
    {
        "name": "adamw_sequential_warmup_cosine",
        "optimizer": "adamw",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.03}}],
        "scheduler": {
            "kind": "sequential",
            "schedulers": [
                {"kind": "linear", "start": 0.1, "end": 1.0, "total": 10},
                {"kind": "cosine", "t_max": 90, "eta_min": 0.0},
            ],
            "milestones": [10],
        },
    },
    {
        "name": "rmsprop_chained_warmup_step",
        "optimizer": "rmsprop",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01}}],
        "scheduler": {
            "kind": "chained",
            "schedulers": [
                {"kind": "linear", "start": 0.5, "end": 1.0, "total": 5},
                {"kind": "step", "step_size": 20, "gamma": 0.5},
            ],
        },
    },
    {
        "name": "adam_clip_norm",
        "optimizer": "adam",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.01}}],
        "clip": {"kind": "norm", "max_norm": 2.0, "norm_type": 2.0},
    },
    {
        "name": "sgd_clip_inf_norm",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.05, "momentum": 0.5}}],
        "clip": {"kind": "norm", "max_norm": 1.0, "norm_type": float("inf")},
    },
    {
        "name": "sgd_clip_value",
        "optimizer": "sgd",
        "groups": [{"params": [0, 1, 2], "options": {"lr": 0.05}}],
        "clip": {"kind": "value", "value": 0.75},
    },
]


def main():
    cases = []
    for c in CASES:
        r = run(c)
        cases.append({**c, "result": r})
    doc = {
        "torch": torch.__version__,
        "steps": STEPS,
        "checkpoints": CHECKPOINTS,
        "shapes": SHAPES,
        "cases": cases,
    }
    text = json.dumps(doc, separators=(",", ":"))
    # inf is not JSON: the inf norm is written as a string.
    text = text.replace("Infinity", '"inf"')
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
