//! matmul (every rank combination, broadcast batches, strided operands, dtypes) and cat/stack
//! against naive references, plus their errors and gradients.

use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::{DType, Error, Tensor};

type R<T = ()> = Result<T, Error>;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// Naive torch.matmul in f64: returns the result and its shape.
fn ref_matmul(a: &[f64], sa: &[usize], b: &[f64], sb: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let (m, k) = if sa.len() == 1 {
        (1, sa[0])
    } else {
        (sa[sa.len() - 2], sa[sa.len() - 1])
    };
    let n = if sb.len() == 1 { 1 } else { sb[sb.len() - 1] };
    let ba = &sa[..sa.len().saturating_sub(2)];
    let bb = &sb[..sb.len().saturating_sub(2)];
    let rank = ba.len().max(bb.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let nbatch: usize = batch.iter().product();
    let mut out = Vec::with_capacity(nbatch * m * n);
    for bi in 0..nbatch {
        // Multi-index of bi, then the flat matrix index in each (broadcast) operand.
        let mut rem = bi;
        let mut idx = vec![0; rank];
        for d in (0..rank).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        let flat = |p: &[usize]| -> usize {
            idx.iter()
                .zip(p)
                .fold(0, |acc, (&i, &s)| acc * s + if s == 1 { 0 } else { i })
        };
        let (oa, ob) = (flat(&pa) * m * k, flat(&pb) * k * n);
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|q| a[oa + i * k + q] * b[ob + q * n + j]).sum());
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (out, shape)
}

fn check_matmul(a: &Tensor, b: &Tensor, rtol: f64, atol: f64) -> R {
    let (want, shape) = ref_matmul(&a.to_vec_f64()?, a.shape(), &b.to_vec_f64()?, b.shape());
    let got = a.matmul(b)?;
    assert_eq!(
        got.shape(),
        shape.as_slice(),
        "{:?} @ {:?}",
        a.shape(),
        b.shape()
    );
    assert_eq!(got.dtype(), a.dtype());
    let g = got.to_vec_f64()?;
    for (i, (x, y)) in g.iter().zip(&want).enumerate() {
        assert!(
            (x - y).abs() <= atol + rtol * y.abs(),
            "{:?} @ {:?} [{i}]: {x} vs {y}",
            a.shape(),
            b.shape()
        );
    }
    Ok(())
}

const RANK_CASES: &[(&[usize], &[usize])] = &[
    (&[5], &[5]),
    (&[3, 4], &[4, 2]),
    (&[4], &[4, 3]),
    (&[3, 4], &[4]),
    (&[2, 3, 4], &[2, 4, 5]),
    (&[2, 3, 4], &[4, 5]),
    (&[3, 4], &[2, 4, 5]),
    (&[4], &[2, 4, 3]),
    (&[2, 3, 4], &[4]),
    (&[2, 1, 3, 4], &[5, 4, 2]),
    (&[1, 3, 4], &[2, 2, 4, 1]),
];

#[test]
fn matmul_every_rank_combination() -> R {
    for (i, &(sa, sb)) in RANK_CASES.iter().enumerate() {
        let (a, b) = (randn(sa, i as u64), randn(sb, 100 + i as u64));
        check_matmul(&a, &b, 1e-12, 1e-12)?;
        check_matmul(
            &a.to_dtype(DType::F32)?,
            &b.to_dtype(DType::F32)?,
            1e-5,
            1e-5,
        )?;
    }
    let dot = randn(&[7], 1).matmul(&randn(&[7], 2))?;
    assert_eq!(dot.shape(), &[] as &[usize]);
    Ok(())
}

