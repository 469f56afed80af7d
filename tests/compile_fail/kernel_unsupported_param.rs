// A kernel parameter must have a schema type: `u8` has none.
use tensorplay::library::custom_op;
use tensorplay::{Result, Tensor};

fn main() -> Result<()> {
    custom_op("cf_param::shift")
        .arg_names(&["x", "by"])
        .build(|x: &Tensor, by: u8| x.add_scalar(by as f64))?;
    Ok(())
}
