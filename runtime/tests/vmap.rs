//! `vmap`: every batched result is compared with an explicit per-example loop whose results are
//! stacked along the output dim.

use std::slice::from_ref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tensorplay_runtime::library::{self, VmapInfo};
use tensorplay_runtime::vmap::{depth, fallback_calls, vmap, vmap_with_randomness};
use tensorplay_runtime::{DType, Error, Result, Tensor, Value};

type Fun<'a> = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + 'a;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// The per-example loop: example `b` of each batched input (`select` along its in_dim), `f` on
/// it, each output stacked along its out_dim.
fn reference(
    f: &Fun<'_>,
    inputs: &[Tensor],
    in_dims: &[Option<i64>],
    out_dims: &[i64],
) -> Result<Vec<Tensor>> {
    let (i, d) = inputs
        .iter()
        .zip(in_dims)
        .find_map(|(t, d)| d.map(|d| (t, d)))
        .expect("a batched input");
    let n = i.size(d)?;
    let mut columns: Vec<Vec<Tensor>> = Vec::new();
    for b in 0..n {
        let xs: Vec<Tensor> = inputs
            .iter()
            .zip(in_dims)
            .map(|(t, d)| match d {
                Some(d) => t.select(*d, b as i64),
                None => Ok(t.clone()),
            })
            .collect::<Result<_>>()?;
        let outs = f(&xs)?;
        if columns.is_empty() {
            columns = outs.iter().map(|_| Vec::new()).collect();
        }
        for (c, o) in columns.iter_mut().zip(outs) {
            c.push(o);
        }
    }
    columns
        .iter()
        .enumerate()
        .map(|(k, c)| {
            Tensor::stack(
                c,
                if out_dims.len() == 1 {
                    out_dims[0]
                } else {
                    out_dims[k]
                },
            )
        })
        .collect()
}

/// Asserts that `vmap(f)` equals the per-example loop (shape, dtype and values) and returns how
/// many times the per-example fallback ran inside `vmap`.
fn check(f: &Fun<'_>, inputs: &[Tensor], in_dims: &[Option<i64>], out_dims: &[i64]) -> Result<u64> {
    let before = fallback_calls();
    let got = vmap(f, in_dims.to_vec(), out_dims.to_vec())(inputs)?;
    let fallbacks = fallback_calls() - before;
    let want = reference(f, inputs, in_dims, out_dims)?;
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(!g.is_batched(), "output {k} is unwrapped");
        assert_eq!(
            g.shape(),
            w.shape(),
            "output {k} shape (in_dims {in_dims:?})"
        );
        assert_eq!(g.dtype(), w.dtype(), "output {k} dtype");
        assert!(
            g.allclose(w, 1e-12, 1e-12)?,
            "output {k} values (in_dims {in_dims:?})"
        );
    }
    Ok(fallbacks)
}

/// Like [`check`], and the batching rules covered everything (no per-example fallback).
fn check_ruled(
    f: &Fun<'_>,
    inputs: &[Tensor],
    in_dims: &[Option<i64>],
    out_dims: &[i64],
) -> Result<()> {
    assert_eq!(
        check(f, inputs, in_dims, out_dims)?,
        0,
        "no fallback expected (in_dims {in_dims:?})"
    );
    Ok(())
}

fn message(e: Error) -> String {
    e.to_string()
}

