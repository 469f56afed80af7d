//! The scalar math functions, each declared once: one row per function in [`math_fns!`],
//! [`libm_fns!`] or [`libm2_fns!`], from which everything else is generated.
//!
//! A row gives the function's name, its f64 form (what f64 kernels and every accuracy reference
//! compute), how its f32 form is computed (the library's approximation in [`crate::approx`], or
//! the f64 form rounded once), the symbol of its `extern "C"` f64 shim (what the CPU JIT calls
//! per lane) and its CUDA C expression in double (`x`, or `a` and `b` for two operands). The
//! tables are *callback* macros: each consumer passes the name of a macro that receives every row
//! and generates its own code (this file: the enums and their methods; [`crate::shims`]: the
//! shims; [`crate::bulk`]: the vectorized buffer kernels), so a consumer cannot leave a row out.
//! Consumers outside this crate (`ScalarOp::Math`/`ScalarOp::Libm`, the JIT's shim table, the
//! CUDA prelude's `TP_MATH` lines) go through the generated `ALL`, `name`, `shim` and
//! `cuda_f64` methods.
//!
//! Adding a function: a row here, and for an approximated one its code in [`crate::approx`].

/// The library's approximated unary functions (f32 forms in [`crate::approx`], written once and
/// run as inline CLIF, bulk kernels and eager kernels). Passes every row to `$then!`.
///
/// Row: `Variant => "name", f64 = <fn(f64) -> f64>, f32 = approx(<approx fn>) | rounded,
/// shim = <symbol>, cuda = "<C expression of double x>";`
macro_rules! math_fns {
    ($then:ident) => {
        $then! {
            /// `e^x`.
            Exp => "exp", f64 = f64::exp, f32 = approx(exp),
                shim = tp_math_exp_f64, cuda = "exp(x)";
            /// Natural logarithm.
            Log => "log", f64 = f64::ln, f32 = approx(log),
                shim = tp_math_log_f64, cuda = "log(x)";
            /// Hyperbolic tangent.
            Tanh => "tanh", f64 = f64::tanh, f32 = approx(tanh),
                shim = tp_math_tanh_f64, cuda = "tanh(x)";
            /// `1 / (1 + e^-x)`.
            Sigmoid => "sigmoid", f64 = crate::shims::sigmoid_f64, f32 = approx(sigmoid),
                shim = tp_math_sigmoid_f64, cuda = "tp_sigmoid_f64(x)";
            /// Error function.
            Erf => "erf", f64 = crate::shims::erf_f64, f32 = approx(erf),
                shim = tp_math_erf_f64, cuda = "erf(x)";
            /// `0.5 x (1 + erf(x / sqrt 2))`.
            GeluErf => "gelu_erf", f64 = crate::shims::gelu_erf_f64, f32 = approx(gelu_erf),
                shim = tp_math_gelu_erf_f64, cuda = "tp_gelu_erf_f64(x)";
            /// `0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))`.
            GeluTanh => "gelu_tanh", f64 = crate::shims::gelu_tanh_f64, f32 = approx(gelu_tanh),
                shim = tp_math_gelu_tanh_f64, cuda = "tp_gelu_tanh_f64(x)";
            /// `x sigmoid(x)`.
            Silu => "silu", f64 = crate::shims::silu_f64, f32 = approx(silu),
                shim = tp_math_silu_f64, cuda = "tp_silu_f64(x)";
            /// Sine (f32: the f64 function rounded once per lane).
            Sin => "sin", f64 = f64::sin, f32 = rounded,
                shim = tp_math_sin_f64, cuda = "sin(x)";
            /// Cosine (f32: the f64 function rounded once per lane).
            Cos => "cos", f64 = f64::cos, f32 = rounded,
                shim = tp_math_cos_f64, cuda = "cos(x)";
            /// `log(1 + x)`, accurate near 0.
            Log1p => "log1p", f64 = f64::ln_1p, f32 = approx(log1p),
                shim = tp_math_log1p_f64, cuda = "log1p(x)";
            /// `e^x - 1`, accurate near 0.
            Expm1 => "expm1", f64 = f64::exp_m1, f32 = approx(expm1),
                shim = tp_math_expm1_f64, cuda = "expm1(x)";
        }
    };
}

