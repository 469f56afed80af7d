//! The arithmetic vocabulary every f32 approximation of the math library is
//! written in, so that one generic definition of each algorithm serves two
//! back ends:
//!
//! - the compiler's CLIF emitter (`tensorplay_compiler::codegen::cpu::math`) emits the
//!   operations as CLIF (scalar `f32` / `f64` or vector `f32x4` / `f64x2` values) for the
//!   inline code of fused kernels;
//! - [`S32`] / [`S64`] evaluate them directly on one Rust `f32` / `f64` lane,
//!   which the bulk kernels ([`crate::bulk`]) run in lane loops that LLVM
//!   vectorizes to AVX-512 / AVX2.
//!
//! Both back ends perform the same IEEE operations in the same order (every
//! operation here is exactly rounded or exact, with no contraction or
//! reassociation on either side), so their results are identical bit for bit
//! (NaN payloads aside). All methods of the lane back ends are
//! `#[inline(always)]`: the algorithms must dissolve into the vectorized
//! loop of the caller.

/// A float comparison. Each variant means what Cranelift's `Cmp` of the same name means
/// (the CLIF back end maps one onto the other), so the algorithms can be written without
/// depending on Cranelift.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// Neither operand is NaN.
    Ordered,
    /// Either operand is NaN.
    Unordered,
    /// `a == b`.
    Equal,
    /// `a != b` (true when either is NaN).
    NotEqual,
    /// Neither is NaN and `a != b`.
    OrderedNotEqual,
    /// Either is NaN or `a == b`.
    UnorderedOrEqual,
    /// `a < b`.
    LessThan,
    /// `a <= b`.
    LessThanOrEqual,
    /// `a > b`.
    GreaterThan,
    /// `a >= b`.
    GreaterThanOrEqual,
    /// Either is NaN or `a < b`.
    UnorderedOrLessThan,
    /// Either is NaN or `a <= b`.
    UnorderedOrLessThanOrEqual,
    /// Either is NaN or `a > b`.
    UnorderedOrGreaterThan,
    /// Either is NaN or `a >= b`.
    UnorderedOrGreaterThanOrEqual,
}

/// A back end for the approximations: float values `V`, integer values `I`
/// of the same lane layout (i32 for f32 lanes, i64 for f64 lanes), and
/// comparison results `M`.
pub trait Arith {
    /// A float value.
    type V: Copy;
    /// An integer value with the same layout as [`Arith::V`].
    type I: Copy;
    /// A comparison result (truth value or lane mask).
    type M: Copy;
    /// The f64 back end that [`Arith::widen`] runs its body on.
    type W: Arith;

    /// Whether [`Arith::fma`] is fused (a single rounding).
    fn has_fma(&self) -> bool;
    /// Whether the lanes are f32 (else f64).
    fn is_f32(&self) -> bool;

    /// A float constant given by its raw lane bits (the low 32 for f32).
    fn fbits(&mut self, bits: u64) -> Self::V;
    /// An integer constant (truncated to i32 for f32 lanes).
    fn i(&mut self, v: i64) -> Self::I;

