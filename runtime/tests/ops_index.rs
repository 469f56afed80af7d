//! Indexing, scan, shape and reduction ops a transformer needs: the primitives (`gather`,
//! `scatter`, `scatter_add`, `flip`, `cumsum`) and the composite methods over them
//! (`index_select`, `masked_fill`, `tril`/`triu`, `split`/`chunk`, `movedim`, `repeat`,
//! `unflatten`, `logsumexp`, `any`/`all`/`count_nonzero`, `sum`/`mean` with a dtype, `norm`):
//! values, NaN/inf/empty/0-d/non-contiguous inputs, errors, and gradients against finite
//! differences.

use tensorplay_runtime::{DType, Result, Tensor, vmap};

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

/// `[2, 3]` f64 test data: distinct values away from 0.
fn x23() -> Tensor {
    f64s(&[0.5, -1.25, 2.0, 3.5, -0.75, 1.5], &[2, 3])
}

// ---- gather / scatter / scatter_add -------------------------------------------------------------

#[test]
fn gather_picks_along_each_dim() -> Result<()> {
    let x = x23();
    let i1 = i64s(&[2, 0, 1, 1], &[2, 2]);
    assert_eq!(
        x.gather(1, &i1)?.to_vec::<f64>()?,
        vec![2.0, 0.5, -0.75, -0.75]
    );
    let i0 = i64s(&[1, 0, 1], &[1, 3]);
    assert_eq!(x.gather(0, &i0)?.to_vec::<f64>()?, vec![3.5, -1.25, 1.5]);
    // Negative dim, a non-contiguous self (the transpose) and a non-contiguous index.
    let xt = x.t()?; // [3, 2]
    let it = i64s(&[1, 0, 0, 1, 1, 0], &[2, 3]).t()?; // [3, 2]
    assert_eq!(
        xt.gather(-1, &it)?.to_vec::<f64>()?,
        vec![3.5, 3.5, -1.25, -0.75, 2.0, 2.0]
    );
    // NaN and inf move like any value; integer and bool dtypes keep their dtype.
    let special = f64s(&[f64::NAN, f64::INFINITY], &[2]);
    let g = special
        .gather(0, &i64s(&[1, 0, 0], &[3]))?
        .to_vec::<f64>()?;
    assert!(g[0] == f64::INFINITY && g[1].is_nan() && g[2].is_nan());
    let b = Tensor::from_vec(vec![true, false], &[2])?;
    assert_eq!(
        b.gather(0, &i64s(&[1, 1], &[2]))?.to_vec::<bool>()?,
        vec![false, false]
    );
    // Empty index: an empty result; 0-d self with a 0-d index.
    assert_eq!(x.gather(1, &i64s(&[], &[2, 0]))?.shape(), &[2, 0]);
    let s = Tensor::scalar(4.0f64);
    assert_eq!(s.gather(0, &Tensor::scalar(0i64))?.item::<f64>()?, 4.0);
    Ok(())
}

#[test]
fn gather_errors_name_the_argument() {
    let x = x23();
    let e = err(x.gather(1, &i64s(&[3], &[1, 1])));
    assert!(
        e.contains("gather") && e.contains("index 3") && e.contains("[0, 3)"),
        "{e}"
    );
    let e = err(x.gather(1, &i64s(&[-1], &[1, 1])));
    assert!(e.contains("index -1"), "{e}");
    // An int32 index works, as in PyTorch 2.15; a float one is an error naming its dtype.
    let i32_index = Tensor::from_vec(vec![2i32], &[1, 1]).unwrap();
    assert_eq!(
        x.gather(1, &i32_index).unwrap().to_vec::<f64>().unwrap(),
        vec![2.0]
    );
    let e = err(x.gather(1, &f64s(&[0.0], &[1, 1])));
    assert!(e.contains("int64 or int32") && e.contains("f64"), "{e}");
    let e = err(x.gather(1, &i64s(&[0], &[1])));
    assert!(e.contains("same number of dims"), "{e}");
    let e = err(x.gather(1, &i64s(&[0; 6], &[3, 2])));
    assert!(e.contains("larger than self"), "{e}");
    let e = err(x.gather(2, &i64s(&[0], &[1, 1])));
    assert!(e.contains("dim 2 is out of range"), "{e}");
}

