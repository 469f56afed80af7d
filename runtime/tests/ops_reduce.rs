//! Reductions (sum, mean, max/min, amax/amin, argmax/argmin, prod, var/std) and softmax against
//! straightforward f64 references, plus their edge cases, errors and gradients.

use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::{DType, Error, Tensor};

type R<T = ()> = Result<T, Error>;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

/// For each output of a reduction of `shape` over `dims` (row-major over the kept dims), the
/// reduced values in row-major order over the reduced dims.
fn groups(data: &[f64], shape: &[usize], dims: &[usize]) -> Vec<Vec<f64>> {
    let rank = shape.len();
    let reduced: Vec<bool> = (0..rank).map(|d| dims.contains(&d)).collect();
    let kept: Vec<usize> = (0..rank).filter(|&d| !reduced[d]).collect();
    let red: Vec<usize> = (0..rank).filter(|&d| reduced[d]).collect();
    let nout: usize = kept.iter().map(|&d| shape[d]).product();
    let nred: usize = red.iter().map(|&d| shape[d]).product();
    let strides: Vec<usize> = (0..rank).map(|d| shape[d + 1..].iter().product()).collect();
    let unravel = |mut i: usize, ds: &[usize]| -> Vec<(usize, usize)> {
        let mut idx = vec![];
        for &d in ds.iter().rev() {
            idx.push((d, i % shape[d]));
            i /= shape[d];
        }
        idx
    };
    (0..nout)
        .map(|o| {
            let base: usize = unravel(o, &kept).iter().map(|&(d, i)| i * strides[d]).sum();
            (0..nred)
                .map(|r| {
                    let off: usize = unravel(r, &red).iter().map(|&(d, i)| i * strides[d]).sum();
                    data[base + off]
                })
                .collect()
        })
        .collect()
}

fn kept_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| match (dims.contains(&d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

fn close(got: &[f64], want: &[f64], rtol: f64, atol: f64) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&g, &w)| {
            if w.is_nan() {
                g.is_nan()
            } else if w.is_infinite() {
                g == w
            } else {
                (g - w).abs() <= atol + rtol * w.abs()
            }
        })
}

fn ref_max(v: &[f64]) -> f64 {
    v.iter().fold(f64::NEG_INFINITY, |m, &x| {
        if x.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    })
}

fn ref_min(v: &[f64]) -> f64 {
    -ref_max(&v.iter().map(|x| -x).collect::<Vec<_>>())
}

fn ref_argmax(v: &[f64]) -> i64 {
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return i as i64;
    }
    let m = ref_max(v);
    v.iter().position(|&x| x == m).unwrap() as i64
}

fn ref_argmin(v: &[f64]) -> i64 {
    ref_argmax(&v.iter().map(|x| -x).collect::<Vec<_>>())
}

fn ref_var(v: &[f64], correction: f64) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - correction).max(0.0)
}

fn assert_shape_err<T: std::fmt::Debug>(r: R<T>, what: &str) {
    match r {
        Err(Error::Shape { .. }) => {}
        other => panic!("{what}: expected a shape error, got {other:?}"),
    }
}

// ---- sum / mean ---------------------------------------------------------------------------------

#[test]
fn sum_of_a_million_f32_matches_f64() -> R {
    let n = 1 << 20;
    for (seed, positive) in [(1u64, false), (2, true)] {
        let x = if positive {
            Tensor::rand_seeded(&[n], DType::F32, seed)?
        } else {
            Tensor::randn_seeded(&[n], DType::F32, seed)?
        };
        let v = x.to_vec_f64()?;
        let want: f64 = v.iter().sum();
        let abs: f64 = v.iter().map(|x| x.abs()).sum();
        let got = x.sum_all()?.item::<f64>()?;
        let tol = 1e-8 * abs + (want.abs() as f32 * f32::EPSILON) as f64;
        assert!((got - want).abs() <= tol, "sum {got} vs {want} (tol {tol})");
        let mean = x.mean_all()?.item::<f64>()?;
        assert!((mean - want / n as f64).abs() <= tol / n as f64 + 1e-7 * (want / n as f64).abs());
    }
    Ok(())
}

#[test]
fn sum_over_each_dim_of_a_large_matrix() -> R {
    let x = Tensor::randn_seeded(&[512, 512], DType::F32, 3)?;
    let v = x.to_vec_f64()?;
    for dim in [0usize, 1] {
        let want: Vec<f64> = groups(&v, &[512, 512], &[dim])
            .iter()
            .map(|g| g.iter().sum())
            .collect();
        let got = x.sum(&[dim as i64], false)?;
        assert_eq!(got.shape(), &[512]);
        assert!(
            close(&got.to_vec_f64()?, &want, 1e-5, 1e-4),
            "sum over dim {dim}"
        );
        // The transposed view reduces the other physical direction.
        let got_t = x.t()?.sum(&[1 - dim as i64], true)?;
        assert_eq!(got_t.shape(), if dim == 0 { &[512, 1] } else { &[1, 512] });
        assert!(close(&got_t.to_vec_f64()?, &want, 1e-5, 1e-4));
    }
    // f64 sums of the same data agree with the reference almost exactly.
    let x64 = x.to_dtype(DType::F64)?;
    let want: Vec<f64> = groups(&v, &[512, 512], &[0])
        .iter()
        .map(|g| g.iter().sum())
        .collect();
    assert!(close(
        &x64.sum(&[0], false)?.to_vec_f64()?,
        &want,
        1e-12,
        1e-12
    ));
    Ok(())
}

