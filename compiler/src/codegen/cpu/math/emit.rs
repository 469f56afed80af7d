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

use crate::codegen::cpu::math::wide;
use tensorplay_math::arith::{Arith, Cmp};

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

    fn vconst(&mut self, ty: Type, lane_bytes: &[u8]) -> Value {
        let mut bytes = Vec::with_capacity(16);
        for _ in 0..ty.lane_count() {
            bytes.extend_from_slice(lane_bytes);
        }
        let c = self.fb.func.dfg.constants.insert(ConstantData::from(bytes));
        self.fb.ins().vconst(ty, c)
    }
}

impl<'a, 'f> Arith for Em<'a, 'f> {
    type V = Value;
    type I = Value;
    type M = Mask;
    type W = Self;

    fn has_fma(&self) -> bool {
        self.fma
    }
    fn is_f32(&self) -> bool {
        self.ty.lane_type() == F32
    }

    /// A float constant given by its raw lane bits, splatted for vectors.
    fn fbits(&mut self, bits: u64) -> Value {
        let ty = self.ty;
        match (self.is_f32(), ty.is_vector()) {
            (true, false) => self.fb.ins().f32const(Ieee32::with_bits(bits as u32)),
            (false, false) => self.fb.ins().f64const(Ieee64::with_bits(bits)),
            (true, true) => self.vconst(ty, &(bits as u32).to_le_bytes()),
            (false, true) => self.vconst(ty, &bits.to_le_bytes()),
        }
    }
    /// An integer constant of type [`Em::ity`], splatted for vectors.
    fn i(&mut self, v: i64) -> Value {
        let ity = self.ity();
        match (self.is_f32(), ity.is_vector()) {
            (_, false) => self.fb.ins().iconst(ity, v),
            (true, true) => self.vconst(ity, &(v as i32).to_le_bytes()),
            (false, true) => self.vconst(ity, &v.to_le_bytes()),
        }
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fmul(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().fdiv(a, b)
    }
    fn neg(&mut self, a: Value) -> Value {
        self.fb.ins().fneg(a)
    }
    fn abs(&mut self, a: Value) -> Value {
        self.fb.ins().fabs(a)
    }
    fn fused(&mut self, a: Value, b: Value, c: Value) -> Value {
        debug_assert!(self.fma, "fused fma without ISA support");
        self.fb.ins().fma(a, b, c)
    }
    fn bits(&mut self, v: Value) -> Value {
        let ity = self.ity();
        self.fb.ins().bitcast(ity, MemFlagsData::new(), v)
    }
    fn float(&mut self, v: Value) -> Value {
        let ty = self.ty;
        self.fb.ins().bitcast(ty, MemFlagsData::new(), v)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().isub(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().bor(a, b)
    }
    fn shl(&mut self, a: Value, k: u32) -> Value {
        self.fb.ins().ishl_imm_u(a, k as i64)
    }
    fn sshr(&mut self, a: Value, k: u32) -> Value {
        self.fb.ins().sshr_imm_u(a, k as i64)
    }
    fn ushr(&mut self, a: Value, k: u32) -> Value {
        self.fb.ins().ushr_imm_u(a, k as i64)
    }
    fn i2f(&mut self, v: Value) -> Value {
        let ty = self.ty;
        self.fb.ins().fcvt_from_sint(ty, v)
    }
    fn and(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().band(a, b)
    }
    fn or(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().bor(a, b)
    }
    fn xor(&mut self, a: Value, b: Value) -> Value {
        self.fb.ins().bxor(a, b)
    }
    fn cmp(&mut self, cc: Cmp, a: Value, b: Value) -> Mask {
        Mask(self.fb.ins().fcmp(float_cc(cc), a, b))
    }
    fn mand(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.fb.ins().band(a.0, b.0))
    }
    fn mor(&mut self, a: Mask, b: Mask) -> Mask {
        Mask(self.fb.ins().bor(a.0, b.0))
    }
    /// `m ? a : b`, lane-wise: `select` for scalars, `bitselect` of the lane
    /// mask for vectors.
    fn sel(&mut self, m: Mask, a: Value, b: Value) -> Value {
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
    /// The body runs on this same emitter with its type switched to `f64`
    /// (scalar) or `f64x2` (once per half of an `f32x4`).
    fn widen<const N: usize, F>(&mut self, args: [Value; N], body: F) -> Value
    where
        F: Fn(&mut Self, [Value; N]) -> Value,
    {
        let ty = self.ty;
        let (parts, wty) = wide::promote(self.fb, ty, args);
        self.ty = wty;
        let results: Vec<Value> = parts.into_iter().map(|p| body(self, p)).collect();
        self.ty = ty;
        wide::demote(self.fb, ty, &results)
    }
}

/// The CLIF condition code of a [`Cmp`] (same name, same meaning).
fn float_cc(cc: Cmp) -> FloatCC {
    match cc {
        Cmp::Ordered => FloatCC::Ordered,
        Cmp::Unordered => FloatCC::Unordered,
        Cmp::Equal => FloatCC::Equal,
        Cmp::NotEqual => FloatCC::NotEqual,
        Cmp::OrderedNotEqual => FloatCC::OrderedNotEqual,
        Cmp::UnorderedOrEqual => FloatCC::UnorderedOrEqual,
        Cmp::LessThan => FloatCC::LessThan,
        Cmp::LessThanOrEqual => FloatCC::LessThanOrEqual,
        Cmp::GreaterThan => FloatCC::GreaterThan,
        Cmp::GreaterThanOrEqual => FloatCC::GreaterThanOrEqual,
        Cmp::UnorderedOrLessThan => FloatCC::UnorderedOrLessThan,
        Cmp::UnorderedOrLessThanOrEqual => FloatCC::UnorderedOrLessThanOrEqual,
        Cmp::UnorderedOrGreaterThan => FloatCC::UnorderedOrGreaterThan,
        Cmp::UnorderedOrGreaterThanOrEqual => FloatCC::UnorderedOrGreaterThanOrEqual,
    }
}
