//! `nn::max_pool2d`(`_with_indices`), `nn::avg_pool2d`, `nn::adaptive_avg_pool2d` and their
//! ops (`ops::pool`): against direct definitions over kernel, stride, padding, dilation,
//! `ceil_mode`, `count_include_pad`, `divisor_override`, batched and unbatched inputs; NaN in a
//! window; halves rounding once from f32; gradients and double backward against finite
//! differences; errors naming the op, argument, expectation and value.

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck};
use tensorplay_runtime::nn;
use tensorplay_runtime::{DType, Result, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// PyTorch's pooled size.
fn pooled(n: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> usize {
    let num = n + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut o = num / s + 1;
    if ceil && (o - 1) * s >= n + p {
        o -= 1;
    }
    o
}

#[derive(Clone, Copy, Debug)]
struct Win {
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    ceil: bool,
}

/// Every plane of a `[.., H, W]` tensor as f64 vectors, with the plane size.
fn planes(x: &Tensor) -> (Vec<Vec<f64>>, usize, usize) {
    let s = x.shape();
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    let v = x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
    (v.chunks(h * w).map(<[f64]>::to_vec).collect(), h, w)
}

fn out_shape(x: &Tensor, oh: usize, ow: usize) -> Vec<usize> {
    let s = x.shape();
    let mut v = s[..s.len() - 2].to_vec();
    v.extend([oh, ow]);
    v
}

/// Max pooling by definition: values and flat indices.
fn max_reference(x: &Tensor, c: Win) -> (Tensor, Vec<i64>) {
    let (ps, h, w) = planes(x);
    let oh = pooled(h, c.k[0], c.s[0], c.p[0], c.d[0], c.ceil);
    let ow = pooled(w, c.k[1], c.s[1], c.p[1], c.d[1], c.ceil);
    let (mut vals, mut idx) = (Vec::new(), Vec::new());
    for p in &ps {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best: Option<(f64, usize)> = None;
                for a in 0..c.k[0] {
                    for b in 0..c.k[1] {
                        let iy = (oy * c.s[0] + a * c.d[0]) as i64 - c.p[0] as i64;
                        let ix = (ox * c.s[1] + b * c.d[1]) as i64 - c.p[1] as i64;
                        if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                            continue;
                        }
                        let at = iy as usize * w + ix as usize;
                        let v = p[at];
                        let better = match best {
                            None => true,
                            Some((bv, _)) => !bv.is_nan() && (v > bv || v.is_nan()),
                        };
                        if better {
                            best = Some((v, at));
                        }
                    }
                }
                let (v, at) = best.unwrap();
                vals.push(v);
                idx.push(at as i64);
            }
        }
    }
    (Tensor::from_vec(vals, &out_shape(x, oh, ow)).unwrap(), idx)
}

/// Average pooling by definition.
fn avg_reference(x: &Tensor, c: Win, include_pad: bool, div: Option<i64>) -> Tensor {
    let (ps, h, w) = planes(x);
    let oh = pooled(h, c.k[0], c.s[0], c.p[0], 1, c.ceil);
    let ow = pooled(w, c.k[1], c.s[1], c.p[1], 1, c.ceil);
    let mut out = Vec::new();
    for p in &ps {
        for oy in 0..oh {
            for ox in 0..ow {
                let (y0, x0) = (
                    (oy * c.s[0]) as i64 - c.p[0] as i64,
                    (ox * c.s[1]) as i64 - c.p[1] as i64,
                );
                let y1 = (y0 + c.k[0] as i64).min((h + c.p[0]) as i64);
                let x1 = (x0 + c.k[1] as i64).min((w + c.p[1]) as i64);
                let (mut sum, mut n) = (0.0, 0);
                for iy in y0.max(0)..y1.min(h as i64) {
                    for ix in x0.max(0)..x1.min(w as i64) {
                        sum += p[iy as usize * w + ix as usize];
                        n += 1;
                    }
                }
                let d = match div {
                    Some(d) => d as f64,
                    None if include_pad => ((y1 - y0) * (x1 - x0)) as f64,
                    None => n as f64,
                };
                out.push(sum / d);
            }
        }
    }
    Tensor::from_vec(out, &out_shape(x, oh, ow)).unwrap()
}

