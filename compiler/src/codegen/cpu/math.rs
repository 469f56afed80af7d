//! The math library as CLIF: [`emit_unary`] and [`emit_pow`] append straight-line CLIF
//! (no branches: every path is computed, then chosen with selects) for a value of type `f32`
//! or `f32x4` — the scalar and the vector form come from the same code — or, for `f64` /
//! `f64x2`, a call per lane to an `extern "C" fn(f64) -> f64` shim wrapping Rust's `f64`
//! methods (see [`MathShims`]).
//!
//! Cranelift has no `exp`/`log`/`tanh` instructions, so fused CPU kernels get them from
//! here. The algorithms themselves live in the `tensorplay-math` crate ([`tensorplay_math`]:
//! its docs describe each one, its special values and its measured accuracy), written once
//! against the [`Arith`](tensorplay_math::arith::Arith) vocabulary; this module instantiates
//! them for CLIF (`math/emit.rs`), while the bulk kernels ([`bulk`]) and the runtime's eager
//! kernels run the Rust instantiation of the very same operations — so fused code, bulk
//! kernels and eager ops return the same bits (FMA form; NaN payloads aside).
//!
//! # Example
//!
//! JIT-compile `fn(x: f32x4) -> f32x4 { exp(x) }` and call it:
//!
//! ```
//! use cranelift_codegen::ir::{types, AbiParam, InstBuilder};
//! use cranelift_codegen::settings::{self, Configurable};
//! use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
//! use cranelift_jit::{JITBuilder, JITModule};
//! use cranelift_module::{Linkage, Module};
//! use tensorplay_compiler::codegen::cpu::math::{emit_unary, MathCtx, MathFn, MathShims};
//!
//! let mut flags = settings::builder();
//! flags.set("opt_level", "speed").unwrap();
//! let isa = cranelift_native::builder()
//!     .unwrap()
//!     .finish(settings::Flags::new(flags))
//!     .unwrap();
//! let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
//! MathShims::register_symbols(&mut jb);
//! let mut module = JITModule::new(jb);
//! let shims = MathShims::declare(&mut module).unwrap();
//! let math = MathCtx::for_isa(module.isa()).with_shims(shims);
//!
//! let mut ctx = module.make_context();
//! ctx.func.signature.params.push(AbiParam::new(types::F32X4));
//! ctx.func.signature.returns.push(AbiParam::new(types::F32X4));
//! let mut fctx = FunctionBuilderContext::new();
//! let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
//! let block = fb.create_block();
//! fb.append_block_params_for_function_params(block);
//! fb.switch_to_block(block);
//! fb.seal_block(block);
//! let x = fb.block_params(block)[0];
//! let y = emit_unary(&mut fb, &math, MathFn::Exp, x);
//! fb.ins().return_(&[y]);
//! fb.finalize(module.target_config());
//!
//! let id = module
//!     .declare_function("exp4", Linkage::Local, &ctx.func.signature)
//!     .unwrap();
//! module.define_function(id, &mut ctx).unwrap();
//! module.finalize_definitions().unwrap();
//! let code = module.get_finalized_function(id);
//! # #[cfg(target_arch = "x86_64")]
//! # {
//! use std::arch::x86_64::{__m128, _mm_loadu_ps, _mm_storeu_ps};
//! // SAFETY: the function was compiled with the signature fn(f32x4) -> f32x4.
//! let f: extern "C" fn(__m128) -> __m128 = unsafe { std::mem::transmute(code) };
//! let input = [0.0f32, 1.0, -1.0, 10.0];
//! let mut out = [0.0f32; 4];
//! // SAFETY: the arrays hold 4 f32 each.
//! unsafe { _mm_storeu_ps(out.as_mut_ptr(), f(_mm_loadu_ps(input.as_ptr()))) };
//! for (o, i) in out.iter().zip(input) {
//!     let want = (i as f64).exp();
//!     assert!(((*o as f64) - want).abs() <= want * 3e-7);
//! }
//! # }
//! # let _ = code;
//! ```

pub mod bulk;
mod emit;
mod wide;

pub(crate) use wide::{demote_combine, promote_halves};

use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2};
use cranelift_codegen::ir::{
    AbiParam, ExtFuncData, ExternalName, FuncRef, InstBuilder, Signature, Type, UserExternalName,
    Value,
};
use cranelift_codegen::isa::{CallConv, TargetIsa};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITBuilder;
use cranelift_module::{FuncId, Linkage, Module, ModuleResult};

