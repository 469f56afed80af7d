//! DDP and compiled collectives, checked against single-process references every rank computes
//! on its own.

use tensorplay_compiler::compile;
use tensorplay_compiler::optim::Adam;
use tensorplay_distributed::{self as dist, DistributedDataParallel, ReduceOp, functional};
use tensorplay_runtime::{DType, Result, Tensor};

use tensorplay_ir::OpClass;
use tensorplay_ir::graph::Graph;
use tensorplay_runtime::library::registry;

use crate::checks::ensure;

/// `examples/train_mlp`'s model: mean squared error of `gelu(x w1 + b1) w2 + b2` against `y`.
fn loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y, w1, b1, w2, b2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let h = x.matmul(w1)?.add(b1)?.gelu("tanh")?;
    let d = h.matmul(w2)?.add(b2)?.sub(y)?;
    Ok(vec![d.mul(&d)?.mean_all()?])
}

/// The parameters; `seed_shift` makes each rank's initial values differ (DDP's broadcast must
/// make them equal).
fn params(seed_shift: u64) -> Result<Vec<Tensor>> {
    let p = |shape: &[usize], scale: f64, seed: u64| -> Result<Tensor> {
        Tensor::randn_seeded(shape, DType::F32, seed + seed_shift)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    };
    Ok(vec![
        p(&[16, 32], 0.25, 1)?,
        p(&[32], 0.1, 2)?,
        p(&[32, 4], 0.18, 3)?,
        p(&[4], 0.1, 4)?,
    ])
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    a.detach().sub(&b.detach())?.abs()?.max_all()?.item::<f32>()
}

/// DDP on `size` ranks with batch `B / size` each equals one process with batch `B`, step by
/// step, eager and compiled, with small buckets (several per step) and the default.
pub fn ddp_matches_single_process(rank: usize, size: usize) -> Result<()> {
    let per_rank = 8;
    let batch = per_rank * size;
    let x = Tensor::randn_seeded(&[batch, 16], DType::F32, 100)?;
    let y = Tensor::randn_seeded(&[batch, 4], DType::F32, 101)?;
    let (xl, yl) = (
        x.narrow(0, (rank * per_rank) as i64, per_rank)?
            .contiguous()?,
        y.narrow(0, (rank * per_rank) as i64, per_rank)?
            .contiguous()?,
    );
    for compiled in [false, true] {
        for cap in [600usize, dist::DEFAULT_BUCKET_CAP_BYTES] {
            let reference = params(0)?;
            let mine = params(rank as u64 * 1000)?;
            let ddp = DistributedDataParallel::with_bucket_cap(mine.clone(), cap, None)?;
            ensure(cap > 100_000 || ddp.num_buckets() >= 3, || {
                format!("{} buckets", ddp.num_buckets())
            })?;
            let mut opt_ref = Adam::new(reference.clone(), 1e-2, (0.9, 0.999), 1e-8)?;
            let mut opt = Adam::new(mine.clone(), 1e-2, (0.9, 0.999), 1e-8)?;
            let (f_ref, f) = (compile(loss), compile(loss));
            for step in 0..4 {
                let mut ins_ref = vec![x.clone(), y.clone()];
                ins_ref.extend(reference.iter().cloned());
                let mut ins = vec![xl.clone(), yl.clone()];
                ins.extend(mine.iter().cloned());
                let (l_ref, l) = if compiled {
                    (f_ref.call(&ins_ref)?.remove(0), f.call(&ins)?.remove(0))
                } else {
                    (loss(&ins_ref)?.remove(0), loss(&ins)?.remove(0))
                };
                l_ref.backward()?;
                l.backward()?;
                for (i, (a, b)) in reference.iter().zip(&mine).enumerate() {
                    let d = max_diff(&a.grad().expect("grad"), &b.grad().expect("grad"))?;
                    ensure(d < 1e-5, || {
                        format!(
                            "compiled={compiled} cap={cap} step {step}: grad {i} differs by {d}"
                        )
                    })?;
                }
                if compiled {
                    opt_ref.step()?;
                    opt.step()?;
                } else {
                    opt_ref.step_eager()?;
                    opt.step_eager()?;
                }
                opt_ref.zero_grad();
                opt.zero_grad();
            }
            for (i, (a, b)) in reference.iter().zip(&mine).enumerate() {
                let d = max_diff(a, b)?;
                ensure(d < 1e-5, || {
                    format!("compiled={compiled} cap={cap}: param {i} differs by {d}")
                })?;
            }
        }
    }
    Ok(())
}