#[test]
fn sums_and_means_over_several_dims() -> R {
    let shape = [3usize, 4, 5];
    let x = randn(&shape, 4);
    let v = x.to_vec_f64()?;
    for dims in [
        vec![0usize],
        vec![1],
        vec![2],
        vec![0, 2],
        vec![1, 2],
        vec![0, 1, 2],
    ] {
        for keepdim in [false, true] {
            let di: Vec<i64> = dims.iter().map(|&d| d as i64 - 3).collect(); // negative dims
            let g = groups(&v, &shape, &dims);
            let sums: Vec<f64> = g.iter().map(|g| g.iter().sum()).collect();
            let means: Vec<f64> = g
                .iter()
                .map(|g| g.iter().sum::<f64>() / g.len() as f64)
                .collect();
            let s = x.sum(&di, keepdim)?;
            assert_eq!(s.shape(), kept_shape(&shape, &dims, keepdim).as_slice());
            assert!(close(&s.to_vec_f64()?, &sums, 1e-12, 1e-12));
            assert!(close(
                &x.mean(&di, keepdim)?.to_vec_f64()?,
                &means,
                1e-12,
                1e-12
            ));
        }
    }
    Ok(())
}

#[test]
fn empty_reductions_follow_pytorch() -> R {
    let e = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(e.sum_all()?.item::<f32>()?, 0.0);
    assert!(e.mean_all()?.item::<f32>()?.is_nan());
    assert_eq!(e.prod_all()?.item::<f32>()?, 1.0);
    assert_eq!(e.sum(&[0], false)?.to_vec::<f32>()?, vec![0.0; 3]);
    assert_eq!(e.prod(&[0], false)?.to_vec::<f32>()?, vec![1.0; 3]);
    assert!(e.var(&[], false)?.item::<f32>()?.is_nan());
    // Reductions without identity error over a zero-size dim, but not over the other dims.
    assert_shape_err(e.max_all(), "max of empty");
    assert_shape_err(e.min_all(), "min of empty");
    assert_shape_err(e.amax(&[0], false), "amax over empty dim");
    assert_shape_err(e.argmax(None, false), "argmax of empty");
    assert_shape_err(e.argmin(Some(0), false), "argmin over empty dim");
    assert_shape_err(e.max_dim(0, false), "max_dim over empty dim");
    assert_eq!(e.amax(&[1], false)?.shape(), &[0]);
    let (v, i) = e.max_dim(1, true)?;
    assert_eq!((v.shape(), i.shape()), (&[0usize, 1][..], &[0usize, 1][..]));
    Ok(())
}

#[test]
fn bad_dims_and_dtypes_are_errors() {
    let x = Tensor::ones(&[2, 3], DType::F32);
    assert_shape_err(x.sum(&[2], false), "dim out of range");
    assert_shape_err(x.amax(&[-3], false), "negative dim out of range");
    assert_shape_err(x.argmax(Some(5), false), "argmax dim");
    assert_shape_err(x.max_dim(2, false), "max_dim dim");
    for r in [
        x.sum(&[0, -2], false),
        x.amax(&[1, 1], false),
        x.prod(&[0, 0], true),
        x.var(&[1, -1], false),
    ] {
        assert!(
            matches!(r, Err(Error::Argument { .. })),
            "duplicate dims: {r:?}"
        );
    }
    let i = Tensor::ones(&[2, 3], DType::I64);
    assert!(matches!(i.mean(&[0], false), Err(Error::DType { .. })));
    assert!(matches!(i.var(&[0], false), Err(Error::DType { .. })));
    assert!(matches!(i.std(&[], false), Err(Error::DType { .. })));
    assert!(matches!(i.softmax(0), Err(Error::DType { .. })));
    let b = Tensor::ones(&[2], DType::Bool);
    assert!(matches!(b.argmax(None, false), Err(Error::DType { .. })));
}

// ---- max / min / amax / amin / argmax / argmin -------------------------------------------------

