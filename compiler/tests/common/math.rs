//! Shared pieces of the math accuracy tests (`math_ulp.rs`, `math_bulk.rs`):
//! a JIT'd loop kernel around the inline CLIF math, the f64 references of
//! the composite activations, the ulp metric and the input generators.
//!
//! Some items are used by only one of the two test files; those carry
//! `#[allow(dead_code)]` (every test file compiles this module on its own).

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{AbiParam, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, default_libcall_names};
use tensorplay_compiler::codegen::cpu::math::{
    MathCtx, MathFn, MathShims, erf_f64, erfc_f64, isa_has_fma,
};

/// The ulp bound of the math library's contract.
pub const MAX_ULP: f64 = 4.0;

/// The host ISA at `opt_level = speed`, as the compiler builds it.
pub fn isa() -> Arc<dyn TargetIsa> {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").unwrap();
    cranelift_native::builder()
        .unwrap()
        .finish(settings::Flags::new(flags))
        .unwrap()
}

/// The code paths to measure: FMA (when the host has it) and mul+add.
#[allow(dead_code)]
pub fn fma_modes() -> Vec<Option<bool>> {
    if isa_has_fma(&*isa()) {
        vec![Some(true), Some(false)]
    } else {
        vec![Some(false)]
    }
}

/// Inputs per function: `TP_ULP_SAMPLES`, default 1_200_000.
pub fn samples() -> usize {
    std::env::var("TP_ULP_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_200_000)
}

/// Bit-identical, or both NaN (payload and sign are free).
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

// ---------------------------------------------------------------------------
// The test's own inline kernel.

/// The body of a kernel: the result of one element (or vector of lanes)
/// from the loaded inputs.
pub type Body<'a> = &'a dyn Fn(&mut FunctionBuilder, &MathCtx, &[Value]) -> Value;

/// A JIT'd elementwise kernel `fn(in0, [in1,] out, n)`, built here rather
/// than taken from the library so that it can pick the FMA mode and the
/// vector width, and check the library's own loop independently.
pub struct Kernel {
    _module: JITModule,
    code: *const u8,
    inputs: usize,
}

impl Kernel {
    /// Builds a kernel over elements of `scalar` type, processing `lanes`
    /// elements per iteration with `vector` values, then a scalar tail.
    /// `fma`: force the FMA (`Some(true)`) or mul+add form; `None` follows
    /// the host.
    pub fn build(
        scalar: Type,
        vector: Type,
        inputs: usize,
        fma: Option<bool>,
        body: Body,
    ) -> Kernel {
        let isa = isa();
        let has_fma = fma.unwrap_or_else(|| isa_has_fma(&*isa));
        let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
        MathShims::register_symbols(&mut jb);
        let mut module = JITModule::new(jb);
        let shims = MathShims::declare(&mut module).unwrap();
        let math = MathCtx::new(has_fma).with_shims(shims);
        let ptr = module.target_config().pointer_type();
        let mut ctx = module.make_context();
        for _ in 0..inputs + 2 {
            ctx.func.signature.params.push(AbiParam::new(ptr));
        }
        let mut fctx = FunctionBuilderContext::new();
        let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = fb.create_block();
        let vhead = fb.create_block();
        let vbody = fb.create_block();
        let thead = fb.create_block();
        let tbody = fb.create_block();
        let exit = fb.create_block();
        for b in [vhead, vbody, thead, tbody] {
            fb.append_block_param(b, ptr);
        }
        fb.append_block_params_for_function_params(entry);
        fb.switch_to_block(entry);
        let params = fb.block_params(entry).to_vec();
        let (srcs, dst, n) = (&params[..inputs], params[inputs], params[inputs + 1]);
        let zero = fb.ins().iconst(ptr, 0);
        fb.ins().jump(vhead, &[zero.into()]);

        let esize = scalar.bytes() as i64;
        let lanes = vector.lane_count() as i64;
        let flags = MemFlagsData::new();
        // vector loop
        fb.switch_to_block(vhead);
        let i = fb.block_params(vhead)[0];
        let next = fb.ins().iadd_imm_s(i, lanes);
        let ok = fb.ins().icmp(IntCC::UnsignedLessThanOrEqual, next, n);
        fb.ins().brif(ok, vbody, &[i.into()], thead, &[i.into()]);
        fb.switch_to_block(vbody);
        let i = fb.block_params(vbody)[0];
        let off = fb.ins().imul_imm_s(i, esize);
        let xs: Vec<Value> = srcs
            .iter()
            .map(|&s| {
                let a = fb.ins().iadd(s, off);
                fb.ins().load(vector, flags, a, 0)
            })
            .collect();
        let y = body(&mut fb, &math, &xs);
        let a = fb.ins().iadd(dst, off);
        fb.ins().store(flags, y, a, 0);
        let next = fb.ins().iadd_imm_s(i, lanes);
        fb.ins().jump(vhead, &[next.into()]);
        // scalar tail
        fb.switch_to_block(thead);
        let i = fb.block_params(thead)[0];
        let ok = fb.ins().icmp(IntCC::UnsignedLessThan, i, n);
        fb.ins().brif(ok, tbody, &[i.into()], exit, &[]);
        fb.switch_to_block(tbody);
        let i = fb.block_params(tbody)[0];
        let off = fb.ins().imul_imm_s(i, esize);
        let xs: Vec<Value> = srcs
            .iter()
            .map(|&s| {
                let a = fb.ins().iadd(s, off);
                fb.ins().load(scalar, flags, a, 0)
            })
            .collect();
        let y = body(&mut fb, &math, &xs);
        let a = fb.ins().iadd(dst, off);
        fb.ins().store(flags, y, a, 0);
        let next = fb.ins().iadd_imm_s(i, 1);
        fb.ins().jump(thead, &[next.into()]);
        fb.switch_to_block(exit);
        fb.ins().return_(&[]);
        fb.seal_all_blocks();
        fb.finalize(module.target_config());

        let id = module
            .declare_function("kernel", Linkage::Local, &ctx.func.signature)
            .unwrap();
        module.define_function(id, &mut ctx).unwrap();
        module.finalize_definitions().unwrap();
        let code = module.get_finalized_function(id);
        Kernel {
            _module: module,
            code,
            inputs,
        }
    }

    /// Runs a unary f32 kernel over `x`.
    pub fn run32(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(self.inputs, 1);
        let mut out = vec![0.0f32; x.len()];
        // SAFETY: built with signature fn(*const f32, *mut f32, usize).
        let f: extern "C" fn(*const f32, *mut f32, usize) =
            unsafe { std::mem::transmute(self.code) };
        f(x.as_ptr(), out.as_mut_ptr(), x.len());
        out
    }

    /// Runs a binary f32 kernel over `x` and `y` (of equal length).
    pub fn run32_2(&self, x: &[f32], y: &[f32]) -> Vec<f32> {
        assert_eq!(self.inputs, 2);
        assert_eq!(x.len(), y.len());
        let mut out = vec![0.0f32; x.len()];
        // SAFETY: built with signature fn(*const f32, *const f32, *mut f32, usize).
        let f: extern "C" fn(*const f32, *const f32, *mut f32, usize) =
            unsafe { std::mem::transmute(self.code) };
        f(x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), x.len());
        out
    }

    /// Runs an f32 kernel of either arity over `args` (one slice per input).
    #[allow(dead_code)]
    pub fn run(&self, args: &[&[f32]]) -> Vec<f32> {
        assert_eq!(self.inputs, args.len());
        match args {
            [x] => self.run32(x),
            [x, y] => self.run32_2(x, y),
            _ => panic!("kernels take one or two inputs, not {}", args.len()),
        }
    }

    /// Runs a unary f64 kernel over `x`.
    #[allow(dead_code)]
    pub fn run64(&self, x: &[f64]) -> Vec<f64> {
        assert_eq!(self.inputs, 1);
        let mut out = vec![0.0f64; x.len()];
        // SAFETY: built with signature fn(*const f64, *mut f64, usize).
        let f: extern "C" fn(*const f64, *mut f64, usize) =
            unsafe { std::mem::transmute(self.code) };
        f(x.as_ptr(), out.as_mut_ptr(), x.len());
        out
    }

    /// Runs a binary f64 kernel over `x` and `y`.
    #[allow(dead_code)]
    pub fn run64_2(&self, x: &[f64], y: &[f64]) -> Vec<f64> {
        assert_eq!(self.inputs, 2);
        let mut out = vec![0.0f64; x.len()];
        // SAFETY: built with signature fn(*const f64, *const f64, *mut f64, usize).
        let f: extern "C" fn(*const f64, *const f64, *mut f64, usize) =
            unsafe { std::mem::transmute(self.code) };
        f(x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), x.len());
        out
    }
}

