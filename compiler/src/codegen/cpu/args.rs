//! The calling convention of compiled CPU kernels.

pub use tensorplay_kernel::args::ScalarArgs;

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
