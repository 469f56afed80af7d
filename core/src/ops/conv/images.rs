//! A `conv2d` forward split by images, with a hook after each chunk: the compiler's conv
//! epilogues run a pointwise region over the images a thread has just computed.

use std::ops::Range;

use tensorplay_ir::{DType, Device, Error, Result};

use super::geometry::{CONV2D_NAME, Geometry, geometry};
use super::im2col::Real;
use super::kernel::{elements, elements_mut, forward_chunk};
use super::products::{Base, Split};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// One `conv2d` call whose output images are computed chunk by chunk, each chunk followed by
/// the caller's work on it ([`ConvImages::run_chunks`]). The chunks are the ones the eager
/// kernel uses: one per pool thread when there are at least as many images as threads.
///
/// ```
/// use tensorplay_core::ops::conv::ConvImages;
/// use tensorplay_core::{DType, Tensor, Value};
///
/// let x = Tensor::randn_seeded(&[4, 3, 8, 8], DType::F32, 1)?;
/// let w = Tensor::randn_seeded(&[5, 3, 3, 3], DType::F32, 2)?;
/// let args = [
///     Value::Tensor(x.clone()),
///     Value::Tensor(w.clone()),
///     Value::OptionalTensor(None),
///     Value::IntList(vec![1, 1]),
///     Value::IntList(vec![1, 1, 1, 1]),
///     Value::IntList(vec![1, 1]),
///     Value::Int(1),
/// ];
/// let out = Tensor::zeros(&[4, 5, 8, 8], DType::F32);
/// let conv = ConvImages::new(&args, &out)?.expect("an f32 CPU conv2d");
/// let seen = std::sync::atomic::AtomicUsize::new(0);
/// // SAFETY: nothing else touches `out` meanwhile; the hook reads nothing of it.
/// unsafe {
///     conv.run_chunks(|images| {
///         seen.fetch_add(images.len(), std::sync::atomic::Ordering::Relaxed);
///         Ok(())
///     })?;
/// }
/// assert_eq!(seen.into_inner(), 4);
/// let eager = tensorplay_core::dispatch::call(&tensorplay_core::ops::conv::CONV2D, &args)?;
/// assert_eq!(out.to_vec::<f32>()?, eager[0].to_vec::<f32>()?);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub struct ConvImages {
    /// Contiguous input, weight and bias, and the output, held alive.
    x: Tensor,
    w: Tensor,
    bias: Option<Tensor>,
    out: Tensor,
    g: Geometry,
    split: Split,
    direct: bool,
    dtype: DType,
}

impl ConvImages {
    /// `Ok(None)` unless `args` (`conv2d`'s arguments in schema order) have an `f32` or `f64`
    /// CPU input, weight and bias of one dtype, and `out` is a contiguous CPU tensor of that
    /// dtype and the output's shape sharing memory with none of them; an error when the
    /// arguments are not a valid `conv2d` call.
    pub fn new(args: &[Value], out: &Tensor) -> Result<Option<ConvImages>> {
        let a = Args::new(CONV2D_NAME, args);
        let (x, w, bias) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2)?);
        let dtype = x.dtype();
        let plain = |t: &Tensor| {
            t.device() == Device::Cpu
                && !t.is_fake()
                && t.dtype() == dtype
                && !t.storage().same(out.storage())
        };
        if !matches!(dtype, DType::F32 | DType::F64)
            || !plain(x)
            || !plain(w)
            || !bias.is_none_or(plain)
            || out.device() != Device::Cpu
            || out.dtype() != dtype
            || !out.is_contiguous()
        {
            return Ok(None);
        }
        let g = geometry(a.op, x, w, a)?;
        if out.shape() != [g.n, g.o, g.oh, g.ow] {
            return Err(Error::argument(
                a.op,
                "out",
                format!("shape {:?}", [g.n, g.o, g.oh, g.ow]),
                format!("{:?}", out.shape()),
            ));
        }
        Ok(Some(ConvImages {
            x: x.contiguous()?,
            w: w.contiguous()?,
            bias: bias.map(Tensor::contiguous).transpose()?,
            out: out.clone(),
            split: Split::new(&g),
            direct: super::direct::chosen(&g),
            g,
            dtype,
        }))
    }

    /// Images in the batch.
    pub fn images(&self) -> usize {
        self.g.n
    }

    /// Elements of one output image (`O * OH * OW`).
    pub fn image_len(&self) -> usize {
        self.g.o * self.g.l()
    }

    /// Computes the output chunk by chunk (in parallel on the pool when the eager kernel
    /// would), calling `after(images)` on the thread that computed `images` right after them;
    /// the first error of `after` is returned.
    ///
    /// # Safety
    /// Nothing else reads or writes the output while this runs, and `after(images)` reads or
    /// writes no other images of it.
    pub unsafe fn run_chunks(
        &self,
        after: impl Fn(Range<usize>) -> Result<()> + Send + Sync,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            match self.dtype {
                DType::F64 => self.run_as::<f64>(after),
                _ => self.run_as::<f32>(after),
            }
        }
    }

    /// [`Self::run_chunks`] at element type `F`.
    ///
    /// # Safety
    /// As [`Self::run_chunks`].
    unsafe fn run_as<F: Real>(
        &self,
        after: impl Fn(Range<usize>) -> Result<()> + Send + Sync,
    ) -> Result<()> {
        let op = CONV2D_NAME;
        let (xs, ws) = (elements::<F>(op, &self.x)?, elements::<F>(op, &self.w)?);
        let bs = self
            .bias
            .as_ref()
            .map(|b| elements::<F>(op, b))
            .transpose()?;
        let po = Base(elements_mut::<F>(op, &self.out)?.as_mut_ptr());
        self.split.for_chunks(self.g.n, |imgs| {
            // SAFETY: chunks are disjoint image ranges of the output, which the caller keeps
            // to this call; each is written by its own task only, before `after` reads it.
            unsafe {
                forward_chunk(
                    &self.g,
                    &self.split,
                    self.direct,
                    (xs, ws, bs),
                    po,
                    imgs.clone(),
                )
            };
            after(imgs)
        })
    }
}
