//! Issue 12, item 1 (the rest): `scatter_reduce`, `nonzero`/`argwhere`/`masked_select`, the
//! global-generator `randint`/`bernoulli`/`bernoulli_p`/`nn::dropout_global`, and the
//! `Tensor::index`/`index_put` API: values against hand-computed PyTorch results, NaN/inf/±0,
//! empty, 0-d, non-contiguous and broadcast inputs, errors, gradients (finite differences) and
//! the fake-tensor behaviour.

use tensorplay_runtime::{DType, Device, Result, Tensor, manual_seed, nn, vmap};

#[path = "common/grad.rs"]
mod grad;
use grad::check_grad;

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

// ---- scatter_reduce -----------------------------------------------------------------------------

#[test]
fn scatter_reduce_every_reduce_with_and_without_self() -> Result<()> {
    let x = f64s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let i = i64s(&[0, 0, 2, 0, 2], &[5]);
    let s = f64s(&[5.0, -1.0, 2.0, 3.0, 0.5], &[5]);
    let run = |r: &str, inc: bool| {
        x.scatter_reduce(0, &i, &s, r, inc)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    assert_eq!(run("sum", true), vec![8.0, 2.0, 5.5, 4.0]);
    assert_eq!(run("sum", false), vec![7.0, 2.0, 2.5, 4.0]);
    assert_eq!(run("prod", true), vec![-15.0, 2.0, 3.0, 4.0]);
    assert_eq!(run("prod", false), vec![-15.0, 2.0, 1.0, 4.0]);
    assert_eq!(run("mean", true), vec![2.0, 2.0, 5.5 / 3.0, 4.0]);
    assert_eq!(run("mean", false), vec![7.0 / 3.0, 2.0, 1.25, 4.0]);
    assert_eq!(run("amax", true), vec![5.0, 2.0, 3.0, 4.0]);
    assert_eq!(run("amax", false), vec![5.0, 2.0, 2.0, 4.0]);
    assert_eq!(run("amin", true), vec![-1.0, 2.0, 0.5, 4.0]);
    assert_eq!(run("amin", false), vec![-1.0, 2.0, 0.5, 4.0]);
    Ok(())
}

#[test]
fn scatter_reduce_2d_noncontiguous_integers_and_specials() -> Result<()> {
    // dim 1 of a [2, 3] tensor, with a transposed (non-contiguous) src.
    let x = f64s(&[0.0; 6], &[2, 3]);
    let i = i64s(&[2, 2, 0, 1], &[2, 2]);
    let s = f64s(&[1.0, 3.0, 2.0, 4.0], &[2, 2]).t()?; // [[1, 2], [3, 4]]
    assert_eq!(
        x.scatter_reduce(1, &i, &s, "sum", false)?.to_vec::<f64>()?,
        vec![0.0, 0.0, 3.0, 3.0, 4.0, 0.0]
    );
    assert_eq!(
        x.scatter_reduce(-1, &i, &s, "amax", true)?
            .to_vec::<f64>()?,
        vec![0.0, 0.0, 2.0, 3.0, 4.0, 0.0]
    );
    // Integer mean floors (PyTorch's floor division); i32 keeps its dtype.
    let xi = i64s(&[0, 10], &[2]);
    let ii = i64s(&[0, 0, 1], &[3]);
    let si = i64s(&[-3, -4, 1], &[3]);
    assert_eq!(
        xi.scatter_reduce(0, &ii, &si, "mean", true)?
            .to_vec::<i64>()?,
        vec![-3, 5]
    );
    let x32 = xi.to_dtype(DType::I32)?;
    let y32 = x32.scatter_reduce(0, &ii, &si.to_dtype(DType::I32)?, "amin", false)?;
    assert_eq!(y32.dtype(), DType::I32);
    assert_eq!(y32.to_vec::<i32>()?, vec![-4, 1]);
    // NaN wins amax/amin and propagates through sum/mean; -inf/inf behave as values.
    let xf = f64s(&[0.0, 0.0, f64::NEG_INFINITY], &[3]);
    let i3 = i64s(&[0, 0, 1, 2], &[4]);
    let sf = f64s(&[f64::NAN, 1.0, f64::INFINITY, 2.0], &[4]);
    let amax = xf
        .scatter_reduce(0, &i3, &sf, "amax", true)?
        .to_vec::<f64>()?;
    assert!(amax[0].is_nan() && amax[1] == f64::INFINITY && amax[2] == 2.0);
    let amin = xf
        .scatter_reduce(0, &i3, &sf, "amin", true)?
        .to_vec::<f64>()?;
    assert!(amin[0].is_nan() && amin[1] == 0.0 && amin[2] == f64::NEG_INFINITY);
    let mean = xf
        .scatter_reduce(0, &i3, &sf, "mean", false)?
        .to_vec::<f64>()?;
    assert!(mean[0].is_nan() && mean[1] == f64::INFINITY && mean[2] == 2.0);
    // ±0: a tie keeps the value already there; prod carries the sign.
    let z = f64s(&[-0.0], &[1]);
    let y = z.scatter_reduce(0, &i64s(&[0], &[1]), &f64s(&[0.0], &[1]), "amax", true)?;
    assert!(y.to_vec::<f64>()?[0].is_sign_negative());
    let y = f64s(&[2.0], &[1]).scatter_reduce(0, &i64s(&[0], &[1]), &z, "prod", true)?;
    assert!(y.to_vec::<f64>()?[0].is_sign_negative());
    Ok(())
}

#[test]
fn scatter_reduce_empty_0d_and_errors() -> Result<()> {
    // An empty index leaves self unchanged; a 0-d self takes 0-d index and src.
    let x = f64s(&[1.0, 2.0], &[2]);
    let e = x.scatter_reduce(0, &i64s(&[], &[0]), &f64s(&[], &[0]), "prod", false)?;
    assert_eq!(e.to_vec::<f64>()?, vec![1.0, 2.0]);
    let s0 = Tensor::scalar(3.0f64);
    let y = s0.scatter_reduce(
        0,
        &Tensor::scalar(0i64),
        &Tensor::scalar(5.0f64),
        "sum",
        true,
    )?;
    assert_eq!((y.shape().len(), y.item::<f64>()?), (0, 8.0));
    let i = i64s(&[0], &[1]);
    let m = err(x.scatter_reduce(0, &i, &x, "max", true));
    assert!(
        m.contains("scatter_reduce")
            && m.contains("reduce")
            && m.contains("amax")
            && m.contains("\"max\""),
        "{m}"
    );
    let m = err(x.scatter_reduce(0, &i64s(&[2], &[1]), &x, "sum", true));
    assert!(m.contains("scatter_reduce") && m.contains("index 2"), "{m}");
    let m = err(x.scatter_reduce(0, &i.to_dtype(DType::I32)?, &x, "sum", true));
    assert!(m.contains("int64"), "{m}");
    let m = err(x.scatter_reduce(0, &i, &x.to_dtype(DType::F32)?, "sum", true));
    assert!(m.contains("src"), "{m}");
    let b = Tensor::from_vec(vec![true], &[1])?;
    assert!(err(b.scatter_reduce(0, &i, &b, "mean", true)).contains("mean"));
    // Bool: sum/amax are `or`, prod/amin `and`.
    let bf = Tensor::from_vec(vec![false], &[1])?;
    assert_eq!(
        bf.scatter_reduce(0, &i, &b, "amax", true)?
            .to_vec::<bool>()?,
        vec![true]
    );
    assert_eq!(
        bf.scatter_reduce(0, &i, &b, "prod", true)?
            .to_vec::<bool>()?,
        vec![false]
    );
    // Fake tensors get the shape and dtype.
    let f = Tensor::empty_fake(&[3, 4], DType::F32, Device::Cpu);
    let fi = Tensor::empty_fake(&[2, 4], DType::I64, Device::Cpu);
    let y = f.scatter_reduce(0, &fi, &f, "amin", false)?;
    assert!(y.is_fake() && y.shape() == [3, 4] && y.dtype() == DType::F32);
    assert!(f.scatter_reduce(0, &fi, &f, "nope", false).is_err());
    Ok(())
}

#[test]
fn scatter_reduce_gradients() -> Result<()> {
    // Repeated indices, and for amax/amin distinct values (ties are tested separately).
    let x = f64s(&[0.3, -1.2, 2.5, 0.9], &[4]);
    let s = f64s(&[1.7, -0.4, 0.1, 2.9, -2.2], &[5]);
    let i = i64s(&[0, 0, 2, 0, 3], &[5]);
    for r in ["sum", "mean", "amax", "amin"] {
        for inc in [true, false] {
            let i = i.clone();
            check_grad(
                move |t| {
                    t[0].scatter_reduce(0, &i, &t[1], r, inc)?
                        .mul(&t[0])?
                        .sum_all()
                },
                &[x.clone(), s.clone()],
            );
        }
    }
    // A tie in amax shares the gradient equally between self and src.
    let x = f64s(&[1.0, 0.0], &[2]).requires_grad_(true)?;
    let s = f64s(&[1.0, -3.0], &[2]).requires_grad_(true)?;
    x.scatter_reduce(0, &i64s(&[0, 0], &[2]), &s, "amax", true)?
        .sum_all()?
        .backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![0.5, 1.0]);
    assert_eq!(s.grad().unwrap().to_vec::<f64>()?, vec![0.5, 0.0]);
    // include_self = false: reached positions of self get no gradient.
    let x = f64s(&[1.0, 0.0], &[2]).requires_grad_(true)?;
    x.scatter_reduce(0, &i64s(&[0], &[1]), &f64s(&[4.0], &[1]), "mean", false)?
        .sum_all()?
        .backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![0.0, 1.0]);
    // prod has no derivative: the backward is an error naming the op and the reduce.
    let x = f64s(&[1.0, 2.0], &[2]).requires_grad_(true)?;
    let y = x.scatter_reduce(0, &i64s(&[0], &[1]), &f64s(&[4.0], &[1]), "prod", true)?;
    let e = y
        .sum_all()?
        .backward()
        .expect_err("prod backward")
        .to_string();
    assert!(e.contains("scatter_reduce") && e.contains("prod"), "{e}");
    Ok(())
}