#[test]
fn extrema_match_reference_over_dims_and_dtypes() -> R {
    let shape = [4usize, 3, 5];
    // Small integers so every dtype holds the values exactly and ties are frequent.
    let data: Vec<f64> = (0..60)
        .map(|i| ((i * 37 + 11) % 23) as f64 - 11.0)
        .collect();
    let base = Tensor::from_vec(data.clone(), &shape)?;
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ] {
        let x = base.to_dtype(dt)?;
        let full_max = x.max_all()?;
        assert_eq!((full_max.shape(), full_max.dtype()), (&[][..], dt));
        assert_eq!(full_max.item::<f64>()?, ref_max(&data));
        assert_eq!(x.min_all()?.item::<f64>()?, ref_min(&data));
        assert_eq!(x.argmax(None, false)?.item::<i64>()?, ref_argmax(&data));
        assert_eq!(x.argmin(None, true)?.shape(), &[1, 1, 1]);
        assert_eq!(x.argmin(None, true)?.item::<i64>()?, ref_argmin(&data));
        for dims in [vec![0usize], vec![2], vec![0, 1], vec![1, 2], vec![0, 1, 2]] {
            let g = groups(&data, &shape, &dims);
            let di: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            for keepdim in [false, true] {
                let want_shape = kept_shape(&shape, &dims, keepdim);
                let amax = x.amax(&di, keepdim)?;
                assert_eq!((amax.shape(), amax.dtype()), (want_shape.as_slice(), dt));
                assert_eq!(
                    amax.to_vec_f64()?,
                    g.iter().map(|g| ref_max(g)).collect::<Vec<_>>()
                );
                let amin = x.amin(&di, keepdim)?;
                assert_eq!(
                    amin.to_vec_f64()?,
                    g.iter().map(|g| ref_min(g)).collect::<Vec<_>>()
                );
            }
        }
        for d in 0..3usize {
            let g = groups(&data, &shape, &[d]);
            for keepdim in [false, true] {
                let want_shape = kept_shape(&shape, &[d], keepdim);
                let (v, i) = x.max_dim(d as i64, keepdim)?;
                assert_eq!(
                    (v.shape(), i.shape()),
                    (want_shape.as_slice(), want_shape.as_slice())
                );
                assert_eq!(i.dtype(), DType::I64);
                assert_eq!(
                    v.to_vec_f64()?,
                    g.iter().map(|g| ref_max(g)).collect::<Vec<_>>()
                );
                assert_eq!(
                    i.to_vec::<i64>()?,
                    g.iter().map(|g| ref_argmax(g)).collect::<Vec<_>>()
                );
                let (v, i) = x.min_dim(d as i64 - 3, keepdim)?;
                assert_eq!(
                    v.to_vec_f64()?,
                    g.iter().map(|g| ref_min(g)).collect::<Vec<_>>()
                );
                assert_eq!(
                    i.to_vec::<i64>()?,
                    g.iter().map(|g| ref_argmin(g)).collect::<Vec<_>>()
                );
                let am = x.argmax(Some(d as i64), keepdim)?;
                assert_eq!(am.shape(), want_shape.as_slice());
                assert_eq!(
                    am.to_vec::<i64>()?,
                    g.iter().map(|g| ref_argmax(g)).collect::<Vec<_>>()
                );
                let an = x.argmin(Some(d as i64), keepdim)?;
                assert_eq!(
                    an.to_vec::<i64>()?,
                    g.iter().map(|g| ref_argmin(g)).collect::<Vec<_>>()
                );
            }
        }
    }
    Ok(())
}

#[test]
fn extrema_of_bool_and_zero_dim_tensors() -> R {
    let b = Tensor::from_vec(vec![false, true, false, false], &[2, 2])?;
    assert!(b.max_all()?.item::<bool>()?);
    assert!(!b.min_all()?.item::<bool>()?);
    assert_eq!(b.amax(&[0], false)?.to_vec::<bool>()?, vec![false, true]);
    let (v, i) = b.max_dim(1, false)?;
    assert_eq!(
        (v.to_vec::<bool>()?, i.to_vec::<i64>()?),
        (vec![true, false], vec![1, 0])
    );
    let s = Tensor::scalar(2.5f32);
    assert_eq!(s.max_all()?.item::<f32>()?, 2.5);
    let (v, i) = s.max_dim(0, false)?;
    assert_eq!(
        (v.shape(), v.item::<f32>()?, i.item::<i64>()?),
        (&[][..], 2.5, 0)
    );
    assert_eq!(s.argmax(Some(-1), true)?.item::<i64>()?, 0);
    assert_eq!(s.amax(&[0], true)?.item::<f32>()?, 2.5);
    Ok(())
}