fn adaptive_reference(x: &Tensor, oh: usize, ow: usize) -> Tensor {
    let (ps, h, w) = planes(x);
    let mut out = Vec::new();
    for p in &ps {
        for oy in 0..oh {
            let (ya, yb) = (oy * h / oh, ((oy + 1) * h).div_ceil(oh));
            for ox in 0..ow {
                let (xa, xb) = (ox * w / ow, ((ox + 1) * w).div_ceil(ow));
                let mut sum = 0.0;
                for iy in ya..yb {
                    for ix in xa..xb {
                        sum += p[iy * w + ix];
                    }
                }
                out.push(sum / ((yb - ya) * (xb - xa)) as f64);
            }
        }
    }
    Tensor::from_vec(out, &out_shape(x, oh, ow)).unwrap()
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

const WINS: &[Win] = &[
    Win {
        k: [2, 2],
        s: [2, 2],
        p: [0, 0],
        d: [1, 1],
        ceil: false,
    },
    Win {
        k: [3, 2],
        s: [2, 1],
        p: [1, 1],
        d: [1, 1],
        ceil: true,
    },
    Win {
        k: [3, 3],
        s: [2, 3],
        p: [1, 0],
        d: [2, 1],
        ceil: true,
    },
    Win {
        k: [1, 3],
        s: [1, 2],
        p: [0, 1],
        d: [1, 1],
        ceil: false,
    },
];

#[test]
fn max_pool_matches_the_definition() -> Result<()> {
    for (i, &c) in WINS.iter().enumerate() {
        for shape in [&[2, 3, 7, 8][..], &[3, 6, 5]] {
            let x = randn(shape, i as u64);
            for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
                let xd = x.to_dtype(dtype)?;
                let (y, idx) = nn::max_pool2d_with_indices(&xd, &c.k, &c.s, &c.p, &c.d, c.ceil)?;
                let (want, want_idx) = max_reference(&xd, c);
                assert_eq!(y.dtype(), dtype);
                assert_eq!(max_rel_diff(&y, &want), 0.0, "{c:?} {dtype}");
                assert_eq!(idx.to_vec::<i64>()?, want_idx, "{c:?} {dtype}");
            }
        }
    }
    // A NaN wins its window; -inf values still give an index inside the window.
    let x = Tensor::from_vec(
        vec![
            1.0f32,
            f32::NAN,
            3.0,
            0.0,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            2.0,
            5.0,
        ],
        &[1, 2, 4],
    )?;
    let (y, i) = nn::max_pool2d_with_indices(&x, &[2], &[], &[0], &[1], false)?;
    let y = y.to_vec::<f32>()?;
    assert!(y[0].is_nan() && y[1] == 5.0, "{y:?}");
    assert_eq!(i.to_vec::<i64>()?, vec![1, 7]);
    Ok(())
}

