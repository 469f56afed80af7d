//! Tensor factories: constants, ranges, data from Rust vectors, seeded random tensors.

use std::sync::atomic::{AtomicU64, Ordering};

use tensorplay_ir::shape::{contiguous_strides, fmt_shape, numel};
use tensorplay_ir::{DType, Device, Error, Result};

use super::{Tensor, TensorImpl};
use crate::element::Element;
use crate::storage::Storage;
use crate::value::Scalar;

/// Global seed state for [`Tensor::rand`] and [`Tensor::randn`].
static SEED: AtomicU64 = AtomicU64::new(0x5eed_0f_7e45_0a11);

/// Seeds the global generator used by `rand`/`randn` (like `torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    SEED.store(seed, Ordering::SeqCst);
}

/// SplitMix64: tiny, fast, and good enough for initialising weights and test data.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Draws a fresh stream seed from the global state (so successive calls differ).
fn next_stream() -> u64 {
    SEED.fetch_add(0x2545_f491_4f6c_dd1d, Ordering::SeqCst)
}

impl Tensor {
    /// A tensor of `shape` holding `data` (row-major), with `T`'s dtype.
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// assert!(Tensor::from_vec(vec![1.0f32, 2.0], &[3]).is_err());
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice(&data, shape)
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        if data.len() != numel(shape) {
            return Err(Error::shape(
                "from_vec",
                format!("{} values cannot fill shape {} ({} elements)", data.len(), fmt_shape(shape), numel(shape)),
            ));
        }
        let t = Tensor::empty_with(shape, T::DTYPE, Device::Cpu, false);
        let ptr = t.data_ptr("from_vec")? as *mut T;
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        Ok(t)
    }

    /// A 0-d tensor holding `value`.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_slice(&[value], &[]).expect("one value fills a 0-d tensor")
    }

    /// A 0-d tensor from a Rust scalar operand, flagged so that it only raises the promotion
    /// category of the op it meets (f64, i64 or bool storage, like PyTorch's wrapped numbers).
    pub fn wrapped_scalar(s: Scalar) -> Tensor {
        let t = match s {
            Scalar::Bool(b) => Tensor::scalar(b),
            Scalar::Int(i) => Tensor::scalar(i),
            Scalar::Float(f) => Tensor::scalar(f),
        };
        let mut inner = std::sync::Arc::try_unwrap(t.0).unwrap_or_else(|_| unreachable!("fresh tensor is unique"));
        inner.wrapped_number = true;
        Tensor::from_impl(inner)
    }

    /// An uninitialized tensor (contents are whatever the allocator returns).
    pub fn empty(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::empty_with(shape, dtype, Device::Cpu, false)
    }

    /// A tensor with metadata only, for shape computations (fake kernels, capture). `device` is
    /// the device it pretends to live on.
    pub fn empty_fake(shape: &[usize], dtype: DType, device: Device) -> Tensor {
        Tensor::empty_with(shape, dtype, device, true)
    }

    /// All zeros.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::from_impl(TensorImpl::new(
            Storage::zeroed(numel(shape) * dtype.size()),
            shape.into(),
            contiguous_strides(shape),
            0,
            dtype,
            Device::Cpu,
        ))
    }

    /// All ones.
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1, dtype)
    }

    /// Every element set to `value` (converted to `dtype`).
    pub fn full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Tensor {
        let t = Tensor::empty(shape, dtype);
        crate::ops::inplace::fill_scalar("full", &t, value.into()).expect("filling a fresh contiguous tensor cannot fail");
        t
    }

    /// `start, start + step, ...` up to (excluding) `end`.
    ///
    /// ```
    /// use tensorplay_runtime::{Tensor, DType};
    /// let r = Tensor::arange(0.0, 1.0, 0.25, DType::F32)?;
    /// assert_eq!(r.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75]);
    /// assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32).is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::argument("arange", "step", "a finite non-zero step and finite bounds", format!("start={start}, end={end}, step={step}")));
        }
        if (end - start) * step < 0.0 {
            return Err(Error::argument("arange", "step", "a step whose sign matches end - start", format!("start={start}, end={end}, step={step}")));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let values: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        Tensor::from_vec(values, &[n])?.to_dtype(dtype)
    }

    /// Uniform random values in [0, 1) from the global seeded generator.
    pub fn rand(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::rand_seeded(shape, dtype, next_stream())
    }

    /// Standard normal random values from the global seeded generator.
    pub fn randn(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::randn_seeded(shape, dtype, next_stream())
    }

    /// Uniform random values in [0, 1) from an explicit seed (same seed, same values).
    pub fn rand_seeded(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::dtype("rand", format!("expects a floating dtype, got {dtype}")));
        }
        let mut g = SplitMix64(seed);
        let v: Vec<f64> = (0..numel(shape)).map(|_| g.next_f64()).collect();
        Tensor::from_vec(v, shape)?.to_dtype(dtype)
    }

    /// Standard normal values (Box–Muller) from an explicit seed.
    pub fn randn_seeded(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::dtype("randn", format!("expects a floating dtype, got {dtype}")));
        }
        let mut g = SplitMix64(seed);
        let n = numel(shape);
        let mut v = Vec::with_capacity(n + 1);
        while v.len() < n {
            let u1 = 1.0 - g.next_f64(); // (0, 1]
            let u2 = g.next_f64();
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
            v.push(r * c);
            v.push(r * s);
        }
        v.truncate(n);
        Tensor::from_vec(v, shape)?.to_dtype(dtype)
    }

    /// Zeros with this tensor's shape and dtype.
    pub fn zeros_like(t: &Tensor) -> Tensor {
        Tensor::zeros(t.shape(), t.dtype())
    }

    /// Ones with this tensor's shape and dtype.
    pub fn ones_like(t: &Tensor) -> Tensor {
        Tensor::ones(t.shape(), t.dtype())
    }

    /// `value` everywhere, with this tensor's shape and dtype.
    pub fn full_like(t: &Tensor, value: impl Into<Scalar>) -> Tensor {
        Tensor::full(t.shape(), value, t.dtype())
    }

    /// Uninitialized, with this tensor's shape and dtype.
    pub fn empty_like(t: &Tensor) -> Tensor {
        Tensor::empty(t.shape(), t.dtype())
    }

    /// Uniform random values with this tensor's shape and (floating) dtype.
    pub fn rand_like(t: &Tensor) -> Result<Tensor> {
        Tensor::rand(t.shape(), t.dtype())
    }

    /// Normal random values with this tensor's shape and (floating) dtype.
    pub fn randn_like(t: &Tensor) -> Result<Tensor> {
        Tensor::randn(t.shape(), t.dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_random_is_reproducible() {
        let a = Tensor::randn_seeded(&[5], DType::F64, 7).unwrap().to_vec::<f64>().unwrap();
        let b = Tensor::randn_seeded(&[5], DType::F64, 7).unwrap().to_vec::<f64>().unwrap();
        assert_eq!(a, b);
        let u = Tensor::rand_seeded(&[1000], DType::F32, 1).unwrap().to_vec::<f32>().unwrap();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    }
}
