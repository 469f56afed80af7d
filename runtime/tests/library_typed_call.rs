//! Issue 31 item 5: a typed handle's `call` takes exactly the kernel's parameter types (a tuple,
//! or the bare argument of a one-parameter op); what each parameter accepts; the boxed paths
//! (`call_values`, a boxed kernel's handle) stay. The compile errors for a wrong type or count
//! are in the root crate's `tests/compile_fail.rs`.

use tensorplay_runtime::library::{self, CustomOp, Untyped};
use tensorplay_runtime::{DType, Device, Result, Scalar, Tensor, Value};

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

#[test]
fn tensor_and_number_parameters() -> Result<()> {
    let scale: CustomOp<Tensor, (Tensor, f64)> = library::custom_op("ltc_num::scale")
        .arg_names(&["x", "w"])
        .build(|x: &Tensor, w: f64| x.mul_scalar(w))?;
    let x = f32s(&[1.0, 2.0]);
    assert_eq!(scale.call((&x, 3.0))?.to_vec::<f32>()?, vec![3.0, 6.0]);
    // An owned tensor passes too, and an integer where the kernel takes f64 (as the schema's
    // `float` reads an `int`).
    assert_eq!(scale.call((x.clone(), 2))?.to_vec::<f32>()?, vec![2.0, 4.0]);
    // The boxed path: values built at run time, checked when the call runs.
    assert_eq!(
        scale
            .call_values(&[x.clone().into(), Value::Float(0.5)])?
            .to_vec::<f32>()?,
        vec![0.5, 1.0]
    );
    let err = scale.call_values(&[x.clone().into()]).unwrap_err();
    assert!(err.to_string().contains("w"), "{err}");
    Ok(())
}

#[test]
fn one_parameter_ops_take_the_bare_argument() -> Result<()> {
    let double = library::custom_op("ltc_bare::double")
        .arg_names(&["x"])
        .build(|x: Tensor| x.mul_scalar(2.0))?;
    let x = f32s(&[1.5]);
    assert_eq!(double.call(&x)?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(double.call((&x,))?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(double.call(x)?.to_vec::<f32>()?, vec![3.0]);
    Ok(())
}

#[test]
fn optional_list_and_other_parameters() -> Result<()> {
    type Params = (
        Tensor,
        Option<Tensor>,
        Vec<i64>,
        Option<f64>,
        String,
        bool,
        DType,
    );
    let op: CustomOp<Tensor, Params> = library::custom_op("ltc_mix::op")
        .arg_names(&["x", "bias", "shape", "eps", "mode", "flag", "dtype"])
        .build(
            |x: &Tensor,
             bias: Option<&Tensor>,
             shape: Vec<i64>,
             eps: Option<f64>,
             mode: String,
             flag: bool,
             dtype: DType|
             -> Result<Tensor> {
                let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
                let mut y = x.reshape(&dims)?.add_scalar(eps.unwrap_or(0.0))?;
                if let Some(b) = bias {
                    y = y.add(b)?;
                }
                if mode == "neg" && flag {
                    y = y.neg()?;
                }
                y.to_dtype(dtype)
            },
        )?;
    let x = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let b = f32s(&[10.0, 20.0]);
    // `None` for absent optionals, an array reference for a list, `&str` for a string.
    let y = op.call((&x, None, &[2, 2], None, "id", false, DType::F64))?;
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 4.0]);
    // `Some(&b)` or a bare `&b` for `Tensor?`, a bare `f64` for `float?`, a `Vec` for a list.
    let y = op.call((
        &x,
        Some(&b),
        vec![2, 2],
        0.5,
        String::from("neg"),
        true,
        DType::F32,
    ))?;
    assert_eq!(y.to_vec::<f32>()?, vec![-11.5, -22.5, -13.5, -24.5]);
    let y2 = op.call((&x, &b, &[2i64, 2][..], Some(0.5), "neg", true, DType::F32))?;
    assert!(y.equal(&y2)?);
    Ok(())
}

#[test]
fn tuple_returns_and_scalar_parameters() -> Result<()> {
    let op = library::custom_op("ltc_ret::split_shift")
        .arg_names(&["xs", "shift", "device"])
        .build(
            |xs: &[Tensor], shift: Scalar, device: Device| -> Result<(Tensor, i64)> {
                assert_eq!(device, Device::Cpu);
                let n = xs.len() as i64;
                Ok((xs[0].add_scalar(shift)?, n))
            },
        )?;
    let xs = vec![f32s(&[1.0]), f32s(&[2.0])];
    let (y, n) = op.call((&xs, 2, Device::Cpu))?;
    assert_eq!((y.to_vec::<f32>()?, n), (vec![3.0], 2));
    let (y, _) = op.call((&xs[..], Scalar::Float(0.5), Device::Cpu))?;
    assert_eq!(y.to_vec::<f32>()?, vec![1.5]);
    Ok(())
}

#[test]
fn boxed_kernels_keep_the_untyped_call() -> Result<()> {
    let op: CustomOp<Vec<Tensor>, Untyped> = library::custom_op("ltc_boxed::add")
        .schema("(Tensor a, Tensor b) -> Tensor")
        .build(|args: &[Value]| -> Result<Vec<Tensor>> {
            let (Value::Tensor(a), Value::Tensor(b)) = (&args[0], &args[1]) else {
                unreachable!("bound to the schema")
            };
            Ok(vec![a.add(b)?])
        })?;
    let x = f32s(&[1.0]);
    let outs = op.call(&[x.clone().into(), x.clone().into()])?;
    assert_eq!(outs[0].to_vec::<f32>()?, vec![2.0]);
    let outs = op.call((&x, &x))?;
    assert_eq!(outs[0].to_vec::<f32>()?, vec![2.0]);
    // Checked when the call runs.
    assert!(op.call((&x, 1.0)).is_err());
    Ok(())
}

#[test]
fn zero_parameter_ops_take_the_empty_tuple() -> Result<()> {
    let op = library::custom_op("ltc_zero::answer")
        .build(|| -> Result<Tensor> { Ok(Tensor::scalar(42.0)) })?;
    assert_eq!(op.call(())?.item::<f64>()?, 42.0);
    Ok(())
}
