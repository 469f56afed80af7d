//! A training step compiled end to end: an MLP with a traced-through custom op (GELU-like) and
//! an opaque custom op with its own autograd formula, trained 20 steps eagerly and compiled
//! (compiled forward + compiled backward + fused in-place optimizer); losses and parameters
//! agree.

use std::sync::OnceLock;

use tensorplay_compiler::compile;
use tensorplay_compiler::optim::{
    Adam, AdamOptions, AdamW, Optimizer, RMSprop, RMSpropOptions, Sgd, SgdOptions, clip_grad_norm_,
    clip_grad_norm_eager, clip_grad_value_,
};
use tensorplay_runtime::library::{self, CustomOpDef};
use tensorplay_runtime::{DType, Result, Tensor, Value};

/// `gelu_like(x) = x·sigmoid(1.702x)` (traced through) and `softsign(x) = x / (1 + |x|)`
/// (opaque: CPU kernel, fake kernel, autograd formula).
fn ops() -> &'static (CustomOpDef, CustomOpDef) {
    static OPS: OnceLock<(CustomOpDef, CustomOpDef)> = OnceLock::new();
    OPS.get_or_init(|| {
        let gelu = library::custom_op("train_mlp::gelu_like")
            .arg_names(&["x"])
            .build(|x: Tensor| -> Result<Tensor> { x.mul(&x.mul_scalar(1.702)?.sigmoid()?) })
            .expect("gelu_like");
        let softsign = library::custom_op("train_mlp::softsign")
            .arg_names(&["x"])
            .device_types(&["cpu"])
            .build(|x: Tensor| -> Result<Tensor> { x.div(&x.abs()?.add_scalar(1.0)?) })
            .expect("softsign");
        softsign
            .register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })
            .expect("fake");
        softsign
            .register_autograd(
                |ctx, g| {
                    let x = &ctx.saved_tensors()[0];
                    let d = x.abs()?.add_scalar(1.0)?;
                    Ok(vec![g[0].as_ref().map(|g| g.div(&d.mul(&d)?)).transpose()?])
                },
                Some(Box::new(|ctx, inputs, _| {
                    let x = inputs[0].tensors().next().cloned().expect("x");
                    ctx.save_for_backward(&[&x]);
                    Ok(())
                })),
            )
            .expect("autograd");
        (gelu.into(), softsign.into())
    })
}

/// Loss of the MLP: inputs `x, y, w1, b1, w2, b2`.
fn loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (gelu, softsign) = ops();
    let (x, y, w1, b1, w2, b2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let h = gelu.call1(&[Value::Tensor(x.matmul(w1)?.add(b1)?)])?;
    let o = softsign.call1(&[Value::Tensor(h.matmul(w2)?.add(b2)?)])?;
    let d = o.sub(y)?;
    Ok(vec![d.mul(&d)?.mean_all()?])
}

fn params(seed: u64) -> Result<Vec<Tensor>> {
    [
        (vec![8, 16], 0.3),
        (vec![16], 0.1),
        (vec![16, 4], 0.3),
        (vec![4], 0.1),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (s, scale))| {
        Tensor::randn_seeded(&s, DType::F32, seed + i as u64)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    })
    .collect()
}

fn data() -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn_seeded(&[32, 8], DType::F32, 100)?;
    let y = Tensor::randn_seeded(&[32, 4], DType::F32, 101)?.tanh()?;
    Ok((x, y))
}

trait Step {
    fn fused(&mut self) -> Result<()>;
    fn eager(&mut self) -> Result<()>;
    fn zero(&self);
}
impl Step for Sgd {
    fn fused(&mut self) -> Result<()> {
        self.step()
    }
    fn eager(&mut self) -> Result<()> {
        self.step_eager()
    }
    fn zero(&self) {
        self.zero_grad()
    }
}
impl Step for Adam {
    fn fused(&mut self) -> Result<()> {
        self.step()
    }
    fn eager(&mut self) -> Result<()> {
        self.step_eager()
    }
    fn zero(&self) {
        self.zero_grad()
    }
}

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