#[test]
fn scatter_reduce_under_vmap() -> Result<()> {
    let x = f64s(&[0.0; 6], &[2, 3]);
    let s = f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let i = i64s(&[2, 2], &[2]);
    let f = vmap::vmap(
        move |r: &[Tensor]| Ok(vec![r[0].scatter_reduce(0, &i, &r[1], "amax", false)?]),
        vec![Some(0), Some(0)],
        vec![0],
    );
    let y = f(&[x, s])?.remove(0);
    assert_eq!(y.to_vec::<f64>()?, vec![0.0, 0.0, 2.0, 0.0, 0.0, 4.0]);
    Ok(())
}

// ---- nonzero / argwhere / masked_select ---------------------------------------------------------

#[test]
fn nonzero_positions_specials_empty_and_0d() -> Result<()> {
    let x = f64s(
        &[0.0, f64::NAN, -0.0, f64::NEG_INFINITY, 1e-300, 0.0],
        &[2, 3],
    );
    let nz = x.nonzero()?;
    assert_eq!((nz.shape(), nz.dtype()), (&[3usize, 2][..], DType::I64));
    assert_eq!(nz.to_vec::<i64>()?, vec![0, 1, 1, 0, 1, 1]);
    assert_eq!(x.argwhere()?.to_vec::<i64>()?, nz.to_vec::<i64>()?);
    // Non-contiguous: positions are of the logical (transposed) layout.
    assert_eq!(x.t()?.nonzero()?.to_vec::<i64>()?, vec![0, 1, 1, 0, 1, 1]);
    let b = Tensor::from_vec(vec![false, true, true], &[3])?;
    assert_eq!(b.nonzero()?.to_vec::<i64>()?, vec![1, 2]);
    assert_eq!(i64s(&[0, 0], &[2]).nonzero()?.shape(), &[0, 1]);
    assert_eq!(f64s(&[], &[0, 4]).nonzero()?.shape(), &[0, 2]);
    assert_eq!(Tensor::scalar(2.0f32).nonzero()?.shape(), &[1, 0]);
    assert_eq!(Tensor::scalar(0i64).nonzero()?.shape(), &[0, 0]);
    // Fake tensors: no size to give.
    let f = Tensor::empty_fake(&[3], DType::F32, Device::Cpu);
    let m = err(f.nonzero());
    assert!(
        m.contains("nonzero") && m.contains("depends on the data"),
        "{m}"
    );
    Ok(())
}

