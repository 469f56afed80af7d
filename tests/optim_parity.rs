//! Optimizers, LR schedulers and gradient clipping against trajectories recorded from PyTorch
//! (`tests/data/optim_parity.json`, written by `scripts/parity/record_optim.py`).
//!
//! Every case runs 100 steps of one configuration on three small f32 parameters whose initial
//! values and gradients are exact formulas of (step, parameter, element) — the same ones the
//! script uses; parameter 1 has no gradient every third step. Each case is replayed twice,
//! with the fused step (`step()`, `clip_grad_norm_`) and the op-by-op step (`step_eager()`,
//! `clip_grad_norm_eager`), and compared with PyTorch at every recorded step: the learning
//! rates of every step, the total norms, the parameters at the checkpoints, and the step counts
//! and state buffers after the last step, within 1e-6 relative (parameters and buffers also
//! accept an absolute error of 1e-7, resp. 1e-6 of the buffer's largest element, near zero).
//! After step 37 every replay restarts as from a checkpoint (a fresh optimizer and scheduler
//! loaded from `state_dict()` / `state()`), and the rest must still follow PyTorch's
//! uninterrupted run.

use serde_json::Value as J;
use tensorplay::optim::{
    Adam, AdamOptions, AdamW, ChainedScheduler, CosineAnnealingLR, LRScheduler, LinearLR,
    OneCycleLR, OneCycleOptions, Optimizer, RMSprop, RMSpropOptions, SequentialLR, Sgd, SgdOptions,
    StepLR, clip_grad_norm_, clip_grad_norm_eager, clip_grad_value_,
};
use tensorplay::{DType, Result, Tensor};

const SHAPES: [&[usize]; 3] = [&[3, 4], &[5], &[1]];

fn init_value(param: usize, j: usize) -> f64 {
    ((j * 7 + param * 13 + 3) % 19) as f64 / 8.0 - 9.0 / 8.0
}

fn grad_value(step: usize, param: usize, j: usize) -> f64 {
    let base = ((step * 13 + j * 7 + param * 5) % 23) as f64 - 11.0;
    base / 8.0 * (1.0 + (step % 5) as f64 / 4.0) * [1.0, 0.5, 2.0][param]
}

fn has_grad(step: usize, param: usize) -> bool {
    !(param == 1 && step.is_multiple_of(3))
}

fn f(v: &J) -> f64 {
    match v {
        J::String(s) if s == "inf" => f64::INFINITY,
        _ => v.as_f64().expect("a number"),
    }
}

fn opt_f(o: &J, key: &str, default: f64) -> f64 {
    o.get(key).map_or(default, f)
}

fn opt_b(o: &J, key: &str, default: bool) -> bool {
    o.get(key).map_or(default, |v| v.as_bool().unwrap())
}

fn sgd_options(o: &J) -> SgdOptions {
    let d = SgdOptions::default();
    SgdOptions {
        lr: opt_f(o, "lr", d.lr),
        momentum: opt_f(o, "momentum", d.momentum),
        dampening: opt_f(o, "dampening", d.dampening),
        weight_decay: opt_f(o, "weight_decay", d.weight_decay),
        nesterov: opt_b(o, "nesterov", d.nesterov),
    }
}

fn adam_options(o: &J, d: AdamOptions) -> AdamOptions {
    let betas = o.get("betas").map_or(d.betas, |b| (f(&b[0]), f(&b[1])));
    AdamOptions {
        lr: opt_f(o, "lr", d.lr),
        betas,
        eps: opt_f(o, "eps", d.eps),
        weight_decay: opt_f(o, "weight_decay", d.weight_decay),
        amsgrad: opt_b(o, "amsgrad", d.amsgrad),
    }
}

fn rmsprop_options(o: &J) -> RMSpropOptions {
    let d = RMSpropOptions::default();
    RMSpropOptions {
        lr: opt_f(o, "lr", d.lr),
        alpha: opt_f(o, "alpha", d.alpha),
        eps: opt_f(o, "eps", d.eps),
        weight_decay: opt_f(o, "weight_decay", d.weight_decay),
        momentum: opt_f(o, "momentum", d.momentum),
        centered: opt_b(o, "centered", d.centered),
    }
}