#[test]
fn nan_propagates_through_extrema() -> R {
    let nan = f64::NAN;
    let data = vec![1.0, nan, 5.0, nan, 2.0, 9.0, -3.0, 0.0, -1.0];
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = Tensor::from_vec(data.clone(), &[3, 3])?.to_dtype(dt)?;
        assert!(x.max_all()?.item::<f64>()?.is_nan());
        assert!(x.min_all()?.item::<f64>()?.is_nan());
        assert_eq!(x.argmax(None, false)?.item::<i64>()?, 1);
        assert_eq!(x.argmin(None, false)?.item::<i64>()?, 1);
        let m = x.amax(&[1], false)?.to_vec_f64()?;
        assert!(m[0].is_nan() && m[1].is_nan() && m[2] == 0.0);
        let m = x.amin(&[0], false)?.to_vec_f64()?;
        assert!(m[0].is_nan() && m[1].is_nan() && m[2] == -1.0);
        let (v, i) = x.max_dim(0, false)?;
        let v = v.to_vec_f64()?;
        assert!(v[0].is_nan() && v[1].is_nan() && v[2] == 9.0);
        assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 1]);
    }
    // Infinities are ordinary values.
    let x = Tensor::from_vec(vec![f32::NEG_INFINITY, f32::INFINITY, 1.0], &[3])?;
    assert_eq!(x.max_all()?.item::<f32>()?, f32::INFINITY);
    assert_eq!(x.argmin(None, false)?.item::<i64>()?, 0);
    Ok(())
}

#[test]
fn extrema_of_non_contiguous_inputs() -> R {
    let base = randn(&[6, 8], 5);
    let views = [
        base.t()?,
        base.slice(0, Some(1), None, 2)?,
        base.slice(1, Some(0), Some(7), 3)?.t()?,
    ];
    for x in views {
        let shape = x.shape().to_vec();
        let data = x.to_vec_f64()?;
        for d in 0..2usize {
            let g = groups(&data, &shape, &[d]);
            let (v, i) = x.max_dim(d as i64, false)?;
            assert_eq!(
                v.to_vec_f64()?,
                g.iter().map(|g| ref_max(g)).collect::<Vec<_>>()
            );
            assert_eq!(
                i.to_vec::<i64>()?,
                g.iter().map(|g| ref_argmax(g)).collect::<Vec<_>>()
            );
            assert_eq!(
                x.amin(&[d as i64], true)?.to_vec_f64()?,
                g.iter().map(|g| ref_min(g)).collect::<Vec<_>>()
            );
        }
        assert_eq!(x.argmax(None, false)?.item::<i64>()?, ref_argmax(&data));
    }
    Ok(())
}

#[test]
fn large_arg_reductions_keep_the_first_tie() -> R {
    // Many ties, so any reordering of partial results would change the index.
    for shape in [[512usize, 512], [1 << 17, 2], [2, 1 << 17]] {
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64).collect();
        let x = Tensor::from_vec(data.clone(), &shape)?.to_dtype(DType::F32)?;
        assert_eq!(x.argmax(None, false)?.item::<i64>()?, ref_argmax(&data));
        assert_eq!(x.argmin(None, false)?.item::<i64>()?, ref_argmin(&data));
        for d in 0..2usize {
            let g = groups(&data, &shape, &[d]);
            let (v, i) = x.max_dim(d as i64, false)?;
            assert_eq!(
                v.to_vec_f64()?,
                g.iter().map(|g| ref_max(g)).collect::<Vec<_>>()
            );
            assert_eq!(
                i.to_vec::<i64>()?,
                g.iter().map(|g| ref_argmax(g)).collect::<Vec<_>>(),
                "dim {d} of {shape:?}"
            );
            let am = x.argmin(Some(d as i64), false)?;
            assert_eq!(
                am.to_vec::<i64>()?,
                g.iter().map(|g| ref_argmin(g)).collect::<Vec<_>>()
            );
        }
    }
    // A NaN late in a long reduction still wins.
    let mut data: Vec<f32> = (0..1 << 18).map(|i| (i % 1000) as f32).collect();
    data[200_000] = f32::NAN;
    let x = Tensor::from_vec(data, &[1 << 18])?;
    assert!(x.max_all()?.item::<f32>()?.is_nan());
    assert_eq!(x.argmax(None, false)?.item::<i64>()?, 200_000);
    Ok(())
}

// ---- prod ---------------------------------------------------------------------------------------

#[test]
fn prod_matches_reference() -> R {
    let shape = [3usize, 4, 2];
    let x = Tensor::rand_seeded(&shape, DType::F64, 6)?.add_scalar(0.5)?;
    let v = x.to_vec_f64()?;
    for dims in [vec![0usize], vec![1, 2], vec![0, 1, 2]] {
        let di: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let want: Vec<f64> = groups(&v, &shape, &dims)
            .iter()
            .map(|g| g.iter().product())
            .collect();
        for dt in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            let p = x.to_dtype(dt)?.prod(&di, true)?;
            assert_eq!(
                (p.dtype(), p.shape()),
                (dt, kept_shape(&shape, &dims, true).as_slice())
            );
            let tol = match dt {
                DType::F64 => 1e-14,
                DType::F32 => 1e-6,
                _ => 3e-2,
            };
            assert!(
                close(&p.to_vec_f64()?, &want, tol, 0.0),
                "{dt} prod over {dims:?}"
            );
        }
    }
    // Non-contiguous input.
    let t = x.select(2, 0)?.t()?;
    let want: Vec<f64> = groups(&t.to_vec_f64()?, t.shape(), &[1])
        .iter()
        .map(|g| g.iter().product())
        .collect();
    assert!(close(
        &t.prod(&[1], false)?.to_vec_f64()?,
        &want,
        1e-14,
        0.0
    ));
    Ok(())
}