/// The unary functions computed in f64 (by the platform's libm, or by this crate) and rounded
/// once to the compute dtype, in eager kernels and compiled code alike. Passes every row to
/// `$then!`. Row: `Variant => "name", f64 = <fn(f64) -> f64>, shim = <symbol>, cuda = "<C>";`
macro_rules! libm_fns {
    ($then:ident) => {
        $then! {
            Tan => "tan", f64 = f64::tan, shim = tp_libm_tan_f64, cuda = "tan(x)";
            Asin => "asin", f64 = f64::asin, shim = tp_libm_asin_f64, cuda = "asin(x)";
            Acos => "acos", f64 = f64::acos, shim = tp_libm_acos_f64, cuda = "acos(x)";
            Atan => "atan", f64 = f64::atan, shim = tp_libm_atan_f64, cuda = "atan(x)";
            Sinh => "sinh", f64 = f64::sinh, shim = tp_libm_sinh_f64, cuda = "sinh(x)";
            Cosh => "cosh", f64 = f64::cosh, shim = tp_libm_cosh_f64, cuda = "cosh(x)";
            Asinh => "asinh", f64 = crate::shims::asinh_f64, shim = tp_libm_asinh_f64, cuda = "asinh(x)";
            Acosh => "acosh", f64 = crate::shims::acosh_f64, shim = tp_libm_acosh_f64, cuda = "acosh(x)";
            Atanh => "atanh", f64 = crate::shims::atanh_f64, shim = tp_libm_atanh_f64, cuda = "atanh(x)";
            Log2 => "log2", f64 = f64::log2, shim = tp_libm_log2_f64, cuda = "log2(x)";
            Log10 => "log10", f64 = f64::log10, shim = tp_libm_log10_f64, cuda = "log10(x)";
            Exp2 => "exp2", f64 = f64::exp2, shim = tp_libm_exp2_f64, cuda = "exp2(x)";
            /// `sin(pi x) / (pi x)`, 1 at 0 (PyTorch's normalized `sinc`).
            Sinc => "sinc", f64 = crate::shims::sinc_f64, shim = tp_libm_sinc_f64,
                cuda = "(x == 0.0 ? 1.0 : sin(3.141592653589793 * x) / (3.141592653589793 * x))";
        }
    };
}

/// The binary functions computed in f64 and rounded once. Passes every row to `$then!`.
/// Row: `Variant => "name", f64 = <fn(f64, f64) -> f64>, shim = <symbol>, cuda = "<C of a, b>";`
macro_rules! libm2_fns {
    ($then:ident) => {
        $then! {
            Atan2 => "atan2", f64 = f64::atan2, shim = tp_libm_atan2_f64, cuda = "atan2(a, b)";
            Hypot => "hypot", f64 = f64::hypot, shim = tp_libm_hypot_f64, cuda = "hypot(a, b)";
            /// C's `fmod` (exact: the result has the dividend's sign).
            Fmod => "fmod", f64 = |a: f64, b: f64| a % b, shim = tp_libm_fmod_f64,
                cuda = "fmod(a, b)";
            Copysign => "copysign", f64 = f64::copysign, shim = tp_libm_copysign_f64,
                cuda = "copysign(a, b)";
        }
    };
}

/// The f32 form of one [`MathFn`] row on `$a`'s values: `Some(approximation)`, or `None` for a
/// function whose f32 form is the f64 function rounded once.
macro_rules! f32_form {
    (approx($f:ident), $a:expr, $x:expr) => {
        Some(crate::approx::$f($a, $x))
    };
    (rounded, $a:expr, $x:expr) => {
        None
    };
}

