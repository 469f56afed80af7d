//! Helpers for parts of f32 functions that are computed in f64 lanes: an
//! `f32x4` is split into two `f64x2` halves (a scalar `f32` is promoted), the
//! body runs on each half, and the results are rounded back once.

use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I8X16};
use cranelift_codegen::ir::{ConstantData, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

fn shuffle_bytes(fb: &mut FunctionBuilder, a: Value, b: Value, mask: [u8; 16], ty: Type) -> Value {
    let ab = fb.ins().bitcast(I8X16, le(), a);
    let bb = fb.ins().bitcast(I8X16, le(), b);
    let imm = fb.func.dfg.immediates.push(ConstantData::from(&mask[..]));
    let r = fb.ins().shuffle(ab, bb, imm);
    fb.ins().bitcast(ty, le(), r)
}

/// f32x4 -> (f64x2 of lanes 0,1; f64x2 of lanes 2,3).
pub(crate) fn promote_halves(fb: &mut FunctionBuilder, v: Value) -> (Value, Value) {
    let lo = fb.ins().fvpromote_low(v);
    let mut mask = [0u8; 16];
    for (i, m) in mask.iter_mut().enumerate() {
        *m = 8 + (i as u8 % 8);
    }
    let h = shuffle_bytes(fb, v, v, mask, F32X4);
    let hi = fb.ins().fvpromote_low(h);
    (lo, hi)
}

/// (f64x2, f64x2) -> f32x4 of the four rounded lanes.
pub(crate) fn demote_combine(fb: &mut FunctionBuilder, lo: Value, hi: Value) -> Value {
    let a = fb.ins().fvdemote(lo);
    let b = fb.ins().fvdemote(hi);
    let mut mask = [0u8; 16];
    for (i, m) in mask.iter_mut().enumerate() {
        *m = if i < 8 { i as u8 } else { 8 + i as u8 };
    }
    shuffle_bytes(fb, a, b, mask, F32X4)
}

/// The f64 promotion of `args` (all `F32` or all `F32X4`): one group of
/// `f64` values for scalars, two groups of `f64x2` halves for vectors, and
/// the f64 type.
pub(super) fn promote<const N: usize>(
    fb: &mut FunctionBuilder,
    ty: Type,
    args: [Value; N],
) -> (Vec<[Value; N]>, Type) {
    if ty.is_vector() {
        debug_assert_eq!(ty, F32X4);
        let mut lo = args;
        let mut hi = args;
        for k in 0..N {
            (lo[k], hi[k]) = promote_halves(fb, args[k]);
        }
        (vec![lo, hi], F64X2)
    } else {
        debug_assert_eq!(ty, F32);
        (vec![args.map(|a| fb.ins().fpromote(F64, a))], F64)
    }
}

/// Rounds the results of [`promote`]'s groups back to one value of `ty`.
pub(super) fn demote(fb: &mut FunctionBuilder, ty: Type, results: &[Value]) -> Value {
    if ty.is_vector() {
        demote_combine(fb, results[0], results[1])
    } else {
        fb.ins().fdemote(F32, results[0])
    }
}
