//! `nn::conv2d` / `nn::conv1d` and the `conv2d` op (`ops::conv`, im2col + gemm): against a
//! direct (seven-loop) convolution over strides, asymmetric padding, dilation, groups and
//! batch sizes on both sides of the parallel thresholds; f16/bf16 rounding once from f32;
//! `"same"`/`"valid"` padding; gradients against finite differences, double backward; the
//! backward's `output_mask`; errors naming the op, argument, expectation and value.

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck};
use tensorplay_runtime::dispatch::call;
use tensorplay_runtime::nn::{self, ConvPadding};
use tensorplay_runtime::ops::conv::{CONV2D, CONV2D_BACKWARD};
use tensorplay_runtime::{DType, Result, Tensor, Value};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// One call's sizes: stride, padding `[top, bottom, left, right]`, dilation, groups.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    stride: [usize; 2],
    pad: [usize; 4],
    dil: [usize; 2],
    groups: usize,
}

/// The convolution computed directly from its definition, in f64.
fn reference(x: &Tensor, w: &Tensor, b: Option<&Tensor>, c: Cfg) -> Tensor {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (n, ci, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let og = o / c.groups;
    let oh = (h + c.pad[0] + c.pad[1] - c.dil[0] * (kh - 1) - 1) / c.stride[0] + 1;
    let ow = (wd + c.pad[2] + c.pad[3] - c.dil[1] * (kw - 1) - 1) / c.stride[1] + 1;
    let xv = x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let wv = w.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let bv = b.map(|b| b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap());
    let mut out = vec![0.0; n * o * oh * ow];
    for i in 0..n {
        for oc in 0..o {
            let grp = oc / og;
            for y in 0..oh {
                for xx in 0..ow {
                    let mut acc = bv.as_ref().map_or(0.0, |b| b[oc]);
                    for cc in 0..cg {
                        let ic = grp * cg + cc;
                        for a in 0..kh {
                            for bb in 0..kw {
                                let iy = (y * c.stride[0] + a * c.dil[0]) as i64 - c.pad[0] as i64;
                                let ix =
                                    (xx * c.stride[1] + bb * c.dil[1]) as i64 - c.pad[2] as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                    continue;
                                }
                                let xi = ((i * ci + ic) * h + iy as usize) * wd + ix as usize;
                                let wi = ((oc * cg + cc) * kh + a) * kw + bb;
                                acc += xv[xi] * wv[wi];
                            }
                        }
                    }
                    out[((i * o + oc) * oh + y) * ow + xx] = acc;
                }
            }
        }
    }
    Tensor::from_vec(out, &[n, o, oh, ow]).unwrap()
}

fn op_call(x: &Tensor, w: &Tensor, b: Option<&Tensor>, c: Cfg) -> Result<Tensor> {
    let ints = |v: &[usize]| Value::IntList(v.iter().map(|&x| x as i64).collect());
    Ok(call(
        &CONV2D,
        &[
            Value::Tensor(x.clone()),
            Value::Tensor(w.clone()),
            Value::OptionalTensor(b.cloned()),
            ints(&c.stride),
            ints(&c.pad),
            ints(&c.dil),
            Value::Int(c.groups as i64),
        ],
    )?
    .swap_remove(0))
}

fn max_rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let a = a.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let b = b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f64::max)
}

const CASES: &[(usize, [usize; 4], usize, Cfg)] = &[
    // (batch, [C, H, W, O], kernel, cfg)
    (
        2,
        [3, 7, 6, 4],
        3,
        Cfg {
            stride: [1, 1],
            pad: [1, 1, 1, 1],
            dil: [1, 1],
            groups: 1,
        },
    ),
    (
        1,
        [4, 9, 8, 6],
        3,
        Cfg {
            stride: [2, 3],
            pad: [0, 2, 1, 0],
            dil: [1, 2],
            groups: 2,
        },
    ),
    (
        3,
        [4, 6, 6, 4],
        2,
        Cfg {
            stride: [1, 2],
            pad: [0, 1, 1, 1],
            dil: [2, 1],
            groups: 4,
        },
    ),
    // Big enough for the thread pool: images in parallel, then one image with a parallel product.
    (
        8,
        [16, 20, 20, 24],
        3,
        Cfg {
            stride: [1, 1],
            pad: [1, 1, 1, 1],
            dil: [1, 1],
            groups: 1,
        },
    ),
    (
        1,
        [32, 24, 24, 32],
        3,
        Cfg {
            stride: [2, 2],
            pad: [1, 1, 1, 1],
            dil: [1, 1],
            groups: 1,
        },
    ),
];