// ---------------------------------------------------------------------------
// References (f64) and the ulp metric.

/// The logistic function without overflow of `exp` for either sign.
fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// The f64 reference of the activations composed of exp/erf (sigmoid,
/// silu, gelu_erf, gelu_tanh), written to avoid cancellation.
///
/// # Panics
/// For any other function (those have a direct f64 reference).
pub fn activation64(f: MathFn, x: f64) -> f64 {
    match f {
        MathFn::Sigmoid => sigmoid64(x),
        MathFn::Silu => x * sigmoid64(x),
        MathFn::GeluErf => {
            if x >= 0.0 {
                0.5 * x * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2))
            } else {
                0.5 * x * erfc_f64(-x * std::f64::consts::FRAC_1_SQRT_2)
            }
        }
        // 0.5 x (1 + tanh(u)) == x sigmoid(2u), without the cancellation of
        // 1 + tanh(u) for negative x (which the literal formula has in f64 too).
        MathFn::GeluTanh => x * sigmoid64(2.0 * 0.797_884_560_8 * (x + 0.044_715 * x * x * x)),
        other => panic!("{} is not a composite activation", other.name()),
    }
}

/// Spacing of f32 numbers at the magnitude of `v` (2^-149 for subnormals).
pub fn ulp_at(v: f64) -> f64 {
    let a = v.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    let e = ((a.to_bits() >> 52) as i32 - 1023).max(-126);
    2f64.powi(e - 23)
}