#[test]
fn elementwise_with_every_in_dim_placement() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        let (x, y) = (&xs[0], &xs[1]);
        let m = x.gt(y)?;
        Ok(vec![
            x.exp()?,
            x.mul(y)?.add(x)?,
            x.pow_scalar(2)?.sub_scalar(1.5)?,
            m.clone(),
            Tensor::where_cond(&m, x, y)?,
            x.clamp(Some(-0.5), Some(0.5))?,
            x.to_dtype(DType::F32)?,
            x.gelu("tanh")?,
            m.logical_not()?.logical_or(&x.lt_scalar(0.0)?)?,
            x.maximum(y)?.div(&y.abs()?.add_scalar(1.0)?)?,
        ])
    };
    // (0, None): y shared; (1, 0): both batched at different dims; (None, 0): x shared.
    check_ruled(
        f,
        &[randn(&[3, 4, 5], 1), randn(&[4, 5], 2)],
        &[Some(0), None],
        &[0],
    )?;
    check_ruled(
        f,
        &[randn(&[4, 3, 5], 3), randn(&[3, 4, 5], 4)],
        &[Some(1), Some(0)],
        &[0],
    )?;
    check_ruled(
        f,
        &[randn(&[4, 5], 5), randn(&[3, 4, 5], 6)],
        &[None, Some(0)],
        &[0],
    )?;
    check_ruled(
        f,
        &[randn(&[4, 5, 3], 7), randn(&[5], 8)],
        &[Some(-1), None],
        &[0],
    )?;
    Ok(())
}

#[test]
fn broadcasting_against_unbatched_operands_of_higher_rank() -> Result<()> {
    let f: &Fun<'_> = &|xs| Ok(vec![xs[0].add(&xs[1])?, xs[1].mul(&xs[0])?]);
    // Per-example [5] against a shared [2, 4, 5].
    check_ruled(
        f,
        &[randn(&[3, 5], 1), randn(&[2, 4, 5], 2)],
        &[Some(0), None],
        &[0],
    )?;
    // Per-example 0-d against a shared [2, 3]; and per-example [4, 1] against [2, 1, 6].
    check_ruled(
        f,
        &[randn(&[3], 3), randn(&[2, 3], 4)],
        &[Some(0), None],
        &[0],
    )?;
    check_ruled(
        f,
        &[randn(&[4, 1, 3], 5), randn(&[2, 1, 6], 6)],
        &[Some(2), None],
        &[1],
    )?;
    // Both batched with different per-example ranks.
    check_ruled(
        f,
        &[randn(&[5, 3], 7), randn(&[3, 2, 4, 5], 8)],
        &[Some(1), Some(0)],
        &[0],
    )?;
    Ok(())
}

#[test]
fn reductions_with_dims_keepdim_and_all_dims() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        let x = &xs[0];
        let (mx, ix) = x.max_dim(1, false)?;
        let (mn, jn) = x.min_dim(-1, true)?;
        Ok(vec![
            x.sum(&[0], false)?,
            x.sum(&[-1, 0], true)?,
            x.sum_all()?,
            x.mean(&[1], true)?,
            x.mean_all()?,
            x.amax(&[0, 2], false)?,
            x.amin(&[], true)?,
            x.prod(&[2], false)?,
            x.var(&[1], false)?,
            x.std(&[], true)?,
            x.var_correction(&[0, 1], 0.0, false)?,
            mx,
            ix,
            mn,
            jn,
            x.argmax(Some(2), false)?,
            x.argmin(Some(0), true)?,
            x.argmax(None, false)?,
            x.argmin(None, true)?,
        ])
    };
    check_ruled(f, &[randn(&[4, 3, 5, 2], 11)], &[Some(1)], &[0])?;
    check_ruled(f, &[randn(&[3, 5, 2, 4], 12)], &[Some(-1)], &[0])?;
    // Integer sums and products.
    let ints = Tensor::from_vec((0..24).map(|v| v as i64 - 7).collect(), &[2, 3, 4])?;
    let g: &Fun<'_> = &|xs| {
        Ok(vec![
            xs[0].sum(&[1], false)?,
            xs[0].prod_all()?,
            xs[0].sum_all()?,
        ])
    };
    check_ruled(g, &[ints], &[Some(2)], &[0])?;
    Ok(())
}

#[test]
fn reductions_without_a_rule_use_the_fallback() -> Result<()> {
    // max_all has no dim argument; 0-d examples make every dim rule inapplicable.
    let f: &Fun<'_> = &|xs| Ok(vec![xs[0].max_all()?, xs[0].min_all()?]);
    assert!(check(f, &[randn(&[3, 4, 2], 1)], &[Some(0)], &[0])? > 0);
    let g: &Fun<'_> = &|xs| Ok(vec![xs[0].sum_all()?, xs[0].softmax(0)?]);
    assert!(check(g, &[randn(&[5], 2)], &[Some(0)], &[0])? > 0);
    Ok(())
}

