//! Casts between dtypes with the runtime's rules, and the 16-bit float conversions that loads,
//! stores and casts share (f16 and bf16 bits to and from f32 lanes).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I32, I32X4, I64, I64X2};
use cranelift_codegen::ir::{InstBuilder, Type, Value};
use tensorplay_ir::{DType, Result};

use crate::codegen::cpu::emit::{Emitter, internal};

impl<'a, 'b> Emitter<'a, 'b> {
    /// The integer type with the lanes of float type `ty`.
    fn int_of(ty: Type) -> Type {
        match ty {
            F32 => I32,
            F64 => I64,
            F32X4 => I32X4,
            F64X2 => I64X2,
            other => other,
        }
    }

    // ---- 16-bit float conversions ----------------------------------------------------------

    /// f16 bits (in the low 16 bits of `i32` lanes) of `x` (`f32` or `f32x4`), rounded to
    /// nearest even; NaN becomes the quiet NaN `0x7e00` with the sign kept.
    pub(super) fn f32_to_f16_bits(&mut self, x: Value) -> Value {
        let fty = self.ty_of(x);
        let ity = Self::int_of(fty);
        let b = self.bitcast(ity, x);
        let sign_mask = self.iconst(ity, 0x8000_0000);
        let sign = self.fb.ins().band(b, sign_mask);
        let a = self.fb.ins().bxor(b, sign);
        // Below 2^-14: add 0.5 so the f32 rounding aligns the f16 subnormal bits at the bottom.
        let fa = self.bitcast(fty, a);
        let half = self.fconst(fty, 0.5);
        let shifted = self.fb.ins().fadd(fa, half);
        let shifted = self.bitcast(ity, shifted);
        let magic = self.iconst(ity, 0x3f00_0000);
        let sub = self.fb.ins().isub(shifted, magic);
        // Normal: rebias the exponent and round to nearest even on the 13 dropped bits.
        let s13 = self.iconst(I32, 13);
        let m = self.fb.ins().ushr(a, s13);
        let one = self.iconst(ity, 1);
        let odd = self.fb.ins().band(m, one);
        let bias = self.iconst(ity, 0xC800_0FFF);
        let t = self.fb.ins().iadd(a, bias);
        let t = self.fb.ins().iadd(t, odd);
        let norm = self.fb.ins().ushr(t, s13);
        let small_lim = self.iconst(ity, 0x3880_0000);
        let small = self.fb.ins().icmp(IntCC::SignedLessThan, a, small_lim);
        let r = self.select(small, sub, norm);
        let big_lim = self.iconst(ity, 0x4780_0000);
        let big = self
            .fb
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, a, big_lim);
        let inf = self.iconst(ity, 0x7f80_0000);
        let nan = self.fb.ins().icmp(IntCC::SignedGreaterThan, a, inf);
        let qnan = self.iconst(ity, 0x7e00);
        let hinf = self.iconst(ity, 0x7c00);
        let special = self.select(nan, qnan, hinf);
        let r = self.select(big, special, r);
        let s16 = self.iconst(I32, 16);
        let sign16 = self.fb.ins().ushr(sign, s16);
        self.fb.ins().bor(r, sign16)
    }

    /// The f32 value (exact) of f16 bits held in the low 16 bits of `i32` lanes.
    pub(super) fn f16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.ty_of(h);
        let fty = if ity.is_vector() { F32X4 } else { F32 };
        let sm = self.iconst(ity, 0x8000);
        let sign = self.fb.ins().band(h, sm);
        let s16 = self.iconst(I32, 16);
        let sign = self.fb.ins().ishl(sign, s16);
        let em = self.iconst(ity, 0x7fff);
        let o = self.fb.ins().band(h, em);
        let s13 = self.iconst(I32, 13);
        let o = self.fb.ins().ishl(o, s13);
        let of = self.bitcast(fty, o);
        let scale = self.fconst(fty, 2f64.powi(112));
        let f = self.fb.ins().fmul(of, scale);
        let fbits = self.bitcast(ity, f);
        let expm = self.iconst(ity, 0x7c00);
        let e = self.fb.ins().band(h, expm);
        let special = self.fb.ins().icmp(IntCC::Equal, e, expm);
        let infbits = self.iconst(ity, 0x7f80_0000);
        let spec_bits = self.fb.ins().bor(o, infbits);
        let bits = self.select(special, spec_bits, fbits);
        let bits = self.fb.ins().bor(bits, sign);
        self.bitcast(fty, bits)
    }

    /// bf16 bits (low 16 bits of `i32` lanes) of `x`, rounded to nearest even (NaN stays NaN).
    pub(super) fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let ity = Self::int_of(self.ty_of(x));
        let b = self.bitcast(ity, x);
        let absm = self.iconst(ity, 0x7fff_ffff);
        let a = self.fb.ins().band(b, absm);
        let inf = self.iconst(ity, 0x7f80_0000);
        let nan = self.fb.ins().icmp(IntCC::SignedGreaterThan, a, inf);
        let s16 = self.iconst(I32, 16);
        let hi = self.fb.ins().ushr(b, s16);
        let one = self.iconst(ity, 1);
        let lsb = self.fb.ins().band(hi, one);
        let bias = self.iconst(ity, 0x7fff);
        let t = self.fb.ins().iadd(b, bias);
        let t = self.fb.ins().iadd(t, lsb);
        let rounded = self.fb.ins().ushr(t, s16);
        let quiet = self.iconst(ity, 0x40);
        let qn = self.fb.ins().bor(hi, quiet);
        self.select(nan, qn, rounded)
    }

    /// The f32 value of bf16 bits held in the low 16 bits of `i32` lanes.
    pub(super) fn bf16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.ty_of(h);
        let fty = if ity.is_vector() { F32X4 } else { F32 };
        let s16 = self.iconst(I32, 16);
        let b = self.fb.ins().ishl(h, s16);
        self.bitcast(fty, b)
    }

    /// Rounds an f32-represented value to the nearest f16 (or bf16) value, staying in f32.
    fn round_half(&mut self, x: Value, to: DType) -> Value {
        if to == DType::F16 {
            let h = self.f32_to_f16_bits(x);
            self.f16_bits_to_f32(h)
        } else {
            let h = self.f32_to_bf16_bits(x);
            self.bf16_bits_to_f32(h)
        }
    }

    /// Converts `v` from `from` to `to` with the runtime's cast rules.
    pub(super) fn cast(&mut self, v: Value, from: DType, to: DType) -> Result<Value> {
        if from == to {
            return Ok(v);
        }
        let ty = self.ty_of(v);
        let vector = ty.is_vector();
        let to_ty = self.repr(to, vector)?;
        Ok(match (from.is_float(), to.is_float()) {
            (true, true) => {
                let mut x = v;
                if from == DType::F64 && to != DType::F64 {
                    x = self.fb.ins().fdemote(F32, x);
                } else if from != DType::F64 && to == DType::F64 {
                    x = self.fb.ins().fpromote(F64, x);
                }
                if to.is_half() {
                    x = self.round_half(x, to);
                }
                x
            }
            (true, false) => match to {
                DType::Bool => {
                    let zero = self.fconst(ty, 0.0);
                    self.fb.ins().fcmp(FloatCC::NotEqual, v, zero)
                }
                _ => self.fb.ins().fcvt_to_sint_sat(to_ty, v),
            },
            (false, true) => {
                if from == DType::Bool {
                    let one = self.fconst(to_ty, 1.0);
                    if vector {
                        let m = self.bitcast(to_ty, v);
                        self.fb.ins().band(m, one)
                    } else {
                        let zero = self.fconst(to_ty, 0.0);
                        self.fb.ins().select(v, one, zero)
                    }
                } else {
                    let x = self.fb.ins().fcvt_from_sint(to_ty, v);
                    if to.is_half() {
                        self.round_half(x, to)
                    } else {
                        x
                    }
                }
            }
            (false, false) => match (from, to) {
                (_, DType::Bool) => {
                    let zero = self.iconst(ty, 0);
                    self.fb.ins().icmp(IntCC::NotEqual, v, zero)
                }
                (DType::Bool, _) => self.fb.ins().uextend(to_ty, v),
                (DType::I32, DType::I64) => self.fb.ins().sextend(I64, v),
                (DType::I64, DType::I32) => self.fb.ins().ireduce(I32, v),
                _ => return Err(internal(format!("cast {from} -> {to}"))),
            },
        })
    }
}
