//! Tensor factories: constants, ranges, data from Rust vectors, seeded random tensors.

use std::sync::atomic::{AtomicU64, Ordering};

use tensorplay_ir::shape::{fmt_shape, numel};
use tensorplay_ir::{DType, Device, Error, Result, Shape};

use super::{Tensor, checked_nbytes};
use crate::element::Element;
use crate::storage::Storage;
use crate::symint::SymInt;
use crate::value::Scalar;

/// Global seed state for [`Tensor::rand`] and [`Tensor::randn`].
static SEED: AtomicU64 = AtomicU64::new(0x5eed_0f7e_4500_0a11);

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
pub(crate) fn next_stream() -> u64 {
    SEED.fetch_add(0x2545_f491_4f6c_dd1d, Ordering::SeqCst)
}

/// `bernoulli`'s `p`: a probability in `[0, 1]` (NaN is not).
fn check_probability(p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::argument(
            "bernoulli",
            "p",
            "a probability in [0, 1]",
            p.to_string(),
        ));
    }
    Ok(())
}

/// An f64 tensor of `shape` filled by `fill` from a generator seeded with `seed`.
fn random_f64(
    op: &str,
    shape: &[usize],
    seed: u64,
    fill: impl FnOnce(&mut SplitMix64, &mut [f64]),
) -> Result<Tensor> {
    let t = Tensor::try_zeros_with(op, shape, DType::F64)?;
    let n = t.numel();
    // SAFETY: `t` is a fresh, zero-filled (so initialised), contiguous f64 tensor of `n` elements
    // that no other handle can reach yet, so this is the only reference to its memory.
    let out = unsafe { std::slice::from_raw_parts_mut(t.data_ptr(op)?.cast::<f64>(), n) };
    fill(&mut SplitMix64(seed), out);
    Ok(t)
}