#[test]
fn matmul_of_strided_operands() -> R {
    let a = randn(&[6, 5], 3);
    let b = randn(&[7, 6], 4);
    // Transposed operands are read in place.
    check_matmul(&a.t()?, &b.t()?, 1e-12, 1e-12)?;
    check_matmul(&b, &a, 1e-12, 1e-12)?;
    // Sliced with steps, a column as a vector, an expanded (stride-0) operand.
    let s = a.slice(0, Some(1), None, 2)?; // [3, 5]
    check_matmul(&s, &b.slice(1, None, Some(5), 1)?.t()?, 1e-12, 1e-12)?;
    check_matmul(&b, &a.select(1, 2)?, 1e-12, 1e-12)?;
    check_matmul(&a.select(1, 0)?, &a, 1e-12, 1e-12)?;
    let row = randn(&[1, 5], 5).expand(&[4, 5])?;
    check_matmul(&row, &a.t()?, 1e-12, 1e-12)?;
    let batched = randn(&[3, 4, 5], 6).permute(&[2, 0, 1])?; // [5, 3, 4], non-contiguous batch
    check_matmul(&batched, &randn(&[4, 2], 7), 1e-12, 1e-12)?;
    check_matmul(
        &batched.transpose(-1, -2)?,
        &randn(&[5, 3, 2], 8),
        1e-12,
        1e-12,
    )?;
    Ok(())
}

#[test]
fn matmul_half_precision_and_integers() -> R {
    let (a, b) = (randn(&[2, 6, 8], 9), randn(&[8, 5], 10));
    // Round the inputs to the narrow type first so the reference sees the same operands.
    for (dt, tol) in [(DType::F16, 1e-2), (DType::BF16, 5e-2)] {
        let (ad, bd) = (a.to_dtype(dt)?, b.to_dtype(dt)?);
        check_matmul(&ad, &bd, tol, tol)?;
        check_matmul(&ad.select(0, 1)?.t()?, &ad.select(0, 0)?, tol, tol)?;
    }
    let ai: Vec<i64> = (0..24).map(|i| (i * 7 % 11) as i64 - 5).collect();
    let bi: Vec<i64> = (0..20).map(|i| (i * 5 % 9) as i64 - 4).collect();
    for dt in [DType::I32, DType::I64] {
        let a = Tensor::from_vec(ai.clone(), &[2, 3, 4])?.to_dtype(dt)?;
        let b = Tensor::from_vec(bi.clone(), &[4, 5])?.to_dtype(dt)?;
        check_matmul(&a, &b, 0.0, 0.0)?;
        check_matmul(&b.t()?, &a.select(0, 1)?.t()?, 0.0, 0.0)?;
        check_matmul(&a.select(0, 0)?.select(0, 1)?, &b, 0.0, 0.0)?;
    }
    // Integer products wrap like two's complement.
    let big = Tensor::from_vec(vec![1i32 << 30, 1 << 30], &[1, 2])?;
    let four = Tensor::from_vec(vec![2i32, 2], &[2, 1])?;
    assert_eq!(
        big.matmul(&four)?.to_vec::<i32>()?,
        vec![(1i32 << 30).wrapping_mul(4)]
    );
    let huge = Tensor::from_vec(vec![i64::MAX, 1], &[2])?;
    assert_eq!(
        huge.matmul(&huge)?.item::<i64>()?,
        i64::MAX.wrapping_mul(i64::MAX).wrapping_add(1)
    );
    Ok(())
}

#[test]
fn large_matmuls_match_reference() -> R {
    // One big product (parallel inside gemm) and many small ones (parallel across the batch).
    let a = Tensor::randn_seeded(&[160, 300], DType::F32, 11)?;
    let b = Tensor::randn_seeded(&[300, 130], DType::F32, 12)?;
    check_matmul(&a, &b, 1e-4, 1e-4)?;
    check_matmul(&b.t()?, &a.t()?, 1e-4, 1e-4)?;
    let x = Tensor::randn_seeded(&[64, 16, 24], DType::F32, 13)?;
    let y = Tensor::randn_seeded(&[64, 24, 16], DType::F32, 14)?;
    check_matmul(&x, &y, 1e-4, 1e-4)?;
    let xi = Tensor::from_vec(
        (0..64 * 64)
            .map(|i| (i % 17) as i64 - 8)
            .collect::<Vec<_>>(),
        &[64, 64],
    )?;
    check_matmul(&xi, &xi.t()?, 0.0, 0.0)?;
    Ok(())
}

