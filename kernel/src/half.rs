//! 16-bit float conversions (round to nearest even), shared by lowering (scalar constants of
//! f16/bf16 kernels) and launching (scalar arguments written as 16-bit values).

/// The f16 bit pattern nearest to `x` (ties to even; NaN stays a quiet NaN).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7fff_ffff;
    if a > 0x7f80_0000 {
        return sign | 0x7e00 | ((a >> 13) as u16 & 0x3ff);
    }
    if a >= 0x4780_0000 {
        return sign | 0x7c00;
    }
    if a < 0x3880_0000 {
        // Below the smallest normal f16: a multiple of 2^-24, rounded.
        let q = (f32::from_bits(a) as f64 * 16_777_216.0).round_ties_even() as u16;
        return sign | q;
    }
    let e = (a >> 23) - 112;
    let m = a & 0x7f_ffff;
    let mut h = (e << 10) | (m >> 13);
    let rem = m & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    sign | h as u16
}

/// The f32 value of an f16 bit pattern (exact).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let e = ((h >> 10) & 0x1f) as u32;
    let m = (h & 0x3ff) as u32;
    let mag = match e {
        0 => m as f32 * (1.0 / 16_777_216.0),
        31 => f32::from_bits(0x7f80_0000 | (m << 13)),
        _ => f32::from_bits(((e + 112) << 23) | (m << 13)),
    };
    f32::from_bits(mag.to_bits() | sign)
}

/// The bf16 bit pattern nearest to `x` (ties to even; NaN stays a quiet NaN).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 value of a bf16 bit pattern (exact).
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(65519.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(f32::INFINITY), 0x7c00);
        assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
        // Smallest subnormal, and halfway below it (ties to even: 0).
        assert_eq!(f32_to_f16_bits(2f32.powi(-24)), 1);
        assert_eq!(f32_to_f16_bits(2f32.powi(-25)), 0);
        assert_eq!(f32_to_f16_bits(3.0 * 2f32.powi(-25)), 2);
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even (1).
        assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        for h in 0..=u16::MAX {
            let f = f16_bits_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_f16_bits(f), h, "{h:#x}");
            }
        }
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }
}
