//! Staging: what a collective's tensors look like to the engine. A contiguous CPU tensor of a
//! dtype the engine reduces is used in place; anything else (strided views, device tensors,
//! f16/bf16 under a reduction) goes through a contiguous host copy, written back after the
//! collective completes.

use tensorplay_runtime::autograd::no_grad;
use tensorplay_runtime::{DType, Device, Error, Result, Tensor};

use crate::engine::{Buf, Wire};

/// One tensor as the engine sees it.
pub(crate) struct Staged {
    /// The caller's tensor.
    pub(crate) orig: Tensor,
    /// Contiguous host memory the engine uses (`orig` itself when no copy was needed).
    pub(crate) buf: Tensor,
    copied: bool,
}

/// The largest element count one MPI call takes (`int` counts).
const MAX_COUNT: usize = i32::MAX as usize;

/// Checks that `t` can take part in collective `op` as argument `arg`.
pub(crate) fn check_tensor(op: &str, arg: &str, t: &Tensor) -> Result<()> {
    if t.is_fake() || t.is_batched() {
        return Err(Error::argument(
            op,
            arg,
            "a tensor with data",
            format!(
                "a {} tensor without data (collectives on fake tensors or inside vmap are not \
                 supported; under compile, use the collectives of tensorplay::distributed, \
                 which are captured as graph nodes)",
                if t.is_batched() { "batched" } else { "fake" }
            ),
        ));
    }
    if t.numel() > MAX_COUNT {
        return Err(Error::argument(
            op,
            arg,
            format!("at most {MAX_COUNT} elements (one MPI message)"),
            format!("{} elements", t.numel()),
        ));
    }
    Ok(())
}

/// Checks that `t` has `dtype`, naming the argument otherwise.
pub(crate) fn check_dtype(op: &str, arg: &str, t: &Tensor, dtype: DType) -> Result<()> {
    if t.dtype() != dtype {
        return Err(Error::argument(
            op,
            arg,
            format!("a tensor of dtype {dtype} (the input's)"),
            format!("dtype {}", t.dtype()),
        ));
    }
    Ok(())
}

/// Checks that `t` has `numel` elements.
pub(crate) fn check_numel(op: &str, arg: &str, t: &Tensor, numel: usize) -> Result<()> {
    if t.numel() != numel {
        return Err(Error::shape(
            op,
            format!("`{arg}` has {} elements, expected {numel}", t.numel()),
        ));
    }
    Ok(())
}

impl Staged {
    /// Stages `t` for `op`; `reduce` stages f16/bf16 as f32 (the engine has no 16-bit float
    /// arithmetic: values are summed in f32 and rounded once when written back).
    pub(crate) fn new(op: &str, arg: &str, t: &Tensor, reduce: bool) -> Result<Staged> {
        check_tensor(op, arg, t)?;
        let half = matches!(t.dtype(), DType::F16 | DType::BF16);
        let wire_dtype = if reduce && half {
            DType::F32
        } else {
            t.dtype()
        };
        if t.device() == Device::Cpu && t.is_contiguous() && wire_dtype == t.dtype() {
            return Ok(Staged {
                orig: t.clone(),
                buf: t.detach(),
                copied: false,
            });
        }
        let _g = no_grad();
        let host = t.detach().to_device(Device::Cpu)?;
        // A fresh buffer: the tensor was not host-contiguous in its own dtype, so one of the
        // conversions copied.
        let buf = host.to_dtype(wire_dtype)?.contiguous()?;
        Ok(Staged {
            orig: t.clone(),
            buf,
            copied: true,
        })
    }

    /// A fresh contiguous host buffer of `numel` elements of `dtype` (an output the engine fills,
    /// distributed into the caller's tensors afterwards).
    pub(crate) fn scratch(numel: usize, dtype: DType) -> Staged {
        let buf = Tensor::empty(&[numel], dtype);
        Staged {
            orig: buf.clone(),
            buf,
            copied: false,
        }
    }

    /// The engine's view of the buffer.
    pub(crate) fn wire(&self, op: &str) -> Result<Buf> {
        Ok(Buf {
            ptr: self.buf.data_ptr(op)?,
            count: self.buf.numel(),
            wire: Wire::of(self.buf.dtype()),
        })
    }

    /// Copies the buffer back into the caller's tensor (when it was a copy), converting dtype and
    /// device as needed.
    pub(crate) fn write_back(&self) -> Result<()> {
        if self.copied {
            copy_into(&self.orig, &self.buf)?;
        }
        Ok(())
    }
}

/// Copies host tensor `src` into `dst` (any device; `copy_` converts dtypes, not devices).
fn copy_into(dst: &Tensor, src: &Tensor) -> Result<()> {
    let _g = no_grad();
    let src = if dst.device() == Device::Cpu {
        src.clone()
    } else {
        src.to_device(dst.device())?
    };
    dst.detach().copy_(&src)?;
    Ok(())
}

/// Copies consecutive blocks of `flat` (a contiguous 1-d host tensor) into `outs`, in order.
pub(crate) fn unflatten_into(flat: &Tensor, outs: &[Tensor]) -> Result<()> {
    let _g = no_grad();
    let mut at = 0;
    for o in outs {
        let n = o.numel();
        copy_into(o, &flat.narrow(0, at as i64, n)?.reshape(o.shape())?)?;
        at += n;
    }
    Ok(())
}

/// `inputs` flattened into one contiguous host tensor of their (common) dtype.
pub(crate) fn flatten_from(inputs: &[Tensor], dtype: DType) -> Result<Staged> {
    let _g = no_grad();
    let total = inputs.iter().map(Tensor::numel).sum();
    let flat = Staged::scratch(total, dtype);
    let mut at = 0;
    for t in inputs {
        let n = t.numel();
        let host = t.detach().to_device(Device::Cpu)?;
        flat.buf
            .narrow(0, at as i64, n)?
            .copy_(&host.reshape(&[n])?)?;
        at += n;
    }
    Ok(flat)
}