use tensorplay_ir::{LibmFn, LibmFn2};
pub use tensorplay_math::MathFn;
use tensorplay_math::pow;
pub use tensorplay_math::shims::{
    erf_f64, erfc_f64, gelu_erf_f64, gelu_tanh_f64, sigmoid_f64, silu_f64, tp_math_cos_f64,
    tp_math_erf_f64, tp_math_exp_f64, tp_math_expm1_f64, tp_math_gelu_erf_f64,
    tp_math_gelu_tanh_f64, tp_math_log_f64, tp_math_log1p_f64, tp_math_pow_f64,
    tp_math_sigmoid_f64, tp_math_silu_f64, tp_math_sin_f64, tp_math_tanh_f64,
};

use emit::Em;

/// The shims in table order: one per [`MathFn`], `pow`, one per [`LibmFn`], one per
/// [`LibmFn2`] (all from the math library's function tables).
pub const NUM_SHIMS: usize = MathFn::ALL.len() + 1 + LibmFn::ALL.len() + LibmFn2::ALL.len();
const POW_SHIM: usize = MathFn::ALL.len();
const POW_SHIM_NAME: &str = "tp_math_pow_f64";
/// Shim index of the first [`LibmFn`], then of the first [`LibmFn2`].
const LIBM_SHIM: usize = POW_SHIM + 1;
const LIBM2_SHIM: usize = LIBM_SHIM + LibmFn::ALL.len();

/// Index of `f`'s f64 shim in the shim table.
fn shim_index(f: MathFn) -> usize {
    MathFn::ALL.iter().position(|&g| g == f).expect("in ALL")
}

fn libm_shim_index(f: LibmFn) -> usize {
    LIBM_SHIM + LibmFn::ALL.iter().position(|&g| g == f).expect("in ALL")
}

fn libm2_shim_index(f: LibmFn2) -> usize {
    LIBM2_SHIM + LibmFn2::ALL.iter().position(|&g| g == f).expect("in ALL")
}

/// Number of `f64` parameters of shim `idx`.
fn shim_params(idx: usize) -> usize {
    if idx == POW_SHIM || idx >= LIBM2_SHIM {
        2
    } else {
        1
    }
}

/// A shim the JIT must be able to resolve: its symbol name, its address and
/// its number of `f64` parameters (it returns one `f64`).
#[derive(Clone, Copy, Debug)]
pub struct ShimSymbol {
    /// Symbol name (also the name [`MathShims::declare`] imports).
    pub name: &'static str,
    /// Address of the `extern "C"` function.
    pub addr: *const u8,
    /// Number of `f64` parameters (1, or 2 for pow).
    pub params: usize,
}

/// Every shim symbol, for registering in a JIT builder by hand
/// ([`MathShims::register_symbols`] does it for a [`JITBuilder`]).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::math::{shim_symbols, NUM_SHIMS};
/// let syms = shim_symbols();
/// assert_eq!(syms.len(), NUM_SHIMS);
/// assert_eq!(syms[0].name, "tp_math_exp_f64");
/// ```
pub fn shim_symbols() -> [ShimSymbol; NUM_SHIMS] {
    let symbol = |name, addr, params| ShimSymbol { name, addr, params };
    let unary =
        |(name, f): (&'static str, extern "C" fn(f64) -> f64)| symbol(name, f as *const u8, 1);
    let binary =
        |(name, f): (&'static str, extern "C" fn(f64, f64) -> f64)| symbol(name, f as *const u8, 2);
    let all: Vec<ShimSymbol> = MathFn::ALL
        .iter()
        .map(|f| unary(f.shim()))
        .chain([symbol(POW_SHIM_NAME, tp_math_pow_f64 as *const u8, 2)])
        .chain(LibmFn::ALL.iter().map(|f| unary(f.shim())))
        .chain(LibmFn2::ALL.iter().map(|f| binary(f.shim())))
        .collect();
    all.try_into().expect("NUM_SHIMS symbols")
}

/// The f64 shims declared (as imports) in one [`Module`].
///
/// Declare once per module; [`emit_unary`] / [`emit_pow`] import the needed
/// ones into the function being built on first use (reusing an import the
/// caller already made with `declare_func_in_func`).
#[derive(Clone, Copy, Debug)]
pub struct MathShims {
    ids: [FuncId; NUM_SHIMS],
    call_conv: CallConv,
}

impl MathShims {
    /// Registers every shim's address under its symbol name.
    pub fn register_symbols(builder: &mut JITBuilder) {
        for s in shim_symbols() {
            builder.symbol(s.name, s.addr);
        }
    }

    /// Declares every shim as an imported function of `module`.
    ///
    /// # Errors
    /// Whatever [`Module::declare_function`] reports (e.g. a clashing
    /// declaration of the same name with another signature).
    #[allow(
        clippy::result_large_err,
        reason = "returns cranelift_module's own result type, like Module::declare_function"
    )]
    pub fn declare<M: Module + ?Sized>(module: &mut M) -> ModuleResult<MathShims> {
        let call_conv = module.isa().default_call_conv();
        let mut ids = Vec::with_capacity(NUM_SHIMS);
        for s in shim_symbols() {
            let sig = shim_signature(call_conv, s.params);
            ids.push(module.declare_function(s.name, Linkage::Import, &sig)?);
        }
        let ids: [FuncId; NUM_SHIMS] = ids.try_into().expect("NUM_SHIMS ids");
        Ok(MathShims { ids, call_conv })
    }

    /// The declared id of `f`'s f64 shim.
    pub fn func_id(&self, f: MathFn) -> FuncId {
        self.ids[shim_index(f)]
    }

    /// The declared id of the f64 pow shim.
    pub fn pow_func_id(&self) -> FuncId {
        self.ids[POW_SHIM]
    }
}

