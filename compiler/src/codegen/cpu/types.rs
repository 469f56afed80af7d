//! What every part of the CPU code generator shares: which values a kernel needs, the vector
//! shape its Cranelift loops run at, where a staged kernel keeps a value between stages, and the
//! options a compile is asked for.

use tensorplay_ir::DType;

use crate::codegen::kernel::{Inst, KernelSpec, LoopKind};

/// The vector shape of a kernel's main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lanes {
    /// No vector loop (integer kernels, mixed f32/f64 kernels, bool-only kernels).
    Scalar,
    /// f32x4 values, i32x4 masks.
    F32x4,
    /// f64x2 values, i64x2 masks.
    F64x2,
}

impl Lanes {
    /// Elements per vector.
    pub(super) fn count(self) -> i64 {
        match self {
            Lanes::Scalar => 1,
            Lanes::F32x4 => 4,
            Lanes::F64x2 => 2,
        }
    }
}

/// Lanes of the vector loop `spec` compiles to (1: scalar only).
pub(super) fn kernel_lanes(spec: &KernelSpec) -> i64 {
    choose_lanes(spec, &spec.liveness()).count()
}

/// The float class of a dtype: `Some(false)` for f16/bf16/f32, `Some(true)` for f64.
fn float_class(d: DType) -> Option<bool> {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => Some(false),
        DType::F64 => Some(true),
        _ => None,
    }
}

/// The vector shape for `spec`: one float class (plus bool masks) vectorizes, anything else
/// (integers, f32 mixed with f64, bool only) runs at scalar width.
pub(super) fn choose_lanes(spec: &KernelSpec, live: &[bool]) -> Lanes {
    let mut dtypes: Vec<DType> = Vec::new();
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        match inst {
            Inst::Op { compute, out, .. } => dtypes.extend([*compute, *out]),
            Inst::Store { output, .. } => dtypes.push(spec.outputs[*output]),
            _ => dtypes.extend(spec.value_dtype(i)),
        }
    }
    dtypes.extend(spec.outputs.iter().copied());
    if let LoopKind::Reduce { value, .. } = &spec.kind
        && spec.value_dtype(*value).is_some_and(|d| !d.is_float())
    {
        return Lanes::Scalar;
    }
    let mut classes = dtypes.iter().filter_map(|&d| float_class(d));
    let any_int = dtypes.iter().any(|d| d.is_int());
    match classes.next() {
        None => Lanes::Scalar,
        Some(_) if any_int => Lanes::Scalar,
        Some(first) => {
            if classes.any(|c| c != first) {
                Lanes::Scalar
            } else if first {
                Lanes::F64x2
            } else {
                Lanes::F32x4
            }
        }
    }
}

/// Where a bulk call reads an argument or writes its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Buf {
    /// Scratch slot `k`: `tile` f32 values on the stack.
    Slot(usize),
    /// Operand `op` itself (inputs, then outputs): only for unit-stride f32 operands of a
    /// one-dim layout, where a tile is one contiguous run.
    Operand(usize),
}

impl std::fmt::Display for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Buf::Slot(k) => write!(f, "slot{k}"),
            Buf::Operand(op) => write!(f, "operand{op}"),
        }
    }
}

/// Choices of the CPU code generator that do not change results.
///
/// ```
/// use tensorplay_compiler::codegen::cpu::CodegenOptions;
/// let inline = CodegenOptions { bulk_math: false };
/// assert!(!inline.bulk_math);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodegenOptions {
    /// Run f32 work at the host's full vector width (AVX2: 8 lanes, AVX-512: 16), with the
    /// same bits as the inline 4-lane code: f32 pointwise kernels over one or two loop dims are
    /// assembled directly at that width (no Cranelift; `TP_WIDE_ASM=0` turns that part off),
    /// and they and the other kernels hand transcendentals and `pow` (Cranelift's kernels also
    /// division and `sqrt`) on f32 to the wide bulk kernels of
    /// [`math::bulk`](super::math::bulk) (2–4x faster). The
    /// default is on when the host has them ([`bulk::level`](super::math::bulk::level), which
    /// `TP_BULK_MATH=0` turns off). `true` cannot force them: without bulk kernels on this host
    /// (or under `TP_BULK_MATH=0`) the kernel is compiled inline either way.
    pub bulk_math: bool,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            bulk_math: crate::codegen::cpu::math::bulk::level().is_some(),
        }
    }
}
