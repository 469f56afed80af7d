//! Issue 12, item 1 (the rest): `scatter_reduce`, `nonzero`/`argwhere`/`masked_select`, the
//! global-generator `randint`/`bernoulli`/`bernoulli_p`/`nn::dropout_global`, and the
//! `Tensor::index`/`index_put` API: values against hand-computed PyTorch results, NaN/inf/±0,
//! empty, 0-d, non-contiguous and broadcast inputs, errors, gradients (finite differences) and
//! the fake-tensor behaviour.

use tensorplay_runtime::{DType, Device, Idx, Result, Tensor, manual_seed, nn, vmap};

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
    // "max"/"min" are PyTorch's aliases of amax/amin; another string is an error listing the five.
    let alias = x.scatter_reduce(0, &i, &f64s(&[5.0, 0.0], &[2]), "max", true)?;
    assert_eq!(alias.to_vec::<f64>()?, vec![5.0, 2.0]);
    let m = err(x.scatter_reduce(0, &i, &x, "maximum", true));
    assert!(
        m.contains("scatter_reduce")
            && m.contains("reduce")
            && m.contains("amax")
            && m.contains("\"maximum\""),
        "{m}"
    );
    let m = err(x.scatter_reduce(0, &i64s(&[2], &[1]), &x, "sum", true));
    assert!(m.contains("scatter_reduce") && m.contains("index 2"), "{m}");
    // int32 indices work (as PyTorch 2.15); a float index is an error naming both dtypes.
    let y = x.scatter_reduce(0, &i.to_dtype(DType::I32)?, &x, "sum", true)?;
    assert_eq!(y.to_vec::<f64>()?, vec![2.0, 2.0]);
    let m = err(x.scatter_reduce(0, &i.to_dtype(DType::F32)?, &x, "sum", true));
    assert!(m.contains("int64 or int32"), "{m}");
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
    for r in ["sum", "mean", "amax", "amin", "prod"] {
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
    // prod with zeros: one zero at a position (its gradient is the product of the others) and
    // two (every gradient there is 0), in self and in src, with and without self.
    let x = f64s(&[0.0, 1.5, 0.0, 0.0], &[4]);
    let s = f64s(&[0.7, 0.0, 0.0, 1.3, -0.6], &[5]);
    let i = i64s(&[0, 1, 2, 2, 3], &[5]);
    for inc in [true, false] {
        let i = i.clone();
        check_grad(
            move |t| {
                t[0].scatter_reduce(0, &i, &t[1], "prod", inc)?
                    .mul_scalar(1.7)?
                    .sum_all()
            },
            &[x.clone(), s.clone()],
        );
    }
    let xg = x.clone().requires_grad_(true)?;
    let sg = s.clone().requires_grad_(true)?;
    xg.scatter_reduce(0, &i, &sg, "prod", true)?
        .sum_all()?
        .backward()?;
    // Position 0: 0 * 0.7 (self's gradient 0.7, src's 0); 1: 1.5 * 0 (0 and 1.5); 2: 0 * 0 *
    // 1.3 (two zeros: all 0); 3: 0 * -0.6 (-0.6 and 0).
    assert_eq!(
        xg.grad().unwrap().to_vec::<f64>()?,
        vec![0.7, 0.0, 0.0, -0.6]
    );
    assert_eq!(
        sg.grad().unwrap().to_vec::<f64>()?,
        vec![0.0, 1.5, 0.0, 0.0, 0.0]
    );
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

// ---- Tensor::index / index_put ------------------------------------------------------------------

fn ar(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n as i64).collect(), shape).unwrap()
}

fn sl(start: Option<i64>, end: Option<i64>, step: i64) -> Idx {
    Idx::Slice { start, end, step }
}

