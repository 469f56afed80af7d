//! Integer and bool ops: `i32`/`i64` arithmetic, bit operations, shifts and comparisons at
//! scalar width (`pow` through the integer helper), and bools as `i8` 0/1 or lane masks.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{InstBuilder, Value};
use tensorplay_ir::{DType, Result, ScalarOp};

use crate::codegen::cpu::emit::{Emitter, internal};

impl<'a, 'b> Emitter<'a, 'b> {
    /// A bool (i8 0/1 or lane mask) from a comparison result of the same width.
    fn not(&mut self, b: Value) -> Value {
        if self.ty_of(b).is_vector() {
            self.fb.ins().bnot(b)
        } else {
            self.fb.ins().bxor_imm_s(b, 1)
        }
    }

    pub(super) fn int_op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let ty = self.ty_of(a[0]);
        if ty.is_vector() {
            return Err(internal("integer ops run at scalar width"));
        }
        let x = a[0];
        let cmp = |e: &mut Self, cc: IntCC| e.fb.ins().icmp(cc, a[0], a[1]);
        Ok(match op {
            Neg => self.fb.ins().ineg(x),
            Abs => self.fb.ins().iabs(x),
            Add => self.fb.ins().iadd(a[0], a[1]),
            Sub => self.fb.ins().isub(a[0], a[1]),
            Mul => self.fb.ins().imul(a[0], a[1]),
            Square => self.fb.ins().imul(x, x),
            Relu => {
                let zero = self.iconst(ty, 0);
                self.fb.ins().smax(x, zero)
            }
            Sign => {
                let m1 = self.iconst(ty, -1);
                let p1 = self.iconst(ty, 1);
                let t = self.fb.ins().smax(x, m1);
                self.fb.ins().smin(t, p1)
            }
            Floor | Ceil | Round | NanToNum { .. } => x,
            BitAnd => self.fb.ins().band(a[0], a[1]),
            BitOr => self.fb.ins().bor(a[0], a[1]),
            BitXor => self.fb.ins().bxor(a[0], a[1]),
            BitNot => self.fb.ins().bnot(x),
            Shl | Shr => {
                // Cranelift masks the amount; PyTorch gives 0 (<<) or the sign fill (>>) for a
                // negative amount or one of the bit width or more.
                let width = i64::from(ty.bits());
                let bits = self.iconst(ty, width);
                let ok = self.fb.ins().icmp(IntCC::UnsignedLessThan, a[1], bits);
                if op == Shl {
                    let sh = self.fb.ins().ishl(a[0], a[1]);
                    let zero = self.iconst(ty, 0);
                    self.fb.ins().select(ok, sh, zero)
                } else {
                    let top = self.iconst(ty, width - 1);
                    let amt = self.fb.ins().select(ok, a[1], top);
                    self.fb.ins().sshr(a[0], amt)
                }
            }
            Maximum => self.fb.ins().smax(a[0], a[1]),
            Minimum => self.fb.ins().smin(a[0], a[1]),
            Clamp { min, max } => {
                let (tmin, tmax) = if compute == DType::I32 {
                    (i32::MIN as i64, i32::MAX as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                let mut v = x;
                if let Some(lo) = min {
                    let lo = self.iconst(ty, (lo as i64).clamp(tmin, tmax));
                    v = self.fb.ins().smax(v, lo);
                }
                if let Some(hi) = max {
                    let hi = self.iconst(ty, (hi as i64).clamp(tmin, tmax));
                    v = self.fb.ins().smin(v, hi);
                }
                v
            }
            Eq => cmp(self, IntCC::Equal),
            Ne => cmp(self, IntCC::NotEqual),
            Lt => cmp(self, IntCC::SignedLessThan),
            Le => cmp(self, IntCC::SignedLessThanOrEqual),
            Gt => cmp(self, IntCC::SignedGreaterThan),
            Ge => cmp(self, IntCC::SignedGreaterThanOrEqual),
            Where => self.fb.ins().select(a[0], a[1], a[2]),
            Pow => {
                let f = self
                    .ipow
                    .ok_or_else(|| internal("integer pow without its helper"))?;
                let (b, e) = if ty == I32 {
                    (
                        self.fb.ins().sextend(I64, a[0]),
                        self.fb.ins().sextend(I64, a[1]),
                    )
                } else {
                    (a[0], a[1])
                };
                let call = self.fb.ins().call(f, &[b, e]);
                let r = self.fb.inst_results(call)[0];
                if ty == I32 {
                    self.fb.ins().ireduce(I32, r)
                } else {
                    r
                }
            }
            _ => return Err(internal(format!("{op} on {compute} operands"))),
        })
    }

    pub(super) fn bool_op(&mut self, op: ScalarOp, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let vector = self.ty_of(a[0]).is_vector();
        let x = a[0];
        Ok(match op {
            Add | Maximum | LogicalOr => self.fb.ins().bor(a[0], a[1]),
            Mul | Minimum | LogicalAnd => self.fb.ins().band(a[0], a[1]),
            LogicalXor | Ne => self.fb.ins().bxor(a[0], a[1]),
            Eq => {
                let d = self.fb.ins().bxor(a[0], a[1]);
                self.not(d)
            }
            LogicalNot | BitNot => self.not(x),
            BitAnd => self.fb.ins().band(a[0], a[1]),
            BitOr => self.fb.ins().bor(a[0], a[1]),
            BitXor => self.fb.ins().bxor(a[0], a[1]),
            Abs | Sign | NanToNum { .. } => x,
            Where => self.select(a[0], a[1], a[2]),
            Lt | Le | Gt | Ge if !vector => {
                let cc = match op {
                    Lt => IntCC::UnsignedLessThan,
                    Le => IntCC::UnsignedLessThanOrEqual,
                    Gt => IntCC::UnsignedGreaterThan,
                    _ => IntCC::UnsignedGreaterThanOrEqual,
                };
                self.fb.ins().icmp(cc, a[0], a[1])
            }
            // false < true on lane masks.
            Lt => {
                let na = self.not(a[0]);
                self.fb.ins().band(na, a[1])
            }
            Gt => {
                let nb = self.not(a[1]);
                self.fb.ins().band(a[0], nb)
            }
            Le => {
                let na = self.not(a[0]);
                self.fb.ins().bor(na, a[1])
            }
            Ge => {
                let nb = self.not(a[1]);
                self.fb.ins().bor(a[0], nb)
            }
            _ => return Err(internal(format!("{op} on bool operands"))),
        })
    }
}
