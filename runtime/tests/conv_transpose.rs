//! `nn::conv_transpose2d` and the `conv_transpose2d` op (`ops::conv::transpose`, the
//! convolution kernels run as their adjoint): against the definition (each input value
//! scattered through the kernel) over strides, padding, output_padding (also one only the
//! dilation allows), dilation, groups and bias; f16/bf16 rounding once from f32; gradients
//! and double backward against finite differences; the backward's `output_mask`; the adjoint
//! identity with `conv2d`; unbatched input; errors naming the op and argument.

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck};
use tensorplay_runtime::dispatch::call;
use tensorplay_runtime::nn;
use tensorplay_runtime::ops::conv::CONV_TRANSPOSE2D_BACKWARD;
use tensorplay_runtime::{DType, Result, Tensor, Value};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// One call's sizes.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    stride: [usize; 2],
    pad: [usize; 2],
    out_pad: [usize; 2],
    dil: [usize; 2],
    groups: usize,
}

/// The transposed convolution from its definition, in f64: every input value, times the
/// kernel, added onto the output window it maps to.
fn reference(x: &Tensor, w: &Tensor, b: Option<&Tensor>, c: Cfg) -> Tensor {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (n, ci, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (og, kh, kw) = (ws[1], ws[2], ws[3]);
    let (o, cg) = (og * c.groups, ci / c.groups);
    let size = |d: usize, len: usize, k: usize| {
        (len - 1) * c.stride[d] + c.dil[d] * (k - 1) + c.out_pad[d] + 1 - 2 * c.pad[d]
    };
    let (oh, ow) = (size(0, h, kh), size(1, wd, kw));
    let f = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let (xv, wv) = (f(x), f(w));
    let mut out = vec![0.0; n * o * oh * ow];
    if let Some(b) = b {
        let bv = f(b);
        for (i, v) in out.iter_mut().enumerate() {
            *v = bv[(i / (oh * ow)) % o];
        }
    }
    for i in 0..n {
        for ic in 0..ci {
            let grp = ic / cg;
            for y in 0..h {
                for xx in 0..wd {
                    let v = xv[((i * ci + ic) * h + y) * wd + xx];
                    for oc in 0..og {
                        for a in 0..kh {
                            for bb in 0..kw {
                                let oy = (y * c.stride[0] + a * c.dil[0]) as i64 - c.pad[0] as i64;
                                let ox =
                                    (xx * c.stride[1] + bb * c.dil[1]) as i64 - c.pad[1] as i64;
                                if oy < 0 || ox < 0 || oy >= oh as i64 || ox >= ow as i64 {
                                    continue;
                                }
                                let wi = ((ic * og + oc) * kh + a) * kw + bb;
                                let at =
                                    ((i * o + grp * og + oc) * oh + oy as usize) * ow + ox as usize;
                                out[at] += v * wv[wi];
                            }
                        }
                    }
                }
            }
        }
    }
    Tensor::from_vec(out, &[n, o, oh, ow]).unwrap()
}

fn run(x: &Tensor, w: &Tensor, b: Option<&Tensor>, c: Cfg) -> Result<Tensor> {
    nn::conv_transpose2d(x, w, b, &c.stride, &c.pad, &c.out_pad, c.groups, &c.dil)
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

const fn cfg(
    stride: [usize; 2],
    pad: [usize; 2],
    out_pad: [usize; 2],
    dil: [usize; 2],
    groups: usize,
) -> Cfg {
    Cfg {
        stride,
        pad,
        out_pad,
        dil,
        groups,
    }
}

const CASES: &[(usize, [usize; 4], [usize; 2], Cfg)] = &[
    // (batch, [C_in, H, W, C_out], kernel, cfg)
    (
        2,
        [3, 5, 4, 4],
        [3, 3],
        cfg([1, 1], [0, 0], [0, 0], [1, 1], 1),
    ),
    (
        1,
        [4, 4, 5, 6],
        [3, 2],
        cfg([2, 3], [1, 0], [1, 2], [1, 1], 2),
    ),
    (
        3,
        [2, 3, 3, 2],
        [2, 3],
        cfg([2, 1], [0, 1], [0, 0], [2, 2], 1),
    ),
    // output_padding 1 with stride 1 is allowed by the dilation 2.
    (
        1,
        [4, 3, 4, 4],
        [3, 3],
        cfg([1, 2], [2, 1], [1, 1], [2, 1], 4),
    ),
    // Enough work for the parallel paths.
    (
        8,
        [8, 12, 12, 16],
        [4, 4],
        cfg([2, 2], [1, 1], [0, 0], [1, 1], 1),
    ),
];

#[test]
fn forward_matches_the_definition() -> Result<()> {
    for (seed, &(n, [c, h, w, o], [kh, kw], cfg)) in CASES.iter().enumerate() {
        let seed = seed as u64 * 10;
        let x = randn(&[n, c, h, w], seed);
        let wt = randn(&[c, o / cfg.groups, kh, kw], seed + 1);
        let b = randn(&[o], seed + 2);
        for dtype in [DType::F64, DType::F32] {
            let (xd, wd, bd) = (x.to_dtype(dtype)?, wt.to_dtype(dtype)?, b.to_dtype(dtype)?);
            let got = run(&xd, &wd, Some(&bd), cfg)?;
            assert_eq!(got.dtype(), dtype);
            let tol = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
            let d = max_rel_diff(&got, &reference(&xd, &wd, Some(&bd), cfg));
            assert!(d < tol, "{cfg:?} {dtype}: {d}");
            let nob = run(&xd, &wd, None, cfg)?;
            let d = max_rel_diff(&nob, &reference(&xd, &wd, None, cfg));
            assert!(d < tol, "{cfg:?} {dtype} without bias: {d}");
        }
    }
    Ok(())
}

#[test]
fn is_the_adjoint_of_conv2d() -> Result<()> {
    // <conv_transpose2d(x, w), y> = <x, conv2d(y, w)> when output_padding is 0.
    let c = CASES[2].3;
    let (x, w) = (randn(&[3, 2, 3, 3], 1), randn(&[2, 2, 2, 3], 2));
    let t = run(&x, &w, None, c)?;
    let y = randn(t.shape(), 3);
    let conv = nn::conv2d(&y, &w, None, &c.stride, c.pad, &c.dil, c.groups)?;
    let lhs = t.mul(&y)?.sum_all()?.item::<f64>()?;
    let rhs = x.mul(&conv)?.sum_all()?.item::<f64>()?;
    assert!(
        (lhs - rhs).abs() < 1e-10 * (1.0 + lhs.abs()),
        "{lhs} vs {rhs}"
    );
    Ok(())
}

#[test]
fn halves_compute_in_f32_and_round_once() -> Result<()> {
    let cfg = CASES[1].3;
    for dtype in [DType::F16, DType::BF16] {
        let x = randn(&[2, 4, 4, 5], 3).to_dtype(dtype)?;
        let w = randn(&[4, 3, 3, 2], 4).to_dtype(dtype)?;
        let b = randn(&[6], 5).to_dtype(dtype)?;
        let got = run(&x, &w, Some(&b), cfg)?;
        assert_eq!(got.dtype(), dtype);
        let f32s = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let in_f32 = run(&f32s(&x), &f32s(&w), Some(&f32s(&b)), cfg)?;
        assert_eq!(
            got.to_dtype(DType::F64)?.to_vec::<f64>()?,
            in_f32
                .to_dtype(dtype)?
                .to_dtype(DType::F64)?
                .to_vec::<f64>()?,
            "{dtype}"
        );
        let xg = x.requires_grad_(true)?;
        let y = run(&xg, &w, Some(&b), cfg)?;
        let g = autograd::grad(&[y.sum_all()?], std::slice::from_ref(&xg), &[None], false)?;
        assert_eq!(g[0].as_ref().unwrap().dtype(), dtype);
    }
    Ok(())
}

#[test]
fn gradients_match_finite_differences() -> Result<()> {
    for (seed, &(n, [c, h, w, o], [kh, kw], cfg)) in CASES[..4].iter().enumerate() {
        let seed = 100 + seed as u64 * 10;
        let inputs = [
            randn(&[n, c, h, w], seed),
            randn(&[c, o / cfg.groups, kh, kw], seed + 1),
            randn(&[o], seed + 2),
        ]
        .map(|t| t.requires_grad_(true).unwrap());
        gradcheck(
            |xs| run(&xs[0], &xs[1], Some(&xs[2]), cfg),
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
        randn(&[1, 4, 3, 3], 7),
        randn(&[4, 3, 3, 2], 8),
        randn(&[6], 9),
    ]
    .map(|t| t.requires_grad_(true).unwrap());
    gradcheck(
        |xs| {
            // Finite differences call this under no_grad: make the inputs leaves to
            // differentiate once.
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
            let y = run(&xs[0], &xs[1], Some(&xs[2]), cfg)?;
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
    let c = CASES[1].3;
    let (x, w) = (randn(&[2, 4, 4, 5], 1), randn(&[4, 3, 3, 2], 2));
    let go = randn(run(&x, &w, None, c)?.shape(), 3);
    let mask_run = |mask: [bool; 3]| -> Result<Vec<Tensor>> {
        let ints = |v: &[usize]| Value::IntList(v.iter().map(|&x| x as i64).collect());
        call(
            &CONV_TRANSPOSE2D_BACKWARD,
            &[
                Value::Tensor(go.clone()),
                Value::Tensor(x.clone()),
                Value::Tensor(w.clone()),
                ints(&c.stride),
                ints(&c.pad),
                ints(&c.out_pad),
                Value::Int(c.groups as i64),
                ints(&c.dil),
                Value::BoolList(mask.to_vec()),
            ],
        )
    };
    let all = mask_run([true; 3])?;
    let some = mask_run([false, true, false])?;
    assert_eq!(all[1].to_vec::<f64>()?, some[1].to_vec::<f64>()?);
    assert!(some[0].to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert!(some[2].to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert_eq!(all[2].shape(), &[6]);
    let want = go.sum(&[0, 2, 3], false)?;
    assert!(max_rel_diff(&all[2], &want) < 1e-12);
    Ok(())
}

#[test]
fn unbatched_input_squeezes_back() -> Result<()> {
    let c = CASES[1].3;
    let (x, w, b) = (
        randn(&[4, 4, 5], 1),
        randn(&[4, 3, 3, 2], 2),
        randn(&[6], 3),
    );
    let got = run(&x, &w, Some(&b), c)?;
    let want = run(&x.unsqueeze(0)?, &w, Some(&b), c)?.squeeze(Some(0))?;
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.to_vec::<f64>()?, want.to_vec::<f64>()?);
    Ok(())
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn bad_arguments_are_clear_errors() -> Result<()> {
    let x = randn(&[1, 4, 3, 3], 1);
    let w = randn(&[4, 2, 3, 3], 2);
    let call =
        |w: &Tensor, b: Option<&Tensor>, s: &[usize], p: &[usize], op: &[usize], g, d: &[usize]| {
            nn::conv_transpose2d(&x, w, b, s, p, op, g, d)
        };
    let e = err(call(&w, None, &[2], &[0], &[2], 1, &[1]));
    assert!(
        e.contains("conv_transpose2d") && e.contains("output_padding") && e.contains("[2, 2]"),
        "{e}"
    );
    let e = err(call(&w, None, &[1], &[0], &[0], 3, &[1]));
    assert!(
        e.contains("conv_transpose2d") && e.contains("groups") && e.contains('3'),
        "{e}"
    );
    let e = err(call(
        &randn(&[3, 2, 3, 3], 3),
        None,
        &[1],
        &[0],
        &[0],
        1,
        &[1],
    ));
    assert!(e.contains("weight") && e.contains("[3, 2, 3, 3]"), "{e}");
    let e = err(call(&w, Some(&randn(&[5], 4)), &[1], &[0], &[0], 2, &[1]));
    assert!(e.contains("bias") && e.contains("[4]"), "{e}");
    let e = err(call(&w, None, &[0], &[0], &[0], 1, &[1]));
    assert!(e.contains("stride"), "{e}");
    let e = err(call(&w, None, &[1], &[4], &[0], 1, &[1]));
    assert!(e.contains("padding") && e.contains("non-empty"), "{e}");
    let e = err(call(&w, None, &[1, 1, 1], &[0], &[0], 1, &[1]));
    assert!(e.contains("stride") && e.contains("1 or 2"), "{e}");
    let e = err(nn::conv_transpose2d(
        &randn(&[4, 3], 5),
        &w,
        None,
        &[1],
        &[0],
        &[0],
        1,
        &[1],
    ));
    assert!(e.contains("input") && e.contains("3-D"), "{e}");
    let e = err(call(
        &w.to_dtype(DType::F32)?,
        None,
        &[1],
        &[0],
        &[0],
        1,
        &[1],
    ));
    assert!(e.contains("conv_transpose2d") && e.contains("f32"), "{e}");
    Ok(())
}
