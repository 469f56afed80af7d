//! Compiling a kernel spec into a [`CompiledKernel`]: validation, the choice between an
//! assembled full-width kernel ([`wide_asm`]) and Cranelift ([`jit`](super::jit), tiered or not),
//! and the kernel that owns the code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorplay_ir::{CompileKind, Error, Result};

use crate::codegen::cpu::args::KernelFn;
use crate::codegen::cpu::code::{Code, PAGE, WideCode};
use crate::codegen::cpu::jit::{Jitted, Tier, compile_cranelift};
use crate::codegen::cpu::tiers::{self, TierUp};
use crate::codegen::cpu::types::{CodegenOptions, Lanes, choose_lanes};
use crate::codegen::cpu::wide_asm;
use crate::codegen::kernel::{Inst, KernelSpec, LoopKind, LoopLayout, StrideClass};
use crate::passes::logging;

/// A kernel compiled to native code for one [`KernelSpec`] and one [`LoopLayout`].
///
/// Launch it with [`CompiledKernel::launch`]; it serves every size (and every stride) whose
/// launch plan has the same layout. Dropping it frees its machine code.
///
/// ```
/// use tensorplay_compiler::codegen::cpu::compile;
/// use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind, LoopLayout, StrideClass};
/// use tensorplay_ir::{DType, ScalarOp};
/// use tensorplay_runtime::Tensor;
///
/// // out = x * x + 1
/// let spec = KernelSpec {
///     rank: 1, inputs: vec![DType::F32], outputs: vec![DType::F32],
///     insts: vec![
///         Inst::Load { input: 0 },
///         Inst::Op { op: ScalarOp::Mul, args: vec![0, 0], compute: DType::F32, out: DType::F32 },
///         Inst::Const { value: tensorplay_compiler::codegen::kernel::Lit::Float(1.0), dtype: DType::F32 },
///         Inst::Op { op: ScalarOp::Add, args: vec![1, 2], compute: DType::F32, out: DType::F32 },
///         Inst::Store { output: 0, value: 3 },
///     ],
///     kind: LoopKind::Pointwise,
/// };
/// let layout = LoopLayout { dims: 1, reduced: 0, kept_inner: false, in_place: false, classes: vec![StrideClass::Unit; 2] };
/// let k = compile(&spec, &layout)?;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
/// let out = Tensor::zeros(&[3], DType::F32);
/// k.launch(&[&x], &[&out])?;
/// assert_eq!(out.to_vec::<f32>()?, vec![2.0, 5.0, 10.0]);
/// assert!(k.compile_time().as_secs_f64() < 1.0);
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub struct CompiledKernel {
    spec: KernelSpec,
    layout: LoopLayout,
    entry: KernelFn,
    compile_time: Duration,
    vector_lanes: usize,
    work_weight: usize,
    code_bytes: usize,
    params: Vec<tensorplay_ir::DType>,
    /// A fast-tier kernel's way to its optimised code (compiled off the calling thread once
    /// the kernel is launched again); `None` for optimised and assembled kernels.
    tier_up: Option<Arc<TierUp>>,
    _code: Code,
}

// SAFETY: the JIT module is never touched after compilation except by `Drop` (which has
// exclusive access), and the machine code it holds is immutable and reentrant: each call only
// reads its own `KernelArgs` and the tensors they point to.
unsafe impl Send for CompiledKernel {}
// SAFETY: see `Send`; `&CompiledKernel` only exposes immutable data and calls into reentrant
// code.
unsafe impl Sync for CompiledKernel {}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("layout", &self.layout.to_string())
            .field("compile_time", &self.compile_time)
            .field("vector_lanes", &self.vector_lanes)
            .finish_non_exhaustive()
    }
}

impl CompiledKernel {
    /// The spec this kernel computes.
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// The loop layout this kernel was specialised for.
    pub fn layout(&self) -> &LoopLayout {
        &self.layout
    }

    /// Wall time spent building and compiling the function (IR construction, Cranelift, JIT
    /// linking).
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Relative cost of one element (1: a cheap memory-bound element): the launcher splits a
    /// launch across threads once elements × weight reaches twice its minimum chunk.
    pub fn work_weight(&self) -> usize {
        self.work_weight
    }

    /// Bytes of machine code this kernel keeps mapped (its code rounded up to whole pages): what
    /// the kernel cache's size bound counts.
    pub fn code_bytes(&self) -> usize {
        self.code_bytes
    }

    /// The dtypes of the scalar arguments every launch passes ([`super::ScalarArgs`]).
    pub fn param_dtypes(&self) -> &[tensorplay_ir::DType] {
        &self.params
    }

