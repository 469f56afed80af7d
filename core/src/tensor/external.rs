//! Tensors over host memory that another owner allocated ([`Tensor::from_external`]): the
//! zero-copy import of numpy arrays and DLPack tensors.

use std::any::Any;

use tensorplay_ir::{DType, Device, Error, Result};

use super::{Tensor, TensorImpl};
use crate::storage::Storage;

impl Tensor {
    /// A CPU tensor viewing `bytes` bytes of host memory at `ptr` with the layout `shape`,
    /// `strides` (in elements, negative allowed) and `offset` (the element index of
    /// `[0, .., 0]` from `ptr`), kept alive by `owner`: the memory is shared, not copied, and
    /// `owner` is dropped when the last tensor or view over it goes (from whichever thread
    /// drops it).
    ///
    /// Kernels assume no alignment beyond the element size (the compiled kernels' loads and
    /// stores are unaligned ones; the allocator's 64-byte alignment is never relied on), so
    /// `ptr` needs only `dtype`'s alignment; a misaligned one is an error (copy such data
    /// instead). The memory is never recycled for another tensor: the compiler's buffer arena
    /// skips it. An error, too, when the layout reaches outside the `bytes` bytes.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `bytes` bytes for as long as `owner` lives,
    /// and the memory must not be written through other paths while a kernel uses it (as for
    /// any shared storage).
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let mut data = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].into_boxed_slice();
    /// let ptr = data.as_mut_ptr().cast::<u8>();
    /// // The columns of a 2x3 row-major matrix, viewed as a 3x2 tensor; the Box is the owner.
    /// // SAFETY: `data` lives in the owner, which the storage keeps until the last view goes.
    /// let t = unsafe { Tensor::from_external(ptr, 24, &[3, 2], &[1, 3], 0, DType::F32, Box::new(data))? };
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// t.fill_(0.5)?; // writes go to the owner's memory
    /// assert!(t.storage().is_external());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_external(
        ptr: *mut u8,
        bytes: usize,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        dtype: DType,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Tensor> {
        const OP: &str = "from_external";
        if ptr.is_null() {
            return Err(Error::argument(OP, "ptr", "a non-null address", "null"));
        }
        let size = dtype.size();
        if !(ptr as usize).is_multiple_of(size) {
            return Err(Error::argument(
                OP,
                "ptr",
                format!("an address aligned to {size} bytes ({dtype})"),
                format!("{ptr:p}"),
            ));
        }
        if strides.len() != shape.len() {
            return Err(Error::argument(
                OP,
                "strides",
                format!("{} strides (one per dim)", shape.len()),
                strides.len().to_string(),
            ));
        }
        // The lowest and highest element the layout reaches, relative to `ptr`.
        let out_of_range = || {
            Error::argument(
                OP,
                "shape",
                format!("a layout inside the {bytes} bytes given"),
                format!("shape {shape:?}, strides {strides:?}, offset {offset}"),
            )
        };
        let (mut lo, mut hi) = (offset as i128, offset as i128);
        if shape.contains(&0) {
            hi = lo - 1;
        } else {
            for (&n, &s) in shape.iter().zip(strides) {
                let reach = (n as i128 - 1) * s as i128;
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
        }
        if lo < 0 || (hi + 1) * size as i128 > bytes as i128 {
            return Err(out_of_range());
        }
        // SAFETY: the caller's contract (valid for `bytes` bytes while `owner` lives).
        let storage = unsafe { Storage::external(ptr, bytes, owner) };
        Ok(Tensor::from_impl(TensorImpl::new(
            storage,
            shape.into(),
            strides.into(),
            offset,
            dtype,
            Device::Cpu,
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Records that it was dropped.
    struct Owner(Vec<f32>, Arc<AtomicBool>);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.1.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn shares_memory_and_drops_owner_with_last_view() {
        let dropped = Arc::new(AtomicBool::new(false));
        let mut owner = Box::new(Owner(vec![1.0, 2.0, 3.0, 4.0], dropped.clone()));
        let ptr = owner.0.as_mut_ptr().cast::<u8>();
        // SAFETY: the 16 bytes live in the owner's Vec, which the storage keeps alive.
        let t = unsafe { Tensor::from_external(ptr, 16, &[2, 2], &[2, 1], 0, DType::F32, owner) }
            .unwrap();
        let view = t.t().unwrap();
        drop(t);
        assert!(!dropped.load(Ordering::SeqCst));
        assert_eq!(view.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
        view.fill_(7.0).unwrap();
        // SAFETY: the owner is alive (the view holds it); reading its memory directly.
        assert_eq!(unsafe { *ptr.cast::<f32>().add(3) }, 7.0);
        drop(view);
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn rejects_bad_layouts() {
        let mut v = vec![0.0f32; 4];
        let p = v.as_mut_ptr().cast::<u8>();
        // SAFETY: `v` (16 bytes) outlives every tensor made here; only in-bounds layouts are
        // accepted (what the test checks).
        let mk = |ptr: *mut u8, shape: &[usize], strides: &[isize], off| unsafe {
            Tensor::from_external(ptr, 16, shape, strides, off, DType::F32, Box::new(()))
        };
        assert!(mk(p, &[5], &[1], 0).is_err()); // past the end
        assert!(mk(p, &[2], &[-1], 0).is_err()); // before the start
        assert!(mk(p, &[2], &[1, 1], 0).is_err()); // strides of another rank
        let misaligned = mk(p.wrapping_add(2), &[1], &[1], 0)
            .unwrap_err()
            .to_string();
        assert!(misaligned.contains("aligned to 4 bytes"), "{misaligned}");
        // Negative strides inside the memory are fine: a reversed view.
        let r = mk(p, &[4], &[-1], 3).unwrap();
        r.copy_(&Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap())
            .unwrap();
        assert_eq!(v, vec![4.0, 3.0, 2.0, 1.0]);
        // The arena must never recycle it.
        let s = r.storage().clone();
        drop(r);
        assert!(s.is_unique() && s.is_external());
        // SAFETY: nothing else uses `s` (checked just above); the call is refused anyway.
        assert!(unsafe { Tensor::from_recycled_storage(s, &[1], DType::F32) }.is_err());
    }
}
