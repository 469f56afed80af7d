use tensorplay_runtime::library::{self, Library};
use tensorplay_runtime::{DType, Result, Tensor, Value};

#[test]
fn weighted_sum_eager_and_autograd() -> Result<()> {
    let op = library::custom_op("smoke::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.requires_grad_(true)?;
    let w = Tensor::from_vec(vec![0.5f32, 0.5, 2.0], &[3])?;
    let y = op.call1(&[x.clone().into(), w.clone().into()])?;
    assert_eq!(y.item::<f32>()?, 7.5);
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.5, 0.5, 2.0]);
    // Fake inputs need a fake kernel.
    let fx = Tensor::empty_fake(&[3], DType::F32, tensorplay_runtime::Device::Cpu);
    assert!(op.call(&[fx.clone().into(), fx.clone().into()]).is_err());
    op.register_fake(|x: Tensor, _w: Tensor| -> Result<Tensor> { x.sum_all() })?;
    let out = op.call1(&[fx.clone().into(), fx.into()])?;
    assert!(out.is_fake() && out.shape().is_empty());
    Ok(())
}

#[test]
fn library_define_impl_and_drop() -> Result<()> {
    let lib = Library::new("smoke_lib", "DEF")?;
    lib.define("twice(Tensor x) -> Tensor", "", &[])?;
    lib.r#impl("twice", |args: &[Value]| -> Result<Vec<Tensor>> {
        let Value::Tensor(x) = &args[0] else { unreachable!() };
        Ok(vec![x.mul_scalar(2.0)?])
    }, "CompositeExplicitAutograd", "", true)?;
    let x = Tensor::ones(&[2], DType::F32);
    let y = tensorplay_runtime::ops::call("smoke_lib::twice", &[x.into()])?;
    assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 2.0]);
    drop(lib);
    assert!(tensorplay_runtime::ops::call("smoke_lib::twice", &[]).is_err());
    Ok(())
}