/// The case's optimizer over `params`, one group per JSON group.
fn optimizer(case: &J, params: &[Tensor]) -> Result<Box<dyn Optimizer>> {
    let groups = case["groups"].as_array().unwrap();
    let pick = |g: &J| -> Vec<Tensor> {
        g["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| params[i.as_u64().unwrap() as usize].clone())
            .collect()
    };
    let kind = case["optimizer"].as_str().unwrap();
    macro_rules! build {
        ($t:ty, $opts:expr) => {{
            let mut o = <$t>::with_options(pick(&groups[0]), $opts(&groups[0]["options"]))?;
            for g in &groups[1..] {
                o.add_param_group(pick(g), $opts(&g["options"]))?;
            }
            Box::new(o) as Box<dyn Optimizer>
        }};
    }
    Ok(match kind {
        "sgd" => build!(Sgd, sgd_options),
        "adam" => build!(Adam, |o| adam_options(o, AdamOptions::default())),
        "adamw" => build!(AdamW, |o| adam_options(o, AdamOptions::adamw())),
        "rmsprop" => build!(RMSprop, rmsprop_options),
        _ => panic!("unknown optimizer {kind}"),
    })
}

fn scheduler(s: &J, opt: &mut dyn Optimizer) -> Result<Box<dyn LRScheduler>> {
    let i = |k: &str| s[k].as_i64().unwrap();
    Ok(match s["kind"].as_str().unwrap() {
        "step" => Box::new(StepLR::new(opt, i("step_size"), f(&s["gamma"]))?),
        "cosine" => Box::new(CosineAnnealingLR::new(opt, i("t_max"), f(&s["eta_min"]))?),
        "linear" => Box::new(LinearLR::new(
            opt,
            f(&s["start"]),
            f(&s["end"]),
            i("total"),
        )?),
        "one_cycle" => {
            let max: Vec<f64> = match &s["max_lr"] {
                J::Array(a) => a.iter().map(f).collect(),
                v => vec![f(v)],
            };
            Box::new(OneCycleLR::new(
                opt,
                &max,
                i("total"),
                OneCycleOptions::default(),
            )?)
        }
        "sequential" => {
            let inner = s["schedulers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| scheduler(x, opt))
                .collect::<Result<Vec<_>>>()?;
            let milestones = s["milestones"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_i64().unwrap())
                .collect();
            Box::new(SequentialLR::new(opt, inner, milestones)?)
        }
        "chained" => {
            let inner = s["schedulers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| scheduler(x, opt))
                .collect::<Result<Vec<_>>>()?;
            Box::new(ChainedScheduler::new(opt, inner))
        }
        k => panic!("unknown scheduler {k}"),
    })
}

/// The largest error of `got` against `want` in units of the allowed error
/// (`rel·|want| + abs`): at most 1 passes.
fn worst(got: &[f64], want: &[f64], rel: f64, abs: f64) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (rel * w.abs() + abs))
        .fold(0.0, f64::max)
}

fn floats(v: &J) -> Vec<f64> {
    v.as_array().unwrap().iter().map(f).collect()
}

/// Replays one case; returns the largest parameter error relative to the tolerance.
/// The step after which [`replay`] restarts from a checkpoint (optimizer and scheduler states).
const RESUME_AT: usize = 37;

fn replay(case: &J, fused: bool, checkpoints: &[usize]) -> Result<f64> {
    let name = case["name"].as_str().unwrap();
    let mode = if fused { "fused" } else { "eager" };
    let params: Vec<Tensor> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n: usize = s.iter().product();
            let v: Vec<f32> = (0..n).map(|j| init_value(i, j) as f32).collect();
            Tensor::from_vec(v, s)?.requires_grad_(true)
        })
        .collect::<Result<_>>()?;
    let mut opt = optimizer(case, &params)?;
    let mut sched = match case.get("scheduler") {
        Some(s) => Some(scheduler(s, opt.as_mut())?),
        None => None,
    };
    let result = &case["result"];
    let clip = case.get("clip");
    let mut worst_param: f64 = 0.0;
    for step in 1..=100 {
        for (i, p) in params.iter().enumerate() {
            p.zero_grad();
            if has_grad(step, i) {
                let g: Vec<f32> = (0..p.numel())
                    .map(|j| grad_value(step, i, j) as f32)
                    .collect();
                let g = Tensor::from_vec(g, p.shape())?;
                p.mul(&g)?.sum_all()?.backward()?;
            }
        }
        if sched.is_some() {
            let want = floats(&result["lrs"][step - 1]);
            let e = worst(&opt.lrs(), &want, 1e-12, 1e-15);
            assert!(
                e <= 1.0,
                "{name} ({mode}) step {step}: lrs {:?} vs {want:?}",
                opt.lrs()
            );
        }
        if let Some(c) = clip {
            if c["kind"] == "norm" {
                let (max, p) = (f(&c["max_norm"]), f(&c["norm_type"]));
                let n = if fused {
                    clip_grad_norm_(&params, max, p)?
                } else {
                    clip_grad_norm_eager(&params, max, p)?
                };
                let want = f(&result["norms"][step - 1]);
                let e = worst(&[n], &[want], 1e-6, 0.0);
                assert!(e <= 1.0, "{name} ({mode}) step {step}: norm {n} vs {want}");
            } else {
                clip_grad_value_(&params, f(&c["value"]))?;
            }
        }
        if fused {
            opt.step()?;
        } else {
            opt.step_eager()?;
        }
        if let Some(s) = sched.as_mut() {
            s.step(opt.as_mut())?;
        }
        if step == RESUME_AT {
            // A restart from a checkpoint: a fresh optimizer and scheduler, built as at the
            // start, loaded from the states; PyTorch's uninterrupted run must still be followed.
            let saved = (opt.state_dict(), sched.as_ref().map(|s| s.state()));
            opt = optimizer(case, &params)?;
            sched = match case.get("scheduler") {
                Some(s) => Some(scheduler(s, opt.as_mut())?),
                None => None,
            };
            opt.load_state_dict(&saved.0)?;
            if let (Some(s), Some(state)) = (sched.as_mut(), &saved.1) {
                s.load_state(state)?;
                assert_eq!(
                    &s.state(),
                    state,
                    "{name} ({mode}): the loaded scheduler state"
                );
            }
        }
        if checkpoints.contains(&step) {
            let want = &result["checkpoints"][step.to_string()];
            for (i, p) in params.iter().enumerate() {
                let got: Vec<f64> = p
                    .detach()
                    .to_vec::<f32>()?
                    .into_iter()
                    .map(f64::from)
                    .collect();
                let want = floats(&want[i]);
                let e = worst(&got, &want, 1e-6, 1e-7);
                assert!(
                    e <= 1.0,
                    "{name} ({mode}) step {step} param {i}:\n got {got:?}\nwant {want:?}"
                );
                worst_param = worst_param.max(e);
            }
        }
    }
    // Per-parameter state after the last step: step counts and buffers, by PyTorch's names.
    let state = opt.state_dict();
    for (i, want) in result["state"].as_array().unwrap().iter().enumerate() {
        for (key, v) in want.as_object().unwrap() {
            let name_i = format!("state.{i}.{key}");
            if key == "step" {
                assert_eq!(
                    state.scalar(&name_i),
                    Some(f(v)),
                    "{name} ({mode}) {name_i}"
                );
                continue;
            }
            let got: Vec<f64> = state
                .tensor(&name_i)
                .unwrap_or_else(|| panic!("{name} ({mode}): no {name_i}"))
                .to_vec::<f32>()?
                .into_iter()
                .map(f64::from)
                .collect();
            let want = floats(v);
            let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let e = worst(&got, &want, 1e-6, 1e-6 * scale);
            assert!(
                e <= 1.0,
                "{name} ({mode}) {name_i}:\n got {got:?}\nwant {want:?}"
            );
        }
    }
    Ok(worst_param)
}

