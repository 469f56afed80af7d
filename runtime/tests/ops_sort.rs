//! Sorting (`sort`, `argsort`, `topk`) and the remaining shape helpers and factories (`roll`,
//! `tile`, `take`, `eye`, `linspace`): values, NaN/ties/empty/0-d/non-contiguous inputs,
//! errors, gradients against finite differences, and vmap.

use tensorplay_runtime::{DType, Result, Tensor, vmap};

#[path = "common/grad.rs"]
mod grad;
use grad::check_grad;

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn sort_is_stable_and_puts_nan_last() -> Result<()> {
    let x = f64s(&[2.0, f64::NAN, -1.0, 2.0, -0.0, 0.0], &[6]);
    let (v, i) = x.sort(0, false)?;
    assert_eq!(i.to_vec::<i64>()?, vec![2, 4, 5, 0, 3, 1]);
    let v = v.to_vec::<f64>()?;
    assert_eq!(&v[..5], &[-1.0, -0.0, 0.0, 2.0, 2.0]);
    assert!(v[5].is_nan());
    // Descending: NaN first, ties still in their original order.
    let (_, i) = x.sort(0, true)?;
    assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 3, 4, 5, 2]);
    // Along dim 0 of a non-contiguous 2-D tensor; integer dtypes; -inf/inf.
    let m = f64s(
        &[3.0, 1.0, 2.0, f64::NEG_INFINITY, f64::INFINITY, 0.0],
        &[3, 2],
    )
    .t()?;
    let (v, i) = m.sort(1, false)?;
    assert_eq!(
        v.to_vec::<f64>()?,
        vec![2.0, 3.0, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1.0]
    );
    assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 2, 1, 2, 0]);
    let ints = Tensor::from_vec(vec![5i32, -3, 5, 0], &[4])?;
    assert_eq!(ints.argsort(0, true)?.to_vec::<i64>()?, vec![0, 2, 3, 1]);
    assert_eq!(
        Tensor::zeros(&[0, 3], DType::F32).sort(0, false)?.0.shape(),
        &[0, 3]
    );
    assert_eq!(Tensor::scalar(4.0f32).sort(0, false)?.1.item::<i64>()?, 0);
    let e = x.sort(1, false).unwrap_err().to_string();
    assert!(e.contains("sort") && e.contains("out of range"), "{e}");
    check_grad(
        |t| Ok(t[0].sort(1, true)?.0),
        &[f64s(&[0.3, -1.2, 2.5, 0.7, 1.1, -0.4], &[2, 3])],
    );
    Ok(())
}

#[test]
fn topk_picks_the_largest_or_smallest() -> Result<()> {
    let x = f64s(&[0.5, 3.0, -1.0, 3.0, 2.0, 0.0], &[2, 3]);
    let (v, i) = x.topk(2, 1, true)?;
    assert_eq!(v.to_vec::<f64>()?, vec![3.0, 0.5, 3.0, 2.0]);
    assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 0, 1]);
    let (v, _) = x.topk(1, 0, false)?;
    assert_eq!(v.to_vec::<f64>()?, vec![0.5, 2.0, -1.0]);
    assert_eq!(x.topk(0, 1, true)?.0.shape(), &[2, 0]);
    let e = x.topk(4, 1, true).unwrap_err().to_string();
    assert!(
        e.contains("topk") && e.contains("k") && e.contains('4'),
        "{e}"
    );
    // The gradient reaches the picked elements only.
    let t = x.clone().requires_grad_(true)?;
    t.topk(1, 1, true)?.0.sum_all()?.backward()?;
    assert_eq!(
        t.grad().unwrap().to_vec::<f64>()?,
        vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    );
    let f = vmap::vmap(
        |r: &[Tensor]| Ok(vec![r[0].topk(2, 0, true)?.0]),
        vec![Some(0)],
        vec![0],
    );
    assert_eq!(
        f(std::slice::from_ref(&x))?.remove(0).to_vec::<f64>()?,
        vec![3.0, 0.5, 3.0, 2.0]
    );
    Ok(())
}

#[test]
fn roll_tile_take() -> Result<()> {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F64)?.reshape(&[2, 3])?;
    assert_eq!(
        x.roll(&[1], &[0])?.to_vec::<f64>()?,
        vec![3.0, 4.0, 5.0, 0.0, 1.0, 2.0]
    );
    assert_eq!(
        x.roll(&[-4, 1], &[1, 0])?.to_vec::<f64>()?,
        vec![4.0, 5.0, 3.0, 1.0, 2.0, 0.0]
    );
    assert_eq!(x.roll(&[3], &[1])?.to_vec::<f64>()?, x.to_vec::<f64>()?);
    assert_eq!(
        x.t()?.roll(&[1], &[])?.to_vec::<f64>()?,
        vec![5.0, 0.0, 3.0, 1.0, 4.0, 2.0]
    );
    assert!(
        x.roll(&[1, 2], &[0])
            .unwrap_err()
            .to_string()
            .contains("roll")
    );
    check_grad(|t| t[0].roll(&[1, -1], &[0, 1]), std::slice::from_ref(&x));
    assert_eq!(x.tile(&[2])?.shape(), &[2, 6]);
    assert_eq!(x.tile(&[2, 1, 1])?.shape(), &[2, 2, 3]);
    let i = Tensor::from_vec(vec![5i64, 0, 4, 4], &[2, 2])?;
    assert_eq!(x.t()?.take(&i)?.to_vec::<f64>()?, vec![5.0, 0.0, 2.0, 2.0]);
    let e = x
        .take(&Tensor::from_vec(vec![6i64], &[1])?)
        .unwrap_err()
        .to_string();
    assert!(e.contains("index 6"), "{e}");
    check_grad(|t| t[0].take(&i), std::slice::from_ref(&x));
    Ok(())
}

#[test]
fn eye_and_linspace() -> Result<()> {
    assert_eq!(
        Tensor::eye(3, 3, DType::F32)?.to_vec::<f32>()?,
        vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    );
    assert_eq!(Tensor::eye(0, 2, DType::F32)?.shape(), &[0, 2]);
    assert_eq!(
        Tensor::eye(2, 2, DType::Bool)?.to_vec::<bool>()?,
        vec![true, false, false, true]
    );
    let l = Tensor::linspace(-1.0, 1.0, 7, DType::F64)?.to_vec::<f64>()?;
    assert_eq!((l[0], l[6]), (-1.0, 1.0));
    // The middle value is one fused multiply-add from the end with the rounded step 1/3, not
    // 0: what PyTorch's kernel returns too.
    assert_eq!(l[3], 5.551115123125783e-17);
    assert!((l[1] + 2.0 / 3.0).abs() < 1e-15);
    assert_eq!(Tensor::linspace(0.0, 1.0, 0, DType::F32)?.shape(), &[0]);
    assert_eq!(
        Tensor::linspace(0.0, 10.0, 3, DType::I64)?.to_vec::<i64>()?,
        vec![0, 5, 10]
    );
    assert!(Tensor::linspace(0.0, f64::NAN, 3, DType::F32).is_err());
    Ok(())
}