#[test]
fn integer_prod_is_i64_and_wraps() -> R {
    let x = Tensor::from_vec(vec![1i32 << 20, 1 << 20, 1 << 30, 3, -2, 5], &[2, 3])?;
    let p = x.prod(&[1], false)?;
    assert_eq!(p.dtype(), DType::I64);
    let want0 = (1i64 << 40).wrapping_mul(1 << 30);
    assert_eq!(p.to_vec::<i64>()?, vec![want0, -30]);
    let big = Tensor::from_vec(vec![i64::MAX, 3], &[2])?;
    assert_eq!(big.prod_all()?.item::<i64>()?, i64::MAX.wrapping_mul(3));
    let b = Tensor::from_vec(vec![true, true, false, true], &[2, 2])?;
    let pb = b.prod(&[1], false)?;
    assert_eq!((pb.dtype(), pb.to_vec::<i64>()?), (DType::I64, vec![1, 0]));
    Ok(())
}

// ---- var / std ----------------------------------------------------------------------------------

#[test]
fn var_and_std_match_two_pass_reference() -> R {
    let shape = [4usize, 5, 6];
    let x = randn(&shape, 7).mul_scalar(3.0)?.add_scalar(1.5)?;
    let v = x.to_vec_f64()?;
    for dims in [vec![0usize], vec![2], vec![0, 2], vec![0, 1, 2]] {
        let di: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let g = groups(&v, &shape, &dims);
        for correction in [0.0, 1.0, 2.0] {
            for keepdim in [false, true] {
                let want: Vec<f64> = g.iter().map(|g| ref_var(g, correction)).collect();
                let got = x.var_correction(&di, correction, keepdim)?;
                assert_eq!(got.shape(), kept_shape(&shape, &dims, keepdim).as_slice());
                assert!(
                    close(&got.to_vec_f64()?, &want, 1e-12, 0.0),
                    "var over {dims:?}"
                );
                let sd: Vec<f64> = want.iter().map(|w| w.sqrt()).collect();
                assert!(close(
                    &x.std_correction(&di, correction, keepdim)?.to_vec_f64()?,
                    &sd,
                    1e-12,
                    0.0
                ));
            }
        }
        let want: Vec<f64> = g.iter().map(|g| ref_var(g, 1.0)).collect();
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let got = x.to_dtype(dt)?.var(&di, false)?;
            assert_eq!(got.dtype(), dt);
            let tol = if dt == DType::F32 { 1e-5 } else { 2e-2 };
            assert!(
                close(&got.to_vec_f64()?, &want, tol, tol),
                "{dt} var over {dims:?}"
            );
        }
    }
    // Transposed input.
    let t = x.select(0, 1)?.t()?;
    let want: Vec<f64> = groups(&t.to_vec_f64()?, t.shape(), &[1])
        .iter()
        .map(|g| ref_var(g, 1.0))
        .collect();
    assert!(close(&t.var(&[1], false)?.to_vec_f64()?, &want, 1e-12, 0.0));
    Ok(())
}

#[test]
fn var_is_stable_and_has_pytorch_edge_cases() -> R {
    // A large offset: the naive sum-of-squares formula loses every digit here.
    let x = Tensor::from_vec(vec![1e9 + 1.0, 1e9 + 2.0, 1e9 + 3.0, 1e9 + 4.0], &[4])?;
    assert_eq!(x.var(&[], false)?.item::<f64>()?, 5.0 / 3.0);
    let big = Tensor::full(&[1 << 18], 1e4, DType::F32).add(&Tensor::randn_seeded(
        &[1 << 18],
        DType::F32,
        8,
    )?)?;
    let v = big.to_vec_f64()?;
    let want = ref_var(&v, 1.0);
    assert!((big.var(&[], false)?.item::<f64>()? - want).abs() < 1e-4 * want);
    // One element: n - correction = 0 gives NaN; a larger correction gives inf (or NaN for 0/0).
    let one = Tensor::from_vec(vec![3.0f32], &[1])?;
    assert!(one.var(&[], false)?.item::<f32>()?.is_nan());
    assert_eq!(one.var_correction(&[], 0.0, false)?.item::<f32>()?, 0.0);
    let two = Tensor::from_vec(vec![1.0f64, 3.0], &[2])?;
    assert_eq!(
        two.var_correction(&[0], 3.0, false)?.item::<f64>()?,
        f64::INFINITY
    );
    assert_eq!(
        two.var_correction(&[0], 0.5, false)?.item::<f64>()?,
        2.0 / 1.5
    );
    let inf = Tensor::from_vec(vec![1.0f64, f64::INFINITY], &[2])?;
    assert!(inf.var(&[], false)?.item::<f64>()?.is_nan());
    Ok(())
}

