//! The scalar arguments of a kernel launch ([`ScalarArgs`]): the values of a spec's
//! [`Inst::Param`](crate::spec::Inst::Param)s, encoded in 8-byte slots.

use smallvec::SmallVec;
use tensorplay_ir::{DType, Error, Result};

use crate::spec::Lit;

/// The scalar arguments of one kernel, encoded as every code generator passes them (the CPU kernels' `KernelArgs::params`, the CUDA
/// kernels' argument struct): one 8-byte slot per
/// [`Inst::Param`](crate::spec::Inst::Param), the value in the slot's low bytes as
/// the kernel holds it (f64; f32 for f32, f16 and bf16 — 16-bit floats compute in f32; i64; i32;
/// one byte 0/1 for bool).
///
/// ```
/// use tensorplay_kernel::args::ScalarArgs;
/// use tensorplay_kernel::spec::Lit;
/// use tensorplay_ir::DType;
/// let a = ScalarArgs::new(&[DType::F32, DType::I64], &[Lit::Float(0.5), Lit::Int(-3)])?;
/// assert_eq!(a.slots(), &[0.5f32.to_bits() as u64, (-3i64) as u64]);
/// assert!(ScalarArgs::new(&[DType::F32], &[Lit::Int(1)]).is_err()); // kind mismatch
/// assert!(ScalarArgs::new(&[DType::F32], &[]).is_err()); // count mismatch
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScalarArgs {
    dtypes: SmallVec<[DType; 4]>,
    slots: SmallVec<[u64; 4]>,
}

impl ScalarArgs {
    /// Encodes `values` for parameters of `dtypes` (each value of its dtype's kind: a float for
    /// a floating dtype, an integer for an integer dtype, a bool for bool).
    pub fn new(dtypes: &[DType], values: &[Lit]) -> Result<ScalarArgs> {
        if dtypes.len() != values.len() {
            return Err(Error::argument(
                "compiled kernel",
                "params",
                format!("{} scalar arguments", dtypes.len()),
                format!("{}", values.len()),
            ));
        }
        let mut slots = SmallVec::new();
        for (k, (&d, &v)) in dtypes.iter().zip(values).enumerate() {
            let slot = match (v, d) {
                (Lit::Float(x), DType::F64) => x.to_bits(),
                (Lit::Float(x), DType::F32 | DType::F16 | DType::BF16) => {
                    u64::from((x as f32).to_bits())
                }
                (Lit::Int(x), DType::I64) => x as u64,
                (Lit::Int(x), DType::I32) => u64::from(x as i32 as u32),
                (Lit::Bool(b), DType::Bool) => u64::from(b),
                _ => {
                    return Err(Error::argument(
                        "compiled kernel",
                        format!("param {k}"),
                        format!("a {d} value"),
                        format!("{v}"),
                    ));
                }
            };
            slots.push(slot);
        }
        Ok(ScalarArgs {
            dtypes: dtypes.iter().copied().collect(),
            slots,
        })
    }

    /// The parameters' dtypes.
    pub fn dtypes(&self) -> &[DType] {
        &self.dtypes
    }

    /// The encoded slots.
    pub fn slots(&self) -> &[u64] {
        &self.slots
    }
}
