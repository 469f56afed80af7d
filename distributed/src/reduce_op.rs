//! `ReduceOp`: how a reducing collective combines the ranks' values (PyTorch's
//! `torch.distributed.ReduceOp`).

use std::fmt;
use std::str::FromStr;

use tensorplay_runtime::{DType, Error, Result};

/// How a reducing collective (`all_reduce`, `reduce`, `reduce_scatter`) combines values.
///
/// `Avg` is a sum divided by the group's size afterwards, so it needs a floating dtype; `bool`
/// tensors reduce as logical or (`Sum`, `Max`) and logical and (`Product`, `Min`), as PyTorch's
/// backends do.
///
/// ```
/// use tensorplay_distributed::ReduceOp;
/// assert_eq!("avg".parse::<ReduceOp>()?, ReduceOp::Avg);
/// assert_eq!(ReduceOp::Product.to_string(), "product");
/// assert!("mean".parse::<ReduceOp>().is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (PyTorch's default).
    Sum,
    /// The mean over the group's ranks (floating dtypes).
    Avg,
    /// The elementwise maximum.
    Max,
    /// The elementwise minimum.
    Min,
    /// The elementwise product.
    Product,
}

impl ReduceOp {
    /// Every op, in a stable order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Product,
    ];

    /// The name PyTorch prints (`ReduceOp.SUM` is `sum`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Product => "product",
        }
    }

    /// Checks that `dtype` can be reduced with this op, naming `op` (the collective) otherwise.
    pub(crate) fn check_dtype(self, op: &str, dtype: DType) -> Result<()> {
        if self == ReduceOp::Avg && !dtype.is_float() {
            return Err(Error::argument(
                op,
                "op",
                "ReduceOp::Avg on a floating-point tensor",
                format!("ReduceOp::Avg on a tensor of dtype {dtype} (use Sum and divide)"),
            ));
        }
        Ok(())
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = Error;

    fn from_str(s: &str) -> Result<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::argument(
                    "ReduceOp",
                    "op",
                    "one of sum, avg, max, min, product",
                    format!("{s:?}"),
                )
            })
    }
}