#[test]
fn softmax_and_log_softmax() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        Ok(vec![
            xs[0].softmax(0)?,
            xs[0].softmax(-1)?,
            xs[0].log_softmax(1)?,
        ])
    };
    check_ruled(f, &[randn(&[4, 5, 3], 1)], &[Some(2)], &[0])?;
    check_ruled(f, &[randn(&[3, 4, 5], 2)], &[Some(0)], &[-1])?;
    Ok(())
}

#[test]
fn views() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        let x = &xs[0]; // per example [4, 6]
        Ok(vec![
            x.reshape(&[2, 12])?,
            x.reshape_infer(&[-1])?,
            x.permute(&[1, 0])?,
            x.transpose(0, 1)?,
            x.t()?.reshape(&[24])?,
            x.unsqueeze(1)?.expand(&[2, 4, 3, 6])?,
            x.slice(1, Some(1), Some(6), 2)?,
            x.slice(-2, Some(-3), None, 1)?,
            x.select(0, 2)?,
            x.select(1, -1)?,
            x.flatten(0, 1)?,
            x.unsqueeze(0)?.squeeze(Some(0))?,
            x.narrow(1, 2, 3)?,
            x.reshape(&[4, 1, 6])?.squeeze(None)?,
        ])
    };
    check_ruled(f, &[randn(&[4, 3, 6], 1)], &[Some(1)], &[0])?;
    check_ruled(f, &[randn(&[4, 6, 3], 2)], &[Some(2)], &[1])?;
    // A view of a batched tensor aliases the physical storage.
    let g = vmap(
        |xs: &[Tensor]| {
            let v = xs[0].select(0, 0)?;
            v.add_scalar_(100.0)?;
            Ok(vec![xs[0].clone()])
        },
        vec![Some(0)],
        vec![0],
    );
    let x = Tensor::zeros(&[2, 3], DType::F64);
    let out = g(from_ref(&x))?;
    assert_eq!(
        out[0].to_vec::<f64>()?,
        vec![100.0, 0.0, 0.0, 100.0, 0.0, 0.0]
    );
    assert_eq!(x.to_vec::<f64>()?, vec![100.0, 0.0, 0.0, 100.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn slice_backward_under_vmap() -> Result<()> {
    // The gradient of a slice of a batched tensor, computed per example with autograd::grad.
    let f: &Fun<'_> = &|xs| {
        let args = [
            Value::Tensor(xs[0].clone()),
            Value::IntList(vec![5, 4]),
            Value::Int(0),
            Value::Int(1),
            Value::Int(4),
            Value::Int(1),
        ];
        tensorplay_runtime::ops::call("tp::slice_backward", &args)
    };
    check_ruled(f, &[randn(&[3, 4, 2], 1)], &[Some(2)], &[0])?;
    Ok(())
}

#[test]
fn matmul_every_rank_combination_and_batch_placement() -> Result<()> {
    let f: &Fun<'_> = &|xs| Ok(vec![xs[0].matmul(&xs[1])?]);
    let (n, k, m, b) = (3usize, 4usize, 2usize, 5usize);
    // Per-example shapes of the left and right operand for every rank pair.
    let lhs = |r: usize| -> Vec<usize> {
        match r {
            1 => vec![k],
            2 => vec![n, k],
            3 => vec![2, n, k],
            _ => vec![3, 1, n, k],
        }
    };
    let rhs = |r: usize| -> Vec<usize> {
        match r {
            1 => vec![k],
            2 => vec![k, m],
            3 => vec![2, k, m],
            _ => vec![1, 2, k, m],
        }
    };
    let mut seed = 100;
    for ra in 1..=4 {
        for rb in 1..=4 {
            for (da, db) in [
                (Some(0), None),
                (None, Some(0)),
                (Some(0), Some(0)),
                (Some(-1), Some(1)),
            ] {
                let phys = |shape: Vec<usize>, d: Option<i64>| {
                    let mut s = shape;
                    if let Some(d) = d {
                        let pos = if d < 0 { s.len() } else { d as usize };
                        s.insert(pos, b);
                    }
                    s
                };
                seed += 1;
                let a = randn(&phys(lhs(ra), da), seed);
                let bb = randn(&phys(rhs(rb), db), seed + 1000);
                check_ruled(f, &[a, bb], &[da, db], &[0])?;
            }
        }
    }
    // A mismatch is reported with per-example shapes.
    let err = vmap(f, vec![Some(0), None], vec![0])(&[randn(&[2, 3, 4], 1), randn(&[5, 2], 2)])
        .unwrap_err();
    assert!(message(err).contains("matmul"));
    Ok(())
}

#[test]
fn cat_and_stack_with_batched_and_unbatched_members() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        let (x, y, z) = (&xs[0], &xs[1], &xs[2]);
        Ok(vec![
            Tensor::cat(&[x.clone(), y.clone(), z.clone()], 0)?,
            Tensor::cat(&[x.clone(), z.clone()], -1)?,
            Tensor::stack(&[x.clone(), y.clone()], 0)?,
            Tensor::stack(&[z.clone(), x.clone(), y.clone()], -1)?,
            Tensor::stack(&[x.clone(), y.clone()], 1)?,
        ])
    };
    // x batched at dim 1, y shared, z batched at dim 0: per-example [2, 3] each.
    check_ruled(
        f,
        &[
            randn(&[2, 4, 3], 1),
            randn(&[2, 3], 2),
            randn(&[4, 2, 3], 3),
        ],
        &[Some(1), None, Some(0)],
        &[0],
    )?;
    check_ruled(
        f,
        &[randn(&[2, 3], 4), randn(&[2, 3, 4], 5), randn(&[2, 3], 6)],
        &[None, Some(2), None],
        &[2],
    )?;
    Ok(())
}