#[test]
fn scatter_and_scatter_add_write_at_the_index() -> Result<()> {
    let base = Tensor::zeros(&[2, 3], DType::F64);
    let idx = i64s(&[2, 0, 1, 1], &[2, 2]);
    let src = f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    // Repeated index 1 in row 1: scatter keeps the last write, scatter_add sums.
    assert_eq!(
        base.scatter(1, &idx, &src)?.to_vec::<f64>()?,
        vec![2.0, 0.0, 1.0, 0.0, 4.0, 0.0]
    );
    assert_eq!(
        base.scatter_add(1, &idx, &src)?.to_vec::<f64>()?,
        vec![2.0, 0.0, 1.0, 0.0, 7.0, 0.0]
    );
    // `self` is not modified; integer dtypes add exactly.
    assert_eq!(base.to_vec::<f64>()?, vec![0.0; 6]);
    let ints = Tensor::full(&[3], i64::MAX - 1, DType::I64);
    let y = ints.scatter_add(0, &i64s(&[0], &[1]), &i64s(&[1], &[1]))?;
    assert_eq!(
        y.to_vec::<i64>()?,
        vec![i64::MAX, i64::MAX - 1, i64::MAX - 1]
    );
    // src may be larger than index (only index's extent is read).
    let big = f64s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let y = Tensor::zeros(&[2, 3], DType::F64).scatter(0, &i64s(&[1, 0], &[1, 2]), &big)?;
    assert_eq!(y.to_vec::<f64>()?, vec![0.0, 2.0, 0.0, 1.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn scatter_errors_are_checked_before_writing() {
    let base = Tensor::zeros(&[2, 3], DType::F64);
    let idx = i64s(&[0, 1], &[1, 2]);
    let e = err(base.scatter_add(1, &idx, &Tensor::ones(&[1, 2], DType::F32)));
    assert!(
        e.contains("scatter_add") && e.contains("src") && e.contains("f32"),
        "{e}"
    );
    let e = err(base.scatter(
        1,
        &i64s(&[0, 5], &[1, 2]),
        &Tensor::ones(&[1, 2], DType::F64),
    ));
    assert!(e.contains("scatter") && e.contains("index 5"), "{e}");
    let e = err(base.scatter(1, &idx, &Tensor::ones(&[1, 1], DType::F64)));
    assert!(e.contains("larger than src"), "{e}");
}

#[test]
fn gather_and_scatter_gradients() {
    let idx = i64s(&[2, 0, 1, 1], &[2, 2]);
    check_grad(|x| x[0].gather(1, &idx), &[x23()]);
    check_grad(
        |x| x[0].scatter_add(1, &idx, &x[1]),
        &[x23(), f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2])],
    );
    let distinct = i64s(&[2, 0, 1, 0], &[2, 2]);
    check_grad(
        |x| x[0].scatter(1, &distinct, &x[1]),
        &[x23(), f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2])],
    );
}

// ---- flip / cumsum ------------------------------------------------------------------------------

#[test]
fn flip_reverses_dims() -> Result<()> {
    let x = x23();
    assert_eq!(
        x.flip(&[0])?.to_vec::<f64>()?,
        vec![3.5, -0.75, 1.5, 0.5, -1.25, 2.0]
    );
    assert_eq!(
        x.t()?.flip(&[1])?.to_vec::<f64>()?,
        vec![3.5, 0.5, -0.75, -1.25, 1.5, 2.0]
    );
    assert_eq!(x.flip(&[])?.to_vec::<f64>()?, x.to_vec::<f64>()?);
    assert_eq!(Tensor::scalar(2i64).flip(&[0])?.item::<i64>()?, 2);
    assert_eq!(
        Tensor::zeros(&[0, 2], DType::F32).flip(&[0])?.shape(),
        &[0, 2]
    );
    let e = err(x.flip(&[1, -1]));
    assert!(e.contains("flip") && e.contains("twice"), "{e}");
    check_grad(|x| x[0].flip(&[0, 1]), &[x23()]);
    Ok(())
}