#[test]
fn avg_pool_matches_the_definition() -> Result<()> {
    for (i, &c) in WINS.iter().enumerate() {
        let c = Win { d: [1, 1], ..c };
        for shape in [&[2, 3, 7, 8][..], &[3, 6, 5]] {
            let x = randn(shape, 10 + i as u64);
            for (pad, div) in [
                (true, None),
                (false, None),
                (true, Some(5)),
                (false, Some(-2)),
            ] {
                for dtype in [DType::F64, DType::F32] {
                    let xd = x.to_dtype(dtype)?;
                    let y = nn::avg_pool2d(&xd, &c.k, &c.s, &c.p, c.ceil, pad, div)?;
                    let want = avg_reference(&xd, c, pad, div);
                    let tol = if dtype == DType::F64 { 1e-15 } else { 1e-6 };
                    let d = max_rel_diff(&y, &want);
                    assert!(d < tol, "{c:?} {pad} {div:?} {dtype}: {d}");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn adaptive_avg_pool_matches_the_definition() -> Result<()> {
    for (shape, out) in [
        (&[2, 3, 7, 5][..], [3, 2]),
        (&[3, 6, 5], [4, 5]),
        (&[1, 2, 4, 4], [1, 1]),
        (&[1, 1, 3, 3], [5, 4]),
    ] {
        let x = randn(shape, 3);
        for dtype in [DType::F64, DType::F32] {
            let y = nn::adaptive_avg_pool2d(&x.to_dtype(dtype)?, &out)?;
            let want = adaptive_reference(&x.to_dtype(dtype)?, out[0], out[1]);
            let tol = if dtype == DType::F64 { 1e-15 } else { 1e-6 };
            assert!(max_rel_diff(&y, &want) < tol, "{shape:?} {out:?} {dtype}");
        }
    }
    Ok(())
}

#[test]
fn halves_compute_in_f32_and_round_once() -> Result<()> {
    let c = WINS[1];
    for dtype in [DType::F16, DType::BF16] {
        let x = randn(&[2, 3, 7, 8], 5).to_dtype(dtype)?;
        let x32 = x.to_dtype(DType::F32)?;
        let pairs = [
            (
                nn::avg_pool2d(&x, &c.k, &c.s, &c.p, true, false, None)?,
                nn::avg_pool2d(&x32, &c.k, &c.s, &c.p, true, false, None)?,
            ),
            (
                nn::adaptive_avg_pool2d(&x, &[3, 5])?,
                nn::adaptive_avg_pool2d(&x32, &[3, 5])?,
            ),
        ];
        for (half, single) in pairs {
            assert_eq!(half.dtype(), dtype);
            assert_eq!(
                half.to_dtype(DType::F64)?.to_vec::<f64>()?,
                single
                    .to_dtype(dtype)?
                    .to_dtype(DType::F64)?
                    .to_vec::<f64>()?
            );
        }
    }
    Ok(())
}

/// The three poolings of one input, as one differentiable function for gradcheck.
fn all_pools(x: &Tensor, c: Win) -> Result<Tensor> {
    let a = nn::max_pool2d(x, &c.k, &c.s, &c.p, &c.d, c.ceil)?;
    let b = nn::avg_pool2d(x, &c.k, &c.s, &c.p, c.ceil, false, None)?;
    let d = nn::adaptive_avg_pool2d(x, &[3, 2])?;
    a.mul(&a)?
        .sum_all()?
        .add(&b.mul(&b)?.sum_all()?)?
        .add(&d.mul(&d)?.sum_all()?)
}

#[test]
fn gradients_match_finite_differences() -> Result<()> {
    for (i, &c) in WINS.iter().enumerate() {
        // Distinct values a window apart, so no window holds a tie.
        let x = randn(&[2, 2, 6, 7], 20 + i as u64).requires_grad_(true)?;
        gradcheck(|xs| all_pools(&xs[0], c), &[x], GradcheckOptions::default())?;
    }
    Ok(())
}

#[test]
fn double_backward_matches_finite_differences() -> Result<()> {
    let c = WINS[1];
    let x = randn(&[1, 2, 6, 5], 30).requires_grad_(true)?;
    gradcheck(
        |xs| {
            let _on = autograd::enable_grad();
            let x = if xs[0].requires_grad() {
                xs[0].clone()
            } else {
                xs[0].detach().requires_grad_(true)?
            };
            let y = all_pools(&x, c)?;
            let g = autograd::grad(&[y], std::slice::from_ref(&x), &[None], true)?;
            let g = g[0].as_ref().unwrap();
            g.mul(g)?.mul(&x)?.sum_all()
        },
        &[x],
        GradcheckOptions::default(),
    )
}

fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn bad_arguments_are_clear_errors() -> Result<()> {
    let x = randn(&[1, 2, 5, 5], 1);
    let e = err(nn::max_pool2d(&x, &[2], &[], &[2], &[1], false));
    assert!(
        e.contains("max_pool2d") && e.contains("padding") && e.contains("[2, 2]"),
        "{e}"
    );
    let e = err(nn::max_pool2d(&x, &[0], &[], &[0], &[1], false));
    assert!(e.contains("kernel_size") && e.contains("[0]"), "{e}");
    let e = err(nn::avg_pool2d(&x, &[7], &[], &[0], false, true, None));
    assert!(e.contains("avg_pool2d") && e.contains("7x7"), "{e}");
    let e = err(nn::avg_pool2d(&x, &[2], &[], &[0], false, true, Some(0)));
    assert!(e.contains("divisor_override"), "{e}");
    let e = err(nn::adaptive_avg_pool2d(&x, &[0, 2]));
    assert!(
        e.contains("adaptive_avg_pool2d") && e.contains("output_size"),
        "{e}"
    );
    let e = err(nn::adaptive_avg_pool2d(&randn(&[5, 5], 1), &[2]));
    assert!(e.contains("self") && e.contains("[5, 5]"), "{e}");
    let e = err(nn::max_pool2d(
        &x.to_dtype(DType::I64)?,
        &[2],
        &[],
        &[0],
        &[1],
        false,
    ));
    assert!(e.contains("i64"), "{e}");
    Ok(())
}