#[test]
fn out_dims_other_than_zero_and_unbatched_outputs() -> Result<()> {
    let f: &Fun<'_> = &|xs| Ok(vec![xs[0].mul_scalar(2.0)?, xs[0].sum(&[0], false)?]);
    check_ruled(f, &[randn(&[3, 4, 5], 1)], &[Some(0)], &[1, -1])?;
    check_ruled(f, &[randn(&[4, 3, 5], 2)], &[Some(1)], &[2, -2])?;
    // An output that ignores the batched input, and an unbatched input returned as is: both are
    // expanded along the out_dim.
    let c = Tensor::from_vec(vec![1.0f64, 2.0], &[2])?;
    let g = vmap(
        move |xs: &[Tensor]| Ok(vec![c.clone(), xs[1].clone(), xs[0].clone()]),
        vec![Some(0), None],
        vec![1, 0, 0],
    );
    let x = randn(&[3, 2], 1);
    let w = randn(&[2], 2);
    let out = g(&[x.clone(), w.clone()])?;
    assert_eq!(out[0].shape(), &[2, 3]);
    assert_eq!(out[0].to_vec::<f64>()?, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    assert!(out[1].equal(&w.unsqueeze(0)?.expand(&[3, 2])?)?);
    assert!(out[2].equal(&x)?);
    Ok(())
}

#[test]
fn nested_vmap_outer_product() -> Result<()> {
    // Inner vmap over y, outer vmap over x: out[i][j] = x[i] * y[j] + 1.
    let inner = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?.add_scalar(1.0)?]),
        vec![None, Some(0)],
        vec![0],
    );
    let outer = vmap(
        move |xs: &[Tensor]| {
            assert_eq!(depth(), 1);
            inner(xs)
        },
        vec![Some(0), None],
        vec![0],
    );
    let x = randn(&[3], 1);
    let y = randn(&[4], 2);
    let out = outer(&[x.clone(), y.clone()])?;
    let want = x.unsqueeze(1)?.mul(&y.unsqueeze(0)?)?.add_scalar(1.0)?;
    assert_eq!(out[0].shape(), &[3, 4]);
    assert!(out[0].allclose(&want, 1e-12, 1e-12)?);
    assert_eq!(depth(), 0);

    // The inner vmap batches an input the outer vmap already batched: rows outside, columns
    // inside, so each call sees one 0-d element and its row's sum.
    let inner = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].mul_scalar(2.0)?.add(&xs[1])?.sin()?]),
        vec![Some(0), None],
        vec![0],
    );
    let outer = vmap(
        move |xs: &[Tensor]| inner(&[xs[0].clone(), xs[0].sum_all()?]),
        vec![Some(1)],
        vec![1],
    );
    let x = randn(&[4, 3], 5);
    let before = fallback_calls();
    let out = outer(from_ref(&x))?;
    assert_eq!(fallback_calls(), before);
    let want = x.mul_scalar(2.0)?.add(&x.sum(&[0], true)?)?.sin()?;
    assert_eq!(out[0].shape(), &[4, 3]);
    assert!(out[0].allclose(&want, 1e-12, 1e-12)?);

    // Nested matmul and reductions with both levels batched at different dims:
    // out[i][j] = a[i] @ b[:, j] summed.
    let inner = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].matmul(&xs[1])?.sum_all()?]),
        vec![None, Some(1)],
        vec![0],
    );
    let outer = vmap(inner, vec![Some(0), None], vec![-1]);
    let a = randn(&[2, 3, 4], 3);
    let b = randn(&[4, 5, 2], 4);
    let before = fallback_calls();
    let out = outer(&[a.clone(), b.clone()])?;
    assert_eq!(fallback_calls(), before);
    assert_eq!(out[0].shape(), &[5, 2]);
    for i in 0..2 {
        for j in 0..5 {
            let want = a
                .select(0, i)?
                .matmul(&b.select(1, j)?)?
                .sum_all()?
                .item::<f64>()?;
            let got = out[0].select(0, j)?.select(0, i)?.item::<f64>()?;
            assert!((got - want).abs() < 1e-12);
        }
    }
    Ok(())
}

