//! Padding layers over [`nn::pad`], in PyTorch's 1-D, 2-D and 3-D forms: `ZeroPad{1,2,3}d`,
//! `ConstantPad{1,2,3}d`, `ReflectionPad{1,2,3}d`, `ReplicationPad{1,2,3}d` and
//! `CircularPad{1,2,3}d`. A layer of `D` dims pads the last `D` dims of its input; its padding
//! is one size for every side or `2 * D` sizes in PyTorch's order — the last dim's two sides
//! first (`[left, right]`), then the one before's (`top, bottom`), then the one before that's
//! (`front, back`).

use tensorplay_runtime::nn::PadMode;
use tensorplay_runtime::{Error, Result, Tensor, nn};

use crate::Module;
use crate::module::Forward;

/// The `S` side sizes from one size for every side or all `S` of them.
fn sides<const S: usize>(layer: &str, order: &str, padding: &[i64]) -> Result<[i64; S]> {
    match padding.len() {
        1 => Ok([padding[0]; S]),
        n if n == S => {
            let mut out = [0; S];
            out.copy_from_slice(padding);
            Ok(out)
        }
        _ => Err(Error::argument(
            layer,
            "padding",
            format!("one size for every side or {S} ({order})"),
            format!("{padding:?}"),
        )),
    }
}

/// A padding layer filling by a mode (`Reflect`, `Replicate`, `Circular`, or `Constant` with
/// zeros), with a doc example padding every side of a ones tensor of `$shape` by 1.
macro_rules! pad_layer {
    ($(#[$doc:meta])* $name:ident, $mode:ident, $sides:literal, $order:literal,
     $shape:literal => $out:literal) => {
        $(#[$doc])*
        ///
        /// ```
        #[doc = concat!("use tensorplay_nn::{Forward, ", stringify!($name), "};")]
        /// use tensorplay_runtime::{DType, Tensor};
        #[doc = concat!("let pad = ", stringify!($name), "::new(&[1])?;")]
        #[doc = concat!("let y = pad.forward(&Tensor::ones(&", $shape, ", DType::F32))?;")]
        #[doc = concat!("assert_eq!(y.shape(), &", $out, ");")]
        #[doc = concat!("assert!(", stringify!($name), "::new(&[1, 2, 3]).is_err());")]
        /// # Ok::<(), tensorplay_runtime::Error>(())
        /// ```
        #[derive(Module, Debug, Clone, PartialEq)]
        #[module(crate = crate)]
        pub struct $name {
            #[doc = concat!("The sides: `[", $order, "]`.")]
            pub padding: [i64; $sides],
        }

        impl $name {
            #[doc = concat!("Pads by `padding`: one size for every side or `[", $order, "]`.")]
            pub fn new(padding: &[i64]) -> Result<$name> {
                Ok($name {
                    padding: sides(stringify!($name), $order, padding)?,
                })
            }
        }

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                nn::pad(x, &self.padding, PadMode::$mode, 0.0)
            }
        }
    };
}

/// A constant padding layer (`ConstantPad{1,2,3}d`): the sides and a fill value.
macro_rules! constant_pad_layer {
    ($(#[$doc:meta])* $name:ident, $sides:literal, $order:literal,
     $shape:literal => $out:literal) => {
        $(#[$doc])*
        ///
        /// ```
        #[doc = concat!("use tensorplay_nn::{Forward, ", stringify!($name), "};")]
        /// use tensorplay_runtime::{DType, Tensor};
        #[doc = concat!("let pad = ", stringify!($name), "::new(&[1], 0.5)?;")]
        #[doc = concat!("let y = pad.forward(&Tensor::ones(&", $shape, ", DType::F32))?;")]
        #[doc = concat!("assert_eq!(y.shape(), &", $out, ");")]
        /// assert_eq!(y.to_vec::<f32>()?[0], 0.5);
        /// # Ok::<(), tensorplay_runtime::Error>(())
        /// ```
        #[derive(Module, Debug, Clone, PartialEq)]
        #[module(crate = crate)]
        pub struct $name {
            #[doc = concat!("The sides: `[", $order, "]`.")]
            pub padding: [i64; $sides],
            /// The fill value.
            pub value: f64,
        }

        impl $name {
            #[doc = concat!("Pads by `padding` (one size for every side or `[", $order,
                "]`) with `value`.")]
            pub fn new(padding: &[i64], value: f64) -> Result<$name> {
                Ok($name {
                    padding: sides(stringify!($name), $order, padding)?,
                    value,
                })
            }
        }

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                nn::pad(x, &self.padding, PadMode::Constant, self.value)
            }
        }
    };
}

