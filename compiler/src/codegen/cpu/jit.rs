//! Building a kernel with Cranelift: the host ISA per register-allocation tier, the JIT module
//! with the math shims and the integer `pow` helper, the kernel function's CLIF (emitted by
//! `loops`), and its machine code, defined and linked.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cranelift_codegen::Context;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use tensorplay_ir::{CompileKind, Error, Result, ScalarOp};

use crate::codegen::cpu::args::KernelFn;
use crate::codegen::cpu::code::{Code, JitCode, PAGE};
use crate::codegen::cpu::emit::Emitter;
use crate::codegen::cpu::math::bulk::{self, Level};
use crate::codegen::cpu::math::{MathCtx, MathShims};
use crate::codegen::cpu::staging;
use crate::codegen::cpu::types::{CodegenOptions, Lanes, choose_lanes};
use crate::codegen::kernel::{Inst, KernelSpec, LoopLayout};
use crate::passes::logging;

/// Which register allocator a Cranelift kernel is compiled with (indexes the ISA table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    /// Single-pass register allocation: the first code of a tiered kernel.
    Fast = 0,
    /// Backtracking register allocation: the code every kernel ends up running.
    Optimized = 1,
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
            if cfg!(target_arch = "x86_64") && bulk::level_cap() == Level::Avx2 {
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

fn needs_ipow(spec: &KernelSpec) -> bool {
    spec.insts
        .iter()
        .any(|i| matches!(i, Inst::Op { op: ScalarOp::Pow, compute, .. } if !compute.is_float()))
}

/// A kernel Cranelift compiled: its entry and the code holding it, the vector shape of its
/// loops, the bytes of code it keeps mapped and the time since its compile started.
pub(super) struct Jitted {
    pub(super) entry: KernelFn,
    pub(super) code: JitCode,
    pub(super) lanes: Lanes,
    pub(super) code_bytes: usize,
    pub(super) compile_time: Duration,
}

fn cerr(what: &str, e: &dyn std::fmt::Display) -> Error {
    Error::compile(CompileKind::Codegen, format!("cpu codegen: {what}: {e}"))
}

/// Compiles a validated `spec` and `layout` with Cranelift in `tier` (`t0`: when the compile
/// started).
pub(super) fn compile_cranelift(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
    tier: Tier,
    t0: Instant,
) -> Result<Jitted> {
    let (mut module, math) = jit_module(tier)?;
    let mut ctx = module.make_context();
    let ptr = module.target_config().pointer_type();
    let mut sig = Signature::new(module.isa().default_call_conv());
    sig.params.push(AbiParam::new(ptr));
    ctx.func.signature = sig.clone();
    let ipow_id = declare_ipow(&mut module, spec)?;
    let lanes = emit_function(&mut ctx, &mut module, &math, ipow_id, spec, layout, options)?;
    if logging::enabled("clif") {
        logging::log("clif", || {
            format!(
                "{spec}layout: {layout}\nlanes: {}\n{}{}",
                lanes.count(),
                staging::plan(spec, layout, &spec.liveness(), lanes, options.bulk_math)
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                ctx.func.display()
            )
        });
    }
    let (entry, code, code_bytes) = define_and_link(module, &mut ctx, &sig)?;
    let compile_time = t0.elapsed();
    if logging::enabled("clif") {
        logging::log("clif", || format!("compiled in {compile_time:?}"));
    }
    Ok(Jitted {
        entry,
        code,
        lanes,
        code_bytes,
        compile_time,
    })
}

/// A JIT module for the host ISA in `tier` that resolves the math shims and the integer `pow`
/// helper, and the math context of its declared shims.
fn jit_module(tier: Tier) -> Result<(JITModule, MathCtx)> {
    let isa = isa(tier)?;
    let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
    MathShims::register_symbols(&mut jb);
    jb.symbol(IPOW_SYMBOL, tp_kernel_ipow as *const u8);
    let mut module = JITModule::new(jb);
    let shims = MathShims::declare(&mut module).map_err(|e| cerr("declaring math shims", &e))?;
    let math = MathCtx::for_isa(module.isa()).with_shims(shims);
    Ok((module, math))
}

/// Declares the integer `pow` helper in `module` when `spec` needs it.
fn declare_ipow(module: &mut JITModule, spec: &KernelSpec) -> Result<Option<FuncId>> {
    if !needs_ipow(spec) {
        return Ok(None);
    }
    let mut isig = Signature::new(module.isa().default_call_conv());
    isig.params.push(AbiParam::new(I64));
    isig.params.push(AbiParam::new(I64));
    isig.returns.push(AbiParam::new(I64));
    Ok(Some(
        module
            .declare_function(IPOW_SYMBOL, Linkage::Import, &isig)
            .map_err(|e| cerr("declaring the pow helper", &e))?,
    ))
}

/// Emits the kernel function's CLIF into `ctx.func` (whose signature is set): its arguments,
/// then the loops of its kind. Returns the vector shape of the loops.
fn emit_function(
    ctx: &mut Context,
    module: &mut JITModule,
    math: &MathCtx,
    ipow_id: Option<FuncId>,
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
) -> Result<Lanes> {
    let live = spec.liveness();
    let lanes = choose_lanes(spec, &live);
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
        math,
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
    Ok(lanes)
}

/// Declares the kernel function in `module`, compiles `ctx`'s CLIF into it and links it:
/// its entry, the code that owns `module` from here on (counted in `live_kernels`), and the
/// bytes of code it maps.
fn define_and_link(
    mut module: JITModule,
    ctx: &mut Context,
    sig: &Signature,
) -> Result<(KernelFn, JitCode, usize)> {
    let id = module
        .declare_function("tp_kernel", Linkage::Local, sig)
        .map_err(|e| cerr("declaring the kernel", &e))?;
    let log = logging::enabled("clif");
    ctx.set_disasm(log);
    let define = module.define_function(id, ctx);
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
    // From here on the module is owned (and freed on every path) by `code`.
    let mut code = JitCode::counted(module);
    let module = code.module();
    define.map_err(|e| cerr("compiling", &format!("{e:?}")))?;
    module
        .finalize_definitions()
        .map_err(|e| cerr("linking", &e))?;
    let raw = module.get_finalized_function(id);
    // SAFETY: `raw` is the finalized code of a function compiled with the signature
    // `fn(ptr)` in the platform's default C calling convention.
    let entry: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(raw) };
    Ok((entry, code, code_bytes))
}

/// The optimised code of `spec` for `layout`, for a fast-tier kernel that tiers up: its entry
/// and the code that holds it (not counted in `live_kernels`).
pub(super) fn compile_optimized_code(
    spec: &KernelSpec,
    layout: &LoopLayout,
    options: &CodegenOptions,
) -> Result<(KernelFn, Code)> {
    let Jitted {
        entry, mut code, ..
    } = compile_cranelift(spec, layout, options, Tier::Optimized, Instant::now())?;
    code.uncount();
    Ok((entry, Code::Jit(Box::new(code))))
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