#[test]
fn custom_op_with_a_vmap_rule() -> Result<()> {
    let op = library::custom_op("vmaptest::scale_add")
        .arg_names(&["x", "y", "alpha"])
        .build(|x: Tensor, y: Tensor, alpha: f64| -> Result<Tensor> {
            x.mul_scalar(alpha)?.add(&y)
        })?;
    let calls = Arc::new(AtomicUsize::new(0));
    // (batch size, in_dims, op) of each rule call.
    type Seen = Vec<(usize, Vec<Option<usize>>, String)>;
    let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new(Vec::new()));
    let (c, s) = (calls.clone(), seen.clone());
    op.register_vmap(
        move |info: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
            c.fetch_add(1, Ordering::SeqCst);
            s.lock()
                .push((info.batch_size, in_dims.to_vec(), info.randomness.clone()));
            let (Value::Tensor(x), Value::Tensor(y), Value::Float(alpha)) =
                (&args[0], &args[1], &args[2])
            else {
                return Err(Error::unsupported("scale_add rule", "unexpected arguments"));
            };
            // Batch-first x; y is shared (broadcasts from the right).
            let d = in_dims[0].expect("x batched") as i64;
            let x = x.unsqueeze(0)?.transpose(0, d + 1)?.squeeze(Some(d + 1))?;
            Ok((vec![x.mul_scalar(*alpha)?.add(y)?], vec![Some(0)]))
        },
    )?;
    let f: &Fun<'_> = &|xs| {
        op.def().call(&[
            xs[0].clone().into(),
            xs[1].clone().into(),
            Value::Float(3.0),
        ])
    };
    check_ruled(
        f,
        &[randn(&[4, 5, 3], 1), randn(&[3], 2)],
        &[Some(1), None],
        &[0],
    )?;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.lock()[0],
        (5, vec![Some(1), None, None], "error".to_string())
    );

    // A rule returning an out_dim outside the output is an error naming the op.
    let bad = library::custom_op("vmaptest::bad_rule")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
    bad.register_vmap(|_: &VmapInfo, _: &[Option<usize>], args: &[Value]| {
        let Value::Tensor(x) = &args[0] else {
            unreachable!()
        };
        Ok((vec![x.clone_tensor()?], vec![Some(7)]))
    })?;
    let err = vmap(
        |xs: &[Tensor]| bad.def().call(&[xs[0].clone().into()]),
        vec![Some(0)],
        vec![0],
    )(&[randn(&[2, 3], 1)])
    .unwrap_err();
    let msg = message(err);
    assert!(
        msg.contains("vmaptest::bad_rule") && msg.contains("out_dim 7"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn custom_op_without_a_rule_runs_per_example() -> Result<()> {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let op = library::custom_op("vmaptest::norm2")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            c.fetch_add(1, Ordering::SeqCst);
            x.mul(&x)?.sum_all()?.sqrt()
        })?;
    let f: &Fun<'_> = &|xs| op.def().call(&[xs[0].clone().into()]);
    let x = randn(&[4, 6], 3);
    let got = vmap(f, vec![Some(1)], vec![0])(from_ref(&x))?;
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    let want = reference(f, &[x], &[Some(1)], &[0])?;
    assert!(got[0].allclose(&want[0], 1e-12, 1e-12)?);
    Ok(())
}

