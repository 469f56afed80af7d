//! Compiling a kernel spec into native code with Cranelift, and owning that code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tensorplay_ir::CompileKind;

use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};
use tensorplay_ir::{Error, Result, ScalarOp};

use super::args::KernelFn;
use super::emit::{Emitter, Lanes, choose_lanes, liveness};
use super::math::{MathCtx, MathShims};
use super::staging;
use super::tiers::{Tier, TierUp};
use super::wide_asm::{self, WideCode};
use crate::codegen::kernel::{Inst, KernelSpec, LoopKind, LoopLayout, StrideClass};
use crate::passes::logging;

/// Compiled kernels whose code is still mapped (for leak checks).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Number of compiled kernels whose machine code is currently allocated. Dropping a
/// [`CompiledKernel`] frees its code and decrements this.
///
/// ```
/// use tensorplay_compiler::codegen::cpu::live_kernels;
/// let _ = live_kernels(); // a count, shared by every thread of the process
/// ```
pub fn live_kernels() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Cranelift's x86-64 AVX-512 feature flags, turned off under `TP_BULK_ISA=avx2`.
const AVX512_FLAGS: [&str; 6] = [
    "has_avx512bitalg",
    "has_avx512dq",
    "has_avx512vl",
    "has_avx512vbmi",
    "has_avx512f",
    "has_avx512vnni",
];

/// The host ISA for `tier`, built once per tier: native features (without AVX-512 under
/// `TP_BULK_ISA=avx2`), `opt_level=speed`, the IR verifier in debug builds; the fast tier
/// allocates registers in a single pass (about half the compile time, slower code), the
/// optimised tier with the backtracking allocator.
fn isa(tier: Tier) -> Result<OwnedTargetIsa> {
    static ISAS: [OnceLock<std::result::Result<OwnedTargetIsa, String>>; 2] =
        [OnceLock::new(), OnceLock::new()];
    ISAS[tier as usize]
        .get_or_init(|| {
            let mut flags = settings::builder();
            let set = |f: &mut settings::Builder, k: &str, v: &str| {
                f.set(k, v).map_err(|e| format!("setting {k}={v}: {e}"))
            };
            set(&mut flags, "opt_level", "speed")?;
            let regalloc = match tier {
                Tier::Fast => "single_pass",
                Tier::Optimized => "backtracking",
            };
            set(&mut flags, "regalloc_algorithm", regalloc)?;
            set(&mut flags, "use_colocated_libcalls", "false")?;
            set(&mut flags, "is_pic", "false")?;
            let verify = if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            };
            set(&mut flags, "enable_verifier", verify)?;
            let mut builder = cranelift_native::builder().map_err(|e| format!("host ISA: {e}"))?;
            if cfg!(target_arch = "x86_64")
                && super::math::bulk::level_cap() == super::math::bulk::Level::Avx2
            {
                // `TP_BULK_ISA=avx2`: the inline code an AVX2-only host gets, too.
                for f in AVX512_FLAGS {
                    builder
                        .set(f, "false")
                        .map_err(|e| format!("setting {f}=false: {e}"))?;
                }
            }
            builder
                .finish(settings::Flags::new(flags))
                .map_err(|e| format!("host ISA: {e}"))
        })
        .clone()
        .map_err(|e| Error::compile(CompileKind::Codegen, format!("cpu codegen: {e}")))
}

/// Integer `pow` with eager's semantics (wrapping repeated squaring; a negative exponent gives
/// 1 for base 1, ±1 for base -1, 0 otherwise). Called from kernels computing `pow` on integers.
extern "C" fn tp_kernel_ipow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let mut result: i64 = 1;
    let mut b = base;
    let mut e = exp as u64;
    while e != 0 {
        if e & 1 != 0 {
            result = result.wrapping_mul(b);
        }
        e >>= 1;
        if e != 0 {
            b = b.wrapping_mul(b);
        }
    }
    result
}

const IPOW_SYMBOL: &str = "tp_kernel_ipow";

/// Owns a JIT module; dropping it frees the module's code and data. `counted`: whether it is
/// one of the [`live_kernels`] (a kernel's first code; not the optimised code it tiers up to).
pub(super) struct JitCode {
    module: Option<JITModule>,
    counted: bool,
}

