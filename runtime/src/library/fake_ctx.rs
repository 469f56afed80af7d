//! The fake-kernel context ([`get_ctx`]): what a fake kernel may ask for beyond its inputs — today
//! a fresh data-dependent size ([`FakeCtx::new_dynamic_size`]) for outputs such as `nonzero`'s.
//!
//! Sizes are still concrete `usize`s in TensorPlay's shapes, so a [`DynamicSize`] carries a hint
//! (the value fake shapes use) next to its identity and range. When symbolic sizes land, a
//! `DynamicSize` becomes an unbacked symbol (`id`, `min..=max`) and the hint goes away.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use tensorplay_ir::{Error, Result};

thread_local! {
    /// Names of the ops whose fake kernels are running on this thread, innermost last.
    static FAKE_OPS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

static NEXT_SIZE: AtomicU64 = AtomicU64::new(0);

/// Runs `f` as the fake kernel of `op` (so [`get_ctx`] works inside it).
pub(crate) fn with_fake_ctx<R>(op: &str, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            FAKE_OPS.with(|s| s.borrow_mut().pop());
        }
    }
    FAKE_OPS.with(|s| s.borrow_mut().push(op.to_string()));
    let _pop = Pop;
    f()
}

/// The context of the running fake kernel.
#[derive(Debug, Clone)]
pub struct FakeCtx {
    op: String,
}

/// A size known only when the op runs (an unbacked symbolic size): usable as an output dim of a
/// fake tensor through [`DynamicSize::hint`] (or `usize::from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DynamicSize {
    id: u64,
    min: usize,
    max: Option<usize>,
    hint: usize,
}

impl DynamicSize {
    /// A process-unique id (`u0`, `u1`, … in messages).
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The smallest value it may take.
    pub fn min(&self) -> usize {
        self.min
    }
    /// The largest value it may take (`None`: unbounded).
    pub fn max(&self) -> Option<usize> {
        self.max
    }
    /// The concrete value fake shapes use for it: `min` raised to 2 (so it is not mistaken for a
    /// broadcastable 1 or an empty 0), capped at `max`.
    pub fn hint(&self) -> usize {
        self.hint
    }
}

impl From<DynamicSize> for usize {
    fn from(s: DynamicSize) -> usize {
        s.hint
    }
}

impl fmt::Display for DynamicSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "u{}", self.id)
    }
}

/// The context of the fake kernel running on this thread; outside one it is an error.
///
/// ```
/// use tensorplay_runtime::library::get_ctx;
/// assert!(get_ctx().is_err());
/// ```
pub fn get_ctx() -> Result<FakeCtx> {
    FAKE_OPS
        .with(|s| s.borrow().last().cloned())
        .map(|op| FakeCtx { op })
        .ok_or_else(|| {
            Error::Lookup(
            "get_ctx: no fake kernel is running on this thread (call it inside register_fake's \
             function)"
                .to_string(),
        )
        })
}

impl FakeCtx {
    /// The op whose fake kernel is running.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// A fresh data-dependent size in `min..=max` (`max: None` = unbounded), for outputs whose
    /// shape depends on input data.
    pub fn new_dynamic_size(&self, min: usize, max: Option<usize>) -> Result<DynamicSize> {
        if let Some(m) = max
            && m < min
        {
            return Err(Error::argument(
                &self.op,
                "new_dynamic_size",
                format!("max >= min ({min})"),
                format!("max {m}"),
            ));
        }
        let hint = max.map_or(min.max(2), |m| min.max(2).min(m));
        Ok(DynamicSize {
            id: NEXT_SIZE.fetch_add(1, Ordering::Relaxed),
            min,
            max,
            hint,
        })
    }
}