#[test]
fn seed_weighted_sum_under_vmap_and_its_gradient() -> Result<()> {
    let weighted_sum = library::custom_op("vmaptest::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    let f: &Fun<'_> = &|xs| {
        weighted_sum
            .def()
            .call(&[xs[0].clone().into(), xs[1].clone().into()])
    };
    check(
        f,
        &[randn(&[5, 3], 1), randn(&[3], 2)],
        &[Some(0), None],
        &[0],
    )?;
    check(
        f,
        &[randn(&[3, 5], 3), randn(&[5, 3], 4)],
        &[Some(1), Some(0)],
        &[0],
    )?;

    // Gradients reach the physical inputs once the outputs are unwrapped.
    let x = randn(&[4, 3], 5).requires_grad_(true)?;
    let w = randn(&[3], 6).requires_grad_(true)?;
    let out = vmap(f, vec![Some(0), None], vec![0])(&[x.clone(), w.clone()])?;
    assert_eq!(out[0].shape(), &[4]);
    out[0]
        .mul(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4])?)?
        .sum_all()?
        .backward()?;
    let scale = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4, 1])?;
    assert!(
        x.grad()
            .unwrap()
            .allclose(&scale.mul(&w.detach())?, 1e-12, 1e-12)?
    );
    assert!(w.grad().unwrap().allclose(
        &x.detach().mul(&scale)?.sum(&[0], false)?,
        1e-12,
        1e-12
    )?);
    Ok(())
}

#[test]
fn gradients_through_builtin_rules_match_the_loop() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        Ok(vec![
            xs[0]
                .matmul(&xs[1])?
                .tanh()?
                .softmax(-1)?
                .sum(&[0], false)?,
        ])
    };
    let x = randn(&[3, 2, 4], 1);
    let w = randn(&[4, 5], 2);
    let grads = |batched: bool| -> Result<(Tensor, Tensor)> {
        let xg = x.detach().requires_grad_(true)?;
        let wg = w.detach().requires_grad_(true)?;
        let out = if batched {
            vmap(f, vec![Some(0), None], vec![0])(&[xg.clone(), wg.clone()])?
        } else {
            reference(f, &[xg.clone(), wg.clone()], &[Some(0), None], &[0])?
        };
        out[0].mul(&randn(&[3, 5], 9))?.sum_all()?.backward()?;
        Ok((xg.grad().unwrap(), wg.grad().unwrap()))
    };
    let (gx, gw) = grads(true)?;
    let (rx, rw) = grads(false)?;
    assert!(gx.allclose(&rx, 1e-10, 1e-12)?);
    assert!(gw.allclose(&rw, 1e-10, 1e-12)?);
    Ok(())
}

