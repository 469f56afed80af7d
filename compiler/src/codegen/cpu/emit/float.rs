//! Float ops on `f32`/`f64` values and their vectors: IEEE arithmetic, the sign operations,
//! rounding, the NaN rules of the extrema and `clamp`, comparisons to bools, and the math library
//! (inline CLIF, or a call per lane for the libm functions).

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::F32;
use cranelift_codegen::ir::{ConstantData, InstBuilder, Type, Value};
use tensorplay_ir::{DType, Result, ScalarOp};

use crate::codegen::cpu::emit::{Emitter, internal};
use crate::codegen::cpu::math::{MathFn, emit_libm, emit_libm2, emit_pow, emit_unary};
use crate::codegen::kernel::largest_finite;

impl<'a, 'b> Emitter<'a, 'b> {
    /// A `vconst` of float vector type `ty` whose lanes hold only the sign bit, or (`abs`)
    /// everything but the sign bit.
    fn sign_mask(&mut self, ty: Type, abs: bool) -> Value {
        let lane = ty.lane_type();
        let mut bytes = Vec::with_capacity(16);
        for _ in 0..ty.lane_count() {
            if lane == F32 {
                let sign = 1u32 << 31;
                bytes.extend_from_slice(&(if abs { !sign } else { sign }).to_le_bytes());
            } else {
                let sign = 1u64 << 63;
                bytes.extend_from_slice(&(if abs { !sign } else { sign }).to_le_bytes());
            }
        }
        let c = self.fb.func.dfg.constants.insert(ConstantData::from(bytes));
        self.fb.ins().vconst(ty, c)
    }