/// Error of `got` against the exact `want`, in ulp of f32 at `want`.
pub fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if want == 0.0 && got == 0.0 {
        return if want.is_sign_negative() == got.is_sign_negative() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if want.is_infinite() {
        return if got as f64 == want {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let g = if got.is_infinite() {
        if want as f32 == got {
            return 0.0;
        }
        // treat inf as the next "number" after f32::MAX
        2f64.powi(128).copysign(got as f64)
    } else {
        got as f64
    };
    (g - want).abs() / ulp_at(want)
}

// ---------------------------------------------------------------------------
// Inputs.

/// Special values every unary sweep starts with: signed zeros, infinities,
/// NaNs (quiet, signalling, negative), the normal/subnormal limits, ±MAX,
/// small integers and the neighbours of 1. Each test file appends its own.
pub fn base_specials() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFC0_1234),
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007F_FFFF),
        f32::from_bits(0x807F_FFFF),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        f32::EPSILON,
        1.0 - f32::EPSILON / 2.0,
        1.0 + f32::EPSILON,
    ]
}

/// A tiny deterministic generator (xorshift64*).
pub struct Rng(pub u64);
impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A unary sweep of `total` inputs (at least): `specials`, then runs of
/// 2000 consecutive bit patterns on each side of every edge point (both
/// signs), every k-th bit pattern over the whole range, and a dense uniform
/// sweep of `[lo, hi)` drawn from `Rng(seed)`.
pub fn sweep_inputs(
    specials: Vec<f32>,
    (lo, hi): (f32, f32),
    edges: &[f32],
    seed: u64,
    total: usize,
) -> Vec<f32> {
    let mut v = specials;
    let run = 2000;
    for &e in edges {
        for s in [e, -e] {
            let b = s.to_bits() as i64;
            for d in -run..run {
                let bb = b + d;
                if (0..=u32::MAX as i64).contains(&bb) {
                    v.push(f32::from_bits(bb as u32));
                }
            }
        }
    }
    // every k-th bit pattern over the whole range
    let stride = ((1u64 << 32) / (total as u64 / 2).max(1)) | 1;
    let mut b = 0u64;
    while b < (1u64 << 32) {
        v.push(f32::from_bits(b as u32));
        b += stride;
    }
    // dense uniform sweep of the interesting region
    let mut rng = Rng(seed);
    while v.len() < total {
        v.push((lo as f64 + (hi as f64 - lo as f64) * rng.unit()) as f32);
    }
    v
}

/// Every ordered pair `(x, y)` of `s`, as two columns.
pub fn all_pairs(s: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut xs = Vec::with_capacity(s.len() * s.len());
    let mut ys = Vec::with_capacity(s.len() * s.len());
    for &x in s {
        for &y in s {
            xs.push(x);
            ys.push(y);
        }
    }
    (xs, ys)
}

/// One random `pow` input pair of class `kind` (0..6): any bits for both
/// (0), any x with a moderate y (1), a negative x with an integer y (2), x
/// near 1 with a large y (3), results near overflow or into the subnormal
/// range (4; 5 with a negative x and an integer y).
pub fn pow_pair(rng: &mut Rng, kind: u64) -> (f32, f32) {
    let bits = |r: &mut Rng| f32::from_bits(r.next() as u32);
    match kind {
        0 => (bits(rng), bits(rng)),
        1 => (bits(rng), ((rng.unit() - 0.5) * 8.0) as f32),
        2 => (
            -f32::from_bits((rng.next() as u32) & 0x7FFF_FFFF),
            ((rng.next() % 81) as i32 - 40) as f32,
        ),
        3 => (
            (0.5 + 1.5 * rng.unit()) as f32,
            ((rng.unit() - 0.5) * 4000.0) as f32,
        ),
        _ => {
            let x = 2f64.powf((rng.unit() - 0.5) * 40.0) as f32;
            let z = -155.0 + 285.0 * rng.unit();
            let y = (z / (x as f64).log2()) as f32;
            if kind == 5 { (-x, y.round()) } else { (x, y) }
        }
    }
}
