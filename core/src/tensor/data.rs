//! Reading tensor data out into Rust values.

use tensorplay_ir::{DType, Error, Result};

use crate::element::{Element, cast};
use crate::tensor::Tensor;
use crate::with_dtype;

impl Tensor {
    /// The elements in row-major order as `T`, which must be this tensor's element type.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(x.t()?.to_vec::<i32>()?, vec![1, 3, 2, 4]);
    /// assert!(x.to_vec::<f32>().is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read_out("to_vec")
    }

    /// [`Tensor::to_vec`] with errors naming `op`.
    fn read_out<T: Element>(&self, op: &str) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::dtype(
                op,
                format!("tensor has dtype {}, requested {}", self.dtype(), T::DTYPE),
            ));
        }
        if matches!(self.device(), tensorplay_ir::Device::Cuda(_)) && !self.is_fake() {
            // Values of a CUDA tensor are read from a host copy.
            return self.to_device(tensorplay_ir::Device::Cpu)?.read_out(op);
        }
        // Reading data records nothing, even for a non-contiguous tensor that requires grad.
        let _g = crate::autograd::no_grad();
        let src = self.contiguous()?;
        let ptr = src.data_ptr(op)?.cast::<T>().cast_const();
        // SAFETY: `src` is contiguous with `T`'s dtype, so its `numel` elements are consecutive
        // `T`s inside its storage, and they are initialised (every tensor's data is written before
        // safe code can reach it: `Tensor::empty` zero-fills, op outputs are filled by their
        // kernel). The slice lives only for this copy.
        Ok(unsafe { std::slice::from_raw_parts(ptr, src.numel()) }.to_vec())
    }

    /// The elements in row-major order converted to f64 (any dtype).
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        with_dtype!(self.dtype(), T => {
            Ok(self.to_vec::<T>()?.into_iter().map(cast::<T, f64>).collect())
        })
    }

    /// The single element of a one-element tensor, as `T` (converted from any dtype).
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!(
                    "only one-element tensors can be converted to a scalar, got shape {}",
                    tensorplay_ir::shape::fmt_shape(self.shape())
                ),
            ));
        }
        with_dtype!(self.dtype(), S => {
            Ok(cast::<S, T>(self.read_out::<S>("item")?[0]))
        })
    }

    /// True when shapes match and every element is equal (NaN equals NaN), after promoting both
    /// to a common dtype. Meant for tests.
    pub fn equal(&self, other: &Tensor) -> Result<bool> {
        if self.shape() != other.shape() {
            return Ok(false);
        }
        let dt = DType::promote(self.dtype(), other.dtype());
        if !dt.is_float() {
            // Integers compare exactly (f64 would merge neighbours beyond 2^53).
            let a = self.to_dtype(DType::I64)?.to_vec::<i64>()?;
            let b = other.to_dtype(DType::I64)?.to_vec::<i64>()?;
            return Ok(a == b);
        }
        let (a, b) = (
            self.to_dtype(dt)?.to_vec_f64()?,
            other.to_dtype(dt)?.to_vec_f64()?,
        );
        Ok(a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || (x.is_nan() && y.is_nan())))
    }

    /// True when shapes match and `|a - b| <= atol + rtol * |b|` elementwise (NaN matches NaN,
    /// infinities must match exactly).
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> Result<bool> {
        if self.shape() != other.shape() {
            return Ok(false);
        }
        let (a, b) = (self.to_vec_f64()?, other.to_vec_f64()?);
        Ok(a.iter().zip(&b).all(|(&x, &y)| {
            if x.is_nan() || y.is_nan() {
                x.is_nan() && y.is_nan()
            } else if x.is_infinite() || y.is_infinite() {
                x == y
            } else {
                (x - y).abs() <= atol + rtol * y.abs()
            }
        }))
    }
}
