//! Bulk math kernels (see [`tensorplay_math::bulk`], re-exported here) and their inline
//! baseline: the same operation as a JIT-compiled `f32x4` loop of the inline CLIF code.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F32X4};
use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};
use tensorplay_ir::{CompileKind, Error, Result};
pub use tensorplay_math::bulk::*;

use crate::codegen::cpu::math::{MathCtx, MathShims, emit_pow, emit_unary};

/// The inline CLIF form of a [`BulkOp`] ([`emit_unary`] / [`emit_pow`],
/// CLIF `sqrt` / `fdiv`), JIT-compiled as a standalone loop with the bulk
/// kernels' signature: an `f32x4` body and a scalar tail, FMA iff the host
/// ISA has it. It is the baseline the bulk kernels are benchmarked and
/// tested against (same bits, see the module docs), and works for every op,
/// on every host Cranelift supports.
pub struct InlineLoop {
    module: Option<JITModule>,
    code: *const u8,
    arity: usize,
}

impl std::fmt::Debug for InlineLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineLoop")
            .field("code", &self.code)
            .field("arity", &self.arity)
            .finish()
    }
}

impl Drop for InlineLoop {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: the code is only reachable through `self`, which is
            // going away (callers may not keep the pointers past it).
            unsafe { m.free_memory() };
        }
    }
}

impl InlineLoop {
    /// JIT-compiles the inline loop of `op` for the host.
    ///
    /// # Errors
    /// [`Error::Compile`] when the host ISA is unsupported or Cranelift
    /// rejects the function.
    ///
    /// ```
    /// use tensorplay_compiler::codegen::cpu::math::{MathFn, bulk::{BulkOp, InlineLoop}};
    /// let k = InlineLoop::compile(BulkOp::Math(MathFn::Exp)).unwrap();
    /// let f = k.unary().unwrap();
    /// let x = [0.0f32, 1.0, -1.0, 2.0, 3.0];
    /// let mut y = [0.0f32; 5];
    /// // SAFETY: both buffers hold 5 elements; `k` is alive.
    /// unsafe { f(x.as_ptr(), y.as_mut_ptr(), 5) };
    /// assert_eq!(y[0], 1.0);
    /// assert!((y[1] - std::f32::consts::E).abs() < 1e-6);
    /// ```
    pub fn compile(op: BulkOp) -> Result<InlineLoop> {
        let err = |what: &str, e: &dyn std::fmt::Display| {
            Error::compile(
                CompileKind::Codegen,
                format!("inline math loop for {}: {what}: {e}", op.name()),
            )
        };
        let mut flags = settings::builder();
        flags
            .set("opt_level", "speed")
            .map_err(|e| err("settings", &e))?;
        let isa = cranelift_native::builder()
            .map_err(|e| err("host ISA", &e))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| err("host ISA", &e))?;
        let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        MathShims::register_symbols(&mut jb);
        let mut module = JITModule::new(jb);
        let shims = MathShims::declare(&mut module).map_err(|e| err("shims", &e))?;
        let math = MathCtx::for_isa(module.isa()).with_shims(shims);
        let inputs = op.arity();
        let ptr = module.target_config().pointer_type();
        let mut ctx = module.make_context();
        for _ in 0..inputs + 2 {
            ctx.func.signature.params.push(AbiParam::new(ptr));
        }
        let mut fctx = FunctionBuilderContext::new();
        let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = fb.create_block();
        let heads = [fb.create_block(), fb.create_block()];
        let bodies = [fb.create_block(), fb.create_block()];
        let exit = fb.create_block();
        for b in heads.iter().chain(&bodies) {
            fb.append_block_param(*b, ptr);
        }
        fb.append_block_params_for_function_params(entry);
        fb.switch_to_block(entry);
        let params = fb.block_params(entry).to_vec();
        let (srcs, dst, n) = (&params[..inputs], params[inputs], params[inputs + 1]);
        let zero = fb.ins().iconst(ptr, 0);
        fb.ins().jump(heads[0], &[zero.into()]);
        let mem = MemFlagsData::new();
        for (k, ty) in [F32X4, F32].into_iter().enumerate() {
            let lanes = ty.lane_count() as i64;
            fb.switch_to_block(heads[k]);
            let i = fb.block_params(heads[k])[0];
            let next = fb.ins().iadd_imm_s(i, lanes);
            let ok = fb.ins().icmp(IntCC::UnsignedLessThanOrEqual, next, n);
            if k == 0 {
                fb.ins()
                    .brif(ok, bodies[0], &[i.into()], heads[1], &[i.into()]);
            } else {
                fb.ins().brif(ok, bodies[1], &[i.into()], exit, &[]);
            }
            fb.switch_to_block(bodies[k]);
            let i = fb.block_params(bodies[k])[0];
            let off = fb.ins().imul_imm_s(i, 4);
            let xs: Vec<Value> = srcs
                .iter()
                .map(|&s| {
                    let a = fb.ins().iadd(s, off);
                    fb.ins().load(ty, mem, a, 0)
                })
                .collect();
            let y = match op {
                BulkOp::Math(f) => emit_unary(&mut fb, &math, f, xs[0]),
                BulkOp::Sqrt => fb.ins().sqrt(xs[0]),
                BulkOp::Div => fb.ins().fdiv(xs[0], xs[1]),
                BulkOp::Pow => emit_pow(&mut fb, &math, xs[0], xs[1]),
            };
            let a = fb.ins().iadd(dst, off);
            fb.ins().store(mem, y, a, 0);
            let next = fb.ins().iadd_imm_s(i, lanes);
            fb.ins().jump(heads[k], &[next.into()]);
        }
        fb.switch_to_block(exit);
        fb.ins().return_(&[]);
        fb.seal_all_blocks();
        fb.finalize(module.target_config());
        let id = module
            .declare_function("inline_loop", Linkage::Local, &ctx.func.signature)
            .map_err(|e| err("declare", &e))?;
        module
            .define_function(id, &mut ctx)
            .map_err(|e| err("define", &e))?;
        module
            .finalize_definitions()
            .map_err(|e| err("finalize", &e))?;
        let code = module.get_finalized_function(id);
        Ok(InlineLoop {
            module: Some(module),
            code,
            arity: inputs,
        })
    }

    /// The loop as a [`UnaryFn`] (`None` for a binary op). Valid while
    /// `self` lives.
    pub fn unary(&self) -> Option<UnaryFn> {
        // SAFETY: compiled with the signature fn(*const f32, *mut f32, usize)
        // and the host's default (C) calling convention.
        (self.arity == 1).then(|| unsafe { std::mem::transmute::<*const u8, UnaryFn>(self.code) })
    }

    /// The loop as a [`BinaryFn`] (`None` for a unary op). Valid while
    /// `self` lives.
    pub fn binary(&self) -> Option<BinaryFn> {
        // SAFETY: compiled with the signature
        // fn(*const f32, *const f32, *mut f32, usize), C calling convention.
        (self.arity == 2).then(|| unsafe { std::mem::transmute::<*const u8, BinaryFn>(self.code) })
    }
}