// ---- softmax ------------------------------------------------------------------------------------

fn ref_softmax(v: &[f64], log: bool) -> Vec<f64> {
    let m = ref_max(v);
    let s: f64 = v.iter().map(|x| (x - m).exp()).sum();
    v.iter()
        .map(|x| {
            if log {
                x - m - s.ln()
            } else {
                (x - m).exp() / s
            }
        })
        .collect()
}

/// softmax of `data` (shape `shape`) along `dim`, in row-major order.
fn ref_softmax_dim(data: &[f64], shape: &[usize], dim: usize, log: bool) -> Vec<f64> {
    let mut out = vec![0.0; data.len()];
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer = data.len() / (n * inner).max(1);
    for o in 0..outer {
        for j in 0..inner {
            let idx: Vec<usize> = (0..n).map(|i| (o * n + i) * inner + j).collect();
            let lane: Vec<f64> = idx.iter().map(|&i| data[i]).collect();
            for (&i, y) in idx.iter().zip(ref_softmax(&lane, log)) {
                out[i] = y;
            }
        }
    }
    out
}

#[test]
fn softmax_matches_reference_along_each_dim() -> R {
    let shape = [3usize, 4, 5];
    let x = randn(&shape, 9).mul_scalar(4.0)?;
    let v = x.to_vec_f64()?;
    for log in [false, true] {
        for dim in 0..3usize {
            let want = ref_softmax_dim(&v, &shape, dim, log);
            for (dt, tol) in [
                (DType::F64, 1e-13),
                (DType::F32, 2e-6),
                (DType::F16, 4e-3),
                (DType::BF16, 3e-2),
            ] {
                let xd = x.to_dtype(dt)?;
                let y = if log {
                    xd.log_softmax(dim as i64 - 3)?
                } else {
                    xd.softmax(dim as i64)?
                };
                assert_eq!((y.dtype(), y.shape()), (dt, &shape[..]));
                let atol = if log { tol * 10.0 } else { tol };
                assert!(
                    close(&y.to_vec_f64()?, &want, tol, atol),
                    "{dt} log={log} dim={dim}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn softmax_of_non_contiguous_inputs() -> R {
    let base = randn(&[6, 10], 10);
    for x in [
        base.t()?,
        base.slice(1, Some(1), None, 3)?,
        base.slice(0, None, None, 2)?.t()?,
    ] {
        let v = x.to_vec_f64()?;
        for dim in 0..2usize {
            for log in [false, true] {
                let want = ref_softmax_dim(&v, x.shape(), dim, log);
                let y = if log {
                    x.log_softmax(dim as i64)?
                } else {
                    x.softmax(dim as i64)?
                };
                assert!(close(&y.to_vec_f64()?, &want, 1e-13, 1e-14));
                let y32 = if log {
                    x.to_dtype(DType::F32)?.log_softmax(dim as i64)?
                } else {
                    x.to_dtype(DType::F32)?.softmax(dim as i64)?
                };
                assert!(close(&y32.to_vec_f64()?, &want, 2e-6, 2e-6));
            }
        }
    }
    Ok(())
}

#[test]
fn softmax_infinities_and_nan() -> R {
    let ninf = f64::NEG_INFINITY;
    let data = vec![
        1.0,
        ninf,
        2.0,
        ninf, // some -inf
        ninf,
        ninf,
        ninf,
        ninf, // all -inf: NaN
        0.0,
        f64::NAN,
        1.0,
        2.0, // NaN: NaN
        -1e30,
        0.0,
        1e30,
        5.0, // huge finite values do not overflow
    ];
    for dt in [DType::F32, DType::F64, DType::F16] {
        let x = Tensor::from_vec(data.clone(), &[4, 4])?.to_dtype(dt)?;
        let s = x.softmax(1)?.to_vec_f64()?;
        let e = (1f64).exp();
        let (a, b) = (1.0 / (1.0 + e), e / (1.0 + e));
        assert!(
            close(&s[0..4], &[a, 0.0, b, 0.0], 2e-3, 1e-7),
            "{dt}: {:?}",
            &s[0..4]
        );
        assert!(s[4..12].iter().all(|v| v.is_nan()), "{dt}: {:?}", &s[4..12]);
        if dt != DType::F16 {
            assert!(
                close(&s[12..16], &[0.0, 0.0, 1.0, 0.0], 0.0, 0.0),
                "{dt}: {:?}",
                &s[12..16]
            );
        }
        let l = x.log_softmax(1)?.to_vec_f64()?;
        assert_eq!(
            &l[0..4].iter().map(|v| v.is_infinite()).collect::<Vec<_>>(),
            &[false, true, false, true]
        );
        assert!(close(&[l[0], l[2]], &[a.ln(), b.ln()], 2e-3, 1e-6));
        assert!(l[4..12].iter().all(|v| v.is_nan()));
    }
    // Softmax of a 0-d tensor is 1; of an empty tensor, empty.
    assert_eq!(Tensor::scalar(3.0f32).softmax(0)?.item::<f32>()?, 1.0);
    assert_eq!(Tensor::scalar(3.0f32).log_softmax(-1)?.item::<f32>()?, 0.0);
    assert_eq!(
        Tensor::zeros(&[0, 4], DType::F32).softmax(1)?.shape(),
        &[0, 4]
    );
    assert_shape_err(Tensor::zeros(&[2, 4], DType::F32).softmax(2), "softmax dim");
    // Very negative log_softmax stays finite (no log of an underflowed exp).
    let x = Tensor::from_vec(vec![0.0f32, -200.0], &[2])?;
    assert_eq!(x.log_softmax(0)?.to_vec::<f32>()?, vec![0.0, -200.0]);
    Ok(())
}

#[test]
fn large_softmax_runs_in_parallel_and_matches() -> R {
    // W5-like: rows of 1024 along the last dim, and a middle-dim softmax with wide inner lanes.
    for (shape, dim) in [
        (vec![256usize, 1024], 1usize),
        (vec![16, 64, 300], 1),
        (vec![1 << 17, 3], 0),
    ] {
        let x = Tensor::randn_seeded(&shape, DType::F32, 11)?.mul_scalar(3.0)?;
        let v = x.to_vec_f64()?;
        for log in [false, true] {
            let want = ref_softmax_dim(&v, &shape, dim, log);
            let y = if log {
                x.log_softmax(dim as i64)?
            } else {
                x.softmax(dim as i64)?
            };
            assert!(
                close(&y.to_vec_f64()?, &want, 2e-5, 1e-6),
                "{shape:?} dim {dim} log={log}"
            );
        }
    }
    Ok(())
}

// ---- gradients ----------------------------------------------------------------------------------

/// Gradchecks `f` with every input requiring grad (fresh leaves, so inputs can be reused).
fn check(f: impl Fn(&[Tensor]) -> R<Tensor>, inputs: &[&Tensor]) -> R {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true))
        .collect::<R<_>>()?;
    gradcheck(f, &inputs, GradcheckOptions::default())
}

/// Gradchecks the gradient of the scalar function `f` (so checks its second derivative).
fn check_second_order(f: impl Fn(&Tensor) -> R<Tensor>, x: &Tensor) -> R {
    use tensorplay_runtime::autograd::{enable_grad, grad};
    let first = |xs: &[Tensor]| -> R<Tensor> {
        if xs[0].requires_grad() {
            Ok(grad(&[f(&xs[0])?], &[xs[0].clone()], &[None], true)?[0]
                .clone()
                .unwrap())
        } else {
            // Numerical evaluations run without grad on fresh inputs.
            let _g = enable_grad();
            let x = xs[0].detach().requires_grad_(true)?;
            Ok(grad(&[f(&x)?], &[x], &[None], false)?[0].clone().unwrap())
        }
    };
    check(first, &[x])
}

#[test]
fn gradcheck_sum_mean_and_extrema() -> R {
    let x = randn(&[3, 4, 2], 12);
    check(|xs| xs[0].sum(&[0, 2], false), &[&x])?;
    check(|xs| xs[0].mean(&[-1], true), &[&x])?;
    check(|xs| xs[0].max_all(), &[&x])?;
    check(|xs| xs[0].min_all(), &[&x])?;
    for d in 0..3 {
        for keepdim in [false, true] {
            check(|xs| Ok(xs[0].max_dim(d, keepdim)?.0), &[&x])?;
            check(|xs| Ok(xs[0].min_dim(d, keepdim)?.0), &[&x])?;
        }
    }
    check(|xs| xs[0].amax(&[0, 2], false), &[&x])?;
    check(|xs| xs[0].amin(&[1], true), &[&x])?;
    check(|xs| xs[0].t()?.amax(&[0], false), &[&randn(&[4, 5], 13)])?;
    Ok(())
}

#[test]
fn extremum_gradients_with_ties() -> R {
    // Two-way ties: the central difference sees half the slope, which is the even split.
    let x = Tensor::from_vec(vec![1.0f64, 3.0, 3.0, 0.0, 2.0, -1.0, 2.0, 2.5], &[2, 4])?;
    check(|xs| xs[0].amax(&[1], false), &[&x])?;
    check(|xs| xs[0].max_all(), &[&x])?;
    let y = Tensor::from_vec(vec![-2.0f64, 1.0, -2.0, 4.0], &[4])?;
    check(|xs| xs[0].amin(&[0], true), &[&y])?;
    check(|xs| xs[0].min_all(), &[&y])?;
    // Three-way tie: a third each (checked directly), while max_dim gives all to the first index.
    let z = Tensor::from_vec(vec![5.0f64, 1.0, 5.0, 5.0], &[4])?.requires_grad_(true)?;
    z.amax(&[0], false)?.backward()?;
    let g = z.grad().unwrap().to_vec::<f64>()?;
    assert!(
        close(&g, &[1.0 / 3.0, 0.0, 1.0 / 3.0, 1.0 / 3.0], 1e-15, 0.0),
        "{g:?}"
    );
    z.zero_grad();
    z.max_dim(0, false)?.0.backward()?;
    assert_eq!(z.grad().unwrap().to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 0.0]);
    // NaN: the gradient goes to the NaN element.
    let w = Tensor::from_vec(vec![1.0f64, f64::NAN, 2.0], &[3])?.requires_grad_(true)?;
    w.max_all()?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![0.0, 1.0, 0.0]);
    Ok(())
}