/// The enum of one table and the methods every table shares.
macro_rules! function_enum {
    ($(#[$meta:meta])* $Enum:ident, $Fn:ty, $Shim:ty, $($(#[$doc:meta])* $V:ident => $name:literal,
      f64 = $f64:expr, shim = $shim:ident, cuda = $cuda:literal;)*) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $Enum {
            $($(#[$doc])* $V,)*
        }

        impl $Enum {
            /// Every function, in declaration order.
            pub const ALL: [$Enum; [$(stringify!($V)),*].len()] = [$($Enum::$V),*];

            /// Lower-case name: the CUDA prelude's `tp_<name>`, and for the libm functions the builtin
            /// op's name.
            pub fn name(self) -> &'static str {
                match self {
                    $($Enum::$V => $name,)*
                }
            }

            /// The function called `name`, if any.
            pub fn from_name(name: &str) -> Option<$Enum> {
                Self::ALL.iter().copied().find(|f| f.name() == name)
            }

            /// The f64 form: what f64 kernels and the accuracy references compute.
            pub fn f64_fn(self) -> $Fn {
                match self {
                    $($Enum::$V => $f64,)*
                }
            }

            /// The symbol and address of the `extern "C"` f64 shim the CPU JIT calls per lane.
            pub fn shim(self) -> (&'static str, $Shim) {
                match self {
                    $($Enum::$V => (stringify!($shim), crate::shims::$shim),)*
                }
            }

            /// The CUDA C expression of the f64 form, in `double` operands.
            pub fn cuda_f64(self) -> &'static str {
                match self {
                    $($Enum::$V => $cuda,)*
                }
            }
        }
    };
}