#[test]
fn backward_inside_vmap_is_an_error() -> Result<()> {
    let x = randn(&[3, 2], 1).requires_grad_(true)?;
    let f = vmap(
        |xs: &[Tensor]| {
            let y = xs[0].mul(&xs[0])?.sum_all()?;
            assert!(y.requires_grad() && y.is_batched());
            y.backward()?;
            Ok(vec![y])
        },
        vec![Some(0)],
        vec![0],
    );
    let msg = message(f(from_ref(&x)).unwrap_err());
    assert!(msg.contains("inside vmap"), "{msg}");
    assert!(x.grad().is_none());
    Ok(())
}

#[test]
fn inplace_ops() -> Result<()> {
    // Batched self with batched and shared operands.
    let f: &Fun<'_> = &|xs| {
        let y = xs[0].clone_tensor()?;
        y.add_(&xs[1])?;
        y.mul_(&xs[2])?;
        y.sub_scalar_(1.0)?;
        let z = xs[0].clone_tensor()?;
        z.copy_(&xs[2])?;
        z.fill_(3.0)?;
        Ok(vec![y, z])
    };
    check_ruled(
        f,
        &[randn(&[3, 4], 1), randn(&[4, 3], 2), randn(&[4], 3)],
        &[Some(0), Some(1), None],
        &[0],
    )?;
    // In-place into an unbatched tensor with a batched operand.
    let target = Tensor::zeros(&[4], DType::F64);
    let t = target.clone();
    let g = vmap(
        move |xs: &[Tensor]| Ok(vec![t.add_(&xs[0])?]),
        vec![Some(0)],
        vec![0],
    );
    let msg = message(g(&[randn(&[3, 4], 4)]).unwrap_err());
    assert!(msg.contains("inplace") && msg.contains("add_"), "{msg}");
    assert_eq!(target.to_vec::<f64>()?, vec![0.0; 4]);
    Ok(())
}

#[test]
fn detach_and_factories_inside_vmap() -> Result<()> {
    let f: &Fun<'_> = &|xs| {
        let d = xs[0].detach();
        assert_eq!(d.is_batched(), xs[0].is_batched());
        assert!(!d.requires_grad());
        Ok(vec![
            d.mul(&Tensor::ones_like(&xs[0]))?,
            Tensor::zeros_like(&xs[0]),
        ])
    };
    check_ruled(
        f,
        &[randn(&[3, 2], 1).requires_grad_(true)?],
        &[Some(0)],
        &[0],
    )?;
    Ok(())
}

#[test]
fn errors() -> Result<()> {
    let id = |xs: &[Tensor]| Ok(xs.to_vec());
    let x = randn(&[3, 4], 1);
    let y = randn(&[5, 4], 2);
    // Mismatched batch sizes name the inputs and their sizes.
    let msg =
        message(vmap(id, vec![Some(0), Some(0)], vec![0])(&[x.clone(), y.clone()]).unwrap_err());
    assert!(
        msg.contains("input 0 has size 3") && msg.contains("input 1 has size 5"),
        "{msg}"
    );
    // in_dims length, in_dim and out_dim out of range, nothing batched.
    let msg = message(vmap(id, vec![Some(0)], vec![0])(&[x.clone(), y.clone()]).unwrap_err());
    assert!(
        msg.contains("in_dims") && msg.contains("2 entries"),
        "{msg}"
    );
    let msg = message(vmap(id, vec![Some(2)], vec![0])(from_ref(&x)).unwrap_err());
    assert!(msg.contains("in_dim 2") && msg.contains("[3, 4]"), "{msg}");
    assert!(vmap(id, vec![Some(-3)], vec![0])(from_ref(&x)).is_err());
    let msg = message(vmap(id, vec![Some(0)], vec![2])(from_ref(&x)).unwrap_err());
    assert!(msg.contains("out_dim 2"), "{msg}");
    assert!(vmap(id, vec![None], vec![0])(from_ref(&x)).is_err());
    assert!(vmap(id, vec![Some(0)], vec![0, 0, 0])(from_ref(&x)).is_err());
    // Reading data inside vmap.
    let read = vmap(
        |xs: &[Tensor]| Ok(vec![Tensor::scalar(xs[0].to_vec::<f64>()?[0])]),
        vec![Some(0)],
        vec![0],
    );
    let msg = message(read(from_ref(&x)).unwrap_err());
    assert!(
        msg.contains("cannot read the data of a batched tensor inside vmap"),
        "{msg}"
    );
    let item = vmap(
        |xs: &[Tensor]| Ok(vec![Tensor::scalar(xs[0].sum_all()?.item::<f64>()?)]),
        vec![Some(0)],
        vec![0],
    );
    assert!(message(item(from_ref(&x)).unwrap_err()).contains("batched tensor"));
    // -1 cannot size a new leading dim of expand, batched or not (while it keeps existing dims).
    let expand = vmap(
        |xs: &[Tensor]| {
            tensorplay_runtime::ops::call(
                "tp::expand",
                &[xs[0].clone().into(), Value::IntList(vec![-1, 4])],
            )
        },
        vec![Some(0)],
        vec![0],
    );
    assert!(expand(from_ref(&x)).is_err());
    let keep = vmap(
        |xs: &[Tensor]| {
            tensorplay_runtime::ops::call(
                "tp::expand",
                &[xs[0].clone().into(), Value::IntList(vec![2, -1])],
            )
        },
        vec![Some(0)],
        vec![0],
    );
    assert_eq!(keep(from_ref(&x))?[0].shape(), &[3, 2, 4]);
    // An op error inside vmap speaks of per-example shapes.
    let bad = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].reshape(&[5])?]),
        vec![Some(0)],
        vec![0],
    );
    let msg = message(bad(from_ref(&x)).unwrap_err());
    assert!(msg.contains("[5]") && msg.contains("[4]"), "{msg}");
    // The level is popped after every error.
    assert_eq!(depth(), 0);
    Ok(())
}