#[test]
fn matmul_with_empty_dims() -> R {
    let z = Tensor::ones(&[3, 0], DType::F32).matmul(&Tensor::ones(&[0, 4], DType::F32))?;
    assert_eq!(
        (z.shape(), z.to_vec::<f32>()?),
        (&[3usize, 4][..], vec![0.0; 12])
    );
    let zi = Tensor::ones(&[0], DType::I64).matmul(&Tensor::ones(&[0], DType::I64))?;
    assert_eq!(zi.item::<i64>()?, 0);
    assert_eq!(
        Tensor::ones(&[0, 3], DType::F64)
            .matmul(&Tensor::ones(&[3, 2], DType::F64))?
            .shape(),
        &[0, 2]
    );
    assert_eq!(
        Tensor::ones(&[2, 0, 3, 3], DType::F32)
            .matmul(&Tensor::ones(&[3], DType::F32))?
            .shape(),
        &[2, 0, 3]
    );
    Ok(())
}

#[test]
fn matmul_errors() {
    let a = Tensor::ones(&[2, 3], DType::F32);
    match a.matmul(&Tensor::ones(&[4, 5], DType::F32)) {
        Err(Error::Shape { msg, .. }) => {
            assert!(msg.contains("[2, 3]") && msg.contains("[4, 5]"), "{msg}")
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    assert!(matches!(
        a.matmul(&Tensor::ones(&[4], DType::F32)),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        Tensor::scalar(1.0f32).matmul(&a),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        a.matmul(&Tensor::scalar(1.0f32)),
        Err(Error::Shape { .. })
    ));
    let batch = Tensor::ones(&[2, 2, 3], DType::F32).matmul(&Tensor::ones(&[3, 3, 1], DType::F32));
    assert!(matches!(batch, Err(Error::Shape { .. })), "{batch:?}");
    let b = Tensor::ones(&[3, 2], DType::Bool);
    assert!(matches!(
        a.to_dtype(DType::Bool).unwrap().matmul(&b),
        Err(Error::DType { .. })
    ));
    assert!(matches!(
        a.matmul(&Tensor::ones(&[3, 2], DType::F64)),
        Err(Error::DType { .. })
    ));
}

/// Gradchecks `f` with every input requiring grad (fresh leaves, so inputs can be reused).
fn check(f: impl Fn(&[Tensor]) -> R<Tensor>, inputs: &[&Tensor]) -> R {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true))
        .collect::<R<_>>()?;
    gradcheck(f, &inputs, GradcheckOptions::default())
}

#[test]
fn gradcheck_matmul_every_rank_combination() -> R {
    for (i, &(sa, sb)) in RANK_CASES.iter().enumerate() {
        let (a, b) = (randn(sa, 20 + i as u64), randn(sb, 40 + i as u64));
        check(|xs| xs[0].matmul(&xs[1]), &[&a, &b])?;
        // Only one operand requiring grad.
        let a_only = [a.detach().requires_grad_(true)?, b.clone()];
        gradcheck(
            |xs| xs[0].matmul(&xs[1]),
            &a_only,
            GradcheckOptions::default(),
        )?;
    }
    // Transposed operands.
    check(
        |xs| xs[0].t()?.matmul(&xs[1].t()?),
        &[&randn(&[4, 3], 60), &randn(&[5, 4], 61)],
    )?;
    Ok(())
}

// ---- cat / stack --------------------------------------------------------------------------------