fn train_both(make: &dyn Fn(Vec<Tensor>) -> Result<Box<dyn Step>>) -> Result<()> {
    let (x, y) = data()?;
    let (pe, pc) = (params(1)?, params(1)?);
    let (mut oe, mut oc) = (make(pe.clone())?, make(pc.clone())?);
    let f = compile(loss);
    let mut losses = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let mut ins = vec![x.clone(), y.clone()];
        ins.extend(pe.iter().cloned());
        let le = loss(&ins)?.swap_remove(0);
        le.backward()?;
        oe.eager()?;
        oe.zero();
        losses.0.push(le.item::<f32>()?);

        let mut ins = vec![x.clone(), y.clone()];
        ins.extend(pc.iter().cloned());
        let lc = f.call(&ins)?.swap_remove(0);
        assert_eq!(lc.grad_fn_name(), Some("compiled_backward"));
        lc.backward()?;
        oc.fused()?;
        oc.zero();
        losses.1.push(lc.item::<f32>()?);
    }
    assert!(close(&losses.1, &losses.0, 1e-4), "losses {losses:?}");
    assert!(
        losses.0[19] < losses.0[0],
        "the model trains: {:?}",
        losses.0
    );
    for (i, (a, b)) in pc.iter().zip(&pe).enumerate() {
        let (a, b) = (a.detach().to_vec::<f32>()?, b.detach().to_vec::<f32>()?);
        assert!(close(&a, &b, 1e-4), "parameter {i} differs");
    }
    assert_eq!(f.num_compiled(), 1);
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    let t = f.latest_training().unwrap();
    let text = t.explain();
    assert!(text.contains("train_mlp::softsign"), "{text}");
    assert!(!text.contains("train_mlp::gelu_like"), "{text}");
    Ok(())
}

#[test]
fn mlp_trains_the_same_eager_and_compiled_with_sgd_momentum() -> Result<()> {
    train_both(&|p| Ok(Box::new(Sgd::new(p, 0.1, 0.9)?)))
}

#[test]
fn mlp_trains_the_same_eager_and_compiled_with_adam() -> Result<()> {
    train_both(&|p| Ok(Box::new(Adam::new(p, 0.01, (0.9, 0.999), 1e-8)?)))
}

#[test]
fn one_fused_kernel_updates_every_parameter() -> Result<()> {
    let ps = params(7)?;
    for p in &ps {
        p.mul_scalar(2.0)?.sum_all()?.backward()?;
    }
    let before: Vec<u64> = ps.iter().map(Tensor::version).collect();
    let ptrs: Vec<Vec<f32>> = ps
        .iter()
        .map(|p| p.detach().to_vec::<f32>())
        .collect::<Result<_>>()?;
    let mut opt = Adam::new(ps.clone(), 0.1, (0.9, 0.999), 1e-8)?;
    opt.step()?;
    opt.step()?;
    // All four parameters (different shapes) share one compiled kernel.
    assert_eq!(opt.num_compiled(), 1);
    for (i, p) in ps.iter().enumerate() {
        assert!(
            p.version() > before[i],
            "parameter {i} was written in its own storage"
        );
        let now = p.detach().to_vec::<f32>()?;
        // Adam's first steps move every element by about lr against the gradient's sign.
        for (a, b) in now.iter().zip(&ptrs[i]) {
            assert!((b - a - 0.2).abs() < 1e-3, "parameter {i}: {b} -> {a}");
        }
    }
    Ok(())
}

#[test]
fn optimizers_reject_parameters_they_cannot_update() {
    let e = Sgd::new(vec![Tensor::ones(&[2], DType::I64)], 0.1, 0.0)
        .err()
        .expect("integer parameter")
        .to_string();
    assert!(e.contains("params[0]"), "{e}");
}