#[test]
fn index_basic_gives_views_with_python_semantics() -> Result<()> {
    let x = ar(&[2, 3, 4]);
    // x[1] / x[-1, 2] / x[:, 1:, ::3] / x[None, ..., -1]
    assert_eq!(x.index(&[Idx::Int(1)])?.shape(), &[3, 4]);
    assert_eq!(
        x.index(&[Idx::Int(-1), Idx::Int(2)])?.to_vec::<i64>()?,
        vec![20, 21, 22, 23]
    );
    let y = x.index(&[Idx::Full, sl(Some(1), None, 1), sl(None, None, 3)])?;
    assert_eq!(y.shape(), &[2, 2, 2]);
    assert_eq!(y.to_vec::<i64>()?, vec![4, 7, 8, 11, 16, 19, 20, 23]);
    let z = x.index(&[Idx::NewAxis, Idx::Ellipsis, Idx::Int(-1)])?;
    assert_eq!(z.shape(), &[1, 2, 3]);
    assert_eq!(z.to_vec::<i64>()?, vec![3, 7, 11, 15, 19, 23]);
    // Out-of-range slice bounds clamp (Python); negative bounds count from the end.
    assert_eq!(x.index(&[sl(Some(-5), Some(10), 1)])?.shape(), &[2, 3, 4]);
    assert_eq!(x.index(&[Idx::Full, Idx::range(2, 1)])?.shape(), &[2, 0, 4]);
    // Views share storage: writing through one is seen by x.
    let v = x.index(&[Idx::Int(0), Idx::Full, Idx::Int(0)])?;
    v.fill_(-1)?;
    assert_eq!(
        x.index(&[Idx::Int(0)])?.to_vec::<i64>()?[..5],
        [-1, 1, 2, 3, -1]
    );
    // A 0-d tensor: [] and [...] are itself; [None] adds a dim.
    let s = Tensor::scalar(5.0f64);
    assert_eq!(s.index(&[])?.shape(), &[] as &[usize]);
    assert_eq!(s.index(&[Idx::Ellipsis])?.item::<f64>()?, 5.0);
    assert_eq!(s.index(&[Idx::NewAxis])?.shape(), &[1]);
    // Non-contiguous input.
    let t = ar(&[3, 2]).t()?; // [[0, 2, 4], [1, 3, 5]]
    assert_eq!(
        t.index(&[Idx::Int(1), sl(None, None, 2)])?
            .to_vec::<i64>()?,
        vec![1, 5]
    );
    Ok(())
}

#[test]
fn index_errors_name_the_op_and_argument() -> Result<()> {
    let x = ar(&[2, 3]);
    let e = err(x.index(&[Idx::Int(0), Idx::Int(0), Idx::Int(0)]));
    assert!(
        e.contains("index") && e.contains("at most 2 indices") && e.contains("3 indices"),
        "{e}"
    );
    let e = err(x.index(&[Idx::Ellipsis, Idx::Ellipsis]));
    assert!(e.contains("Ellipsis"), "{e}");
    let e = err(x.index(&[Idx::Full, Idx::Int(3)]));
    assert!(e.contains("[-3, 3)") && e.contains('3'), "{e}");
    assert!(err(x.index(&[Idx::Int(-3)])).contains("[-2, 2)"));
    let e = err(x.index(&[sl(None, None, 0)]));
    assert!(e.contains("positive step") && e.contains("step 0"), "{e}");
    assert!(err(x.index(&[sl(None, None, -1)])).contains("step -1"));
    let e = err(x.index(&[Idx::Tensor(i64s(&[0, 2], &[2]))]));
    assert!(e.contains("index 2") && e.contains("size 2"), "{e}");
    let e = err(x.index(&[Idx::Tensor(f64s(&[0.0], &[1]))]));
    assert!(e.contains("indices") && e.contains("f64"), "{e}");
    let e = err(x.index(&[
        Idx::Tensor(i64s(&[0, 1], &[2])),
        Idx::Tensor(i64s(&[0, 1, 2], &[3])),
    ]));
    assert!(e.contains("broadcast"), "{e}");
    let fake_mask = Tensor::empty_fake(&[2], DType::Bool, Device::Cpu);
    assert!(err(x.index(&[Idx::Tensor(fake_mask)])).contains("depends on the data"));
    Ok(())
}