impl Tensor {
    /// A tensor of `shape` holding `data` (row-major), with `T`'s dtype.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// assert!(Tensor::from_vec(vec![1.0f32, 2.0], &[3]).is_err());
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice(&data, shape)
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        checked_nbytes("from_vec", shape, T::DTYPE)?;
        let n = if shape.contains(&0) { 0 } else { numel(shape) };
        if data.len() != n {
            return Err(Error::shape(
                "from_vec",
                format!(
                    "{} values cannot fill shape {} ({n} elements)",
                    data.len(),
                    fmt_shape(shape)
                ),
            ));
        }
        let t = Tensor::try_empty_with("from_vec", shape, T::DTYPE, Device::Cpu, false)?;
        let ptr = t.data_ptr("from_vec")?.cast::<T>();
        // SAFETY: `t` is fresh, contiguous and holds exactly `data.len()` elements of `T` (checked
        // above), and a new allocation cannot overlap the caller's slice.
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
        let mut inner = std::sync::Arc::try_unwrap(t.0)
            .unwrap_or_else(|_| unreachable!("fresh tensor is unique"));
        inner.wrapped_number = true;
        Tensor::from_impl(inner)
    }

    /// A tensor to be overwritten. Its contents are zero: safe code never sees uninitialised
    /// memory (reading it would be undefined behaviour, and for `bool` even a stray byte is).
    /// Zeroing costs one `memset`; see [`Tensor::try_empty_uninit`] for writers that fill every
    /// element themselves.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// assert_eq!(Tensor::empty(&[3], DType::Bool).to_vec::<bool>()?, vec![false; 3]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    ///
    /// # Panics
    /// When the shape is too large to allocate; [`Tensor::try_empty`] returns an error instead.
    pub fn empty(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::try_empty(shape, dtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Tensor::empty`], with an error when the shape overflows or memory runs out.
    pub fn try_empty(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::try_zeros_with("empty", shape, dtype)
    }

    /// Like [`Tensor::try_empty`] without zeroing: the contents are whatever the allocator
    /// returns. For code generators whose kernels write every element (the compiler's region
    /// outputs).
    ///
    /// # Safety
    /// Every element must be written (through [`Tensor::data_ptr_raw`]) before the tensor or any
    /// view of it is read, passed to an op, or returned to safe code that might read it.
    pub unsafe fn try_empty_uninit(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::try_empty_with("empty", shape, dtype, Device::Cpu, false)
    }

    /// A contiguous CPU tensor of `shape` and `dtype` over the first bytes of `storage`,
    /// reusing its memory: for an owner that recycles buffers (the compiler's arena of
    /// intermediates, whose kernels write every element). An error when the storage is fake or
    /// smaller than the tensor.
    ///
    /// # Safety
    /// As for [`Tensor::try_empty_uninit`]: the contents are whatever the storage held (possibly
    /// never initialised), so every element must be written before it is read. No other
    /// tensor may use `storage` while this one does ([`Storage::is_unique`] before the call).
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let t = Tensor::zeros(&[4], DType::F32);
    /// let s = t.storage().clone();
    /// drop(t);
    /// assert!(s.is_unique());
    /// // SAFETY: nothing else uses the storage, and every element is written before any read.
    /// let u = unsafe { Tensor::from_recycled_storage(s, &[2], DType::F64)? };
    /// u.fill_(1.5)?;
    /// assert_eq!(u.to_vec::<f64>()?, vec![1.5, 1.5]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub unsafe fn from_recycled_storage(
        storage: Storage,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let bytes = checked_nbytes("from_recycled_storage", shape, dtype)?;
        if storage.is_fake()
            || storage.device_buffer().is_some()
            || storage.is_external()
            || storage.nbytes() < bytes
        {
            return Err(Error::argument(
                "from_recycled_storage",
                "storage",
                format!("a host storage of at least {bytes} bytes"),
                format!(
                    "{} bytes{}",
                    storage.nbytes(),
                    if storage.is_fake() {
                        " (fake)"
                    } else if storage.device_buffer().is_some() {
                        " (device memory)"
                    } else if storage.is_external() {
                        " (memory of another owner, never recycled)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(Tensor::contiguous_over(storage, shape, dtype, Device::Cpu))
    }

    /// A tensor with metadata only, for shape computations (fake kernels, capture). `device` is
    /// the device it pretends to live on.
    ///
    /// # Panics
    /// When the shape's byte size overflows `isize` (see [`checked_nbytes`]).
    pub fn empty_fake(shape: &[usize], dtype: DType, device: Device) -> Tensor {
        Tensor::try_empty_with("empty_fake", shape, dtype, device, true)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// All zeros.
    ///
    /// # Panics
    /// When the shape is too large to allocate; [`Tensor::try_zeros`] returns an error instead.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::try_zeros(shape, dtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Tensor::zeros`], with an error when the shape overflows or memory runs out.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// assert_eq!(Tensor::try_zeros(&[2], DType::I32)?.to_vec::<i32>()?, vec![0, 0]);
    /// assert!(Tensor::try_zeros(&[1 << 40, 1 << 40], DType::F32).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn try_zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::try_zeros_with("zeros", shape, dtype)
    }

    /// [`Tensor::zeros`] of sizes that may be symbolic ([`SymInt`]s from
    /// [`Tensor::sym_size`]): during capture a symbolic shape makes the result a graph node
    /// whose sizes follow the inputs (see [`Tensor::full_sym`]).
    pub fn zeros_sym(shape: &[SymInt], dtype: DType) -> Result<Tensor> {
        Tensor::full_sym(shape, 0, dtype)
    }

    /// [`Tensor::ones`] of sizes that may be symbolic (see [`Tensor::full_sym`]).
    pub fn ones_sym(shape: &[SymInt], dtype: DType) -> Result<Tensor> {
        Tensor::full_sym(shape, 1, dtype)
    }

    /// [`Tensor::try_full`] of sizes that may be symbolic. Outside capture every `SymInt` is a
    /// plain size and this is `try_full`; during capture a symbolic shape makes the result a
    /// graph node (not a constant of the example size, which would be limited to 64 elements).
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let x = Tensor::zeros(&[3], DType::F32);
    /// let twos = Tensor::full_sym(&[x.sym_size(0)?], 2.0, DType::F32)?;
    /// assert_eq!(twos.to_vec::<f32>()?, vec![2.0; 3]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn full_sym(shape: &[SymInt], value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        let mut plain = Shape::with_capacity(shape.len());
        for (i, &s) in shape.iter().enumerate() {
            match s {
                SymInt::Lit(n) => plain.push(usize::try_from(n).map_err(|_| {
                    Error::argument(
                        "full",
                        "size",
                        "non-negative sizes",
                        format!("size {n} at dim {i}"),
                    )
                })?),
                SymInt::Sym { .. } => return Tensor::symbolic_full(shape, value.into(), dtype),
            }
        }
        Tensor::try_full(&plain, value, dtype)
    }

    /// A factory of symbolic sizes (only during capture): a 0-d constant broadcast to `sizes` and
    /// copied, so the graph holds nodes whose sizes follow the inputs (not a constant of the
    /// example size). The result is handed out as a proxy (a fake tensor standing for the
    /// recorded value): the copy is real, but the closure must see it like any value derived from
    /// the inputs — its sizes symbolic, a plain read of them guarded.
    fn symbolic_full(sizes: &[SymInt], value: Scalar, dtype: DType) -> Result<Tensor> {
        let scalar = Tensor::try_full(&[], value, dtype)?;
        let filled = scalar.expand_sym(sizes)?.clone_tensor()?;
        let proxy = Tensor::empty_fake(filled.shape(), dtype, filled.device());
        crate::tensor::note_alias(&filled, &proxy);
        Ok(proxy)
    }

    /// Zero-filled CPU storage for `shape`, with errors naming `op`.
    fn try_zeros_with(op: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let bytes = checked_nbytes(op, shape, dtype)?;
        let storage = Storage::zeroed(bytes).ok_or_else(|| {
            Error::unsupported(
                op,
                format!(
                    "out of memory: cannot allocate {bytes} bytes for a tensor of shape {} and dtype {dtype}",
                    fmt_shape(shape)
                ),
            )
        })?;
        Ok(Tensor::contiguous_over(storage, shape, dtype, Device::Cpu))
    }

    /// All ones.
    ///
    /// # Panics
    /// When the shape is too large to allocate (see [`Tensor::try_full`]).
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1, dtype)
    }

    /// Every element set to `value` (converted to `dtype`).
    ///
    /// # Panics
    /// When the shape is too large to allocate, or `value` does not fit `dtype` (an integer out
    /// of range, a finite float beyond a half type's range: PyTorch's checked conversion);
    /// [`Tensor::try_full`] returns an error instead.
    pub fn full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Tensor {
        Tensor::try_full(shape, value, dtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Tensor::full`], with an error when the shape overflows, memory runs out or
    /// `value` does not fit `dtype`.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// assert!(Tensor::try_full(&[2], 70000.0, DType::F16).is_err()); // beyond f16's 65504
    /// assert!(Tensor::try_full(&[2], f64::INFINITY, DType::F16).is_ok());
    /// ```
    pub fn try_full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        let t = Tensor::try_empty_with("full", shape, dtype, Device::Cpu, false)?;
        crate::ops::inplace::fill_scalar("full", &t, value.into())?;
        Ok(t)
    }

    /// `start, start + step, ...` up to (excluding) `end`. Float values are `start + i·step`
    /// rounded once (an fma in f64, then converted to `dtype`); integer dtypes count `ceil((end - start) / step)`
    /// elements but step by the arguments truncated to integers, as PyTorch does.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let r = Tensor::arange(0.0, 1.0, 0.25, DType::F32)?;
    /// assert_eq!(r.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75]);
    /// assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::argument(
                "arange",
                "step",
                "a finite non-zero step and finite bounds",
                format!("start={start}, end={end}, step={step}"),
            ));
        }
        if (end - start) * step < 0.0 {
            return Err(Error::argument(
                "arange",
                "step",
                "a step whose sign matches end - start",
                format!("start={start}, end={end}, step={step}"),
            ));
        }
        let len = ((end - start) / step).ceil();
        if len.is_nan() || len >= isize::MAX as f64 {
            return Err(Error::argument(
                "arange",
                "step",
                "a range with fewer than isize::MAX elements",
                format!("start={start}, end={end}, step={step} ({len} elements)"),
            ));
        }
        let n = len.max(0.0) as usize;
        if dtype.is_int() {
            // PyTorch: the length comes from the float arguments, the values from the arguments
            // converted to the integer type (truncated): `arange(0, 5, 0.5)` as i32 is ten 0s,
            // `arange(-2.5, 2.5, 0.7)` as i64 is eight -2s.
            let (s0, st) = (start as i64, step as i64);
            let values = Tensor::try_empty_with("arange", &[n], DType::I64, Device::Cpu, false)?;
            let ptr = values.data_ptr("arange")?.cast::<i64>();
            for i in 0..n {
                // SAFETY: `values` is a fresh contiguous i64 tensor of `n` elements that nothing
                // else can reach; writing (not reading) its uninitialised slots is fine.
                unsafe {
                    ptr.add(i)
                        .write(s0.wrapping_add((i as i64).wrapping_mul(st)))
                };
            }
            return values.to_dtype(dtype);
        }
        let values = Tensor::try_empty_with("arange", &[n], DType::F64, Device::Cpu, false)?;
        let ptr = values.data_ptr("arange")?.cast::<f64>();
        // Each value is computed from its index (not accumulated), so no error builds up.
        for i in 0..n {
            // SAFETY: `values` is a fresh contiguous f64 tensor of `n` elements that nothing else
            // can reach; writing (not reading) its uninitialised slots is fine.
            // One rounding of the exact `start + i·step` (fma): correctly rounded.
            unsafe { ptr.add(i).write((i as f64).mul_add(step, start)) };
        }
        values.to_dtype(dtype)
    }

    /// Uniform random values in [0, 1) from the global seeded generator.
    pub fn rand(shape: &[usize], dtype: DType) -> Result<Tensor> {
        crate::vmap::random("rand", shape, |s| {
            Tensor::rand_seeded(s, dtype, next_stream())
        })
    }

    /// Standard normal random values from the global seeded generator.
    pub fn randn(shape: &[usize], dtype: DType) -> Result<Tensor> {
        crate::vmap::random("randn", shape, |s| {
            Tensor::randn_seeded(s, dtype, next_stream())
        })
    }

    /// Uniform random values in [0, 1) from an explicit seed (same seed, same values).
    ///
    /// Each value carries as many random bits as `dtype` has significand bits, so it is exactly
    /// representable and never rounds up to 1.0 (even in f16/bf16).
    pub fn rand_seeded(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::dtype(
                "rand",
                format!("expects a floating dtype, got {dtype}"),
            ));
        }
        let bits: u32 = match dtype {
            DType::F64 => 53,
            DType::F32 => 24,
            DType::F16 => 11,
            _ => 8, // bf16
        };
        let scale = 1.0 / (1u64 << bits) as f64;
        let values = random_f64("rand", shape, seed, |g, out| {
            for v in out {
                *v = (g.next_u64() >> (64 - bits)) as f64 * scale;
            }
        })?;
        values.to_dtype(dtype)
    }

    /// Integers drawn uniformly from `[low, high)` (`torch.randint`) from an explicit seed (same
    /// seed, same values), stored in `dtype` (PyTorch's default is i64). `low >= high` is an
    /// argument error, as is a range `dtype` cannot hold (bool holds `[0, 2)`, i32 its range;
    /// floating dtypes take any range, rounding values above their exact-integer range).
    ///
    /// Each value is `low + ((u * (high - low)) >> 64)` for a 64-bit draw `u`, so for ranges far
    /// below 2^64 the bias is below 2^-32 per value.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::randint_seeded(-3, 4, &[1000], DType::I64, 7)?;
    /// let v = x.to_vec::<i64>()?;
    /// assert!(v.iter().all(|&k| (-3..4).contains(&k)));
    /// assert_eq!(v, Tensor::randint_seeded(-3, 4, &[1000], DType::I64, 7)?.to_vec::<i64>()?);
    /// assert!(Tensor::randint_seeded(2, 2, &[3], DType::I64, 0).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn randint_seeded(
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
        seed: u64,
    ) -> Result<Tensor> {
        const OP: &str = "randint";
        if low >= high {
            return Err(Error::argument(
                OP,
                "high",
                format!("a value above low ({low})"),
                high.to_string(),
            ));
        }
        let range: Option<(i64, i64)> = match dtype {
            DType::Bool => Some((0, 1)),
            DType::I32 => Some((i32::MIN as i64, i32::MAX as i64)),
            _ => None,
        };
        if let Some((lo, hi)) = range
            && (low < lo || high - 1 > hi)
        {
            return Err(Error::argument(
                OP,
                "high",
                format!(
                    "a range [low, high) inside [{lo}, {}] for dtype {dtype}",
                    hi + 1
                ),
                format!("[{low}, {high})"),
            ));
        }
        checked_nbytes(OP, shape, DType::I64)?;
        let n = if shape.contains(&0) { 0 } else { numel(shape) };
        let width = high.wrapping_sub(low) as u64 as u128;
        let mut g = SplitMix64(seed);
        let values: Vec<i64> = (0..n)
            .map(|_| {
                let k = ((g.next_u64() as u128 * width) >> 64) as u64;
                low.wrapping_add(k as i64)
            })
            .collect();
        Tensor::from_vec(values, shape)?.to_dtype(dtype)
    }

    /// Bernoulli draws (`torch.bernoulli`) with the probabilities in `self` (floating, each in
    /// `[0, 1]`): 1 where a uniform draw from `seed` falls below `self`'s value, else 0, in
    /// `self`'s dtype and shape. Not differentiable (like PyTorch's). A probability outside
    /// `[0, 1]` (or NaN) is an argument error; it is checked on real data only (not while
    /// capturing, where values are unknown).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let p = Tensor::from_vec(vec![0.0f32, 1.0, 0.0, 1.0], &[2, 2])?;
    /// assert_eq!(p.bernoulli_seeded(3)?.to_vec::<f32>()?, vec![0.0, 1.0, 0.0, 1.0]);
    /// assert!(Tensor::from_vec(vec![1.5f32], &[1])?.bernoulli_seeded(3).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn bernoulli_seeded(&self, seed: u64) -> Result<Tensor> {
        self.bernoulli_with(|shape| Tensor::rand_seeded(shape, DType::F64, seed))
    }

    /// [`Tensor::bernoulli_seeded`] drawing from the global generator (`torch.bernoulli`):
    /// reproducible after [`manual_seed`], and successive calls differ. Safe to call from many
    /// threads (each call takes its own stream from an atomic counter; interleaved threads get
    /// streams in the order they reach it).
    ///
    /// ```
    /// use tensorplay_core::{manual_seed, Tensor};
    /// let p = Tensor::from_vec(vec![0.5f64; 64], &[64])?;
    /// manual_seed(5);
    /// let a = p.bernoulli()?.to_vec::<f64>()?;
    /// manual_seed(5);
    /// assert_eq!(p.bernoulli()?.to_vec::<f64>()?, a);
    /// assert!(a.iter().all(|&v| v == 0.0 || v == 1.0));
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn bernoulli(&self) -> Result<Tensor> {
        self.bernoulli_with(|shape| Tensor::rand(shape, DType::F64))
    }

    /// Bernoulli draws with `self`'s probabilities against the uniform values `uniform(shape)`.
    fn bernoulli_with(&self, uniform: impl FnOnce(&[usize]) -> Result<Tensor>) -> Result<Tensor> {
        const OP: &str = "bernoulli";
        if !self.dtype().is_float() {
            return Err(Error::argument(
                OP,
                "p",
                "a floating tensor of probabilities",
                format!("dtype {}", self.dtype()),
            ));
        }
        if !self.is_fake()
            && let Some(bad) = self
                .to_vec_f64()?
                .into_iter()
                .find(|v| !(0.0..=1.0).contains(v))
        {
            return Err(Error::argument(
                OP,
                "p",
                "probabilities in [0, 1]",
                format!("a value {bad}"),
            ));
        }
        let u = uniform(self.shape())?;
        u.lt(&self.detach().to_dtype(DType::F64)?)?
            .to_dtype(self.dtype())
    }

    /// [`Tensor::bernoulli_p_seeded`] drawing from the global generator: reproducible after
    /// [`manual_seed`]; a `p` outside `[0, 1]` is an argument error.
    ///
    /// ```
    /// use tensorplay_core::{manual_seed, DType, Tensor};
    /// manual_seed(11);
    /// let a = Tensor::bernoulli_p(&[32], 0.5, DType::F32)?.to_vec::<f32>()?;
    /// manual_seed(11);
    /// assert_eq!(Tensor::bernoulli_p(&[32], 0.5, DType::F32)?.to_vec::<f32>()?, a);
    /// assert!(Tensor::bernoulli_p(&[2], 1.5, DType::F32).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn bernoulli_p(shape: &[usize], p: f64, dtype: DType) -> Result<Tensor> {
        check_probability(p)?;
        Tensor::rand(shape, DType::F64)?
            .lt_scalar(p)?
            .to_dtype(dtype)
    }

    /// [`Tensor::randint_seeded`] drawing from the global generator (`torch.randint`):
    /// reproducible after [`manual_seed`], and successive calls differ. The same argument errors
    /// as the seeded form.
    ///
    /// ```
    /// use tensorplay_core::{manual_seed, DType, Tensor};
    /// manual_seed(3);
    /// let a = Tensor::randint(0, 10, &[100], DType::I64)?.to_vec::<i64>()?;
    /// assert!(a.iter().all(|&k| (0..10).contains(&k)));
    /// manual_seed(3);
    /// assert_eq!(Tensor::randint(0, 10, &[100], DType::I64)?.to_vec::<i64>()?, a);
    /// assert!(Tensor::randint(5, 5, &[1], DType::I64).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn randint(low: i64, high: i64, shape: &[usize], dtype: DType) -> Result<Tensor> {
        // Validated before a stream is taken, so a bad call leaves the generator alone.
        Tensor::randint_seeded(low, high, &[0], dtype, 0)?;
        crate::vmap::random("randint", shape, |s| {
            Tensor::randint_seeded(low, high, s, dtype, next_stream())
        })
    }

    /// Bernoulli draws of one probability `p` (in `[0, 1]`) for every element of a new tensor
    /// of `shape` and `dtype` (`torch.empty(shape).bernoulli_(p)`), from an explicit seed.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::bernoulli_p_seeded(&[4000], 0.25, DType::F32, 1)?;
    /// let ones = x.sum_all()?.item::<f32>()?;
    /// assert!((900.0..1100.0).contains(&ones), "{ones}");
    /// assert!(Tensor::bernoulli_p_seeded(&[2], -0.5, DType::F32, 1).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn bernoulli_p_seeded(shape: &[usize], p: f64, dtype: DType, seed: u64) -> Result<Tensor> {
        check_probability(p)?;
        Tensor::rand_seeded(shape, DType::F64, seed)?
            .lt_scalar(p)?
            .to_dtype(dtype)
    }

    /// Standard normal values (Box–Muller) from an explicit seed.
    pub fn randn_seeded(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::dtype(
                "randn",
                format!("expects a floating dtype, got {dtype}"),
            ));
        }
        let values = random_f64("randn", shape, seed, |g, out| {
            for pair in out.chunks_mut(2) {
                let u1 = 1.0 - g.next_f64(); // (0, 1]
                let u2 = g.next_f64();
                let r = (-2.0 * u1.ln()).sqrt();
                let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
                pair[0] = r * c;
                if let Some(second) = pair.get_mut(1) {
                    *second = r * s;
                }
            }
        })?;
        values.to_dtype(dtype)
    }

    /// Zeros with this tensor's shape, dtype and device.
    /// Fake (and meta) inputs give fake results on the same device, so these are usable in fake
    /// kernels.
    ///
    /// # Panics
    /// When a CUDA device's memory is exhausted (as [`Tensor::zeros`] does on the host).
    pub fn zeros_like(t: &Tensor) -> Tensor {
        if t.is_fake() && crate::capture::is_installed() {
            // Under capture (a traced backward's missing gradient), zeros made by an op on `t` —
            // a select with a false condition — so the tracer records them, reading no size.
            let no = Tensor::from_vec(vec![false], &[]);
            if let Ok(z) =
                no.and_then(|no| Tensor::where_cond(&no, t, &Tensor::zeros(&[], t.dtype())))
            {
                return z;
            }
        }
        if t.is_fake() {
            return Tensor::empty_fake(t.shape(), t.dtype(), t.device());
        }
        Tensor::zeros_on(t.shape(), t.dtype(), t.device()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Ones with this tensor's shape, dtype and device.
    pub fn ones_like(t: &Tensor) -> Tensor {
        if t.is_fake() {
            return Tensor::empty_fake(t.shape(), t.dtype(), t.device());
        }
        on_device_of(t, Tensor::ones(t.shape(), t.dtype()))
    }

    /// `value` everywhere, with this tensor's shape, dtype and device.
    ///
    /// # Panics
    /// As [`Tensor::full`] does.
    pub fn full_like(t: &Tensor, value: impl Into<Scalar>) -> Tensor {
        if t.is_fake() {
            return Tensor::empty_fake(t.shape(), t.dtype(), t.device());
        }
        on_device_of(t, Tensor::full(t.shape(), value, t.dtype()))
    }

    /// Like [`Tensor::empty`] (zero-filled), with this tensor's shape, dtype and device.
    pub fn empty_like(t: &Tensor) -> Tensor {
        if t.is_fake() {
            return Tensor::empty_fake(t.shape(), t.dtype(), t.device());
        }
        on_device_of(t, Tensor::empty(t.shape(), t.dtype()))
    }

    /// Uniform random values with this tensor's shape, (floating) dtype and device.
    pub fn rand_like(t: &Tensor) -> Result<Tensor> {
        Tensor::rand(t.shape(), t.dtype())?.to_device(t.device())
    }

    /// Normal random values with this tensor's shape, (floating) dtype and device.
    pub fn randn_like(t: &Tensor) -> Result<Tensor> {
        Tensor::randn(t.shape(), t.dtype())?.to_device(t.device())
    }
}

/// `host` (a fresh CPU tensor made like `t`) on `t`'s device: the `_like` factories keep the
/// device, as PyTorch's do.
///
/// # Panics
/// When the copy to a CUDA device fails (its memory is exhausted): these factories return a
/// tensor, not a `Result`, as `Tensor::full` does.
fn on_device_of(t: &Tensor, host: Tensor) -> Tensor {
    match t.device() {
        Device::Cuda(_) => host.to_device(t.device()).unwrap_or_else(|e| panic!("{e}")),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_random_is_reproducible() {
        let a = Tensor::randn_seeded(&[5], DType::F64, 7)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let b = Tensor::randn_seeded(&[5], DType::F64, 7)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_eq!(a, b);
        let u = Tensor::rand_seeded(&[1000], DType::F32, 1)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    }
}
