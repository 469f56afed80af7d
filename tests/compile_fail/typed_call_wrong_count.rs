// A typed handle's `call` takes one argument per kernel parameter: one too few, one too many.
use tensorplay::library::custom_op;
use tensorplay::{DType, Result, Tensor};

fn main() -> Result<()> {
    let weighted_sum = custom_op("cf_count::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: &Tensor, w: &Tensor| x.mul(w)?.sum_all())?;
    let x = Tensor::ones(&[2], DType::F32);
    weighted_sum.call((&x,))?;
    weighted_sum.call((&x, &x, &x))?;
    Ok(())
}