#[test]
fn index_advanced_matches_numpy_placement() -> Result<()> {
    let x = ar(&[2, 3, 4]);
    let i = i64s(&[1, 0], &[2]);
    let j = i64s(&[2, -1], &[2]);
    // x[i, j] -> [2, 4]: rows x[1, 2], x[0, 2].
    let y = x.index(&[Idx::Tensor(i.clone()), Idx::Tensor(j.clone())])?;
    assert_eq!(y.shape(), &[2, 4]);
    assert_eq!(y.to_vec::<i64>()?, vec![20, 21, 22, 23, 8, 9, 10, 11]);
    // Adjacent in the middle: x[:, j, i] -> [2, 2] in place of dims 1, 2.
    let y = x.index(&[Idx::Full, Idx::Tensor(j.clone()), Idx::Tensor(i.clone())])?;
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_vec::<i64>()?, vec![9, 8, 21, 20]);
    // x[:, :, [[0, 1], [2, 3]]] -> [2, 3, 2, 2] (a 2-d index keeps its shape in place).
    let k = i64s(&[0, 1, 2, 3], &[2, 2]);
    let y = x.index(&[Idx::Full, Idx::Full, Idx::Tensor(k)])?;
    assert_eq!(y.shape(), &[2, 3, 2, 2]);
    assert_eq!(y.to_vec::<i64>()?[..8], [0, 1, 2, 3, 4, 5, 6, 7]);
    // Non-adjacent (separated by a slice): broadcast dims go first. x[i, :, j] -> [2, 3].
    let y = x.index(&[Idx::Tensor(i.clone()), Idx::Full, Idx::Tensor(j.clone())])?;
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_vec::<i64>()?, vec![14, 18, 22, 3, 7, 11]);
    // Broadcasting index tensors: [2, 1] with [3] -> [2, 3].
    let r = i64s(&[0, 1], &[2, 1]);
    let c = i64s(&[0, 1, 2], &[3]);
    let y = x.index(&[Idx::Tensor(r), Idx::Tensor(c), Idx::Int(0)])?;
    assert_eq!(y.shape(), &[2, 3]);
    assert_eq!(y.to_vec::<i64>()?, vec![0, 4, 8, 12, 16, 20]);
    // Bool masks: over one dim, over two dims, and 0-d True/False.
    let m = Tensor::from_vec(vec![true, false, true], &[3])?;
    let y = x.index(&[Idx::Full, Idx::Tensor(m)])?;
    assert_eq!(y.shape(), &[2, 2, 4]);
    let m2 = ar(&[2, 3]).remainder_scalar(2)?.eq_scalar(0)?;
    let y = x.index(&[Idx::Tensor(m2)])?;
    assert_eq!(y.shape(), &[3, 4]);
    assert_eq!(y.to_vec::<i64>()?[..5], [0, 1, 2, 3, 8]);
    assert_eq!(
        x.index(&[Idx::Tensor(Tensor::scalar(true))])?.shape(),
        &[1, 2, 3, 4]
    );
    assert_eq!(
        x.index(&[Idx::Tensor(Tensor::scalar(false))])?.shape(),
        &[0, 2, 3, 4]
    );
    // Empty and 0-d index tensors; int32 indices; NaN data moves as a value.
    assert_eq!(
        x.index(&[Idx::Tensor(i64s(&[], &[0]))])?.shape(),
        &[0, 3, 4]
    );
    assert_eq!(
        x.index(&[Idx::Tensor(Tensor::scalar(1i64))])?.shape(),
        &[3, 4]
    );
    let i32s = Tensor::from_vec(vec![2i32, 0], &[2])?;
    assert_eq!(
        ar(&[3]).index(&[Idx::Tensor(i32s)])?.to_vec::<i64>()?,
        vec![2, 0]
    );
    let nan = f64s(&[f64::NAN, -0.0], &[2]).index(&[Idx::Tensor(i64s(&[1, 0], &[2]))])?;
    let nan = nan.to_vec::<f64>()?;
    assert!(nan[0] == 0.0 && nan[0].is_sign_negative() && nan[1].is_nan());
    // Fake tensors shape it without data (int index tensors only).
    let f = Tensor::empty_fake(&[5, 6], DType::F32, Device::Cpu);
    let fi = Tensor::empty_fake(&[7], DType::I64, Device::Cpu);
    let y = f.index(&[Idx::Full, Idx::Tensor(fi)])?;
    assert!(y.is_fake() && y.shape() == [5, 7]);
    Ok(())
}

