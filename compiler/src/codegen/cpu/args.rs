//! The calling convention of compiled CPU kernels.

use smallvec::SmallVec;
use tensorplay_ir::{DType, Error, Result};

use crate::codegen::kernel::Lit;

/// The one argument of every compiled kernel: `extern "C" fn(args: *const KernelArgs)`.
///
/// Everything that varies from call to call is here, so one compiled artifact serves every size
/// (and every stride within its [`LoopLayout`](crate::codegen::kernel::LoopLayout)):
///
/// * `ptrs` — the address of element `[0, .., 0]` of every input, then every output;
/// * `shape` — the size of each loop dim (`layout.dims` entries, outermost first);
/// * `strides` — element strides, operand-major: `strides[op * dims + d]` (broadcast dims have
///   stride 0; a reduction output has stride 0 along the reduced dims);
/// * `[start, end)` — the part of the iteration this call covers, so the launcher can split work
///   across threads: for pointwise kernels a range of *elements* of the flattened loop space
///   (calls may begin and end mid-row), for reductions and softmax a range of flattened *rows*
///   (kept points);
/// * `partials` — rows-mode reductions only (ignored elsewhere): when non-null, each row's raw
///   accumulator (8 bytes: an `f64` for float sums and products, the extremum widened to `f64`
///   for float `amax`/`amin`, an `i64` for integer and bool reductions) is written to
///   `partials[row]` instead of the finalized value going to the output. The launcher uses this
///   to split one long reduction across threads and merge the pieces.
/// * `params` — the scalar arguments ([`Inst::Param`](crate::codegen::kernel::Inst::Param)),
///   one 8-byte slot each (see [`ScalarArgs`]): scalar constants of the graph, so kernels that
///   differ only in a constant's value are one kernel.
///
/// The layout is `#[repr(C)]` with 8-byte fields at offsets 0, 8, ..., 48 (the generated code
/// reads them at those offsets).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::KernelArgs;
/// assert_eq!(std::mem::size_of::<KernelArgs>(), 56);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelArgs {
    /// Base pointers: inputs, then outputs.
    pub ptrs: *const *mut u8,
    /// Loop dim sizes.
    pub shape: *const i64,
    /// Element strides, operand-major.
    pub strides: *const i64,
    /// First flattened element (pointwise) or row (reductions, softmax) of this call.
    pub start: i64,
    /// One past the last.
    pub end: i64,
    /// Reductions: where raw per-row accumulators go instead of the output (null: finalize).
    pub partials: *mut u8,
    /// Scalar arguments, one 8-byte slot each.
    pub params: *const u64,
}

/// Byte offsets of the fields, as the emitted code reads them.
pub(crate) mod offsets {
    pub const PTRS: i32 = 0;
    pub const SHAPE: i32 = 8;
    pub const STRIDES: i32 = 16;
    pub const START: i32 = 24;
    pub const END: i32 = 32;
    pub const PARTIALS: i32 = 40;
    pub const PARAMS: i32 = 48;
}

/// The scalar arguments of one kernel, encoded for [`KernelArgs::params`]: one 8-byte slot per
/// [`Inst::Param`](crate::codegen::kernel::Inst::Param), the value in the slot's low bytes as
/// the kernel holds it (f64; f32 for f32, f16 and bf16 — 16-bit floats compute in f32; i64; i32;
/// one byte 0/1 for bool).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::ScalarArgs;
/// use tensorplay_compiler::codegen::kernel::Lit;
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

/// The signature of a compiled kernel's entry point.
pub type KernelFn = unsafe extern "C" fn(*const KernelArgs);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_match_the_emitted_code() {
        let a = KernelArgs {
            ptrs: std::ptr::null(),
            shape: std::ptr::null(),
            strides: std::ptr::null(),
            start: 0,
            end: 0,
            partials: std::ptr::null_mut(),
            params: std::ptr::null(),
        };
        let base = &a as *const KernelArgs as usize;
        let at = |p: usize| (p - base) as i32;
        assert_eq!(at(&a.ptrs as *const _ as usize), offsets::PTRS);
        assert_eq!(at(&a.shape as *const _ as usize), offsets::SHAPE);
        assert_eq!(at(&a.strides as *const _ as usize), offsets::STRIDES);
        assert_eq!(at(&a.start as *const _ as usize), offsets::START);
        assert_eq!(at(&a.end as *const _ as usize), offsets::END);
        assert_eq!(at(&a.partials as *const _ as usize), offsets::PARTIALS);
        assert_eq!(at(&a.params as *const _ as usize), offsets::PARAMS);
    }
}