#[test]
fn forward_matches_the_definition() -> Result<()> {
    for (seed, &(n, [c, h, w, o], k, cfg)) in CASES.iter().enumerate() {
        let seed = seed as u64 * 10;
        let x = randn(&[n, c, h, w], seed);
        let wt = randn(&[o, c / cfg.groups, k, k], seed + 1);
        let b = randn(&[o], seed + 2);
        for dtype in [DType::F64, DType::F32] {
            let (xd, wd, bd) = (x.to_dtype(dtype)?, wt.to_dtype(dtype)?, b.to_dtype(dtype)?);
            let got = op_call(&xd, &wd, Some(&bd), cfg)?;
            assert_eq!(got.dtype(), dtype);
            let want = reference(&xd, &wd, Some(&bd), cfg);
            let tol = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
            let d = max_rel_diff(&got, &want);
            assert!(d < tol, "{cfg:?} {dtype}: {d}");
            let nob = op_call(&xd, &wd, None, cfg)?;
            let d = max_rel_diff(&nob, &reference(&xd, &wd, None, cfg));
            assert!(d < tol, "{cfg:?} {dtype} without bias: {d}");
        }
    }
    Ok(())
}

#[test]
fn halves_compute_in_f32_and_round_once() -> Result<()> {
    let cfg = CASES[1].3;
    for dtype in [DType::F16, DType::BF16] {
        let x = randn(&[2, 4, 9, 8], 3).to_dtype(dtype)?;
        let w = randn(&[6, 2, 3, 3], 4).to_dtype(dtype)?;
        let b = randn(&[6], 5).to_dtype(dtype)?;
        let got = op_call(&x, &w, Some(&b), cfg)?;
        assert_eq!(got.dtype(), dtype);
        let in_f32 = op_call(
            &x.to_dtype(DType::F32)?,
            &w.to_dtype(DType::F32)?,
            Some(&b.to_dtype(DType::F32)?),
            cfg,
        )?;
        // Rounding the f32 result once gives exactly the half result.
        assert_eq!(
            got.to_dtype(DType::F64)?.to_vec::<f64>()?,
            in_f32
                .to_dtype(dtype)?
                .to_dtype(DType::F64)?
                .to_vec::<f64>()?,
            "{dtype}"
        );
        // And its gradients come back in the half dtype.
        let xg = x.requires_grad_(true)?;
        let y = op_call(&xg, &w, Some(&b), cfg)?;
        let g = autograd::grad(&[y.sum_all()?], std::slice::from_ref(&xg), &[None], false)?;
        assert_eq!(g[0].as_ref().unwrap().dtype(), dtype);
    }
    Ok(())
}

#[test]
fn gradients_match_finite_differences() -> Result<()> {
    for (seed, &(n, [c, h, w, o], k, cfg)) in CASES[..3].iter().enumerate() {
        let seed = 100 + seed as u64 * 10;
        let inputs = [
            randn(&[n, c, h, w], seed),
            randn(&[o, c / cfg.groups, k, k], seed + 1),
            randn(&[o], seed + 2),
        ]
        .map(|t| t.requires_grad_(true).unwrap());
        gradcheck(
            |xs| op_call(&xs[0], &xs[1], Some(&xs[2]), cfg),
            &inputs,
            GradcheckOptions::default(),
        )?;
    }
    Ok(())
}

#[test]
fn double_backward_matches_finite_differences() -> Result<()> {
    let cfg = CASES[1].3;
    let inputs = [
        randn(&[1, 4, 6, 5], 7),
        randn(&[6, 2, 3, 3], 8),
        randn(&[6], 9),
    ]
    .map(|t| t.requires_grad_(true).unwrap());
    // The gradients (of a weighted sum of the output) as functions of the inputs, summed with
    // weights: gradcheck differentiates the backward.
    gradcheck(
        |xs| {
            // Finite differences call this with plain tensors under no_grad: make them
            // leaves to differentiate once.
            let _on = autograd::enable_grad();
            let xs: Vec<Tensor> = xs
                .iter()
                .map(|t| {
                    if t.requires_grad() {
                        Ok(t.clone())
                    } else {
                        t.detach().requires_grad_(true)
                    }
                })
                .collect::<Result<_>>()?;
            let y = op_call(&xs[0], &xs[1], Some(&xs[2]), cfg)?;
            let probe = randn(y.shape(), 10);
            let y = y.mul(&y)?.mul(&probe)?.sum_all()?;
            let g = autograd::grad(&[y], &xs, &[None], true)?;
            let mut total = Tensor::zeros(&[], DType::F64);
            for (i, gi) in g.iter().enumerate() {
                let gi = gi.as_ref().unwrap();
                total = total.add(&gi.mul(gi)?.sum_all()?.mul_scalar(1.0 + i as f64)?)?;
            }
            Ok(total)
        },
        &inputs,
        GradcheckOptions::default(),
    )
}