#[test]
fn cumsum_values_dtypes_and_specials() -> Result<()> {
    let x = x23();
    assert_eq!(
        x.cumsum(1, None)?.to_vec::<f64>()?,
        vec![0.5, -0.75, 1.25, 3.5, 2.75, 4.25]
    );
    assert_eq!(
        x.cumsum(0, None)?.to_vec::<f64>()?,
        vec![0.5, -1.25, 2.0, 4.0, -2.0, 3.5]
    );
    // Non-contiguous input; bool and int give i64; `dtype=` converts first.
    assert_eq!(
        x.t()?.cumsum(0, None)?.to_vec::<f64>()?,
        vec![0.5, 3.5, -0.75, 2.75, 1.25, 4.25]
    );
    let b = Tensor::from_vec(vec![true, true, false, true], &[4])?;
    let c = b.cumsum(0, None)?;
    assert_eq!(
        (c.dtype(), c.to_vec::<i64>()?),
        (DType::I64, vec![1, 2, 2, 3])
    );
    let c = x.cumsum(1, Some(DType::F32))?;
    assert_eq!(c.dtype(), DType::F32);
    let big = Tensor::from_vec(vec![i32::MAX, i32::MAX], &[2])?;
    assert_eq!(
        big.cumsum(0, None)?.to_vec::<i64>()?,
        vec![2147483647, 4294967294]
    );
    // f32 accumulates in f64 and rounds each prefix once (an f32 running sum would stay 1e8).
    let f = Tensor::from_vec(vec![1.0e8f32, 3.0, 3.0, 3.0], &[4])?;
    assert_eq!(f.cumsum(0, None)?.to_vec::<f32>()?[3], 100_000_008.0);
    // NaN and inf propagate forward only.
    let s = f64s(&[1.0, f64::NAN, 2.0], &[3])
        .cumsum(0, None)?
        .to_vec::<f64>()?;
    assert!(s[0] == 1.0 && s[1].is_nan() && s[2].is_nan());
    let s = f64s(&[f64::INFINITY, f64::NEG_INFINITY], &[2])
        .cumsum(0, None)?
        .to_vec::<f64>()?;
    assert!(s[0] == f64::INFINITY && s[1].is_nan());
    assert_eq!(
        Tensor::zeros(&[0], DType::F32).cumsum(0, None)?.shape(),
        &[0]
    );
    assert_eq!(Tensor::scalar(3.0f64).cumsum(0, None)?.item::<f64>()?, 3.0);
    let e = err(x.cumsum(2, None));
    assert!(e.contains("cumsum") && e.contains("out of range"), "{e}");
    check_grad(|x| x[0].cumsum(0, None), &[x23()]);
    check_grad(|x| x[0].cumsum(-1, None), &[x23()]);
    Ok(())
}

#[test]
fn cumsum_and_gather_under_vmap() -> Result<()> {
    let x = Tensor::randn_seeded(&[3, 4], DType::F64, 3)?;
    let f = vmap::vmap(
        |r: &[Tensor]| Ok(vec![r[0].cumsum(0, None)?]),
        vec![Some(0)],
        vec![0],
    );
    let y = f(std::slice::from_ref(&x))?.remove(0);
    assert_eq!(y.to_vec::<f64>()?, x.cumsum(1, None)?.to_vec::<f64>()?);
    let idx = i64s(&[3, 0], &[2]);
    let g = vmap::vmap(
        move |r: &[Tensor]| Ok(vec![r[0].index_select(0, &idx)?]),
        vec![Some(0)],
        vec![0],
    );
    let y = g(std::slice::from_ref(&x))?.remove(0);
    assert_eq!(
        y.to_vec::<f64>()?,
        x.index_select(1, &i64s(&[3, 0], &[2]))?.to_vec::<f64>()?
    );
    Ok(())
}

