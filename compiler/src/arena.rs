//! The buffer arena of a compiled graph: the memory of its intermediates, kept across calls.
//!
//! The [buffer plan](crate::passes::buffer_plan) assigns every intermediate (a value only other
//! steps read) to a slot shared by values whose live ranges do not overlap. The arena holds one
//! storage per slot. A fused region whose output has a slot writes it into the slot's storage
//! when that is large enough and nothing else uses it; when the value dies its storage goes back
//! to the slot. So a graph called again and again on the same shapes allocates no intermediate
//! after its first call — no allocator round trip, and for large tensors no fresh pages to fault
//! in (a 64 MiB buffer is 16,384 page faults each time it is mapped anew).
//!
//! A storage is recycled only when the arena holds its only handle ([`Storage::is_unique`]): a
//! view, an output that escaped, or a kernel that kept a tensor keeps its memory out of the
//! arena, whatever the plan says. Concurrent calls of one graph do not share slots: a call takes
//! the arena's slots for its duration, and a call that finds them taken runs with empty ones
//! (allocating as it goes).

use parking_lot::Mutex;
use tensorplay_ir::{DType, Result};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::storage::Storage;

/// The arena of one compiled graph.
pub(crate) struct Arena {
    free: Mutex<Option<Slots>>,
    len: usize,
}

/// One call's slots: the storage each slot holds while no value of the slot is alive.
pub(crate) struct Slots(Vec<Option<Storage>>);

impl Arena {
    /// An arena of `len` empty slots.
    pub fn new(len: usize) -> Arena {
        Arena {
            free: Mutex::new(None),
            len,
        }
    }

    /// The slots for one call: the ones earlier calls left, or empty ones when another call
    /// holds them (or none was left).
    pub fn take(&self) -> Slots {
        self.free
            .lock()
            .take()
            .unwrap_or_else(|| Slots(vec![None; self.len]))
    }

    /// Returns a call's slots for the next call.
    pub fn put_back(&self, slots: Slots) {
        *self.free.lock() = Some(slots);
    }

    /// Bytes held between calls (for `explain` and tests).
    pub fn held_bytes(&self) -> usize {
        self.free.lock().as_ref().map_or(0, |s| {
            s.0.iter().flatten().map(Storage::nbytes).sum::<usize>()
        })
    }
}

impl Slots {
    /// A contiguous tensor of `shape` and `dtype` for a value of slot `slot` (`None`: a value
    /// outside the arena): the slot's storage when nothing else uses it and it is large enough,
    /// otherwise a fresh allocation.
    ///
    /// # Safety
    /// As for [`Tensor::try_empty_uninit`]: the caller writes every element before any read.
    pub unsafe fn tensor(
        &mut self,
        slot: Option<usize>,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d));
        if let (Some(entry), Some(bytes)) = (slot.and_then(|k| self.0.get_mut(k)), bytes)
            && let Some(s) = entry.take_if(|s| s.is_unique() && s.nbytes() >= bytes)
        {
            // SAFETY: the arena held the only handle to `s` (checked just above); the caller
            // writes every element before reading (this function's contract).
            return unsafe { Tensor::from_recycled_storage(s, shape, dtype) };
        }
        // SAFETY: the caller writes every element before reading (this function's contract).
        unsafe { Tensor::try_empty_uninit(shape, dtype) }
    }

    /// The value `t` of slot `slot` is dead: its storage becomes the slot's (unless the slot
    /// holds a larger one already). Fake and non-CPU storage is not kept, nor memory of another
    /// owner (a numpy array's, `Tensor::from_external`): a value that is a view of such an
    /// input must never have its memory handed to a later intermediate.
    pub fn release(&mut self, slot: usize, t: Tensor) {
        let Some(entry) = self.0.get_mut(slot) else {
            return;
        };
        if t.is_fake() || t.device() != tensorplay_ir::Device::Cpu || t.storage().is_external() {
            return;
        }
        let s = t.storage().clone();
        drop(t);
        if entry.as_ref().is_none_or(|old| old.nbytes() <= s.nbytes()) {
            *entry = Some(s);
        }
    }
}