    /// Emits `op` computing in the float dtype `compute` on operands in its representation
    /// (bool for `where`'s condition); the ops of several instructions are steps of their own.
    pub(super) fn float_op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let ty = self.ty_of(a[0]);
        let x = a[0];
        let unary = |e: &mut Self, f: MathFn| emit_unary(e.fb, e.math, f, x);
        let cmp = |e: &mut Self, cc: FloatCC| e.fb.ins().fcmp(cc, a[0], a[1]);
        Ok(match op {
            // On vectors, the sign bit is flipped or cleared with a pool constant (one
            // instruction with a memory operand; `fneg`/`fabs` rebuild the mask on every use).
            Neg if ty.is_vector() => {
                let m = self.sign_mask(ty, false);
                self.fb.ins().bxor(x, m)
            }
            Abs if ty.is_vector() => {
                let m = self.sign_mask(ty, true);
                self.fb.ins().band(x, m)
            }
            Neg => self.fb.ins().fneg(x),
            Abs => self.fb.ins().fabs(x),
            Sqrt => self.fb.ins().sqrt(x),
            Rsqrt => {
                let s = self.fb.ins().sqrt(x);
                let one = self.fconst(ty, 1.0);
                self.fb.ins().fdiv(one, s)
            }
            Reciprocal => {
                let one = self.fconst(ty, 1.0);
                self.fb.ins().fdiv(one, x)
            }
            Square => self.fb.ins().fmul(x, x),
            Add => self.fb.ins().fadd(a[0], a[1]),
            Sub => self.fb.ins().fsub(a[0], a[1]),
            Mul => self.fb.ins().fmul(a[0], a[1]),
            Div => self.fb.ins().fdiv(a[0], a[1]),
            Relu => self.float_relu(x),
            Sign => self.float_sign(x),
            Floor => self.fb.ins().floor(x),
            Ceil => self.fb.ins().ceil(x),
            Round => self.fb.ins().nearest(x),
            Maximum | Minimum => self.float_extremum(op == Maximum, a[0], a[1]),
            Clamp { min, max } => self.float_clamp(x, compute, min, max),
            Eq => cmp(self, FloatCC::Equal),
            Ne => cmp(self, FloatCC::NotEqual),
            Lt => cmp(self, FloatCC::LessThan),
            Le => cmp(self, FloatCC::LessThanOrEqual),
            Gt => cmp(self, FloatCC::GreaterThan),
            Ge => cmp(self, FloatCC::GreaterThanOrEqual),
            Where => self.select(a[0], a[1], a[2]),
            Math(f) => unary(self, f),
            Pow => emit_pow(self.fb, self.math, a[0], a[1]),
            Libm(f) => emit_libm(self.fb, self.math, f, x),
            Libm2(f) => emit_libm2(self.fb, self.math, f, a[0], a[1]),
            NanToNum {
                nan,
                posinf,
                neginf,
            } => self.nan_to_num(x, compute, nan, posinf, neginf),
            Cast | LogicalNot | LogicalAnd | LogicalOr | LogicalXor | BitAnd | BitOr | BitXor
            | BitNot | Shl | Shr => {
                return Err(internal(format!("{op} on {compute} operands")));
            }
        })
    }

    /// `relu(x)`: x if x >= 0 (so -0.0 stays -0.0) or x is NaN, else +0 (PyTorch's relu).
    fn float_relu(&mut self, x: Value) -> Value {
        let ty = self.ty_of(x);
        let zero = self.fconst(ty, 0.0);
        let keep = self
            .fb
            .ins()
            .fcmp(FloatCC::UnorderedOrGreaterThanOrEqual, x, zero);
        if ty.is_vector() {
            let m = self.bitcast(ty, keep);
            self.fb.ins().band(x, m)
        } else {
            self.fb.ins().select(keep, x, zero)
        }
    }

    /// `sign(x)`: -1, +0 or 1; NaN stays NaN.
    fn float_sign(&mut self, x: Value) -> Value {
        let ty = self.ty_of(x);
        let zero = self.fconst(ty, 0.0);
        let one = self.fconst(ty, 1.0);
        let minus = self.fconst(ty, -1.0);
        let gt = self.fb.ins().fcmp(FloatCC::GreaterThan, x, zero);
        let lt = self.fb.ins().fcmp(FloatCC::LessThan, x, zero);
        // x + 0.0: -0.0 becomes 0.0 (PyTorch), NaN stays NaN (eager's rule).
        let z = self.fb.ins().fadd(x, zero);
        let s = self.select(gt, one, z);
        self.select(lt, minus, s)
    }

    /// `maximum(a, b)` (`max`) or `minimum(a, b)`.
    fn float_extremum(&mut self, max: bool, a: Value, b: Value) -> Value {
        // Eager: a if (a > b or a is NaN) else b (a NaN in either operand wins).
        let cc = if max {
            FloatCC::GreaterThan
        } else {
            FloatCC::LessThan
        };
        let wins = self.fb.ins().fcmp(cc, a, b);
        let nan = self.fb.ins().fcmp(FloatCC::Unordered, a, a);
        let m = self.fb.ins().bor(wins, nan);
        self.select(m, a, b)
    }

    /// `clamp(x, min, max)` with bounds rounded to `compute`; a NaN bound is the result.
    fn float_clamp(
        &mut self,
        x: Value,
        compute: DType,
        min: Option<f64>,
        max: Option<f64>,
    ) -> Value {
        let ty = self.ty_of(x);
        let narrow = |v: f64| {
            if compute == DType::F64 {
                v
            } else {
                v as f32 as f64
            }
        };
        let mut v = x;
        if let Some(lo) = min {
            let lo_v = self.fconst(ty, narrow(lo));
            v = if lo.is_nan() {
                lo_v
            } else {
                let below = self.fb.ins().fcmp(FloatCC::LessThan, v, lo_v);
                self.select(below, lo_v, v)
            };
        }
        if let Some(hi) = max {
            let hi_v = self.fconst(ty, narrow(hi));
            v = if hi.is_nan() {
                hi_v
            } else {
                let above = self.fb.ins().fcmp(FloatCC::GreaterThan, v, hi_v);
                self.select(above, hi_v, v)
            };
        }
        v
    }

    /// `nan_to_num(x)`: NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf`.
    fn nan_to_num(
        &mut self,
        x: Value,
        compute: DType,
        nan: f64,
        posinf: Option<f64>,
        neginf: Option<f64>,
    ) -> Value {
        let ty = self.ty_of(x);
        // The compute dtype's finite extremes replace absent infinity values.
        let hi = largest_finite(compute);
        let lo = -hi;
        let pinf = self.fconst(ty, f64::INFINITY);
        let ninf = self.fconst(ty, f64::NEG_INFINITY);
        let is_pos = self.fb.ins().fcmp(FloatCC::Equal, x, pinf);
        let is_neg = self.fb.ins().fcmp(FloatCC::Equal, x, ninf);
        let is_nan = self.fb.ins().fcmp(FloatCC::Unordered, x, x);
        let p = self.fconst(ty, posinf.unwrap_or(hi));
        let n = self.fconst(ty, neginf.unwrap_or(lo));
        let q = self.fconst(ty, nan);
        let v = self.select(is_pos, p, x);
        let v = self.select(is_neg, n, v);
        self.select(is_nan, q, v)
    }
}