#[test]
fn optimizers_schedulers_and_clipping_follow_pytorch_for_100_steps() -> Result<()> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/optim_parity.json"
    ))
    .expect("tests/data/optim_parity.json (regenerate with scripts/parity/record_optim.py)");
    let data: J = serde_json::from_str(&text).unwrap();
    let checkpoints: Vec<usize> = data["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap() as usize)
        .collect();
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "the recorded cases");
    for case in cases {
        for fused in [false, true] {
            let e = replay(case, fused, &checkpoints)?;
            println!(
                "{:<32} {}: worst parameter error {e:.3} of the tolerance",
                case["name"].as_str().unwrap(),
                if fused { "fused" } else { "eager" }
            );
        }
    }
    Ok(())
}

/// The per-parameter step count of the recording: parameter 1 missed every third step.
#[test]
fn adam_keeps_one_step_count_per_parameter() -> Result<()> {
    let (a, b) = (
        Tensor::ones(&[2], DType::F32).requires_grad_(true)?,
        Tensor::ones(&[2], DType::F32).requires_grad_(true)?,
    );
    let mut opt = Adam::new(vec![a.clone(), b.clone()], 0.1, (0.9, 0.999), 1e-8)?;
    for step in 0..5 {
        a.zero_grad();
        b.zero_grad();
        a.sum_all()?.backward()?;
        if step % 2 == 0 {
            b.sum_all()?.backward()?;
        }
        opt.step()?;
    }
    let s = opt.state_dict();
    assert_eq!(s.scalar("state.0.step"), Some(5.0));
    assert_eq!(s.scalar("state.1.step"), Some(3.0));
    Ok(())
}