#[test]
fn randomness_modes() -> Result<()> {
    let f = |mode: &str| {
        vmap_with_randomness(
            |xs: &[Tensor]| {
                Ok(vec![
                    xs[0].add(&Tensor::randn(&[2], DType::F64)?)?,
                    Tensor::rand_like(&xs[0])?,
                ])
            },
            vec![Some(0)],
            vec![0],
            mode,
        )
    };
    let x = Tensor::zeros(&[4, 2], DType::F64);
    let msg = message(f("error")(from_ref(&x)).unwrap_err());
    assert!(msg.contains("randomness") && msg.contains("randn"), "{msg}");
    let msg = message(
        vmap(
            |_: &[Tensor]| Ok(vec![Tensor::rand(&[2], DType::F32)?]),
            vec![Some(0)],
            vec![0],
        )(from_ref(&x))
        .unwrap_err(),
    );
    assert!(msg.contains("rand"), "{msg}");
    assert_eq!(depth(), 0);

    let same = f("same")(from_ref(&x))?;
    for o in &same {
        assert_eq!(o.shape(), &[4, 2]);
        let v = o.to_vec::<f64>()?;
        assert!(v.chunks(2).all(|c| c == &v[0..2]));
    }
    let different = f("different")(from_ref(&x))?;
    for o in &different {
        assert_eq!(o.shape(), &[4, 2]);
        let v = o.to_vec::<f64>()?;
        assert!(v.chunks(2).skip(1).all(|c| c != &v[0..2]));
    }
    assert!(message(f("often")(&[x]).unwrap_err()).contains("randomness"));
    Ok(())
}

#[test]
fn fallback_for_ops_without_rules_is_correct() -> Result<()> {
    // max_all has no batching rule; a batch of size 0 works through the rules.
    let f: &Fun<'_> = &|xs| Ok(vec![xs[0].max_all()?.add(&xs[1])?]);
    assert!(
        check(
            f,
            &[randn(&[2, 3, 3], 1), randn(&[3], 2)],
            &[Some(2), None],
            &[0]
        )? > 0
    );
    let empty = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].exp()?.sum(&[0], false)?]),
        vec![Some(0)],
        vec![0],
    );
    let out = empty(&[Tensor::zeros(&[0, 3], DType::F32)])?;
    assert_eq!(out[0].shape(), &[0]);
    Ok(())
}