macro_rules! math_fn_enum {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr,
       f32 = $kind:ident $(($approx:ident))?, shim = $shim:ident, cuda = $cuda:literal;)*) => {
        function_enum! {
            /// A unary math function of the library (one row of `math_fns!` in `math/src/func.rs`).
            MathFn, fn(f64) -> f64, extern "C" fn(f64) -> f64,
            $($(#[$doc])* $V => $name, f64 = $f64, shim = $shim, cuda = $cuda;)*
        }

        impl MathFn {
            /// The library's f32 approximation of `self` on `a`'s values, or `None` when the f32
            /// form is the f64 function rounded once (sin, cos).
            #[inline(always)]
            pub fn approx<A: crate::arith::Arith>(self, a: &mut A, x: A::V) -> Option<A::V> {
                match self {
                    $(MathFn::$V => f32_form!($kind $(($approx))?, a, x),)*
                }
            }
        }
    };
}

macro_rules! libm_fn_enum {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr, shim = $shim:ident,
       cuda = $cuda:literal;)*) => {
        function_enum! {
            /// A unary function computed in f64 and rounded once (one row of `libm_fns!` in `math/src/func.rs`).
            LibmFn, fn(f64) -> f64, extern "C" fn(f64) -> f64,
            $($(#[$doc])* $V => $name, f64 = $f64, shim = $shim, cuda = $cuda;)*
        }
    };
}

macro_rules! libm2_fn_enum {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr, shim = $shim:ident,
       cuda = $cuda:literal;)*) => {
        function_enum! {
            /// A binary function computed in f64 and rounded once (one row of `libm2_fns!` in `math/src/func.rs`).
            LibmFn2, fn(f64, f64) -> f64, extern "C" fn(f64, f64) -> f64,
            $($(#[$doc])* $V => $name, f64 = $f64, shim = $shim, cuda = $cuda;)*
        }
    };
}

math_fns!(math_fn_enum);
libm_fns!(libm_fn_enum);
libm2_fns!(libm2_fn_enum);

impl MathFn {
    /// The `f64` implementation (what the f64 shims compute).
    ///
    /// ```
    /// use tensorplay_math::MathFn;
    /// assert_eq!(MathFn::Exp.eval_f64(0.0), 1.0);
    /// assert_eq!(MathFn::Sigmoid.eval_f64(f64::NEG_INFINITY), 0.0);
    /// assert!(MathFn::Silu.eval_f64(f64::NEG_INFINITY).is_nan());
    /// ```
    pub fn eval_f64(self, x: f64) -> f64 {
        self.f64_fn()(x)
    }

    /// Whether the f32 form is one of the library's approximations (false: sin and cos, which
    /// round the f64 function once per lane).
    pub fn is_inline_f32(self) -> bool {
        self.approx(&mut crate::arith::S32, 0.0).is_some()
    }

    /// The f32 function for one value: the library's approximation (the same bits as every
    /// kernel of [`crate::bulk`] and the compiler's FMA code), or for sin and cos the f64
    /// function rounded once.
    ///
    /// ```
    /// use tensorplay_math::MathFn;
    /// assert_eq!(MathFn::Tanh.eval_f32(0.0), 0.0);
    /// assert_eq!(MathFn::Exp.eval_f32(f32::NEG_INFINITY), 0.0);
    /// ```
    #[inline]
    pub fn eval_f32(self, x: f32) -> f32 {
        match self.approx(&mut crate::arith::S32, x) {
            Some(y) => y,
            None => self.eval_f64(x as f64) as f32,
        }
    }
}

impl LibmFn {
    /// The function in f64: what eager and every code generator compute.
    ///
    /// ```
    /// use tensorplay_math::LibmFn;
    /// assert_eq!(LibmFn::Log2.eval(8.0), 3.0);
    /// assert!(LibmFn::Acosh.eval(0.5).is_nan());
    /// assert_eq!(LibmFn::Sinc.eval(0.0), 1.0);
    /// ```
    pub fn eval(self, x: f64) -> f64 {
        self.f64_fn()(x)
    }
}

impl LibmFn2 {
    /// The function in f64: what eager and every code generator compute.
    ///
    /// ```
    /// use tensorplay_math::LibmFn2;
    /// assert_eq!(LibmFn2::Hypot.eval(3.0, 4.0), 5.0);
    /// assert_eq!(LibmFn2::Fmod.eval(-7.0, 3.0), -1.0);
    /// ```
    pub fn eval(self, a: f64, b: f64) -> f64 {
        self.f64_fn()(a, b)
    }

    /// Whether the result is exact (no rounding: fmod, copysign), so compiled code is
    /// bit-identical to eager for it.
    pub fn is_exact(self) -> bool {
        matches!(self, LibmFn2::Fmod | LibmFn2::Copysign)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let mut names: Vec<&str> = MathFn::ALL.iter().map(|f| f.name()).collect();
        names.extend(LibmFn::ALL.iter().map(|f| f.name()));
        names.extend(LibmFn2::ALL.iter().map(|f| f.name()));
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        for f in MathFn::ALL {
            assert_eq!(MathFn::from_name(f.name()), Some(f));
        }
        for f in LibmFn::ALL {
            assert_eq!(LibmFn::from_name(f.name()), Some(f));
        }
        assert_eq!(MathFn::from_name("tan"), None);
    }

    #[test]
    fn shims_compute_the_f64_form() {
        for f in MathFn::ALL {
            let (name, shim) = f.shim();
            assert!(
                name.starts_with("tp_math_") && name.ends_with("_f64"),
                "{name}"
            );
            for x in [-3.5, -0.25, 0.0, 0.5, 2.0] {
                assert_eq!(shim(x).to_bits(), f.eval_f64(x).to_bits(), "{name}({x})");
            }
        }
        for f in LibmFn::ALL {
            let (name, shim) = f.shim();
            for x in [-0.75, 0.0, 0.5, 3.0] {
                let (s, e) = (shim(x), f.eval(x));
                assert!(
                    s.to_bits() == e.to_bits() || (s.is_nan() && e.is_nan()),
                    "{name}"
                );
            }
        }
        for f in LibmFn2::ALL {
            let (_, shim) = f.shim();
            assert_eq!(shim(2.5, -1.5).to_bits(), f.eval(2.5, -1.5).to_bits());
        }
    }

    #[test]
    fn f32_forms() {
        assert!(
            MathFn::ALL
                .iter()
                .all(|f| f.is_inline_f32() != matches!(f, MathFn::Sin | MathFn::Cos))
        );
        assert_eq!(MathFn::Sin.eval_f32(1.0), 1f64.sin() as f32);
    }

    #[test]
    fn cuda_forms_name_their_operands() {
        for f in MathFn::ALL {
            assert!(f.cuda_f64().contains('x'), "{}", f.name());
        }
        for f in LibmFn::ALL {
            assert!(f.cuda_f64().contains('x'), "{}", f.name());
        }
        for f in LibmFn2::ALL {
            assert!(f.cuda_f64().contains('a') && f.cuda_f64().contains('b'));
        }
    }
}
