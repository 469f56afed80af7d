//! Comparison ops (bool results) with broadcasting; operands compare in their promoted dtype.

use half::{bf16, f16};
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, OpClass, Result};

use super::binary::{as_dtype, result_type};
use super::lowering::expr;
use super::{AutocastPolicy, DTypeRule, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule};
use crate::dispatch::call1;
use crate::kernels::map::map2;
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};

/// The scalar definition of a comparison: one generic predicate over ordered values.
pub trait CompareMath: 'static {
    const NAME: &'static str;
    fn cmp<T: PartialOrd>(a: T, b: T) -> bool;
}

/// Meta rule shared by the comparisons: broadcast shape, bool dtype.
pub fn compare_meta<M: CompareMath>(a: Args) -> Result<Vec<OutSpec>> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let shape = broadcast_shapes(M::NAME, x.shape(), y.shape())?;
    Ok(vec![OutSpec::new(&shape, DType::Bool)])
}

/// Fill shared by the comparisons. NaN compares false except under `ne`.
pub fn compare_fill<M: CompareMath>(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let dt = result_type(x, y);
    let x = as_dtype(x, dt)?;
    let y = as_dtype(y, dt)?;
    let op = a.op;
    match dt {
        DType::F32 => map2::<f32, f32, bool>(op, out, &x, &y, M::cmp),
        DType::F64 => map2::<f64, f64, bool>(op, out, &x, &y, M::cmp),
        DType::F16 => map2::<f16, f16, bool>(op, out, &x, &y, M::cmp),
        DType::BF16 => map2::<bf16, bf16, bool>(op, out, &x, &y, M::cmp),
        DType::I32 => map2::<i32, i32, bool>(op, out, &x, &y, M::cmp),
        DType::I64 => map2::<i64, i64, bool>(op, out, &x, &y, M::cmp),
        DType::Bool => map2::<bool, bool, bool>(op, out, &x, &y, M::cmp),
    }
}

macro_rules! compare_op {
    ($STATIC:ident, $Math:ident, $name:literal, $method:ident, $smethod:ident, |$a:ident, $b:ident| $e:expr) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl CompareMath for $Math {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn cmp<T: PartialOrd>($a: T, $b: T) -> bool {
                $e
            }
        }
        #[doc = concat!("`", $name, "(Tensor self, Tensor other) -> Tensor` (bool result)")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self, Tensor other) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: compare_meta::<$Math>,
                fill: compare_fill::<$Math>,
            },
            derivative: None,
            saved: Saved::Nothing,
            lower: Lower::Pointwise(Pointwise::op(expr::$method, DTypeRule::Promote)),
            autocast: AutocastPolicy::Keep,
            vmap: VmapRule::Derived,
        };
        impl Tensor {
            #[doc = concat!("Elementwise `", $name, "` with broadcasting; bool result.")]
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                call1(&$STATIC, &[self.into(), other.into()])
            }
            #[doc = concat!("Elementwise `", $name, "` against a Rust scalar; bool result.")]
            pub fn $smethod(&self, s: impl Into<Scalar>) -> Result<Tensor> {
                self.$method(&Tensor::wrapped_scalar(s.into()))
            }
        }
    };
}

compare_op!(EQ, Eq, "eq", eq, eq_scalar, |a, b| a == b);
compare_op!(NE, Ne, "ne", ne, ne_scalar, |a, b| a != b);
compare_op!(LT, Lt, "lt", lt, lt_scalar, |a, b| a < b);
compare_op!(LE, Le, "le", le, le_scalar, |a, b| a <= b);
compare_op!(GT, Gt, "gt", gt, gt_scalar, |a, b| a > b);
compare_op!(GE, Ge, "ge", ge, ge_scalar, |a, b| a >= b);

/// Every comparison op.
pub static OPS: &[&OpDef] = &[&EQ, &NE, &LT, &LE, &GT, &GE];
