//! The instruction emitters of the inline operations: one full-width instruction (or a short
//! sequence: compares and blends for the NaN rules, sign masks, rounding immediates) per
//! operation, the same per lane as the inline Cranelift code.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use tensorplay_ir::ScalarOp;

use crate::codegen::cpu::wide_asm::imp::Asm;
use crate::codegen::cpu::wide_asm::imp::frame::{
    CMP_EQ_OQ, CMP_GE_OQ, CMP_GT_OQ, CMP_LE_OQ, CMP_LT_OQ, CMP_NEQ_UQ, CMP_UNORD, Emit, ROUND_DOWN,
    ROUND_NEAREST, ROUND_UP, ymm, zmm,
};
use crate::codegen::cpu::wide_asm::imp::plan::Helper;

impl Asm<'_> {
    fn helper(&self, h: Helper) -> u8 {
        self.plan
            .helpers
            .iter()
            .find(|&&(g, _)| g == h)
            .map(|&(_, r)| r)
            .expect("helper registered by helpers_of")
    }

    /// `d = op(x..)`. `d` differs from every operand register (it is allocated before they
    /// are freed), so multi-instruction sequences may write it early.
    pub(super) fn op(&mut self, op: &ScalarOp, d: u8, x: &[u8]) -> Emit {
        use ScalarOp::*;
        match op {
            Add => vop!(self, vaddps, d, x[0], x[1])?,
            Sub => vop!(self, vsubps, d, x[0], x[1])?,
            Mul => vop!(self, vmulps, d, x[0], x[1])?,
            Div => vop!(self, vdivps, d, x[0], x[1])?,
            Square => vop!(self, vmulps, d, x[0], x[0])?,
            Sqrt => vop!(self, vsqrtps, d, x[0])?,
            Rsqrt => {
                vop!(self, vsqrtps, d, x[0])?;
                let one = self.helper(Helper::One);
                vop!(self, vdivps, d, one, d)?
            }
            Reciprocal => {
                let one = self.helper(Helper::One);
                vop!(self, vdivps, d, one, x[0])?
            }
            Neg => {
                let m = self.helper(Helper::SignBit);
                vop!(self, vxorps, d, x[0], m)?
            }
            Abs => {
                let m = self.helper(Helper::AbsMask);
                vop!(self, vandps, d, x[0], m)?
            }
            // `maxps(0, x)` is `0 > x ? 0 : x`: +0 below zero, x itself at -0 and NaN.
            Relu => {
                let z = self.helper(Helper::Zero);
                vop!(self, vmaxps, d, z, x[0])?
            }
            // Eager: `a` if `a > b` (`a < b`) or `a` is NaN, else `b`. `maxps(a, b)` is
            // `a > b ? a : b`; lanes where `a` is NaN then take `a`.
            Maximum | Minimum => {
                if *op == Maximum {
                    vop!(self, vmaxps, d, x[0], x[1])?;
                } else {
                    vop!(self, vminps, d, x[0], x[1])?;
                }
                self.take_where_nan(d, x[0])?
            }
            // `v < lo ? lo : v` is `maxps(lo, v)`, `v > hi ? hi : v` is `minps(hi, v)`; a
            // NaN bound is the result (eager's rule).
            Clamp { min, max } => {
                let mut v = x[0];
                let narrow = |b: f64| Helper::Bits((b as f32).to_bits());
                if let Some(lo) = min {
                    let l = self.helper(narrow(*lo));
                    if lo.is_nan() {
                        vop!(self, vmovaps, d, l)?;
                    } else {
                        vop!(self, vmaxps, d, l, v)?;
                    }
                    v = d;
                }
                if let Some(hi) = max {
                    let h = self.helper(narrow(*hi));
                    if hi.is_nan() {
                        vop!(self, vmovaps, d, h)?;
                    } else {
                        vop!(self, vminps, d, h, v)?;
                    }
                    v = d;
                }
                if v != d {
                    vop!(self, vmovaps, d, v)?;
                }
            }
            // Bools are lane masks: all ones for true. The predicates are Cranelift's
            // `FloatCC` ones: ordered, except `!=` (true when either side is NaN).
            Eq => self.compare(d, x[0], x[1], CMP_EQ_OQ)?,
            Ne => self.compare(d, x[0], x[1], CMP_NEQ_UQ)?,
            Lt => self.compare(d, x[0], x[1], CMP_LT_OQ)?,
            Le => self.compare(d, x[0], x[1], CMP_LE_OQ)?,
            Gt => self.compare(d, x[0], x[1], CMP_GT_OQ)?,
            Ge => self.compare(d, x[0], x[1], CMP_GE_OQ)?,
            LogicalNot => {
                let ones = self.helper(Helper::Bits(u32::MAX));
                vop!(self, vxorps, d, x[0], ones)?
            }
            LogicalAnd => vop!(self, vandps, d, x[0], x[1])?,
            LogicalOr => vop!(self, vorps, d, x[0], x[1])?,
            LogicalXor => vop!(self, vxorps, d, x[0], x[1])?,
            // where(c, a, b): a in the lanes where c is set.
            Where => {
                if self.wide {
                    self.a.vpmovd2m(k2, zmm(x[0]))?;
                    self.a.vblendmps(zmm(d).k2(), zmm(x[2]), zmm(x[1]))?;
                } else {
                    self.a.vblendvps(ymm(d), ymm(x[2]), ymm(x[1]), ymm(x[0]))?;
                }
            }
            Floor => self.round(d, x[0], ROUND_DOWN)?,
            Ceil => self.round(d, x[0], ROUND_UP)?,
            Round => self.round(d, x[0], ROUND_NEAREST)?,
            other => unreachable!("{other:?} is neither inline nor outlined"),
        }
        Ok(())
    }

    /// `d` = the lane mask of `a <pred> b`.
    fn compare(&mut self, d: u8, a: u8, b: u8, pred: u32) -> Result<(), IcedError> {
        if self.wide {
            self.a.vcmpps(k2, zmm(a), zmm(b), pred)?;
            self.a.vpmovm2d(zmm(d), k2)
        } else {
            self.a.vcmpps(ymm(d), ymm(a), ymm(b), pred)
        }
    }

    /// Lanes of `d` where `a` is NaN become `a`.
    fn take_where_nan(&mut self, d: u8, a: u8) -> Result<(), IcedError> {
        if self.wide {
            self.a.vcmpps(k2, zmm(a), zmm(a), CMP_UNORD)?;
            self.a.vmovaps(zmm(d).k2(), zmm(a))
        } else {
            let t = self.scratch_reg;
            self.a.vcmpps(ymm(t), ymm(a), ymm(a), CMP_UNORD)?;
            self.a.vblendvps(ymm(d), ymm(d), ymm(a), ymm(t))
        }
    }

    fn round(&mut self, d: u8, x: u8, imm: u32) -> Result<(), IcedError> {
        if self.wide {
            self.a.vrndscaleps(zmm(d), zmm(x), imm)
        } else {
            self.a.vroundps(ymm(d), ymm(x), imm)
        }
    }
}
