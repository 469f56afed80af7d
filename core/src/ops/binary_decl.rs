//! The one declaration of a binary elementwise op, shared by the `binary`, `binary_math` and
//! `bitwise` families: its scalar-math type, its `OpDef` static and, when asked for, its tensor
//! and Rust-scalar methods.

/// Declares a binary op `name(Tensor self, Tensor other) -> Tensor`: the unit type `$Math`
/// implementing `BinaryMath` (`out`, `bool_ok`, `bulk` and the four scalar functions), and the
/// elementwise `OpDef` static `$STATIC` (kernel `meta`/`fill`, derivative `grad` saving `saved`,
/// `Lower::Pointwise(lower)`, `autocast`, the derived vmap rule). With `methods`, also
/// `Tensor::$method(&other)` and `Tensor::$smethod(scalar)`, each with the attributes given
/// before its name.
///
/// Each family wraps this in its own short form (`binary_op!`, `binary_math_op!`,
/// `bitwise_op!`) that fills in what its ops share. Names in the expansion (`BinaryMath`,
/// `BinaryOut`, `OpDef`, `OpClass`, `Kernel`, `Saved`, `Lower`, `VmapRule`, `Tensor`, `call1`,
/// `Scalar`, `Result`) resolve where the macro is invoked.
macro_rules! binary_decl {
    (
        $STATIC:ident, $Math:ident, $name:literal,
        out = $out:ident, bool_ok = $bool_ok:expr, bulk = $bulk:expr,
        f32 = $f32:expr, f64 = $f64:expr, int = $int:expr, bool = $bool:expr,
        meta = $meta:expr, fill = $fill:expr, grad = $grad:expr, saved = $saved:ident,
        lower = $lower:expr, autocast = $ac:expr
        $(, methods = $(#[$attr:meta])* $method:ident, $(#[$sattr:meta])* $smethod:ident)?
    ) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl BinaryMath for $Math {
            const NAME: &'static str = $name;
            const OUT: BinaryOut = BinaryOut::$out;
            const BOOL_OK: bool = $bool_ok;
            const BULK: Option<tensorplay_math::bulk::BulkOp> = $bulk;
            #[inline(always)]
            fn f32(a: f32, b: f32) -> f32 {
                ($f32)(a, b)
            }
            #[inline(always)]
            fn f64(a: f64, b: f64) -> f64 {
                ($f64)(a, b)
            }
            #[inline(always)]
            fn int(a: i64, b: i64) -> i64 {
                ($int)(a, b)
            }
            #[inline(always)]
            fn bool(a: bool, b: bool) -> bool {
                ($bool)(a, b)
            }
        }
        #[doc = concat!("`", $name, "(Tensor self, Tensor other) -> Tensor`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self, Tensor other) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: $meta,
                fill: $fill,
            },
            derivative: $grad,
            saved: Saved::$saved,
            lower: Lower::Pointwise($lower),
            autocast: $ac,
            vmap: VmapRule::Derived,
        };
        $(
            impl Tensor {
                $(#[$attr])*
                pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                    call1(&$STATIC, &[self.into(), other.into()])
                }
                $(#[$sattr])*
                pub fn $smethod(&self, s: impl Into<Scalar>) -> Result<Tensor> {
                    self.$method(&Tensor::wrapped_scalar(s.into()))
                }
            }
        )?
    };
}

pub(crate) use binary_decl;