// ---- composite indexing --------------------------------------------------------------------------

#[test]
fn index_select_picks_slices() -> Result<()> {
    let x = x23();
    let i = i64s(&[2, 2, 0], &[3]);
    assert_eq!(
        x.index_select(1, &i)?.to_vec::<f64>()?,
        vec![2.0, 2.0, 0.5, 1.5, 1.5, 3.5]
    );
    let i32s = Tensor::from_vec(vec![1i32], &[1])?;
    assert_eq!(
        x.index_select(0, &i32s)?.to_vec::<f64>()?,
        vec![3.5, -0.75, 1.5]
    );
    assert_eq!(
        x.t()?.index_select(0, &i64s(&[1], &[1]))?.to_vec::<f64>()?,
        vec![-1.25, -0.75]
    );
    assert_eq!(x.index_select(0, &i64s(&[], &[0]))?.shape(), &[0, 3]);
    assert_eq!(
        Tensor::scalar(5.0f64)
            .index_select(0, &i64s(&[0], &[1]))?
            .to_vec::<f64>()?,
        vec![5.0]
    );
    let e = err(x.index_select(0, &i64s(&[0, 1], &[1, 2])));
    assert!(e.contains("index_select") && e.contains("1-D"), "{e}");
    let e = err(x.index_select(0, &f64s(&[0.0], &[1])));
    assert!(e.contains("index_select") && e.contains("int64"), "{e}");
    let e = err(x.index_select(0, &i64s(&[2], &[1])));
    assert!(e.contains("index 2") && e.contains("[0, 2)"), "{e}");
    // Duplicate indices accumulate in the gradient.
    check_grad(|x| x[0].index_select(1, &i), &[x23()]);
    Ok(())
}

#[test]
fn masked_fill_keeps_dtype_and_broadcasts_the_mask() -> Result<()> {
    let x = x23();
    let m = Tensor::from_vec(vec![true, false, true], &[3])?;
    assert_eq!(
        x.masked_fill(&m, -9.0)?.to_vec::<f64>()?,
        vec![-9.0, -1.25, -9.0, -9.0, -0.75, -9.0]
    );
    let h = Tensor::ones(&[3], DType::F16).masked_fill(&m, f64::NEG_INFINITY)?;
    assert_eq!(h.dtype(), DType::F16);
    let i = Tensor::ones(&[3], DType::I32).masked_fill(&m, 7)?;
    assert_eq!((i.dtype(), i.to_vec::<i32>()?), (DType::I32, vec![7, 1, 7]));
    let e = err(x.masked_fill(&i64s(&[1, 0, 1], &[3]), 0.0));
    assert!(e.contains("masked_fill") && e.contains("bool"), "{e}");
    let wide = Tensor::from_vec(vec![true; 12], &[2, 2, 3])?;
    let e = err(x.masked_fill(&wide, 0.0));
    assert!(
        e.contains("masked_fill") && e.contains("does not broadcast"),
        "{e}"
    );
    check_grad(|x| x[0].masked_fill(&m, 0.5), &[x23()]);
    Ok(())
}

// ---- composite shape ops ---------------------------------------------------------------------------

#[test]
fn tril_and_triu() -> Result<()> {
    let x = Tensor::arange(1.0, 10.0, 1.0, DType::F64)?.reshape(&[3, 3])?;
    assert_eq!(
        x.tril(0)?.to_vec::<f64>()?,
        vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]
    );
    assert_eq!(
        x.tril(-1)?.to_vec::<f64>()?,
        vec![0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 7.0, 8.0, 0.0]
    );
    assert_eq!(
        x.triu(1)?.to_vec::<f64>()?,
        vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0]
    );
    // Batched (leading dims) and non-square; NaN outside the triangle is replaced.
    let b = Tensor::full(&[2, 2, 3], f64::NAN, DType::F64)
        .triu(0)?
        .to_vec::<f64>()?;
    assert_eq!(b.iter().filter(|v| v.is_nan()).count(), 10);
    assert_eq!(b[3], 0.0);
    let e = err(Tensor::ones(&[3], DType::F32).tril(0));
    assert!(e.contains("tril") && e.contains("at least 2 dims"), "{e}");
    check_grad(|x| x[0].tril(0), &[x23()]);
    Ok(())
}