    /// Lanes of the main vector loop: 8 (AVX2) or 16 (AVX-512) for kernels assembled at full
    /// width (f32 pointwise kernels, see `CodegenOptions::bulk_math`), otherwise 4 for
    /// f32-class kernels, 2 for f64, 1 when the kernel runs at scalar width.
    pub fn vector_lanes(&self) -> usize {
        self.vector_lanes
    }

    /// The raw entry point (for benchmarks and other launchers).
    ///
    /// # Safety
    /// Calling it requires `KernelArgs` that match this kernel's spec and layout exactly: valid
    /// pointers for every operand over the whole iteration, `layout.dims` sizes and
    /// `operands * dims` strides. [`CompiledKernel::launch`] builds and checks them.
    pub unsafe fn entry(&self) -> KernelFn {
        match &self.tier_up {
            Some(t) => t.entry_for_launch().unwrap_or(self.entry),
            None => self.entry,
        }
    }

    /// Whether this kernel runs fully optimised code: always, except a fast-tier kernel (from
    /// [`compile_tiered`]) whose optimised code is not ready yet.
    pub fn is_optimized(&self) -> bool {
        self.tier_up.as_ref().is_none_or(|t| t.is_done())
    }
}

/// Checks that `layout` fits `spec` (operand count, dim counts per loop kind).
pub(crate) fn check_layout(spec: &KernelSpec, layout: &LoopLayout) -> Result<()> {
    let err = |msg: String| {
        Err(Error::compile(
            CompileKind::Codegen,
            format!("loop layout {layout}: {msg}"),
        ))
    };
    let nops = spec.inputs.len() + spec.outputs.len();
    if layout.classes.len() != nops {
        return err(format!("{nops} operands need {nops} stride classes"));
    }
    if layout.dims == 0 || layout.dims > spec.rank + 2 {
        return err(format!("1 to {} loop dims expected", spec.rank + 2));
    }
    match &spec.kind {
        LoopKind::Pointwise if layout.reduced != 0 => {
            err("pointwise kernels reduce no dims".into())
        }
        _ if layout.kept_inner && !matches!(spec.kind, LoopKind::Reduce { .. }) => {
            err("only reductions have a kept inner dim".into())
        }
        _ if layout.in_place && !matches!(spec.kind, LoopKind::Pointwise) => {
            err("only pointwise kernels run in place".into())
        }
        LoopKind::Reduce { .. } if layout.reduced == 0 || layout.reduced >= layout.dims => {
            err("a reduction needs at least one kept and one reduced dim".into())
        }
        LoopKind::Reduce { .. }
            if !layout.kept_inner
                && layout.classes[spec.inputs.len()..]
                    .iter()
                    .any(|&c| c != StrideClass::Zero) =>
        {
            err("rows-mode reduction outputs have the zero class".into())
        }
        LoopKind::Reduce { .. }
            if layout.kept_inner && choose_lanes(spec, &spec.liveness()) == Lanes::Scalar =>
        {
            err("column mode needs a vectorized kernel".into())
        }
        LoopKind::Softmax { .. } if layout.reduced != 1 || layout.dims < 2 => {
            err("softmax runs rows: one reduced dim after at least one kept dim".into())
        }
        _ => Ok(()),
    }
}

/// Relative cost of one element of `spec`, in units of a cheap memory-bound element: 1 plus
/// each op's [`ScalarOp::cost`](tensorplay_ir::ScalarOp::cost) (transcendentals 8, the general
/// `pow` 12, division / `sqrt` 1); softmax pays one `exp` per element. The launcher scales its
/// minimum parallel chunk by it, so compute-heavy kernels go multi-threaded at smaller sizes.
fn work_weight(spec: &KernelSpec) -> usize {
    let ops: usize = spec
        .insts
        .iter()
        .map(|inst| match inst {
            Inst::Op { op, compute, .. } if compute.is_float() => op.cost(),
            _ => 0,
        })
        .sum();
    let softmax = if matches!(spec.kind, LoopKind::Softmax { .. }) {
        8
    } else {
        0
    };
    1 + ops + softmax
}

/// Compiles `spec` for `layout` into native code.
///
/// Validates both first (a malformed spec or layout is an error, never bad code). The function
/// is `extern "C" fn(*const KernelArgs)`; see [`KernelArgs`](super::KernelArgs). With
/// `TP_LOGS=clif` the spec, the layout, the CLIF and the compile time are printed to stderr.
pub fn compile(spec: &KernelSpec, layout: &LoopLayout) -> Result<CompiledKernel> {
    compile_with(spec, layout, &CodegenOptions::default())
}

/// [`compile`] with explicit [`CodegenOptions`] (tests compare the staged and inline forms).
pub fn compile_with(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
) -> Result<CompiledKernel> {
    compile_in(spec, layout, options, Tier::Optimized)
}

