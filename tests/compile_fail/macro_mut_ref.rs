// `#[custom_op]` refuses `&mut T` parameters: mutation is declared with `mutates_args` on a
// `&Tensor`.
use tensorplay::library::custom_op;
use tensorplay::{Result, Tensor};

#[custom_op("cf_macro::fill_")]
fn fill_(out: &mut Tensor) -> Result<()> {
    let _ = out;
    Ok(())
}

fn main() {}