#[test]
fn gradcheck_prod_with_and_without_zeros() -> R {
    let x = Tensor::rand_seeded(&[3, 4], DType::F64, 14)?.add_scalar(0.5)?;
    check(|xs| xs[0].prod(&[1], false), &[&x])?;
    check(|xs| xs[0].prod(&[0], true), &[&x])?;
    check(|xs| xs[0].prod_all(), &[&x])?;
    // One zero in a row, two zeros in another, none in the last.
    let z = Tensor::from_vec(
        vec![
            0.5f64, 0.0, 2.0, 1.5, 0.0, 3.0, 0.0, 0.7, 1.1, 0.9, 1.3, 0.8,
        ],
        &[3, 4],
    )?;
    check(|xs| xs[0].prod(&[1], false), &[&z])?;
    check(|xs| xs[0].t()?.prod(&[0], true), &[&z])?;
    let one_zero = Tensor::from_vec(vec![2.0f64, 0.0, 3.0], &[3])?.requires_grad_(true)?;
    one_zero.prod_all()?.backward()?;
    assert_eq!(
        one_zero.grad().unwrap().to_vec::<f64>()?,
        vec![0.0, 6.0, 0.0]
    );
    Ok(())
}

#[test]
fn gradcheck_var_and_std() -> R {
    let x = randn(&[3, 5], 15);
    check(|xs| xs[0].var(&[1], false), &[&x])?;
    check(|xs| xs[0].var_correction(&[0], 0.0, true), &[&x])?;
    check(|xs| xs[0].var(&[], false), &[&x])?;
    check(|xs| xs[0].std(&[1], true), &[&x])?;
    check(|xs| xs[0].t()?.std_correction(&[], 2.0, false), &[&x])?;
    // std of a constant lane has gradient 0 (not NaN).
    let c = Tensor::full(&[3], 2.0, DType::F64).requires_grad_(true)?;
    c.std(&[], false)?.backward()?;
    assert_eq!(c.grad().unwrap().to_vec::<f64>()?, vec![0.0; 3]);
    Ok(())
}

