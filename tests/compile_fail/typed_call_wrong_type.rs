// A typed handle's `call` takes the kernel's parameter types: a string where it takes `f64`.
use tensorplay::library::custom_op;
use tensorplay::{DType, Result, Tensor};

fn main() -> Result<()> {
    let scale = custom_op("cf_type::scale")
        .arg_names(&["x", "w"])
        .build(|x: &Tensor, w: f64| x.mul_scalar(w))?;
    let x = Tensor::ones(&[2], DType::F32);
    scale.call((&x, "2.0"))?;
    Ok(())
}