/// A parameter listed twice (tied weights: two updates of one storage, one after the other),
/// a one-element parameter (its own loop layout) and a large one (the group launch splits it
/// across the pool): the fused in-place step equals the eager one.
#[test]
fn tied_one_element_and_large_parameters_update_as_eagerly() -> Result<()> {
    type Make = fn(Vec<Tensor>) -> Result<Box<dyn Step>>;
    let makers: [(&str, Make); 2] = [
        ("sgd", |p| Ok(Box::new(Sgd::new(p, 0.05, 0.9)?))),
        ("adam", |p| {
            Ok(Box::new(Adam::new(p, 0.01, (0.9, 0.999), 1e-8)?))
        }),
    ];
    for (name, make) in makers {
        let fresh = || -> Result<[Tensor; 3]> {
            Ok([
                Tensor::randn_seeded(&[6], DType::F32, 7)?.requires_grad_(true)?,
                Tensor::randn_seeded(&[1], DType::F32, 8)?.requires_grad_(true)?,
                Tensor::randn_seeded(&[300_000], DType::F32, 9)?.requires_grad_(true)?,
            ])
        };
        let (e, c) = (fresh()?, fresh()?);
        let list = |p: &[Tensor; 3]| vec![p[0].clone(), p[1].clone(), p[2].clone(), p[0].clone()];
        let (mut oe, mut oc) = (make(list(&e))?, make(list(&c))?);
        for step in 0..3 {
            for (p, opt, fused) in [(&e, &mut oe, false), (&c, &mut oc, true)] {
                let l = p[0]
                    .mul(&p[0])?
                    .sum_all()?
                    .add(&p[1].mul_scalar(3.0)?.sum_all()?)?
                    .add(&p[2].sin()?.sum_all()?)?;
                l.backward()?;
                if fused {
                    opt.fused()?
                } else {
                    opt.eager()?
                }
                opt.zero();
            }
            for k in 0..3 {
                let (a, b) = (
                    c[k].detach().to_vec::<f32>()?,
                    e[k].detach().to_vec::<f32>()?,
                );
                assert!(
                    close(&a, &b, 1e-5),
                    "{name} step {step}: parameter {k} differs"
                );
            }
        }
    }
    Ok(())
}

/// Sets `p.grad` to `g` (through a backward pass of `sum(p·g)`).
fn set_grad(p: &Tensor, g: &Tensor) -> Result<()> {
    p.zero_grad();
    p.mul(g)?.sum_all()?.backward()
}

/// Groups with their own rates, a learning-rate change without recompiling, and a parameter
/// without a gradient left untouched (its state not even created).
#[test]
fn groups_have_their_own_rates_and_parameters_without_grad_are_skipped() -> Result<()> {
    let (a, b, c) = (
        Tensor::ones(&[3], DType::F32).requires_grad_(true)?,
        Tensor::ones(&[3], DType::F32).requires_grad_(true)?,
        Tensor::ones(&[3], DType::F32).requires_grad_(true)?,
    );
    let mut opt = Sgd::new(vec![a.clone(), c.clone()], 0.1, 0.0)?;
    opt.add_param_group(
        vec![b.clone()],
        SgdOptions {
            lr: 0.5,
            ..Default::default()
        },
    )?;
    let g = Tensor::ones(&[3], DType::F32);
    set_grad(&a, &g)?;
    set_grad(&b, &g)?;
    opt.step()?;
    assert_eq!(a.detach().to_vec::<f32>()?, vec![0.9; 3]);
    assert_eq!(b.detach().to_vec::<f32>()?, vec![0.5; 3]);
    assert_eq!(
        c.detach().to_vec::<f32>()?,
        vec![1.0; 3],
        "no grad: skipped"
    );
    assert!(
        opt.param_state(1).is_none(),
        "no state for a skipped parameter"
    );
    let compiled = opt.num_compiled();
    opt.set_group_lr(1, 0.25)?;
    opt.step()?;
    assert_eq!(b.detach().to_vec::<f32>()?, vec![0.25; 3]);
    assert_eq!(
        opt.num_compiled(),
        compiled,
        "a new rate is an input, not a recompile"
    );
    assert_eq!(opt.lrs(), vec![0.1, 0.25]);
    let e = opt.set_group_lr(2, 0.1).unwrap_err().to_string();
    assert!(e.contains("group"), "{e}");
    Ok(())
}

/// PyTorch's argument checks, as errors naming the argument.
#[test]
fn bad_hyper_parameters_are_clear_errors() {
    let p = || vec![Tensor::ones(&[2], DType::F32)];
    let nesterov = SgdOptions {
        nesterov: true,
        momentum: 0.9,
        dampening: 0.1,
        ..Default::default()
    };
    let e = Sgd::with_options(p(), nesterov).err().unwrap().to_string();
    assert!(e.contains("nesterov") && e.contains("dampening"), "{e}");
    let e = Adam::new(p(), 1e-3, (1.0, 0.999), 1e-8)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("betas.0"), "{e}");
    let e = Sgd::new(p(), -0.1, 0.0).err().unwrap().to_string();
    assert!(e.contains("lr"), "{e}");
    let alpha = RMSpropOptions {
        alpha: -1.0,
        ..Default::default()
    };
    let e = RMSprop::with_options(p(), alpha).err().unwrap().to_string();
    assert!(e.contains("alpha"), "{e}");
}