#[test]
fn masked_select_broadcasts_and_differentiates() -> Result<()> {
    let x = f64s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let m = Tensor::from_vec(vec![true, false, true, false, false, true], &[2, 3])?;
    assert_eq!(x.masked_select(&m)?.to_vec::<f64>()?, vec![1.0, 3.0, 6.0]);
    // mask broadcasts over rows; self broadcasts too ([3] against a [2, 3] mask).
    let row = Tensor::from_vec(vec![false, true, true], &[3])?;
    assert_eq!(
        x.masked_select(&row)?.to_vec::<f64>()?,
        vec![2.0, 3.0, 5.0, 6.0]
    );
    let v = f64s(&[7.0, 8.0, 9.0], &[3]);
    assert_eq!(v.masked_select(&m)?.to_vec::<f64>()?, vec![7.0, 9.0, 9.0]);
    // Non-contiguous self, NaN moves as a value, an all-false mask gives [0], 0-d works.
    assert_eq!(
        x.t()?.masked_select(&m.t()?)?.to_vec::<f64>()?,
        vec![1.0, 3.0, 6.0]
    );
    let n =
        f64s(&[f64::NAN, 1.0], &[2]).masked_select(&Tensor::from_vec(vec![true, false], &[2])?)?;
    assert!(n.to_vec::<f64>()?[0].is_nan());
    let none = x.masked_select(&Tensor::scalar(false))?;
    assert_eq!(none.shape(), &[0]);
    let one = Tensor::scalar(4.0f64).masked_select(&Tensor::scalar(true))?;
    assert_eq!(
        (one.shape(), one.to_vec::<f64>()?),
        (&[1usize][..], vec![4.0])
    );
    assert_eq!(f64s(&[], &[0, 3]).masked_select(&row)?.shape(), &[0]);
    // Errors: a non-bool mask, shapes that do not broadcast, fake tensors.
    assert!(err(x.masked_select(&x)).contains("mask"));
    assert!(
        err(x.masked_select(&Tensor::from_vec(vec![true, false], &[2])?)).contains("masked_select")
    );
    let f = Tensor::empty_fake(&[2, 3], DType::F64, Device::Cpu);
    let e = err(f.masked_select(&m));
    assert!(
        e.contains("masked_select") && e.contains("tp_compile"),
        "{e}"
    );
    // The gradient lands at the selected positions, summed over broadcast dims.
    let vg = v.clone().requires_grad_(true)?;
    vg.masked_select(&m)?
        .mul_scalar(2.0)?
        .sum_all()?
        .backward()?;
    assert_eq!(vg.grad().unwrap().to_vec::<f64>()?, vec![2.0, 0.0, 4.0]);
    let m2 = m.clone();
    check_grad(
        move |t| t[0].masked_select(&m2)?.pow_scalar(2.0)?.sum_all(),
        &[x],
    );
    Ok(())
}