#[test]
fn split_chunk_unflatten_movedim_repeat() -> Result<()> {
    let x = Tensor::arange(0.0, 10.0, 1.0, DType::F64)?.reshape(&[5, 2])?;
    let parts = x.chunk(2, 0)?;
    assert_eq!(parts.len(), 2);
    assert_eq!(
        (parts[0].shape(), parts[1].shape()),
        (&[3usize, 2][..], &[2usize, 2][..])
    );
    assert_eq!(parts[1].to_vec::<f64>()?, vec![6.0, 7.0, 8.0, 9.0]);
    // PyTorch: chunking 5 into 4 gives 3 pieces of 2, 2, 1.
    assert_eq!(x.chunk(4, 0)?.len(), 3);
    let halves = x.split_with_sizes(&[1, 4], 0)?;
    assert_eq!(halves[0].to_vec::<f64>()?, vec![0.0, 1.0]);
    assert!(err(x.split_with_sizes(&[1, 2], 0).map(|_| x.clone())).contains("adding up"));
    assert!(err(x.chunk(0, 0).map(|_| x.clone())).contains("chunks"));
    let y = Tensor::zeros(&[2, 12], DType::F32);
    assert_eq!(y.unflatten(-1, &[2, 3, 2])?.shape(), &[2, 2, 3, 2]);
    assert!(err(y.unflatten(1, &[-1, -1])).contains("unflatten"));
    let z = Tensor::zeros(&[2, 3, 4, 5], DType::F32);
    assert_eq!(z.movedim(&[1], &[-1])?.shape(), &[2, 4, 5, 3]);
    assert_eq!(z.movedim(&[0, 1], &[2, 0])?.shape(), &[3, 4, 2, 5]);
    assert!(err(z.movedim(&[0, 0], &[1, 2])).contains("distinct"));
    let r = f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]).repeat(&[1, 2, 1])?;
    assert_eq!(r.shape(), &[1, 4, 2]);
    assert_eq!(
        r.to_vec::<f64>()?,
        vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]
    );
    assert!(err(x.repeat(&[2])).contains("repeat"));
    assert_eq!(x.repeat(&[0, 1])?.shape(), &[0, 2]);
    check_grad(|x| x[0].repeat(&[2, 1, 2]), &[x23()]);
    check_grad(
        |x| {
            x[0].t()?
                .movedim(&[0], &[1])?
                .chunk(2, 1)?
                .remove(1)
                .mul(&x[0])
        },
        &[x23()],
    );
    Ok(())
}

// ---- reductions ----------------------------------------------------------------------------------

#[test]
fn logsumexp_is_stable() -> Result<()> {
    let x = f64s(&[1000.0, 1000.0, -1000.0, -1000.0], &[2, 2]);
    let y = x.logsumexp(&[1], false)?.to_vec::<f64>()?;
    let ln2 = std::f64::consts::LN_2;
    assert!((y[0] - (1000.0 + ln2)).abs() < 1e-12 && (y[1] - (-1000.0 + ln2)).abs() < 1e-12);
    assert_eq!(x.logsumexp(&[1], true)?.shape(), &[2, 1]);
    assert_eq!(x.logsumexp(&[], false)?.shape(), &[] as &[usize]);
    let ninf = f64s(&[f64::NEG_INFINITY, f64::NEG_INFINITY], &[2]);
    assert_eq!(
        ninf.logsumexp(&[0], false)?.item::<f64>()?,
        f64::NEG_INFINITY
    );
    let inf = f64s(&[f64::INFINITY, 1.0], &[2]);
    assert_eq!(inf.logsumexp(&[0], false)?.item::<f64>()?, f64::INFINITY);
    assert!(
        f64s(&[f64::NAN, 1.0], &[2])
            .logsumexp(&[0], false)?
            .item::<f64>()?
            .is_nan()
    );
    let h = Tensor::full(&[4], 60000.0, DType::F16).logsumexp(&[0], false)?;
    assert_eq!(h.dtype(), DType::F16);
    assert!(
        (h.item::<f64>()? - 60000.0).abs() < 64.0,
        "{}",
        h.item::<f64>()?
    );
    let i = Tensor::from_vec(vec![0i64, 0], &[2])?.logsumexp(&[0], false)?;
    assert_eq!(i.dtype(), DType::F32);
    check_grad(|x| x[0].logsumexp(&[1], false), &[x23()]);
    check_grad(|x| x[0].logsumexp(&[0, 1], true), &[x23()]);
    Ok(())
}

