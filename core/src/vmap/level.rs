//! `vmap` levels: the active `vmap` calls of this thread (innermost last), each with its batch
//! size and randomness mode, and the cheap check whether a call has batched arguments.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorplay_ir::{Error, Result};

use crate::tensor::Tensor;
use crate::value::Value;

/// How random ops (`Tensor::rand`, `Tensor::randn` and their `_like` forms) behave inside `vmap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Randomness {
    /// Random ops are an error (the default: a silent choice would surprise someone).
    Error,
    /// Every example draws its own values (the result is batched).
    Different,
    /// Every example sees the same values (the result is not batched).
    Same,
}

impl Randomness {
    /// Parses `"error"`, `"different"` or `"same"`.
    ///
    /// ```
    /// use tensorplay_core::vmap::Randomness;
    /// assert_eq!(Randomness::parse("same")?, Randomness::Same);
    /// assert!(Randomness::parse("sometimes").is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<Randomness> {
        match s {
            "error" => Ok(Randomness::Error),
            "different" => Ok(Randomness::Different),
            "same" => Ok(Randomness::Same),
            other => Err(Error::argument(
                "vmap",
                "randomness",
                "\"error\", \"different\" or \"same\"",
                format!("{other:?}"),
            )),
        }
    }

    /// The spelling `parse` accepts (what `VmapInfo::randomness` carries).
    pub fn as_str(self) -> &'static str {
        match self {
            Randomness::Error => "error",
            Randomness::Different => "different",
            Randomness::Same => "same",
        }
    }
}

/// One active `vmap` call on this thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Level {
    /// Unique across the process, so a batched tensor that outlives its `vmap` is recognised.
    pub(crate) id: u64,
    pub(crate) batch_size: usize,
    pub(crate) randomness: Randomness,
}

thread_local! {
    /// The active levels, outermost first.
    static LEVELS: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
}

static NEXT_LEVEL: AtomicU64 = AtomicU64::new(1);

/// A snapshot of the active levels, outermost first.
pub(crate) fn levels() -> Vec<Level> {
    LEVELS.with(|l| l.borrow().clone())
}

/// Position of level `id` in the stack (0 = outermost), if it is active on this thread.
pub(crate) fn level_position(id: u64) -> Option<(usize, Level)> {
    LEVELS.with(|l| {
        l.borrow()
            .iter()
            .position(|x| x.id == id)
            .map(|p| (p, l.borrow()[p]))
    })
}

/// Pops its level when dropped, also when the vmapped function fails.
pub(crate) struct LevelGuard {
    id: u64,
}

impl LevelGuard {
    pub(crate) fn push(batch_size: usize, randomness: Randomness) -> (LevelGuard, Level) {
        let level = Level {
            id: NEXT_LEVEL.fetch_add(1, Ordering::Relaxed),
            batch_size,
            randomness,
        };
        LEVELS.with(|l| l.borrow_mut().push(level));
        (LevelGuard { id: level.id }, level)
    }
}

impl Drop for LevelGuard {
    fn drop(&mut self) {
        LEVELS.with(|l| {
            let mut l = l.borrow_mut();
            if let Some(p) = l.iter().rposition(|x| x.id == self.id) {
                l.remove(p);
            }
        });
    }
}

/// Number of `vmap` calls active on this thread (0 outside any `vmap`).
///
/// ```
/// use tensorplay_core::{Tensor, DType, vmap};
/// assert_eq!(vmap::depth(), 0);
/// let f = vmap::vmap(
///     |xs: &[Tensor]| {
///         assert_eq!(vmap::depth(), 1);
///         Ok(vec![xs[0].clone()])
///     },
///     vec![Some(0)],
///     vec![0],
/// );
/// f(&[Tensor::zeros(&[2], DType::F32)])?;
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn depth() -> usize {
    LEVELS.with(|l| l.borrow().len())
}

/// True when some argument is a batched tensor. Cheap when no batched tensor exists anywhere:
/// one atomic load, no scan.
pub(crate) fn any_batched(args: &[Value]) -> bool {
    crate::tensor::any_batched_alive()
        && args.iter().flat_map(Value::tensors).any(Tensor::is_batched)
}