/// A backward pass that fails after DDP launched buckets leaves DDP usable: the next pass
/// averages normally.
pub fn ddp_recovers_from_a_failed_backward(rank: usize, size: usize) -> Result<()> {
    let a = Tensor::zeros(&[2], DType::F32).requires_grad_(true)?;
    let b = Tensor::zeros(&[2], DType::F32).requires_grad_(true)?;
    // One bucket per parameter, so `b`'s bucket launches before the failing hook on `a` runs.
    let ddp = DistributedDataParallel::with_bucket_cap(vec![a.clone(), b.clone()], 8, None)?;
    let fail = a.register_post_accumulate_grad_hook(std::sync::Arc::new(|_: &Tensor| {
        Err(tensorplay_runtime::Error::Autograd("injected".into()))
    }))?;
    let loss = |k: f64| -> Result<Tensor> { b.mul_scalar(k)?.add(&a.mul_scalar(k)?)?.sum_all() };
    ensure(loss(1.0)?.backward().is_err(), || {
        "the injected error".into()
    })?;
    fail.remove();
    a.zero_grad();
    b.zero_grad();
    loss(rank as f64 + 1.0)?.backward()?;
    let avg = (1..=size).sum::<usize>() as f64 / size as f64;
    for t in [&a, &b] {
        let g = t.grad().expect("grad").to_vec::<f32>()?;
        ensure(g.iter().all(|&v| (v as f64 - avg).abs() < 1e-6), || {
            format!("{g:?} vs {avg}")
        })?;
    }
    drop(ddp);
    Ok(())
}

/// Two micro-batches under `no_sync` then one synchronised: the gradients equal the average over
/// ranks of the local sums.
pub fn ddp_no_sync(rank: usize, size: usize) -> Result<()> {
    let w = Tensor::zeros(&[3], DType::F32).requires_grad_(true)?;
    let ddp = DistributedDataParallel::new(vec![w.clone()], None)?;
    let step = |k: f64| -> Result<()> { w.mul_scalar(k)?.sum_all()?.backward() };
    {
        let _local = ddp.no_sync();
        step(rank as f64 + 1.0)?;
        step(1.0)?;
        let g = w.grad().expect("grad").to_vec::<f32>()?;
        ensure(g == vec![rank as f32 + 2.0; 3], || {
            format!("local accumulation: {g:?}")
        })?;
    }
    step(1.0)?;
    // Local sums are r + 3; their average over ranks.
    let avg = (0..size).map(|r| r as f64 + 3.0).sum::<f64>() / size as f64;
    let g = w.grad().expect("grad").to_vec::<f32>()?;
    ensure(g.iter().all(|&v| (v as f64 - avg).abs() < 1e-6), || {
        format!("synchronised: {g:?}, want {avg}")
    })
}

/// A compiled function with an all_reduce between two elementwise regions: the collective is a
/// barrier node, the result matches eager.
pub fn compiled_all_reduce(rank: usize, size: usize) -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let a = xs[0].mul_scalar(2.0)?.add_scalar(1.0)?;
        let b = functional::all_reduce(&a, ReduceOp::Sum, None)?;
        let t = xs[0].clone();
        dist::all_reduce(&t, ReduceOp::Max, None)?;
        Ok(vec![b.relu()?.mul_scalar(3.0)?.add(&t)?])
    };
    let x = Tensor::from_vec(vec![rank as f32, -1.0, 2.5], &[3])?;
    let eager = body(std::slice::from_ref(&x))?.remove(0);
    let f = compile(body);
    let x2 = Tensor::from_vec(vec![rank as f32, -1.0, 2.5], &[3])?;
    let got = f.call(std::slice::from_ref(&x2))?.remove(0);
    let d = max_diff(&eager, &got)?;
    ensure(d == 0.0, || format!("compiled differs from eager by {d}"))?;
    // The in-place all_reduce wrote its input, eager and compiled alike.
    ensure(max_diff(&x, &x2)? == 0.0, || {
        "in-place result differs".into()
    })?;
    let g = f.latest().expect("a compiled graph");
    let text = g.explain();
    ensure(
        text.contains("tp_dist::all_reduce") && text.contains("tp_dist::all_reduce_"),
        || format!("explain() does not show the collectives:\n{text}"),
    )?;
    // The collectives are opaque (barrier) nodes, and the `.tpir` text round-trips them.
    let class_of = |name: &str| registry().find(name).map(|op| op.class());
    ensure(
        class_of("tp_dist::all_reduce") == Some(OpClass::Opaque),
        || format!("class {:?}", class_of("tp_dist::all_reduce")),
    )?;
    let printed = g.graph().to_string();
    let parsed = Graph::parse(&printed, class_of)?;
    ensure(parsed.to_string() == printed, || {
        format!("the .tpir text does not round-trip:\n{printed}")
    })?;
    let _ = size;
    Ok(())
}