#[test]
fn any_all_count_nonzero() -> Result<()> {
    let x = f64s(&[0.0, f64::NAN, 0.0, 0.0, -0.0, 3.0], &[2, 3]);
    assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, vec![true, true]);
    assert_eq!(
        x.all(&[0], false)?.to_vec::<bool>()?,
        vec![false, false, false]
    );
    assert_eq!(x.count_nonzero(&[])?.item::<i64>()?, 2);
    assert_eq!(x.count_nonzero(&[0])?.to_vec::<i64>()?, vec![0, 1, 1]);
    assert_eq!(x.any(&[0], true)?.shape(), &[1, 3]);
    let empty = Tensor::zeros(&[0], DType::F32);
    assert!(!empty.any(&[], false)?.item::<bool>()?);
    assert!(empty.all(&[], false)?.item::<bool>()?);
    let b = Tensor::from_vec(vec![true, true], &[2])?;
    assert!(b.all(&[], false)?.item::<bool>()?);
    Ok(())
}

#[test]
fn sum_and_mean_with_a_dtype() -> Result<()> {
    let x = Tensor::from_vec(vec![i32::MAX, i32::MAX], &[2])?;
    let s = x.sum_dtype(&[], false, DType::I32)?;
    assert_eq!((s.dtype(), s.item::<i32>()?), (DType::I32, -2));
    let s = x.sum_dtype(&[0], false, DType::F64)?;
    assert_eq!(s.item::<f64>()?, 4294967294.0);
    let h = Tensor::full(&[4096], 1.0, DType::F16).sum_dtype(&[], false, DType::F32)?;
    assert_eq!(h.item::<f32>()?, 4096.0);
    let m = Tensor::from_vec(vec![1i64, 2], &[2])?.mean_dtype(&[], false, DType::F64)?;
    assert_eq!(m.item::<f64>()?, 1.5);
    let e = err(x.mean_dtype(&[], false, DType::I64));
    assert!(e.contains("mean") && e.contains("floating"), "{e}");
    Ok(())
}

#[test]
fn norms() -> Result<()> {
    let x = f64s(&[3.0, -4.0, 0.0, 0.0, 1.0, -1.0], &[3, 2]);
    assert_eq!(
        x.norm(2.0, &[1], false)?.to_vec::<f64>()?,
        vec![5.0, 0.0, 2f64.sqrt()]
    );
    assert_eq!(x.norm(1.0, &[], false)?.item::<f64>()?, 9.0);
    assert_eq!(
        x.norm(f64::INFINITY, &[0], false)?.to_vec::<f64>()?,
        vec![3.0, 4.0]
    );
    assert_eq!(
        x.norm(f64::NEG_INFINITY, &[1], false)?.to_vec::<f64>()?,
        vec![3.0, 0.0, 1.0]
    );
    assert_eq!(x.norm(0.0, &[], false)?.item::<f64>()?, 4.0);
    let p3 = x.norm(3.0, &[1], true)?;
    assert_eq!(p3.shape(), &[3, 1]);
    assert!((p3.to_vec::<f64>()?[0] - 91f64.cbrt()).abs() < 1e-12);
    assert!(
        f64s(&[f64::NAN, 1.0], &[2])
            .norm(2.0, &[], false)?
            .item::<f64>()?
            .is_nan()
    );
    assert_eq!(
        f64s(&[f64::INFINITY], &[1])
            .norm(2.0, &[], false)?
            .item::<f64>()?,
        f64::INFINITY
    );
    let e = err(Tensor::ones(&[2], DType::I64).norm(2.0, &[], false));
    assert!(e.contains("norm") && e.contains("floating"), "{e}");
    check_grad(|x| x[0].norm(2.0, &[1], false), &[x23()]);
    check_grad(|x| x[0].norm(3.0, &[], false), &[x23()]);
    // The gradient of the norm of a zero vector is 0 (not NaN).
    let z = Tensor::zeros(&[3], DType::F64).requires_grad_(true)?;
    z.norm(2.0, &[], false)?.backward()?;
    assert_eq!(z.grad().unwrap().to_vec::<f64>()?, vec![0.0; 3]);
    Ok(())
}