/// Every optimizer's fused step equals its eager step on a mix of shapes and options, with
/// one parameter missing its gradient every other step.
#[test]
fn fused_and_eager_steps_agree_for_every_optimizer() -> Result<()> {
    type Make = fn(Vec<Tensor>) -> Result<Box<dyn Optimizer>>;
    let makers: [(&str, Make); 5] = [
        ("sgd", |p| {
            let o = SgdOptions {
                lr: 0.05,
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.01,
                ..Default::default()
            };
            Ok(Box::new(Sgd::with_options(p, o)?))
        }),
        ("adam", |p| {
            let o = AdamOptions {
                lr: 0.01,
                weight_decay: 0.1,
                amsgrad: true,
                ..Default::default()
            };
            Ok(Box::new(Adam::with_options(p, o)?))
        }),
        ("adamw", |p| {
            Ok(Box::new(AdamW::with_options(p, AdamOptions::adamw())?))
        }),
        ("rmsprop", |p| {
            let o = RMSpropOptions {
                momentum: 0.5,
                centered: true,
                weight_decay: 0.01,
                ..Default::default()
            };
            Ok(Box::new(RMSprop::with_options(p, o)?))
        }),
        ("rmsprop-plain", |p| Ok(Box::new(RMSprop::new(p, 0.01)?))),
    ];
    for (name, make) in makers {
        let fresh = || -> Result<Vec<Tensor>> {
            [vec![7, 33], vec![1], vec![50_000]]
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    Tensor::randn_seeded(s, DType::F32, 40 + i as u64)?.requires_grad_(true)
                })
                .collect()
        };
        let (e, c) = (fresh()?, fresh()?);
        let (mut oe, mut oc) = (make(e.clone())?, make(c.clone())?);
        for step in 0..6u64 {
            for (ps, opt, fused) in [(&e, &mut oe, false), (&c, &mut oc, true)] {
                for (i, p) in ps.iter().enumerate() {
                    p.zero_grad();
                    if i != 1 || step.is_multiple_of(2) {
                        let g =
                            Tensor::randn_seeded(p.shape(), DType::F32, 100 + step * 7 + i as u64)?;
                        set_grad(p, &g)?;
                    }
                }
                if fused {
                    opt.step()?
                } else {
                    opt.step_eager()?
                }
            }
            for k in 0..3 {
                let (a, b) = (
                    c[k].detach().to_vec::<f32>()?,
                    e[k].detach().to_vec::<f32>()?,
                );
                assert!(
                    close(&a, &b, 1e-6),
                    "{name} step {step}: parameter {k} differs"
                );
            }
        }
    }
    Ok(())
}