// ---- global generator ---------------------------------------------------------------------------

#[test]
fn global_generator_draws_are_reproducible_after_manual_seed() -> Result<()> {
    // The only test in this binary that uses the global generator.
    type Draws = (Vec<i64>, Vec<f32>, Vec<f64>, Vec<f32>);
    let draw = || -> Result<Draws> {
        let r = Tensor::randint(-5, 5, &[200], DType::I64)?.to_vec::<i64>()?;
        let b = Tensor::bernoulli_p(&[200], 0.3, DType::F32)?.to_vec::<f32>()?;
        let p = f64s(&[0.0, 1.0, 0.5, 0.5], &[4])
            .bernoulli()?
            .to_vec::<f64>()?;
        let d =
            nn::dropout_global(&Tensor::ones(&[200], DType::F32), 0.25, true)?.to_vec::<f32>()?;
        Ok((r, b, p, d))
    };
    manual_seed(77);
    let a = draw()?;
    manual_seed(77);
    assert_eq!(draw()?, a);
    // A second draw differs (fresh streams); a different seed differs.
    assert_ne!(draw()?.0, a.0);
    manual_seed(78);
    assert_ne!(draw()?.0, a.0);
    assert!(a.0.iter().all(|&k| (-5..5).contains(&k)) && a.0.contains(&-5));
    let ones = a.1.iter().filter(|&&v| v == 1.0).count();
    assert!((30..100).contains(&ones), "{ones}");
    assert_eq!((a.2[0], a.2[1]), (0.0, 1.0));
    assert!(a.3.iter().all(|&v| v == 0.0 || v == 4.0 / 3.0));
    // Errors name the op; a bad call is checked before drawing.
    assert!(err(Tensor::randint(3, 3, &[1], DType::I64)).contains("randint"));
    assert!(err(Tensor::randint(0, 3, &[1], DType::Bool)).contains("randint"));
    assert!(err(Tensor::bernoulli_p(&[1], f64::NAN, DType::F32)).contains("bernoulli"));
    assert!(err(f64s(&[1.5], &[1]).bernoulli()).contains("bernoulli"));
    assert!(err(nn::dropout_global(&f64s(&[1.0], &[1]), 2.0, true)).contains("dropout"));
    assert_eq!(Tensor::randint(0, 2, &[0, 3], DType::I32)?.shape(), &[0, 3]);
    // Many threads drawing at once all get valid, distinct streams.
    let outs: Vec<Vec<i64>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                sc.spawn(|| {
                    Tensor::randint(0, 1 << 40, &[8], DType::I64)
                        .unwrap()
                        .to_vec::<i64>()
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for a in 0..4 {
        for b in a + 1..4 {
            assert_ne!(outs[a], outs[b]);
        }
    }
    Ok(())
}