pad_layer!(
    /// Pads the last dim with zeros (PyTorch's `nn.ZeroPad1d`); negative sizes crop.
    ZeroPad1d, Constant, 2, "left, right", "[2, 3, 4]" => "[2, 3, 6]"
);
pad_layer!(
    /// Pads the last two dims with zeros (PyTorch's `nn.ZeroPad2d`); negative sizes crop.
    ZeroPad2d, Constant, 4, "left, right, top, bottom", "[2, 3, 4]" => "[2, 5, 6]"
);
pad_layer!(
    /// Pads the last three dims with zeros (PyTorch's `nn.ZeroPad3d`); negative sizes crop.
    ZeroPad3d, Constant, 6, "left, right, top, bottom, front, back",
    "[1, 2, 3, 4]" => "[1, 4, 5, 6]"
);
constant_pad_layer!(
    /// Pads the last dim with `value` (PyTorch's `nn.ConstantPad1d`); negative sizes crop.
    ConstantPad1d, 2, "left, right", "[2, 3, 4]" => "[2, 3, 6]"
);
constant_pad_layer!(
    /// Pads the last two dims with `value` (PyTorch's `nn.ConstantPad2d`); negative sizes
    /// crop.
    ConstantPad2d, 4, "left, right, top, bottom", "[3, 2, 2]" => "[3, 4, 4]"
);
constant_pad_layer!(
    /// Pads the last three dims with `value` (PyTorch's `nn.ConstantPad3d`); negative sizes
    /// crop.
    ConstantPad3d, 6, "left, right, top, bottom, front, back",
    "[1, 2, 3, 4]" => "[1, 4, 5, 6]"
);
pad_layer!(
    /// Pads the last dim by mirroring about the edge (PyTorch's `nn.ReflectionPad1d`): each
    /// side less than the dim. Input `[N, C, L]` or `[C, L]`.
    ReflectionPad1d, Reflect, 2, "left, right", "[2, 3, 4]" => "[2, 3, 6]"
);
pad_layer!(
    /// Pads the last two dims by mirroring about the edge (PyTorch's `nn.ReflectionPad2d`):
    /// each side less than its dim. Input `[N, C, H, W]` or `[C, H, W]`.
    ReflectionPad2d, Reflect, 4, "left, right, top, bottom", "[2, 3, 4]" => "[2, 5, 6]"
);
pad_layer!(
    /// Pads the last three dims by mirroring about the edge (PyTorch's
    /// `nn.ReflectionPad3d`): each side less than its dim. Input `[N, C, D, H, W]` or
    /// `[C, D, H, W]`.
    ReflectionPad3d, Reflect, 6, "left, right, top, bottom, front, back",
    "[1, 2, 3, 4]" => "[1, 4, 5, 6]"
);
pad_layer!(
    /// Pads the last dim by repeating the edge (PyTorch's `nn.ReplicationPad1d`).
    ReplicationPad1d, Replicate, 2, "left, right", "[2, 3, 4]" => "[2, 3, 6]"
);
pad_layer!(
    /// Pads the last two dims by repeating the edge (PyTorch's `nn.ReplicationPad2d`).
    ReplicationPad2d, Replicate, 4, "left, right, top, bottom", "[2, 3, 4]" => "[2, 5, 6]"
);
pad_layer!(
    /// Pads the last three dims by repeating the edge (PyTorch's `nn.ReplicationPad3d`).
    ReplicationPad3d, Replicate, 6, "left, right, top, bottom, front, back",
    "[1, 2, 3, 4]" => "[1, 4, 5, 6]"
);
pad_layer!(
    /// Pads the last dim by wrapping around (PyTorch's `nn.CircularPad1d`): each side at
    /// most the dim.
    CircularPad1d, Circular, 2, "left, right", "[2, 3, 4]" => "[2, 3, 6]"
);
pad_layer!(
    /// Pads the last two dims by wrapping around (PyTorch's `nn.CircularPad2d`): each side at
    /// most its dim.
    CircularPad2d, Circular, 4, "left, right, top, bottom", "[2, 3, 4]" => "[2, 5, 6]"
);
pad_layer!(
    /// Pads the last three dims by wrapping around (PyTorch's `nn.CircularPad3d`): each side
    /// at most its dim.
    CircularPad3d, Circular, 6, "left, right, top, bottom, front, back",
    "[1, 2, 3, 4]" => "[1, 4, 5, 6]"
);