fn shim_signature(call_conv: CallConv, params: usize) -> Signature {
    let mut sig = Signature::new(call_conv);
    for _ in 0..params {
        sig.params.push(AbiParam::new(F64));
    }
    sig.returns.push(AbiParam::new(F64));
    sig
}

/// Per-compilation settings of the math library.
#[derive(Clone, Copy, Debug)]
pub struct MathCtx {
    has_fma: bool,
    shims: Option<MathShims>,
}

impl MathCtx {
    /// A context that emits `fma` iff `has_fma`, without f64 shims (f64
    /// values and f32 sin/cos then panic in [`emit_unary`]).
    ///
    /// ```
    /// use tensorplay_compiler::codegen::cpu::math::MathCtx;
    /// assert!(!MathCtx::new(false).has_fma());
    /// ```
    pub fn new(has_fma: bool) -> MathCtx {
        MathCtx {
            has_fma,
            shims: None,
        }
    }

    /// A context for `isa`, with `has_fma` from [`isa_has_fma`].
    pub fn for_isa(isa: &dyn TargetIsa) -> MathCtx {
        MathCtx::new(isa_has_fma(isa))
    }

    /// Adds the module's f64 shims.
    pub fn with_shims(mut self, shims: MathShims) -> MathCtx {
        self.shims = Some(shims);
        self
    }

    /// Whether `fma` is emitted.
    pub fn has_fma(&self) -> bool {
        self.has_fma
    }

    /// The shims, if any.
    pub fn shims(&self) -> Option<&MathShims> {
        self.shims.as_ref()
    }
}

/// Whether `isa` executes CLIF `fma` natively (x86-64: the `has_fma` flag,
/// as detected by `cranelift_native`; aarch64 and s390x: always). Without
/// it, Cranelift would turn `fma` into a libcall, so the library uses
/// `mul` + `add` instead.
pub fn isa_has_fma(isa: &dyn TargetIsa) -> bool {
    match isa.name() {
        "x64" => isa
            .isa_flags()
            .iter()
            .any(|v| v.name == "has_fma" && v.as_bool() == Some(true)),
        "aarch64" | "s390x" => true,
        _ => false,
    }
}

/// Whether [`emit_unary`] / [`emit_pow`] accept values of type `ty`.
pub fn supports(ty: Type) -> bool {
    ty == F32 || ty == F32X4 || ty == F64 || ty == F64X2
}

/// Emits `f(x)` for `x` of type `f32`, `f32x4`, `f64` or `f64x2`, returning
/// the value (same type).
///
/// # Panics
/// On any other type, and for `f64`/`f64x2` values (and f32 sin/cos) when
/// `ctx` has no [`MathShims`].
pub fn emit_unary(fb: &mut FunctionBuilder, ctx: &MathCtx, f: MathFn, x: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    match ty {
        F32 | F32X4 if f.is_inline_f32() => {
            let em = &mut Em::new(fb, ty, ctx.has_fma);
            f.approx(em, x).expect("an inline f32 form")
        }
        F32 | F32X4 => per_lane(fb, ctx, shim_index(f), &[x], true),
        F64 | F64X2 => per_lane(fb, ctx, shim_index(f), &[x], false),
        _ => panic!("math::emit_unary: unsupported type {ty}"),
    }
}