#[test]
fn cat_joins_along_any_dim() -> R {
    let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32)?.reshape(&[2, 3])?;
    let b = Tensor::arange(10.0, 14.0, 1.0, DType::F32)?.reshape(&[2, 2])?;
    let c = Tensor::cat(&[a.clone(), b.clone()], 1)?;
    assert_eq!(c.shape(), &[2, 5]);
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![0.0, 1.0, 2.0, 10.0, 11.0, 3.0, 4.0, 5.0, 12.0, 13.0]
    );
    assert!(c.equal(&Tensor::cat(&[a.clone(), b.clone()], -1)?)?);
    let r = Tensor::cat(&[a.clone(), a.slice(0, Some(1), None, 1)?], 0)?;
    assert_eq!(
        r.to_vec::<f32>()?,
        vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0]
    );
    // Non-contiguous inputs and dtype promotion.
    let t = a.t()?; // [3, 2]
    let i = Tensor::from_vec(vec![7i64, 8], &[1, 2])?;
    let m = Tensor::cat(&[t.clone(), i, b.t()?], 0)?;
    assert_eq!((m.dtype(), m.shape()), (DType::F32, &[6usize, 2][..]));
    assert_eq!(
        m.to_vec::<f32>()?,
        vec![
            0.0, 3.0, 1.0, 4.0, 2.0, 5.0, 7.0, 8.0, 10.0, 12.0, 11.0, 13.0
        ]
    );
    let promoted = Tensor::cat(
        &[
            Tensor::ones(&[1], DType::I32),
            Tensor::ones(&[2], DType::F64),
        ],
        0,
    )?;
    assert_eq!(promoted.dtype(), DType::F64);
    let bools = Tensor::cat(
        &[
            Tensor::ones(&[1], DType::Bool),
            Tensor::ones(&[1], DType::I32),
        ],
        0,
    )?;
    assert_eq!(bools.dtype(), DType::I32);
    // Empty 1-D tensors are skipped (PyTorch's legacy rule); zero-size dims join normally.
    let e = Tensor::zeros(&[0], DType::F32);
    assert!(Tensor::cat(&[e.clone(), a.clone(), e.clone()], 1)?.equal(&a)?);
    assert_eq!(
        Tensor::cat(&[Tensor::zeros(&[0, 3], DType::F32), a.clone()], 0)?.shape(),
        &[2, 3]
    );
    assert_eq!(Tensor::cat(&[e.clone(), e], 0)?.shape(), &[0]);
    let one = Tensor::cat(std::slice::from_ref(&a), 0)?;
    assert!(one.equal(&a)? && !one.storage().same(a.storage()));
    Ok(())
}

#[test]
fn stack_adds_a_dim() -> R {
    let a = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    let b = a.mul_scalar(10)?;
    for dim in [0i64, 1, 2, -1, -3] {
        let s = Tensor::stack(&[a.clone(), b.clone()], dim)?;
        let d = if dim < 0 { dim + 3 } else { dim } as usize;
        let mut shape = vec![2usize, 3];
        shape.insert(d, 2);
        assert_eq!(s.shape(), shape.as_slice());
        assert!(s.select(d as i64, 0)?.equal(&a)? && s.select(d as i64, 1)?.equal(&b)?);
    }
    let mixed = Tensor::stack(&[a.t()?, b.to_dtype(DType::F32)?.t()?], 1)?;
    assert_eq!(
        (mixed.dtype(), mixed.shape()),
        (DType::F32, &[3usize, 2, 2][..])
    );
    assert_eq!(
        mixed.to_vec::<f32>()?,
        vec![
            1.0, 4.0, 10.0, 40.0, 2.0, 5.0, 20.0, 50.0, 3.0, 6.0, 30.0, 60.0
        ]
    );
    let scalars = Tensor::stack(&[Tensor::scalar(1.5f64), Tensor::scalar(2.5f64)], 0)?;
    assert_eq!(scalars.to_vec::<f64>()?, vec![1.5, 2.5]);
    Ok(())
}

