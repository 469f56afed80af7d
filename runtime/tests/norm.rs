//! `nn::batch_norm` (training with running-statistics updates, eval) and `nn::group_norm`:
//! against their formulas computed element by element, gradients against finite differences,
//! halves computing in f32, and argument errors.

use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::nn;
use tensorplay_runtime::{DType, Result, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

/// `[N, C, S]` values of channel `c` (all samples and positions).
fn channel(v: &[f64], shape: &[usize], c: usize) -> Vec<f64> {
    let (n, ch) = (shape[0], shape[1]);
    let s: usize = shape[2..].iter().product();
    (0..n)
        .flat_map(|i| v[(i * ch + c) * s..(i * ch + c + 1) * s].to_vec())
        .collect()
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (
        m,
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64,
    )
}

#[test]
fn batch_norm_training_normalizes_per_channel_and_updates_running_stats() -> Result<()> {
    let shape = [4, 3, 5, 2];
    let x = randn(&shape, 1).mul_scalar(2.0)?.add_scalar(1.5)?;
    let (w, b) = (randn(&[3], 2), randn(&[3], 3));
    let (rm0, rv0) = (randn(&[3], 4), randn(&[3], 5).abs()?.add_scalar(0.5)?);
    let (rm, rv) = (rm0.clone_tensor()?, rv0.clone_tensor()?);
    let y = nn::batch_norm(
        &x,
        Some(&rm),
        Some(&rv),
        Some(&w),
        Some(&b),
        true,
        0.1,
        1e-5,
    )?;
    let (xv, yv, wv, bv) = (vals(&x), vals(&y), vals(&w), vals(&b));
    let count = (4 * 5 * 2) as f64;
    for c in 0..3 {
        let (m, v) = mean_var(&channel(&xv, &shape, c));
        let want: Vec<f64> = channel(&xv, &shape, c)
            .iter()
            .map(|x| (x - m) / (v + 1e-5).sqrt() * wv[c] + bv[c])
            .collect();
        assert!(close(&channel(&yv, &shape, c), &want, 1e-12), "channel {c}");
        let rm_want = 0.9 * vals(&rm0)[c] + 0.1 * m;
        let rv_want = 0.9 * vals(&rv0)[c] + 0.1 * v * count / (count - 1.0);
        assert!(
            close(&[vals(&rm)[c]], &[rm_want], 1e-14),
            "running mean {c}"
        );
        assert!(close(&[vals(&rv)[c]], &[rv_want], 1e-14), "running var {c}");
    }
    // Eval mode uses (and keeps) the running statistics.
    let (rm1, rv1) = (vals(&rm), vals(&rv));
    let y = nn::batch_norm(&x, Some(&rm), Some(&rv), None, Some(&b), false, 0.1, 1e-5)?;
    let yv = vals(&y);
    for c in 0..3 {
        let want: Vec<f64> = channel(&xv, &shape, c)
            .iter()
            .map(|x| (x - rm1[c]) / (rv1[c] + 1e-5).sqrt() + bv[c])
            .collect();
        assert!(
            close(&channel(&yv, &shape, c), &want, 1e-12),
            "eval channel {c}"
        );
    }
    assert_eq!(vals(&rm), rm1);
    Ok(())
}

#[test]
fn group_norm_normalizes_each_group_of_each_sample() -> Result<()> {
    let shape = [2, 6, 4];
    let x = randn(&shape, 6).mul_scalar(3.0)?;
    let (w, b) = (randn(&[6], 7), randn(&[6], 8));
    let y = vals(&nn::group_norm(&x, 3, Some(&w), Some(&b), 1e-5)?);
    let (xv, wv, bv) = (vals(&x), vals(&w), vals(&b));
    for n in 0..2 {
        for g in 0..3 {
            let at = (n * 6 + g * 2) * 4;
            let (m, v) = mean_var(&xv[at..at + 8]);
            for i in 0..8 {
                let c = g * 2 + i / 4;
                let want = (xv[at + i] - m) / (v + 1e-5).sqrt() * wv[c] + bv[c];
                assert!(close(&[y[at + i]], &[want], 1e-12), "sample {n} group {g}");
            }
        }
    }
    Ok(())
}

#[test]
fn gradients_match_finite_differences() -> Result<()> {
    let inputs = [randn(&[3, 4, 2, 3], 10), randn(&[4], 11), randn(&[4], 12)]
        .map(|t| t.requires_grad_(true).unwrap());
    let (rm, rv) = (randn(&[4], 13), randn(&[4], 14).abs()?.add_scalar(0.5)?);
    for training in [true, false] {
        gradcheck(
            |xs| {
                let (m, v) = (rm.clone_tensor()?, rv.clone_tensor()?);
                let y = nn::batch_norm(
                    &xs[0],
                    Some(&m),
                    Some(&v),
                    Some(&xs[1]),
                    Some(&xs[2]),
                    training,
                    0.1,
                    1e-5,
                )?;
                y.mul(&y)?.sum_all()
            },
            &inputs,
            GradcheckOptions::default(),
        )?;
    }
    gradcheck(
        |xs| {
            let y = nn::group_norm(&xs[0], 2, Some(&xs[1]), Some(&xs[2]), 1e-5)?;
            y.mul(&y.sin()?)?.sum_all()
        },
        &inputs,
        GradcheckOptions::default(),
    )
}

#[test]
fn halves_compute_in_f32_and_keep_f32_running_stats() -> Result<()> {
    for dtype in [DType::F16, DType::BF16] {
        let x = randn(&[4, 3, 5], 20).to_dtype(dtype)?;
        let rm = Tensor::zeros(&[3], DType::F32);
        let rv = Tensor::ones(&[3], DType::F32);
        let y = nn::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5)?;
        assert_eq!((y.dtype(), rm.dtype()), (dtype, DType::F32));
        let y32 = nn::batch_norm(
            &x.to_dtype(DType::F32)?,
            None,
            None,
            None,
            None,
            true,
            0.1,
            1e-5,
        )?;
        assert_eq!(vals(&y), vals(&y32.to_dtype(dtype)?));
        let g = nn::group_norm(&x, 3, None, None, 1e-5)?;
        let g32 = nn::group_norm(&x.to_dtype(DType::F32)?, 3, None, None, 1e-5)?;
        assert_eq!(vals(&g), vals(&g32.to_dtype(dtype)?));
    }
    Ok(())
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn bad_arguments_are_clear_errors() -> Result<()> {
    let x = randn(&[2, 3, 4], 1);
    let e = err(nn::batch_norm(
        &x,
        Some(&randn(&[4], 2)),
        Some(&randn(&[3], 3)),
        None,
        None,
        true,
        0.1,
        1e-5,
    ));
    assert!(
        e.contains("batch_norm") && e.contains("running_mean") && e.contains("[4]"),
        "{e}"
    );
    let e = err(nn::batch_norm(
        &randn(&[1, 3], 1),
        None,
        None,
        None,
        None,
        true,
        0.1,
        1e-5,
    ));
    assert!(e.contains("more than 1 value per channel"), "{e}");
    let e = err(nn::batch_norm(
        &randn(&[3], 1),
        None,
        None,
        None,
        None,
        true,
        0.1,
        1e-5,
    ));
    assert!(e.contains("input") && e.contains("[3]"), "{e}");
    let e = err(nn::group_norm(&x, 2, None, None, 1e-5));
    assert!(
        e.contains("group_norm") && e.contains("num_groups") && e.contains('2'),
        "{e}"
    );
    let e = err(nn::group_norm(&x, 3, Some(&randn(&[2], 1)), None, 1e-5));
    assert!(e.contains("weight") && e.contains("[2]"), "{e}");
    Ok(())
}