#[test]
fn index_and_index_put_gradients() -> Result<()> {
    let x = f64s(&[0.3, -1.2, 2.5, 0.9, 1.1, -0.4], &[2, 3]);
    let i = i64s(&[1, 1, 0], &[3]);
    let j = i64s(&[0, 2, 2], &[3]);
    let (i2, j2) = (i.clone(), j.clone());
    check_grad(
        move |t| {
            t[0].index(&[Idx::Tensor(i2.clone()), Idx::Tensor(j2.clone())])?
                .pow_scalar(2.0)?
                .sum_all()
        },
        std::slice::from_ref(&x),
    );
    check_grad(
        |t| {
            t[0].index(&[Idx::Full, sl(Some(1), None, 1)])?
                .exp()?
                .sum_all()
        },
        std::slice::from_ref(&x),
    );
    let v = f64s(&[1.5, -2.0, 0.7], &[3]);
    for acc in [false, true] {
        let (i2, j2) = (i.clone(), j.clone());
        check_grad(
            move |t| {
                t[0].index_put(
                    &[Idx::Tensor(i2.clone()), Idx::Tensor(j2.clone())],
                    &t[1],
                    acc,
                )?
                .pow_scalar(2.0)?
                .sum_all()
            },
            &[x.clone(), v.clone()],
        );
    }
    // A broadcast value gets the summed gradient; overwritten positions of self get none.
    let xg = x.clone().requires_grad_(true)?;
    let s = Tensor::scalar(2.0f64).requires_grad_(true)?;
    xg.index_put(&[Idx::Int(0)], &s, false)?
        .sum_all()?
        .backward()?;
    assert_eq!(s.grad().unwrap().item::<f64>()?, 3.0);
    assert_eq!(
        xg.grad().unwrap().to_vec::<f64>()?,
        vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    );
    Ok(())
}

#[test]
fn index_put_values_accumulate_and_in_place() -> Result<()> {
    let x = f64s(&[0.0; 6], &[2, 3]);
    // x[1:, ::2] = [7, 8]
    let y = x.index_put(
        &[sl(Some(1), None, 1), sl(None, None, 2)],
        &f64s(&[7.0, 8.0], &[2]),
        false,
    )?;
    assert_eq!(y.to_vec::<f64>()?, vec![0.0, 0.0, 0.0, 7.0, 0.0, 8.0]);
    // Repeated positions accumulate; inf/NaN values go in as values.
    let i = i64s(&[0, 0, -1], &[3]);
    let v = f64s(&[1.0, f64::INFINITY, f64::NAN], &[3]);
    let y = x
        .index_put(&[Idx::Int(0), Idx::Tensor(i)], &v, true)?
        .to_vec::<f64>()?;
    assert!(y[0] == f64::INFINITY && y[1] == 0.0 && y[2].is_nan());
    // A mask with a broadcast scalar; the original is untouched (out of place).
    let m = Tensor::from_vec(vec![true, false, true, false, false, true], &[2, 3])?;
    let y = x.index_put(&[Idx::Tensor(m.clone())], &Tensor::scalar(-0.0f64), false)?;
    assert!(y.to_vec::<f64>()?[0].is_sign_negative());
    assert!(!x.to_vec::<f64>()?[0].is_sign_negative());
    // In place, through a non-contiguous view.
    let z = ar(&[3, 2]);
    let zt = z.t()?;
    zt.index_put_(&[Idx::Int(1)], &i64s(&[10, 11, 12], &[3]), false)?;
    assert_eq!(z.to_vec::<i64>()?, vec![0, 10, 2, 11, 4, 12]);
    // Errors: dtype, shape, and the index errors.
    assert!(err(x.index_put(&[Idx::Int(0)], &i64s(&[1], &[1]), false)).contains("values"));
    let e = err(x.index_put(&[Idx::Int(0)], &f64s(&[1.0, 2.0], &[2]), false));
    assert!(
        e.contains("index_put") && e.contains("broadcasts to [3]"),
        "{e}"
    );
    assert!(err(x.index_put(&[Idx::Int(5)], &Tensor::scalar(1.0f64), false)).contains("index_put"));
    // An empty selection writes nothing.
    let y = x.index_put(
        &[Idx::Tensor(i64s(&[], &[0]))],
        &Tensor::scalar(1.0f64),
        false,
    )?;
    assert_eq!(y.to_vec::<f64>()?, vec![0.0; 6]);
    Ok(())
}