/// `gather`/`scatter_add` along dim 0 with one index per row (what `index_select`, `embedding`
/// and their gradients build) take a row-copy path: it must give what the general loop gives
/// for the same index materialized, bit for bit, and fail the same way.
#[test]
fn row_index_path_matches_the_general_loop() -> Result<()> {
    for (dtype, rows, trailing) in [
        (DType::F32, 29, vec![64]),
        (DType::F64, 5, vec![3, 4]),
        (DType::BF16, 7, vec![8]),
    ] {
        let mut shape = vec![rows];
        shape.extend(&trailing);
        let x = Tensor::randn_seeded(&shape, DType::F32, 7)?.to_dtype(dtype)?;
        let ids = Tensor::randint_seeded(0, rows as i64, &[40], DType::I64, 11)?;
        for ids in [ids.clone(), ids.to_dtype(DType::I32)?] {
            let mut at = vec![40];
            at.extend(vec![1; trailing.len()]);
            let mut full = vec![40];
            full.extend(&trailing);
            let rowwise = ids.reshape(&at)?.expand(&full)?;
            let general = rowwise.contiguous()?;
            let fast = x.gather(0, &rowwise)?;
            let slow = x.gather(0, &general)?;
            assert_eq!(fast.shape(), slow.shape());
            assert_eq!(
                fast.to_dtype(DType::F64)?.to_vec::<f64>()?,
                slow.to_dtype(DType::F64)?.to_vec::<f64>()?,
                "gather {dtype}"
            );
            // Repeated ids accumulate in order.
            let src = Tensor::randn_seeded(&full, DType::F32, 13)?.to_dtype(dtype)?;
            let base = Tensor::randn_seeded(&shape, DType::F32, 17)?.to_dtype(dtype)?;
            let fast = base.scatter_add(0, &rowwise, &src)?;
            let slow = base.scatter_add(0, &general, &src)?;
            let (f, s) = (
                fast.to_dtype(DType::F64)?.to_vec::<f64>()?,
                slow.to_dtype(DType::F64)?.to_vec::<f64>()?,
            );
            assert!(
                f.iter().zip(&s).all(|(a, b)| a.to_bits() == b.to_bits()),
                "scatter_add {dtype}"
            );
        }
    }
    // Out of range: the same error as the general path.
    let x = x23();
    let bad = i64s(&[0, 2], &[2, 1]).expand(&[2, 3])?;
    let e = err(x.gather(0, &bad));
    assert!(
        e.contains("gather") && e.contains("index 2") && e.contains("[0, 2)"),
        "{e}"
    );
    let e = err(Tensor::zeros_like(&x).scatter_add(0, &bad, &x));
    assert!(e.contains("scatter_add") && e.contains("index 2"), "{e}");
    // A transposed (non-contiguous) `self` takes the general path and still picks rows.
    let xt = x.t()?;
    let i = i64s(&[1, 0], &[2, 1]).expand(&[2, 2])?;
    assert_eq!(
        xt.gather(0, &i)?.to_vec::<f64>()?,
        vec![-1.25, -0.75, 0.5, 3.5]
    );
    Ok(())
}