/// Like [`compile`], but a kernel Cranelift compiles is built in the fast tier first (single-pass
/// register allocation: about half the compile time) and recompiled with the full optimizer on
/// a background thread once it is launched a second time; launches switch to the optimised
/// code when it is ready ([`CompiledKernel::is_optimized`]). Both tiers compile the same IR, so
/// results are the same bits. Assembled kernels compile in tens of microseconds and are not
/// tiered; neither is anything under `TP_JIT_TIERS=0`. This is what compiled graphs use (through
/// the kernel cache): kernels launched once never pay for the optimizer.
///
/// ```
/// use tensorplay_compiler::codegen::cpu::{compile_tiered, plan};
/// use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind};
/// use tensorplay_ir::{DType, ScalarOp};
/// use tensorplay_runtime::Tensor;
/// // out = x * x in f64 (a Cranelift kernel)
/// let spec = KernelSpec { rank: 1, inputs: vec![DType::F64], outputs: vec![DType::F64],
///     insts: vec![
///         Inst::Load { input: 0 },
///         Inst::Op { op: ScalarOp::Mul, args: vec![0, 0], compute: DType::F64, out: DType::F64 },
///         Inst::Store { output: 0, value: 1 },
///     ],
///     kind: LoopKind::Pointwise };
/// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3])?;
/// let out = Tensor::zeros(&[3], DType::F64);
/// let k = compile_tiered(&spec, plan(&spec, &[&x], &[&out], None)?.layout())?;
/// for _ in 0..3 {
///     k.launch(&[&x], &[&out])?; // the second launch asks for the optimised code
///     assert_eq!(out.to_vec::<f64>()?, vec![1.0, 4.0, 9.0]);
/// }
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn compile_tiered(spec: &KernelSpec, layout: &LoopLayout) -> Result<CompiledKernel> {
    let options = CodegenOptions::default();
    if !tiers::enabled() {
        return compile_with(spec, layout, &options);
    }
    let mut k = compile_in(spec, layout, &options, Tier::Fast)?;
    if matches!(k._code, Code::Jit(_)) {
        k.tier_up = Some(Arc::new(TierUp::new(spec, layout, options)));
    }
    Ok(k)
}

/// Validates `spec` and `layout`, then assembles the kernel at full width when it can, else
/// compiles it with Cranelift in `tier`.
fn compile_in(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
    tier: Tier,
) -> Result<CompiledKernel> {
    let t0 = Instant::now();
    spec.validate()?;
    check_layout(spec, layout)?;
    if options.bulk_math
        && let Some(level) = crate::codegen::cpu::math::bulk::level()
        && let Some(wide) = wide_asm::assemble(spec, layout, level).map_err(|e| {
            Error::compile(
                CompileKind::Codegen,
                format!("cpu codegen: assembling: {e}"),
            )
        })?
    {
        return Ok(finish_wide(spec, layout, wide, t0));
    }
    let jit = compile_cranelift(spec, layout, options, tier, t0)?;
    Ok(finish_jit(spec, layout, jit))
}

/// A [`CompiledKernel`] around code Cranelift compiled.
fn finish_jit(spec: &KernelSpec, layout: &LoopLayout, jit: Jitted) -> CompiledKernel {
    CompiledKernel {
        spec: spec.clone(),
        layout: layout.clone(),
        entry: jit.entry,
        compile_time: jit.compile_time,
        vector_lanes: jit.lanes.count() as usize,
        work_weight: work_weight(spec),
        code_bytes: jit.code_bytes,
        params: spec.param_dtypes(),
        tier_up: None,
        _code: Code::Jit(Box::new(jit.code)),
    }
}

/// A [`CompiledKernel`] around code [`wide_asm`] assembled.
fn finish_wide(
    spec: &KernelSpec,
    layout: &LoopLayout,
    wide: WideCode,
    t0: Instant,
) -> CompiledKernel {
    // SAFETY: the mapping holds a complete function assembled for the System V signature
    // `fn(*const KernelArgs)`; it stays mapped (read + execute) while `wide` lives, which is as
    // long as the kernel holding this entry.
    let entry: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(wide.map.as_ptr()) };
    let compile_time = t0.elapsed();
    if logging::enabled("clif") {
        logging::log("clif", || {
            format!(
                "{spec}layout: {layout}\nassembled at {} lanes ({}): {} bytes of machine code in {compile_time:?}",
                wide.lanes,
                wide.summary,
                wide.map.len()
            )
        });
    }
    CompiledKernel {
        spec: spec.clone(),
        layout: layout.clone(),
        entry,
        compile_time,
        vector_lanes: wide.lanes,
        work_weight: work_weight(spec),
        code_bytes: wide.map.len().next_multiple_of(PAGE),
        params: spec.param_dtypes(),
        tier_up: None,
        _code: Code::Wide(wide),
    }
}