/// Emits `pow(x, y)` (C99 / PyTorch semantics) for `x`, `y` of the same type
/// `f32`, `f32x4`, `f64` or `f64x2`.
///
/// # Panics
/// On other or mismatched types, and for f64 types when `ctx` has no
/// [`MathShims`].
pub fn emit_pow(fb: &mut FunctionBuilder, ctx: &MathCtx, x: Value, y: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    assert_eq!(
        ty,
        fb.func.dfg.value_type(y),
        "math::emit_pow: operand types differ"
    );
    match ty {
        F32 | F32X4 => pow::pow_f32(&mut Em::new(fb, ty, ctx.has_fma), x, y),
        F64 | F64X2 => per_lane(fb, ctx, POW_SHIM, &[x, y], false),
        _ => panic!("math::emit_pow: unsupported type {ty}"),
    }
}

/// Emits the libm function `f` for `x` of type `f32`, `f32x4`, `f64` or `f64x2`: a call per
/// lane to its f64 shim, with f32 lanes promoted and the result rounded once (the same bits as
/// eager, which computes `f.eval(x as f64) as f32`).
///
/// # Panics
/// On other types, and when `ctx` has no [`MathShims`].
pub fn emit_libm(fb: &mut FunctionBuilder, ctx: &MathCtx, f: LibmFn, x: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    match ty {
        F32 | F32X4 => per_lane(fb, ctx, libm_shim_index(f), &[x], true),
        F64 | F64X2 => per_lane(fb, ctx, libm_shim_index(f), &[x], false),
        _ => panic!("math::emit_libm: unsupported type {ty}"),
    }
}

/// Emits the two-operand libm function `f` (as [`emit_libm`]) for `x`, `y` of the same type.
///
/// # Panics
/// On other or mismatched types, and when `ctx` has no [`MathShims`].
pub fn emit_libm2(
    fb: &mut FunctionBuilder,
    ctx: &MathCtx,
    f: LibmFn2,
    x: Value,
    y: Value,
) -> Value {
    let ty = fb.func.dfg.value_type(x);
    assert_eq!(
        ty,
        fb.func.dfg.value_type(y),
        "math::emit_libm2: operand types differ"
    );
    match ty {
        F32 | F32X4 => per_lane(fb, ctx, libm2_shim_index(f), &[x, y], true),
        F64 | F64X2 => per_lane(fb, ctx, libm2_shim_index(f), &[x, y], false),
        _ => panic!("math::emit_libm2: unsupported type {ty}"),
    }
}

/// Imports shim `idx` into the function being built (or finds an existing
/// import of it).
fn import_shim(fb: &mut FunctionBuilder, ctx: &MathCtx, idx: usize) -> FuncRef {
    let shims = ctx
        .shims
        .as_ref()
        .expect("math: f64 functions need MathCtx::with_shims");
    let name = UserExternalName::new(0, shims.ids[idx].as_u32());
    for (fref, data) in fb.func.dfg.ext_funcs.iter() {
        if let ExternalName::User(r) = data.name
            && fb.func.params.user_named_funcs()[r] == name
        {
            return fref;
        }
    }
    let params = shim_params(idx);
    let signature = fb.import_signature(shim_signature(shims.call_conv, params));
    let user = fb.func.declare_imported_user_function(name);
    fb.import_function(ExtFuncData {
        name: ExternalName::user(user),
        signature,
        colocated: false,
        patchable: false,
    })
}

/// Calls shim `idx` once per lane. `f32_lanes`: the values are f32 (promote
/// each lane to f64 and demote the result).
fn per_lane(
    fb: &mut FunctionBuilder,
    ctx: &MathCtx,
    idx: usize,
    args: &[Value],
    f32_lanes: bool,
) -> Value {
    let fref = import_shim(fb, ctx, idx);
    let ty = fb.func.dfg.value_type(args[0]);
    let lanes = ty.lane_count();
    let mut results = Vec::with_capacity(lanes as usize);
    for lane in 0..lanes {
        let lane_args: Vec<Value> = args
            .iter()
            .map(|&a| {
                let v = if ty.is_vector() {
                    fb.ins().extractlane(a, lane as u8)
                } else {
                    a
                };
                if f32_lanes {
                    fb.ins().fpromote(F64, v)
                } else {
                    v
                }
            })
            .collect();
        let call = fb.ins().call(fref, &lane_args);
        let r = fb.inst_results(call)[0];
        results.push(if f32_lanes {
            fb.ins().fdemote(F32, r)
        } else {
            r
        });
    }
    if !ty.is_vector() {
        return results[0];
    }
    let mut v = fb.ins().splat(ty, results[0]);
    for (lane, &r) in results.iter().enumerate().skip(1) {
        v = fb.ins().insertlane(v, r, lane as u8);
    }
    v
}