#[test]
fn gradcheck_softmax_and_log_softmax() -> R {
    let x = randn(&[3, 4, 2], 16);
    for dim in [0i64, 1, -1] {
        check(|xs| xs[0].softmax(dim), &[&x])?;
        check(|xs| xs[0].log_softmax(dim), &[&x])?;
    }
    check(|xs| xs[0].permute(&[2, 0, 1])?.softmax(1), &[&x])?;
    // Second order: differentiate the first derivative (recorded with create_graph).
    let w = randn(&[2, 3], 18);
    for f in [
        (|x: &Tensor| x.softmax(1)) as fn(&Tensor) -> R<Tensor>,
        |x: &Tensor| x.log_softmax(0),
        |x: &Tensor| x.std(&[1], true),
    ] {
        check_second_order(|x| f(x)?.mul(&w)?.sum_all(), &randn(&[2, 3], 19))?;
    }
    Ok(())
}

#[test]
fn meta_rules_run_on_fake_tensors() -> R {
    use tensorplay_runtime::Device;
    let x = Tensor::empty_fake(&[3, 0, 5], DType::F32, Device::Cpu);
    let (v, i) = x.max_dim(2, true)?;
    assert!(v.is_fake() && v.shape() == [3, 0, 1] && i.dtype() == DType::I64);
    assert_eq!(x.argmax(Some(0), false)?.shape(), &[0, 5]);
    assert_shape_err(x.amax(&[1], false), "fake amax over an empty dim");
    assert_shape_err(x.max_all(), "fake max of an empty tensor");
    let y = Tensor::empty_fake(&[4, 6], DType::BF16, Device::Cpu);
    assert_eq!(y.var(&[0], true)?.shape(), &[1, 6]);
    assert_eq!(y.prod(&[], false)?.shape(), &[] as &[usize]);
    assert_eq!(y.softmax(-1)?.dtype(), DType::BF16);
    assert_eq!(
        y.to_dtype(DType::I32)?.prod(&[1], false)?.dtype(),
        DType::I64
    );
    Ok(())
}