impl JitCode {
    /// Stops counting this code in [`live_kernels`] (it backs a kernel counted already).
    fn uncount(&mut self) {
        if std::mem::replace(&mut self.counted, false) && self.module.is_some() {
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The machine code a [`CompiledKernel`] owns: a Cranelift module or an assembled kernel
/// ([`wide_asm`]). Both count in [`live_kernels`] while they exist (a kernel's optimised
/// second tier does not: it backs the same kernel).
pub(super) enum Code {
    /// Held for its `Drop` (frees the module).
    Jit(#[allow(dead_code)] Box<JitCode>),
    /// Held for its `Drop` (unmaps the code).
    Wide(#[allow(dead_code)] WideCode),
}

/// Counts one piece of mapped kernel code in [`live_kernels`] for as long as it lives.
pub(super) struct LiveCode(());

impl LiveCode {
    pub(super) fn new() -> LiveCode {
        LIVE.fetch_add(1, Ordering::Relaxed);
        LiveCode(())
    }
}

impl Drop for LiveCode {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the only pointer into this module is the owning `CompiledKernel`'s entry
            // (or its tier-up's), which is being dropped with it; no call can be running
            // (launch borrows the kernel for the duration of every call).
            unsafe { module.free_memory() };
            if self.counted {
                LIVE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

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

/// The granularity in which the JIT maps code.
const PAGE: usize = 4096;

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
            if layout.kept_inner && choose_lanes(spec, &liveness(spec)) == Lanes::Scalar =>
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
/// each op's [`ScalarOp::cost`] (transcendentals 8, the general `pow` 12, division / `sqrt` 1);
/// softmax pays one `exp` per element. The launcher scales its minimum parallel chunk by it, so
/// compute-heavy kernels go multi-threaded at smaller sizes.
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

fn needs_ipow(spec: &KernelSpec) -> bool {
    spec.insts
        .iter()
        .any(|i| matches!(i, Inst::Op { op: ScalarOp::Pow, compute, .. } if !compute.is_float()))
}

/// Compiles `spec` for `layout` into native code.
///
/// Validates both first (a malformed spec or layout is an error, never bad code). The function
/// is `extern "C" fn(*const KernelArgs)`; see [`KernelArgs`](super::KernelArgs). With
/// `TP_LOGS=clif` the spec, the layout, the CLIF and the compile time are printed to stderr.
pub fn compile(spec: &KernelSpec, layout: &LoopLayout) -> Result<CompiledKernel> {
    compile_with(spec, layout, &CodegenOptions::default())
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
            bulk_math: super::math::bulk::level().is_some(),
        }
    }
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
    if !super::tiers::enabled() {
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
        && let Some(level) = super::math::bulk::level()
        && let Some(wide) = wide_asm::assemble(spec, layout, level).map_err(|e| {
            Error::compile(
                CompileKind::Codegen,
                format!("cpu codegen: assembling: {e}"),
            )
        })?
    {
        return Ok(finish_wide(spec, layout, wide, t0));
    }
    compile_cranelift(spec, layout, options, tier, t0)
}

/// The optimised code of `spec` for `layout`, for a fast-tier kernel that tiers up: its entry
/// and the code that holds it (not counted in [`live_kernels`]).
pub(super) fn compile_optimized_code(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
) -> Result<(KernelFn, Code)> {
    let k = compile_cranelift(spec, layout, options, Tier::Optimized, Instant::now())?;
    let CompiledKernel {
        entry, mut _code, ..
    } = k;
    if let Code::Jit(code) = &mut _code {
        code.uncount();
    }
    Ok((entry, _code))
}

/// Compiles a validated `spec` and `layout` with Cranelift in `tier`.
fn compile_cranelift(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
    tier: Tier,
    t0: Instant,
) -> Result<CompiledKernel> {
    let cerr = |what: &str, e: &dyn std::fmt::Display| {
        Error::compile(CompileKind::Codegen, format!("cpu codegen: {what}: {e}"))
    };
    let isa = isa(tier)?;
    let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
    MathShims::register_symbols(&mut jb);
    jb.symbol(IPOW_SYMBOL, tp_kernel_ipow as *const u8);
    let mut module = JITModule::new(jb);
    let code = JitCode {
        module: None,
        counted: true,
    };
    let shims = MathShims::declare(&mut module).map_err(|e| cerr("declaring math shims", &e))?;
    let math = MathCtx::for_isa(module.isa()).with_shims(shims);
    let mut ctx = module.make_context();
    let ptr = module.target_config().pointer_type();
    let mut sig = Signature::new(module.isa().default_call_conv());
    sig.params.push(AbiParam::new(ptr));
    ctx.func.signature = sig.clone();
    let ipow_id = if needs_ipow(spec) {
        let mut isig = Signature::new(module.isa().default_call_conv());
        isig.params.push(AbiParam::new(I64));
        isig.params.push(AbiParam::new(I64));
        isig.returns.push(AbiParam::new(I64));
        Some(
            module
                .declare_function(IPOW_SYMBOL, Linkage::Import, &isig)
                .map_err(|e| cerr("declaring the pow helper", &e))?,
        )
    } else {
        None
    };
    let live = liveness(spec);
    let lanes = choose_lanes(spec, &live);
    {
        let mut fctx = FunctionBuilderContext::new();
        let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let ipow = ipow_id.map(|id| module.declare_func_in_func(id, fb.func));
        let entry = fb.create_block();
        fb.append_block_params_for_function_params(entry);
        fb.switch_to_block(entry);
        fb.seal_block(entry);
        let args = fb.block_params(entry)[0];
        let zero = fb.ins().iconst(I64, 0);
        let mut em = Emitter {
            fb: &mut fb,
            math: &math,
            spec,
            layout,
            lanes,
            live,
            ipow,
            ptrs: Vec::new(),
            shape: Vec::new(),
            strides: Vec::new(),
            inner_bytes: Vec::new(),
            start: zero,
            end: zero,
            partials: zero,
            params: zero,
            call_conv: module.isa().default_call_conv(),
            bulk: options.bulk_math,
            reads: Vec::new(),
            scratch_row: None,
            slot_bytes: 0,
        };
        em.load_args(args)?;
        em.emit_kernel()?;
        fb.finalize(module.target_config());
    }
    if logging::enabled("clif") {
        logging::log("clif", || {
            format!(
                "{spec}layout: {layout}\nlanes: {}\n{}{}",
                lanes.count(),
                staging::plan(spec, layout, &liveness(spec), lanes, options.bulk_math)
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                ctx.func.display()
            )
        });
    }
    let id = module
        .declare_function("tp_kernel", Linkage::Local, &sig)
        .map_err(|e| cerr("declaring the kernel", &e))?;
    let log = logging::enabled("clif");
    ctx.set_disasm(log);
    let define = module.define_function(id, &mut ctx);
    // The JIT maps code in whole pages (one anonymous mapping per allocation).
    let code_bytes = ctx
        .compiled_code()
        .map_or(0, |c| c.code_info().total_size as usize)
        .next_multiple_of(PAGE);
    if log && define.is_ok() {
        let asm = ctx
            .compiled_code()
            .and_then(|c| c.vcode.clone())
            .unwrap_or_default();
        logging::log("clif", || format!("machine code:\n{asm}"));
    }
    let mut code = code;
    LIVE.fetch_add(1, Ordering::Relaxed);
    // From here on the module is owned (and freed on every path) by `code`.
    let module = code.module.insert(module);
    define.map_err(|e| cerr("compiling", &format!("{e:?}")))?;
    module
        .finalize_definitions()
        .map_err(|e| cerr("linking", &e))?;
    let raw = module.get_finalized_function(id);
    // SAFETY: `raw` is the finalized code of a function compiled with the signature
    // `fn(ptr)` in the platform's default C calling convention.
    let entry: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(raw) };
    let compile_time = t0.elapsed();
    if log {
        logging::log("clif", || format!("compiled in {compile_time:?}"));
    }
    Ok(CompiledKernel {
        spec: spec.clone(),
        layout: layout.clone(),
        entry,
        compile_time,
        vector_lanes: lanes.count() as usize,
        work_weight: work_weight(spec),
        code_bytes,
        params: spec.param_dtypes(),
        tier_up: None,
        _code: Code::Jit(Box::new(code)),
    })
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

#[cfg(test)]
mod tests {
    use super::tp_kernel_ipow;

    #[test]
    fn integer_pow_matches_eager_rules() {
        assert_eq!(tp_kernel_ipow(2, 10), 1024);
        assert_eq!(tp_kernel_ipow(-1, -3), -1);
        assert_eq!(tp_kernel_ipow(-1, -4), 1);
        assert_eq!(tp_kernel_ipow(1, -5), 1);
        assert_eq!(tp_kernel_ipow(3, -1), 0);
        assert_eq!(tp_kernel_ipow(0, 0), 1);
        assert_eq!(tp_kernel_ipow(3, 41), 3i64.wrapping_pow(41));
        assert_eq!(tp_kernel_ipow(7, 63), 7i64.wrapping_pow(63));
    }
}