#[test]
fn cat_and_stack_errors() {
    let a = Tensor::ones(&[2, 3], DType::F32);
    let b = Tensor::ones(&[2, 4], DType::F32);
    match Tensor::cat(&[a.clone(), a.clone(), b.clone()], 0) {
        Err(Error::Shape { msg, .. }) => {
            assert!(
                msg.contains("tensor 2") && msg.contains("[2, 4]") && msg.contains("[2, 3]"),
                "{msg}"
            )
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    assert!(Tensor::cat(&[a.clone(), b.clone()], 1).is_ok());
    assert!(matches!(
        Tensor::cat(&[a.clone(), Tensor::ones(&[2, 3, 1], DType::F32)], 0),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(Tensor::cat(&[], 0), Err(Error::Argument { .. })));
    assert!(matches!(Tensor::stack(&[], 0), Err(Error::Argument { .. })));
    assert!(matches!(
        Tensor::cat(std::slice::from_ref(&a), 2),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        Tensor::cat(&[Tensor::scalar(1.0f32)], 0),
        Err(Error::Shape { .. })
    ));
    match Tensor::stack(&[a.clone(), b.clone()], 0) {
        Err(Error::Shape { msg, .. }) => {
            assert!(msg.contains("tensor 1") && msg.contains("[2, 4]"), "{msg}")
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    assert!(matches!(
        Tensor::stack(std::slice::from_ref(&a), 3),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn gradcheck_cat_and_stack() -> R {
    let (a, b, c) = (randn(&[3, 2], 70), randn(&[2, 3], 71), randn(&[3, 3], 72));
    // Non-contiguous inputs: a transpose and a strided slice.
    check(
        |xs| {
            Tensor::cat(
                &[xs[0].clone(), xs[1].t()?, xs[2].slice(1, None, None, 2)?],
                1,
            )
        },
        &[&a, &b, &c],
    )?;
    check(|xs| Tensor::cat(&[xs[0].t()?, xs[1].clone()], 0), &[&a, &b])?;
    check(
        |xs| Tensor::stack(&[xs[0].clone(), xs[1].slice(1, Some(1), None, 1)?], 1),
        &[&a, &c],
    )?;
    check(
        |xs| Tensor::stack(&[xs[0].t()?, xs[1].slice(0, None, Some(2), 1)?], -1),
        &[&a, &c],
    )?;
    // Gradients only for inputs that require grad; the rest (and skipped empties) are left alone.
    let x = a.detach().requires_grad_(true)?;
    let e = Tensor::zeros(&[0], DType::F64).requires_grad_(true)?;
    let fixed = randn(&[3, 1], 73);
    let y = Tensor::cat(&[fixed.clone(), e.clone(), x.clone()], 1)?;
    y.mul(&randn(&[3, 3], 74))?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().shape(), &[3, 2]);
    assert_eq!(e.grad().unwrap().shape(), &[0]);
    assert!(fixed.grad().is_none());
    Ok(())
}

#[test]
fn meta_rules_run_on_fake_tensors() -> R {
    use tensorplay_runtime::Device;
    let fake = |s: &[usize], dt| Tensor::empty_fake(s, dt, Device::Cpu);
    let y = fake(&[2, 1, 3, 4], DType::F32).matmul(&fake(&[5, 4, 2], DType::F32))?;
    assert!(y.is_fake() && y.shape() == [2, 5, 3, 2]);
    assert_eq!(
        fake(&[4], DType::I64)
            .matmul(&fake(&[4], DType::I64))?
            .shape(),
        &[] as &[usize]
    );
    assert!(
        fake(&[2, 3], DType::F32)
            .matmul(&fake(&[2, 3], DType::F32))
            .is_err()
    );
    let c = Tensor::cat(&[fake(&[2, 3], DType::I32), fake(&[4, 3], DType::F16)], 0)?;
    assert_eq!(
        (c.shape(), c.dtype(), c.is_fake()),
        (&[6usize, 3][..], DType::F16, true)
    );
    let s = Tensor::stack(&[fake(&[2, 3], DType::F32), fake(&[2, 3], DType::F32)], 1)?;
    assert_eq!(s.shape(), &[2, 2, 3]);
    Ok(())
}
