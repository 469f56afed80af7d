//! A thin instruction-emitting layer over [`FunctionBuilder`] so that every
//! approximation in the math library is written once and works unchanged on a
//! scalar (`f32`, `f64`) or a vector (`f32x4`, `f64x2`) value.
//!
//! Constants are splatted (as `vconst` pool entries) for vectors, comparisons
//! produce a [`Mask`] (an `i8` truth value for scalars, a lane mask for
//! vectors), and [`Em::sel`] lowers to `select` for scalars and to
//! `bitselect` of the lane mask for vectors.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::F32;
use cranelift_codegen::ir::{ConstantData, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// The result of a comparison: a scalar truth value or a vector lane mask.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mask(Value);

/// Emitter for one element type (`F32`, `F32X4`, `F64` or `F64X2`).
pub(super) struct Em<'a, 'f> {
    pub fb: &'a mut FunctionBuilder<'f>,
    /// The float type every value handled by the helpers has.
    pub ty: Type,
    /// Whether `fma` instructions may be emitted (otherwise `mul` + `add`).
    pub fma: bool,
}

impl<'a, 'f> Em<'a, 'f> {
    pub fn new(fb: &'a mut FunctionBuilder<'f>, ty: Type, fma: bool) -> Self {
        Em { fb, ty, fma }
    }

    /// The integer type with the same lane layout as `self.ty`.
    pub fn ity(&self) -> Type {
        self.ty.as_int()
    }

    fn is_f32(&self) -> bool {
        self.ty.lane_type() == F32
    }

    fn vconst(&mut self, ty: Type, lane_bytes: &[u8]) -> Value {
        let mut bytes = Vec::with_capacity(16);
        for _ in 0..ty.lane_count() {
            bytes.extend_from_slice(lane_bytes);
        }
        let c = self.fb.func.dfg.constants.insert(ConstantData::from(bytes));
        self.fb.ins().vconst(ty, c)
    }

    /// A float constant (rounded to the lane type), splatted for vectors.
    pub fn f(&mut self, v: f64) -> Value {
        if self.is_f32() {
            self.fbits((v as f32).to_bits() as u64)
        } else {
            self.fbits(v.to_bits())
        }
    }

    /// A float constant given by its raw lane bits.
    pub fn fbits(&mut self, bits: u64) -> Value {
        let ty = self.ty;
        match (self.is_f32(), ty.is_vector()) {
            (true, false) => self.fb.ins().f32const(Ieee32::with_bits(bits as u32)),
            (false, false) => self.fb.ins().f64const(Ieee64::with_bits(bits)),
            (true, true) => self.vconst(ty, &(bits as u32).to_le_bytes()),
            (false, true) => self.vconst(ty, &bits.to_le_bytes()),
        }
    }

    /// An integer constant of type [`Em::ity`], splatted for vectors.
    pub fn i(&mut self, v: i64) -> Value {
        let ity = self.ity();
        match (self.is_f32(), ity.is_vector()) {
            (_, false) => self.fb.ins().iconst(ity, v),
            (true, true) => self.vconst(ity, &(v as i32).to_le_bytes()),
            (false, true) => self.vconst(ity, &v.to_le_bytes()),
        }
    }

    pub fn add(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fadd(a, b)
    }
    pub fn sub(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fsub(a, b)
    }
    pub fn mul(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fmul(a, b)
    }
    pub fn div(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fdiv(a, b)
    }
    pub fn neg(&mut self, a: Value) -> Value {
        self.fb.ins().fneg(a)
    }
    pub fn abs(&mut self, a: Value) -> Value {
        self.fb.ins().fabs(a)
    }
    /// `a + k` for a constant `k`.
    pub fn addk(&mut self, a: Value, k: f64) -> Value {
        let k = self.f(k);
        self.add(a, k)
    }
    /// `a * k` for a constant `k`.
    pub fn mulk(&mut self, a: Value, k: f64) -> Value {
        let k = self.f(k);
        self.mul(a, k)
    }

    /// `a * b + c`, fused when the ISA has FMA.
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            self.fb.ins().fma(a, b, c)
        } else {
            let p = self.fb.ins().fmul(a, b);
            self.fb.ins().fadd(p, c)
        }
    }
    /// `a * k + c` for a constant `k`.
    pub fn fmak(&mut self, a: Value, k: f64, c: Value) -> Value {
        let k = self.f(k);
        self.fma(a, k, c)
    }
    /// `a * k1 + k2` for constants `k1`, `k2`.
    pub fn fmakk(&mut self, a: Value, k1: f64, k2: f64) -> Value {
        let k1 = self.f(k1);
        let k2 = self.f(k2);
        self.fma(a, k1, k2)
    }

    /// Horner evaluation of `c[0] + x*(c[1] + x*(c[2] + ...))`.
    pub fn horner(&mut self, x: Value, c: &[f64]) -> Value {
        let n = c.len();
        assert!(n >= 2, "polynomial needs at least two coefficients");
        let mut acc = self.fmakk(x, c[n - 1], c[n - 2]);
        for &k in c[..n - 2].iter().rev() {
            let kv = self.f(k);
            acc = self.fma(acc, x, kv);
        }
        acc
    }

    /// Error-free product: `p + e == a * b` exactly (barring under/overflow).
    pub fn two_prod(&mut self, a: Value, b: Value) -> (Value, Value) {
        let p = self.mul(a, b);
        if self.fma {
            let np = self.neg(p);
            let e = self.fb.ins().fma(a, b, np);
            (p, e)
        } else {
            // Veltkamp split + Dekker product.
            let (ah, al) = self.split(a);
            let (bh, bl) = self.split(b);
            let t = self.mul(ah, bh);
            let t = self.sub(t, p);
            let u = self.mul(ah, bl);
            let t = self.add(t, u);
            let u = self.mul(al, bh);
            let t = self.add(t, u);
            let u = self.mul(al, bl);
            let e = self.add(t, u);
            (p, e)
        }
    }

    /// `c - a * b`, exact when the result is representable (as for the
    /// remainder of a correctly rounded division `a ~ c / b`).
    pub fn rem_exact(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            let na = self.neg(a);
            self.fb.ins().fma(na, b, c)
        } else {
            let (p, e) = self.two_prod(a, b);
            let d = self.sub(c, p);
            self.sub(d, e)
        }
    }

    fn split(&mut self, a: Value) -> (Value, Value) {
        let k = if self.is_f32() { 4097.0 } else { 134_217_729.0 };
        let c = self.mulk(a, k);
        let d = self.sub(c, a);
        let hi = self.sub(c, d);
        let lo = self.sub(a, hi);
        (hi, lo)
    }

    /// Error-free sum (Knuth): `s + e == a + b` exactly.
    pub fn two_sum(&mut self, a: Value, b: Value) -> (Value, Value) {
        let s = self.add(a, b);
        let bb = self.sub(s, a);
        let sb = self.sub(s, bb);
        let da = self.sub(a, sb);
        let db = self.sub(b, bb);
        let e = self.add(da, db);
        (s, e)
    }

    /// Reinterpret a float value as the integer type with the same layout.
    pub fn bits(&mut self, v: Value) -> Value {
        let ity = self.ity();
        self.fb.ins().bitcast(ity, MemFlagsData::new(), v)
    }
    /// Reinterpret an integer value as the float type.
    pub fn float(&mut self, v: Value) -> Value {
        let ty = self.ty;
        self.fb.ins().bitcast(ty, MemFlagsData::new(), v)
    }
    pub fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().iadd(a, b)
    }
    pub fn isub(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().isub(a, b)
    }
    pub fn iaddk(&mut self, a: Value, k: i64) -> Value {
        let k = self.i(k);
        self.iadd(a, k)
    }
    pub fn shl(&mut self, a: Value, k: i64) -> Value {
        self.fb.ins().ishl_imm_u(a, k)
    }
    pub fn sshr(&mut self, a: Value, k: i64) -> Value {
        self.fb.ins().sshr_imm_u(a, k)
    }
    pub fn ushr(&mut self, a: Value, k: i64) -> Value {
        self.fb.ins().ushr_imm_u(a, k)
    }
    /// Bitwise and (works on float values too).
    pub fn and(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().band(a, b)
    }
    /// Bitwise or (works on float values too).
    pub fn or(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().bor(a, b)
    }
    /// Bitwise xor (works on float values too).
    pub fn xor(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().bxor(a, b)
    }
    /// Signed integer to float conversion of an [`Em::ity`] value.
    pub fn i2f(&mut self, v: Value) -> Value {
        let ty = self.ty;
        self.fb.ins().fcvt_from_sint(ty, v)
    }

    pub fn cmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Mask {
        Mask(self.fb.ins().fcmp(cc, a, b))
    }
    pub fn cmpk(&mut self, cc: FloatCC, a: Value, k: f64) -> Mask {
        let k = self.f(k);
        self.cmp(cc, a, k)
    }
    pub fn mand(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.fb.ins().band(a.0, b.0))
    }
    pub fn mor(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.fb.ins().bor(a.0, b.0))
    }
    /// `m ? a : b`, lane-wise; `a` and `b` may be float or integer values.
    pub fn sel(&mut self, m: Mask, a: Value, b: Value) -> Value {
        if self.ty.is_vector() {
            let vty = self.fb.func.dfg.value_type(a);
            let mty = self.fb.func.dfg.value_type(m.0);
            let c = if vty == mty {
                m.0
            } else {
                self.fb.ins().bitcast(vty, MemFlagsData::new(), m.0)
            };
            self.fb.ins().bitselect(c, a, b)
        } else {
            self.fb.ins().select(m.0, a, b)
        }
    }
    /// `m ? k : b` for a float constant `k`.
    pub fn selk(&mut self, m: Mask, k: f64, b: Value) -> Value {
        let k = self.f(k);
        self.sel(m, k, b)
    }
    /// `max(x, lo)` that keeps NaN (lowers to `maxps` for vectors).
    pub fn clamp_lo(&mut self, x: Value, lo: f64) -> Value {
        let k = self.f(lo);
        let m = self.cmp(FloatCC::LessThan, x, k);
        self.sel(m, k, x)
    }
    /// `min(x, hi)` that keeps NaN (lowers to `minps` for vectors).
    pub fn clamp_hi(&mut self, x: Value, hi: f64) -> Value {
        let k = self.f(hi);
        let m = self.cmp(FloatCC::LessThan, k, x);
        self.sel(m, k, x)
    }

    /// The sign bit of the lane type as a float constant (`-0.0`).
    pub fn sign_mask(&mut self) -> Value {
        self.f(-0.0)
    }
}