/// The state export names PyTorch's buffers and step counts; importing it into a fresh
/// optimizer continues the same trajectory; a mismatched state is refused with the keys listed.
#[test]
fn optimizer_state_round_trips_and_mismatches_are_listed() -> Result<()> {
    let fresh = || -> Result<Vec<Tensor>> {
        Ok(vec![
            Tensor::randn_seeded(&[4, 3], DType::F32, 1)?.requires_grad_(true)?,
            Tensor::randn_seeded(&[3], DType::F32, 2)?.requires_grad_(true)?,
        ])
    };
    let opts = AdamOptions {
        lr: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let grads = |step: u64, ps: &[Tensor]| -> Result<()> {
        for (i, p) in ps.iter().enumerate() {
            let g = Tensor::randn_seeded(p.shape(), DType::F32, 10 + step * 2 + i as u64)?;
            set_grad(p, &g)?;
        }
        Ok(())
    };
    let (a, b) = (fresh()?, fresh()?);
    let mut oa = Adam::with_options(a.clone(), opts)?;
    for step in 0..3 {
        grads(step, &a)?;
        oa.step()?;
    }
    let state = oa.state_dict();
    let names: Vec<&str> = state.tensors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "state.0.exp_avg",
            "state.0.exp_avg_sq",
            "state.0.max_exp_avg_sq",
            "state.1.exp_avg",
            "state.1.exp_avg_sq",
            "state.1.max_exp_avg_sq"
        ]
    );
    assert_eq!(state.scalar("state.1.step"), Some(3.0));
    assert_eq!(state.scalar("param_groups.0.amsgrad"), Some(1.0));
    // b: the same parameters, a fresh optimizer with other options, loaded.
    for (pb, pa) in b.iter().zip(&a) {
        pb.detach().copy_(&pa.detach())?;
    }
    let mut ob = Adam::new(b.clone(), 1.0, (0.5, 0.5), 1.0)?;
    ob.load_state_dict(&state)?;
    for step in 3..6 {
        grads(step, &a)?;
        oa.step()?;
        grads(step, &b)?;
        ob.step()?;
    }
    for (pa, pb) in a.iter().zip(&b) {
        assert_eq!(pa.detach().to_vec::<f32>()?, pb.detach().to_vec::<f32>()?);
    }
    // The export shares a's live buffers (as PyTorch's `state_dict()` does); the import copies.
    let ptr = |o: &Adam| -> Result<usize> {
        Ok(o.state_dict()
            .tensor("state.0.exp_avg")
            .unwrap()
            .data_ptr_raw()? as usize)
    };
    let exported = state.tensor("state.0.exp_avg").unwrap().data_ptr_raw()? as usize;
    assert_eq!(ptr(&oa)?, exported);
    assert_ne!(ptr(&ob)?, exported);
    // A state for other shapes, and one with an unknown key.
    let mut small = Adam::new(
        vec![Tensor::ones(&[2], DType::F32)],
        0.1,
        (0.9, 0.999),
        1e-8,
    )?;
    let e = small.load_state_dict(&state).unwrap_err().to_string();
    assert!(
        e.contains("state.0.exp_avg is [4, 3]") && e.contains("unexpected state.1.step"),
        "{e}"
    );
    Ok(())
}

/// Clipping: the fused norm and scaling equal the eager ones, the norm is returned before
/// clipping, parameters without a gradient are ignored, and values clamp in place.
#[test]
fn clipping_fused_equals_eager() -> Result<()> {
    let make = || -> Result<Vec<Tensor>> {
        [vec![64, 65], vec![3], vec![1], vec![20_000]]
            .iter()
            .map(|s| Tensor::zeros(s, DType::F32).requires_grad_(true))
            .collect()
    };
    for p in [2.0, 1.0, f64::INFINITY, 3.0] {
        let (e, c) = (make()?, make()?);
        for ps in [&e, &c] {
            for (i, t) in ps.iter().enumerate().take(3) {
                set_grad(
                    t,
                    &Tensor::randn_seeded(t.shape(), DType::F32, 7 + i as u64)?,
                )?;
            }
        }
        let ne = clip_grad_norm_eager(&e, 0.5, p)?;
        let nc = clip_grad_norm_(&c, 0.5, p)?;
        assert!((ne - nc).abs() <= 1e-6 * ne, "p = {p}: {ne} vs {nc}");
        for k in 0..3 {
            let (a, b) = (
                c[k].grad().unwrap().to_vec::<f32>()?,
                e[k].grad().unwrap().to_vec::<f32>()?,
            );
            assert!(close(&a, &b, 1e-6), "p = {p}: gradient {k}");
        }
        assert!(c[3].grad().is_none());
        // Clipped to the norm 0.5 (1e-6 below it).
        let again = clip_grad_norm_(&c, 1e9, p)?;
        assert!(
            (again - 0.5).abs() < 1e-5,
            "p = {p}: norm after clipping {again}"
        );
    }
    let w = Tensor::zeros(&[5], DType::F32).requires_grad_(true)?;
    set_grad(
        &w,
        &Tensor::from_vec(vec![-2.0f32, -0.5, 0.0, 0.5, 2.0], &[5])?,
    )?;
    clip_grad_value_(std::slice::from_ref(&w), 1.0)?;
    assert_eq!(
        w.grad().unwrap().to_vec::<f32>()?,
        vec![-1.0, -0.5, 0.0, 0.5, 1.0]
    );
    assert_eq!(
        clip_grad_norm_(&[Tensor::ones(&[2], DType::F32)], 1.0, 2.0)?,
        0.0,
        "no gradients"
    );
    Ok(())
}