    fn add(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn div(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn neg(&mut self, a: Self::V) -> Self::V;
    fn abs(&mut self, a: Self::V) -> Self::V;
    /// `a * b + c` rounded once (only called when [`Arith::has_fma`]).
    fn fused(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;

    /// Reinterpret a float as the integer type with the same layout.
    fn bits(&mut self, v: Self::V) -> Self::I;
    /// Reinterpret an integer as the float type.
    fn float(&mut self, v: Self::I) -> Self::V;
    /// Wrapping integer add.
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Wrapping integer subtract.
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Integer bitwise or.
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Shift left by a constant (< lane width).
    fn shl(&mut self, a: Self::I, k: u32) -> Self::I;
    /// Arithmetic shift right by a constant.
    fn sshr(&mut self, a: Self::I, k: u32) -> Self::I;
    /// Logical shift right by a constant.
    fn ushr(&mut self, a: Self::I, k: u32) -> Self::I;
    /// Signed integer to float (rounded).
    fn i2f(&mut self, v: Self::I) -> Self::V;

    /// Bitwise and of two float values.
    fn and(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// Bitwise or of two float values.
    fn or(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// Bitwise xor of two float values.
    fn xor(&mut self, a: Self::V, b: Self::V) -> Self::V;

    /// IEEE comparison with Cranelift's condition-code semantics.
    fn cmp(&mut self, cc: Cmp, a: Self::V, b: Self::V) -> Self::M;
    fn mand(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn mor(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// `m ? a : b`, lane-wise.
    fn sel(&mut self, m: Self::M, a: Self::V, b: Self::V) -> Self::V;

    /// Runs `body` on the f64 promotion of `args` (f32 lanes) and rounds its
    /// result back once.
    fn widen<const N: usize, F>(&mut self, args: [Self::V; N], body: F) -> Self::V
    where
        F: Fn(&mut Self::W, [<Self::W as Arith>::V; N]) -> <Self::W as Arith>::V;

    // ---- derived operations (one definition for every back end) ----

    /// A float constant (rounded to the lane type).
    #[inline(always)]
    fn f(&mut self, v: f64) -> Self::V {
        if self.is_f32() {
            self.fbits((v as f32).to_bits() as u64)
        } else {
            self.fbits(v.to_bits())
        }
    }
    /// `a + k` for a constant `k`.
    #[inline(always)]
    fn addk(&mut self, a: Self::V, k: f64) -> Self::V {
        let k = self.f(k);
        self.add(a, k)
    }
    /// `a * k` for a constant `k`.
    #[inline(always)]
    fn mulk(&mut self, a: Self::V, k: f64) -> Self::V {
        let k = self.f(k);
        self.mul(a, k)
    }
    /// `a * b + c`, fused when the back end has FMA.
    #[inline(always)]
    fn fma(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        if self.has_fma() {
            self.fused(a, b, c)
        } else {
            let p = self.mul(a, b);
            self.add(p, c)
        }
    }
    /// `a * k + c` for a constant `k`.
    #[inline(always)]
    fn fmak(&mut self, a: Self::V, k: f64, c: Self::V) -> Self::V {
        let k = self.f(k);
        self.fma(a, k, c)
    }
    /// `a * k1 + k2` for constants `k1`, `k2`.
    #[inline(always)]
    fn fmakk(&mut self, a: Self::V, k1: f64, k2: f64) -> Self::V {
        let k1 = self.f(k1);
        let k2 = self.f(k2);
        self.fma(a, k1, k2)
    }
    /// Horner evaluation of `c[0] + x*(c[1] + x*(c[2] + ...))`.
    #[inline(always)]
    fn horner(&mut self, x: Self::V, c: &[f64]) -> Self::V {
        let n = c.len();
        assert!(n >= 2, "polynomial needs at least two coefficients");
        let mut acc = self.fmakk(x, c[n - 1], c[n - 2]);
        for &k in c[..n - 2].iter().rev() {
            let kv = self.f(k);
            acc = self.fma(acc, x, kv);
        }
        acc
    }
    /// Horner evaluation with f32 coefficients.
    #[inline(always)]
    fn horner32<const N: usize>(&mut self, x: Self::V, c: &[f32; N]) -> Self::V {
        let mut w = [0.0f64; N];
        for (d, &s) in w.iter_mut().zip(c) {
            *d = s as f64;
        }
        self.horner(x, &w)
    }
    /// Error-free product: `p + e == a * b` exactly (barring under/overflow).
    #[inline(always)]
    fn two_prod(&mut self, a: Self::V, b: Self::V) -> (Self::V, Self::V) {
        let p = self.mul(a, b);
        if self.has_fma() {
            let np = self.neg(p);
            let e = self.fused(a, b, np);
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
    #[inline(always)]
    fn rem_exact(&mut self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        if self.has_fma() {
            let na = self.neg(a);
            self.fused(na, b, c)
        } else {
            let (p, e) = self.two_prod(a, b);
            let d = self.sub(c, p);
            self.sub(d, e)
        }
    }
    /// Veltkamp split into high and low halves of the significand.
    #[inline(always)]
    fn split(&mut self, a: Self::V) -> (Self::V, Self::V) {
        let k = if self.is_f32() { 4097.0 } else { 134_217_729.0 };
        let c = self.mulk(a, k);
        let d = self.sub(c, a);
        let hi = self.sub(c, d);
        let lo = self.sub(a, hi);
        (hi, lo)
    }
    /// Error-free sum (Knuth): `s + e == a + b` exactly.
    #[inline(always)]
    fn two_sum(&mut self, a: Self::V, b: Self::V) -> (Self::V, Self::V) {
        let s = self.add(a, b);
        let bb = self.sub(s, a);
        let sb = self.sub(s, bb);
        let da = self.sub(a, sb);
        let db = self.sub(b, bb);
        let e = self.add(da, db);
        (s, e)
    }
    /// `a + k` for an integer constant `k`.
    #[inline(always)]
    fn iaddk(&mut self, a: Self::I, k: i64) -> Self::I {
        let k = self.i(k);
        self.iadd(a, k)
    }
    /// Comparison against a constant.
    #[inline(always)]
    fn cmpk(&mut self, cc: Cmp, a: Self::V, k: f64) -> Self::M {
        let k = self.f(k);
        self.cmp(cc, a, k)
    }
    /// `m ? k : b` for a float constant `k`.
    #[inline(always)]
    fn selk(&mut self, m: Self::M, k: f64, b: Self::V) -> Self::V {
        let k = self.f(k);
        self.sel(m, k, b)
    }
    /// `max(x, lo)` that keeps NaN (lowers to `maxps` for CLIF vectors).
    #[inline(always)]
    fn clamp_lo(&mut self, x: Self::V, lo: f64) -> Self::V {
        let k = self.f(lo);
        let m = self.cmp(Cmp::LessThan, x, k);
        self.sel(m, k, x)
    }
    /// `min(x, hi)` that keeps NaN (lowers to `minps` for CLIF vectors).
    #[inline(always)]
    fn clamp_hi(&mut self, x: Self::V, hi: f64) -> Self::V {
        let k = self.f(hi);
        let m = self.cmp(Cmp::LessThan, k, x);
        self.sel(m, k, x)
    }
    /// The sign bit of the lane type as a float constant (`-0.0`).
    #[inline(always)]
    fn sign_mask(&mut self) -> Self::V {
        self.f(-0.0)
    }
}

/// Evaluates a [`Cmp`] on two Rust floats.
macro_rules! float_cc {
    ($cc:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        let uno = a.is_nan() | b.is_nan();
        match $cc {
            Cmp::Ordered => !uno,
            Cmp::Unordered => uno,
            Cmp::Equal => a == b,
            Cmp::NotEqual => a != b,
            Cmp::OrderedNotEqual => !uno & (a != b),
            Cmp::UnorderedOrEqual => uno | (a == b),
            Cmp::LessThan => a < b,
            Cmp::LessThanOrEqual => a <= b,
            Cmp::GreaterThan => a > b,
            Cmp::GreaterThanOrEqual => a >= b,
            Cmp::UnorderedOrLessThan => uno | (a < b),
            Cmp::UnorderedOrLessThanOrEqual => uno | (a <= b),
            Cmp::UnorderedOrGreaterThan => uno | (a > b),
            Cmp::UnorderedOrGreaterThanOrEqual => uno | (a >= b),
        }
    }};
}

/// Generates the lane back end for one float type.
macro_rules! lane_backend {
    ($name:ident, $f:ty, $i:ty, $u:ty, $is_f32:expr, $wide:ty, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Arith for $name {
            type V = $f;
            type I = $i;
            type M = bool;
            type W = $wide;

            #[inline(always)]
            fn has_fma(&self) -> bool {
                true
            }
            #[inline(always)]
            fn is_f32(&self) -> bool {
                $is_f32
            }
            #[inline(always)]
            fn fbits(&mut self, bits: u64) -> $f {
                <$f>::from_bits(bits as $u)
            }
            #[inline(always)]
            fn i(&mut self, v: i64) -> $i {
                v as $i
            }
            #[inline(always)]
            fn add(&mut self, a: $f, b: $f) -> $f {
                a + b
            }
            #[inline(always)]
            fn sub(&mut self, a: $f, b: $f) -> $f {
                a - b
            }
            #[inline(always)]
            fn mul(&mut self, a: $f, b: $f) -> $f {
                a * b
            }
            #[inline(always)]
            fn div(&mut self, a: $f, b: $f) -> $f {
                a / b
            }
            #[inline(always)]
            fn neg(&mut self, a: $f) -> $f {
                -a
            }
            #[inline(always)]
            fn abs(&mut self, a: $f) -> $f {
                a.abs()
            }
            #[inline(always)]
            fn fused(&mut self, a: $f, b: $f, c: $f) -> $f {
                a.mul_add(b, c)
            }
            #[inline(always)]
            fn bits(&mut self, v: $f) -> $i {
                v.to_bits() as $i
            }
            #[inline(always)]
            fn float(&mut self, v: $i) -> $f {
                <$f>::from_bits(v as $u)
            }
            #[inline(always)]
            fn iadd(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn isub(&mut self, a: $i, b: $i) -> $i {
                a.wrapping_sub(b)
            }
            #[inline(always)]
            fn ior(&mut self, a: $i, b: $i) -> $i {
                a | b
            }
            #[inline(always)]
            fn shl(&mut self, a: $i, k: u32) -> $i {
                a.wrapping_shl(k)
            }
            #[inline(always)]
            fn sshr(&mut self, a: $i, k: u32) -> $i {
                a.wrapping_shr(k)
            }
            #[inline(always)]
            fn ushr(&mut self, a: $i, k: u32) -> $i {
                (a as $u).wrapping_shr(k) as $i
            }
            #[inline(always)]
            fn i2f(&mut self, v: $i) -> $f {
                v as $f
            }
            #[inline(always)]
            fn and(&mut self, a: $f, b: $f) -> $f {
                <$f>::from_bits(a.to_bits() & b.to_bits())
            }
            #[inline(always)]
            fn or(&mut self, a: $f, b: $f) -> $f {
                <$f>::from_bits(a.to_bits() | b.to_bits())
            }
            #[inline(always)]
            fn xor(&mut self, a: $f, b: $f) -> $f {
                <$f>::from_bits(a.to_bits() ^ b.to_bits())
            }
            #[inline(always)]
            fn cmp(&mut self, cc: Cmp, a: $f, b: $f) -> bool {
                float_cc!(cc, a, b)
            }
            #[inline(always)]
            fn mand(&mut self, a: bool, b: bool) -> bool {
                a & b
            }
            #[inline(always)]
            fn mor(&mut self, a: bool, b: bool) -> bool {
                a | b
            }
            #[inline(always)]
            fn sel(&mut self, m: bool, a: $f, b: $f) -> $f {
                if m { a } else { b }
            }
            #[inline(always)]
            fn widen<const N: usize, F>(&mut self, args: [$f; N], body: F) -> $f
            where
                F: Fn(&mut $wide, [<$wide as Arith>::V; N]) -> <$wide as Arith>::V,
            {
                let wide: [f64; N] = args.map(|a| a as f64);
                body(&mut <$wide>::default(), wide) as $f
            }
        }
    };
}

lane_backend!(
    S32,
    f32,
    i32,
    u32,
    true,
    S64,
    "One f32 lane evaluated in Rust (always fused `fma`)."
);
lane_backend!(
    S64,
    f64,
    i64,
    u64,
    false,
    S64,
    "One f64 lane evaluated in Rust (always fused `fma`)."
);