#[test]
fn backward_computes_only_the_masked_gradients() -> Result<()> {
    let cfg = CASES[0].3;
    let (go, x, w) = (
        randn(&[2, 4, 7, 6], 1),
        randn(&[2, 3, 7, 6], 2),
        randn(&[4, 3, 3, 3], 3),
    );
    let run = |mask: [bool; 3]| -> Result<Vec<Tensor>> {
        let ints = |v: &[usize]| Value::IntList(v.iter().map(|&x| x as i64).collect());
        call(
            &CONV2D_BACKWARD,
            &[
                Value::Tensor(go.clone()),
                Value::Tensor(x.clone()),
                Value::Tensor(w.clone()),
                ints(&cfg.stride),
                ints(&cfg.pad),
                ints(&cfg.dil),
                Value::Int(1),
                Value::BoolList(mask.to_vec()),
            ],
        )
    };
    let all = run([true; 3])?;
    let some = run([false, true, false])?;
    assert_eq!(all[1].to_vec::<f64>()?, some[1].to_vec::<f64>()?);
    assert!(some[0].to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert!(some[2].to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    // grad_bias is the sum of grad_output over batch and positions.
    let want = go.sum(&[0, 2, 3], false)?;
    assert!(max_rel_diff(&all[2], &want) < 1e-12);
    Ok(())
}

#[test]
fn nn_forms_unbatched_same_valid_and_conv1d() -> Result<()> {
    let x = randn(&[3, 8, 7], 1);
    let w = randn(&[5, 3, 4, 3], 2);
    // "same" with an even kernel: one more row of padding after than before.
    let same = nn::conv2d(&x, &w, None, &[1], ConvPadding::Same, &[1, 2], 1)?;
    assert_eq!(same.shape(), &[5, 8, 7]);
    let cfg = Cfg {
        stride: [1, 1],
        pad: [1, 2, 2, 2],
        dil: [1, 2],
        groups: 1,
    };
    let want = reference(&x.unsqueeze(0)?, &w, None, cfg).squeeze(Some(0))?;
    assert!(max_rel_diff(&same, &want) < 1e-12);
    let valid = nn::conv2d(&x, &w, None, &[1], ConvPadding::parse("valid")?, &[1], 1)?;
    assert_eq!(valid.shape(), &[5, 5, 5]);
    let strided = nn::conv2d(&x.unsqueeze(0)?, &w, None, &[2, 1], [1, 0], &[1], 1)?;
    assert_eq!(strided.shape(), &[1, 5, 4, 5]);
    // conv1d: a 2-D convolution over a height of 1.
    let x1 = randn(&[2, 4, 11], 3);
    let w1 = randn(&[6, 2, 3], 4);
    let b1 = randn(&[6], 5);
    let y = nn::conv1d(&x1, &w1, Some(&b1), 2, 1, 2, 2)?;
    let cfg1 = Cfg {
        stride: [1, 2],
        pad: [0, 0, 1, 1],
        dil: [1, 2],
        groups: 2,
    };
    let want = reference(&x1.unsqueeze(2)?, &w1.unsqueeze(2)?, Some(&b1), cfg1).squeeze(Some(2))?;
    assert_eq!(y.shape(), &[2, 6, 5]);
    assert!(max_rel_diff(&y, &want) < 1e-12);
    let y = nn::conv1d(&x1.select(0, 1)?, &w1, None, 1, ConvPadding::Same, 1, 2)?;
    assert_eq!(y.shape(), &[6, 11]);
    Ok(())
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn bad_arguments_are_clear_errors() -> Result<()> {
    let x = randn(&[1, 4, 5, 5], 1);
    let w = randn(&[6, 2, 3, 3], 2);
    let e = err(nn::conv2d(&x, &w, None, &[1], 0, &[1], 3));
    assert!(
        e.contains("conv2d") && e.contains("groups") && e.contains('3'),
        "{e}"
    );
    let e = err(nn::conv2d(&x, &w, None, &[1], 0, &[1], 1));
    assert!(e.contains("weight") && e.contains("[6, 2, 3, 3]"), "{e}");
    let e = err(nn::conv2d(
        &x,
        &randn(&[6, 4, 7, 3], 3),
        None,
        &[1],
        0,
        &[1],
        1,
    ));
    assert!(e.contains("kernel 7x3"), "{e}");
    let e = err(nn::conv2d(&x, &w, None, &[0], 0, &[1], 2));
    assert!(e.contains("stride") && e.contains("at least 1"), "{e}");
    let e = err(nn::conv2d(&x, &w, None, &[2], ConvPadding::Same, &[1], 2));
    assert!(e.contains("padding") && e.contains("stride"), "{e}");
    let e = err(nn::conv2d(&x, &w, Some(&randn(&[5], 4)), &[1], 0, &[1], 2));
    assert!(e.contains("bias") && e.contains("[5]"), "{e}");
    let e = err(nn::conv2d(&randn(&[4, 5], 1), &w, None, &[1], 0, &[1], 2));
    assert!(e.contains("input") && e.contains("[4, 5]"), "{e}");
    let e = err(nn::conv2d(
        &x.to_dtype(DType::F32)?,
        &w,
        None,
        &[1],
        0,
        &[1],
        2,
    ));
    assert!(e.contains("f32") && e.contains("f64"), "{e}");
    let e = err(nn::conv2d(&x, &w, None, &[1, 1, 1], 0, &[1], 2));
    assert!(e.contains("stride"), "{e}");
    assert!(ConvPadding::parse("full").is_err());
    Ok(())
}
