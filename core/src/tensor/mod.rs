//! The tensor handle: shared storage viewed through shape, strides and an offset, plus the autograd
//! metadata that links it into a backward graph.

mod data;
mod external;
pub(crate) mod factory;
mod fmt;
mod ops_overload;
mod plan_operand;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tensorplay_ir::graph::SymGuard;
use tensorplay_ir::shape::{contiguous_strides, fmt_shape, is_contiguous, numel};
use tensorplay_ir::{DType, Device, Error, Result, Shape, Strides, SymExpr, TensorMeta};

use crate::autograd::node::GradEdge;
use crate::storage::Storage;

/// An n-dimensional array of one dtype on one device.
///
/// Cloning a `Tensor` is cheap and yields another handle to the same tensor (like a Python
/// reference): views share storage, in-place ops are seen through every handle.
///
/// ```
/// use tensorplay_core::{Tensor, DType};
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = (&a * 2.0)?;
/// assert_eq!(b.to_vec::<f32>()?, vec![2.0, 4.0, 6.0, 8.0]);
/// assert_eq!(a.t()?.shape(), &[2, 2]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) storage: Storage,
    pub(crate) shape: Shape,
    pub(crate) strides: Strides,
    /// Offset of element `[0, .., 0]` in elements from the storage base.
    pub(crate) offset: usize,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
    /// A 0-d tensor made from a Rust scalar operand: it only raises the promotion category.
    pub(crate) wrapped_number: bool,
    pub(crate) autograd: AutogradMeta,
    /// Set for batched tensors inside `vmap`: the physical tensor and its batch dim.
    pub(crate) batch: Option<Box<BatchInfo>>,
}

/// Autograd state of one tensor handle.
#[derive(Default)]
pub(crate) struct AutogradMeta {
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// The node that produced this tensor and which of its outputs it is; `None` for leaves.
    pub(crate) grad_fn: Option<GradEdge>,
    /// Hooks run after a backward pass has delivered all of this leaf's gradient (by id).
    pub(crate) post_accumulate_hooks: Mutex<Vec<(u64, GradHook)>>,
}

/// A hook run on a leaf after `backward()` has accumulated this pass's gradient into its `.grad`
/// (see [`Tensor::register_post_accumulate_grad_hook`]).
pub type GradHook = Arc<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// Removes a hook registered by [`Tensor::register_post_accumulate_grad_hook`].
pub struct HookHandle {
    tensor: std::sync::Weak<TensorImpl>,
    id: u64,
}

impl HookHandle {
    /// Unregisters the hook (a no-op when the tensor is gone or the hook was removed).
    pub fn remove(self) {
        if let Some(t) = self.tensor.upgrade() {
            t.autograd
                .post_accumulate_hooks
                .lock()
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl TensorImpl {
    pub(crate) fn new(
        storage: Storage,
        shape: Shape,
        strides: Strides,
        offset: usize,
        dtype: DType,
        device: Device,
    ) -> TensorImpl {
        TensorImpl {
            storage,
            shape,
            strides,
            offset,
            dtype,
            device,
            wrapped_number: false,
            autograd: AutogradMeta::default(),
            batch: None,
        }
    }
}

impl Tensor {
    pub(crate) fn from_impl(t: TensorImpl) -> Tensor {
        Tensor(Arc::new(t))
    }

    /// A fresh contiguous tensor with uninitialized data (or no data when `fake` or on the meta
    /// device); an error naming `op` when the shape overflows or the memory cannot be allocated.
    pub(crate) fn try_empty_with(
        op: &str,
        shape: &[usize],
        dtype: DType,
        device: Device,
        fake: bool,
    ) -> Result<Tensor> {
        let bytes = checked_nbytes(op, shape, dtype)?;
        let storage = if fake || device == Device::Meta {
            Storage::fake(bytes)
        } else {
            Storage::uninit(bytes).ok_or_else(|| alloc_error(op, shape, dtype, bytes))?
        };
        Ok(Tensor::contiguous_over(storage, shape, dtype, device))
    }

    /// A contiguous tensor of `shape` and `dtype` over the start of `storage` (the caller
    /// checked that it is large enough).
    pub(crate) fn contiguous_over(
        storage: Storage,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Tensor {
        Tensor::from_impl(TensorImpl::new(
            storage,
            shape.into(),
            contiguous_strides(shape),
            0,
            dtype,
            device,
        ))
    }

    /// A tensor sharing this one's storage with new shape/strides/offset (no autograd history).
    pub(crate) fn alias_with(&self, shape: Shape, strides: Strides, offset: usize) -> Tensor {
        Tensor::from_impl(TensorImpl::new(
            self.0.storage.clone(),
            shape,
            strides,
            offset,
            self.0.dtype,
            self.0.device,
        ))
    }

    /// Size of each dimension.
    ///
    /// Under capture, reading the sizes of a fake tensor guards them (the compiled graph is used
    /// only while they stay the same); see `tensorplay_ir::graph::SizeGuard`.
    pub fn shape(&self) -> &[usize] {
        if self.is_fake() {
            note_size_read(self, None);
        }
        &self.0.shape
    }

    /// The sizes without a size-read note: for autograd's bookkeeping (shape checks and zero
    /// gradients), which does not change what a traced program computes.
    pub(crate) fn shape_untracked(&self) -> &[usize] {
        &self.0.shape
    }

    /// Size of dimension `dim` (negative counts from the end).
    pub fn size(&self, dim: i64) -> Result<usize> {
        if self.rank() == 0 {
            return Err(Error::shape(
                "size",
                format!("dim {dim} was requested but the tensor is 0-d (it has no dims)"),
            ));
        }
        let d = tensorplay_ir::shape::normalize_dim("size", dim, self.rank())?;
        if self.is_fake() {
            note_size_read(self, Some(d));
        }
        Ok(self.0.shape[d])
    }

    /// Strides in elements. Under capture, strides follow from sizes, so reading them guards
    /// the whole shape like [`Tensor::shape`].
    pub fn strides(&self) -> &[isize] {
        if self.is_fake() {
            note_size_read(self, None);
        }
        &self.0.strides
    }

    /// Offset of the first element into the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.0.offset
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        if self.is_fake() {
            note_size_read(self, None);
        }
        // Zero-size dims first: a shape like [2^40, 2^40, 0] has no elements, and its plain product
        // would overflow on the way.
        if self.0.shape.contains(&0) {
            0
        } else {
            numel(&self.0.shape)
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Device.
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// The storage this tensor views.
    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }

    /// True when the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        if self.is_fake() {
            note_size_read(self, None);
        }
        is_contiguous(&self.0.shape, &self.0.strides)
    }

    /// True for fake and meta tensors, which carry metadata but no data.
    pub fn is_fake(&self) -> bool {
        self.0.storage.is_fake()
    }

    /// Shape, dtype and device as IR metadata.
    pub fn meta(&self) -> TensorMeta {
        if self.is_fake() {
            note_size_read(self, None);
        }
        TensorMeta::new(&self.0.shape, self.0.dtype, self.0.device)
    }

    /// The storage's version counter (bumped by every in-place write through any view).
    pub fn version(&self) -> u64 {
        self.0.storage.version()
    }

    /// True when both handles refer to the same tensor object.
    pub fn same(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A number identifying this tensor object while it is alive (handles from `clone()` share
    /// it; views and `detach()` get their own). Tracers use it to map tensors to graph values.
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// True for 0-d tensors made from Rust scalar operands (they only raise the promotion
    /// category of the op they meet).
    pub fn is_wrapped_scalar(&self) -> bool {
        self.0.wrapped_number
    }

    /// True for a batched tensor inside `vmap` (it shows one example's shape and has no data of
    /// its own).
    pub fn is_batched(&self) -> bool {
        self.0.batch.is_some()
    }

    /// The physical tensor, batch dim and level of a batched tensor (`None` otherwise).
    pub(crate) fn batch_info(&self) -> Option<&BatchInfo> {
        self.0.batch.as_deref()
    }

    pub(crate) fn is_wrapped_number(&self) -> bool {
        self.0.wrapped_number
    }

    /// Base data pointer of element `[0, .., 0]`, or an error naming `op` for fake tensors.
    pub fn data_ptr(&self, op: &str) -> Result<*mut u8> {
        if self.is_batched() {
            return Err(Error::unsupported(
                op,
                "cannot read the data of a batched tensor inside vmap",
            ));
        }
        if self.0.storage.device_buffer().is_some() {
            return Err(Error::device(
                op,
                format!(
                    "tensor {} is in device memory, which CPU code cannot read; copy it with \
                     to_device(Device::Cpu) first",
                    self.meta()
                ),
            ));
        }
        let base = self.0.storage.ptr().ok_or_else(|| {
            if is_tracing() {
                // The user's closure is being traced on shape-only proxies.
                return Error::unsupported(
                    op,
                    format!(
                        "reading tensor data inside a compiled closure is not supported (tensor {} \
                         is a capture proxy with no data); pass the value to the compiled \
                         function as an input instead",
                        self.meta()
                    ),
                );
            }
            Error::unsupported(
                op,
                format!(
                    "tensor {} has no data (fake or meta tensor); a fake kernel must not read data",
                    self.meta()
                ),
            )
        })?;
        // SAFETY: views are only built with offsets (and shapes/strides) that address elements
        // inside their storage, so `offset` elements from the base stay within the allocation.
        Ok(unsafe { base.add(self.0.offset * self.0.dtype.size()) })
    }

    /// Address of element `[0, .., 0]`, for code generators that read and write tensor memory
    /// through their own loops (the JIT'd kernels of `tensorplay-compiler`). Fails on fake and
    /// meta tensors, which own no data. Writing through the pointer bypasses version counting;
    /// callers bump versions themselves where it matters.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let p = t.data_ptr_raw()? as *const f32;
    /// assert_eq!(unsafe { *p.add(1) }, 2.0);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn data_ptr_raw(&self) -> Result<*mut u8> {
        self.data_ptr("data_ptr_raw")
    }

    // ---- autograd ---------------------------------------------------------------------------

    /// Whether gradients are tracked for this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.autograd.requires_grad.load(Ordering::Relaxed)
    }

    /// Marks a leaf tensor as requiring gradients (only floating dtypes can).
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let w = Tensor::ones(&[3], DType::F32).requires_grad_(true)?;
    /// assert!(w.requires_grad() && w.is_leaf());
    /// assert!(Tensor::ones(&[3], DType::I64).requires_grad_(true).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn requires_grad_(self, requires_grad: bool) -> Result<Tensor> {
        if requires_grad && !self.dtype().is_float() {
            return Err(Error::argument(
                "requires_grad_",
                "requires_grad",
                "a floating-point tensor",
                format!("a tensor of dtype {}", self.dtype()),
            ));
        }
        if !self.is_leaf() {
            return Err(Error::Autograd(
                "requires_grad_ can only change leaf tensors; use detach() to make a new leaf"
                    .into(),
            ));
        }
        self.0
            .autograd
            .requires_grad
            .store(requires_grad, Ordering::Relaxed);
        Ok(self)
    }

    /// True for tensors not produced by a differentiable op (user-created tensors).
    pub fn is_leaf(&self) -> bool {
        self.0.autograd.grad_fn.is_none()
    }

    /// The accumulated gradient of a leaf after `backward()`.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.autograd.grad.lock().clone()
    }

    /// Replaces the accumulated gradient (PyTorch's `p.grad = g`): `g` must have this tensor's
    /// shape, dtype and device.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let w = Tensor::zeros(&[2], DType::F32).requires_grad_(true)?;
    /// w.set_grad(Some(Tensor::ones(&[2], DType::F32)))?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0]);
    /// assert!(w.set_grad(Some(Tensor::ones(&[3], DType::F32))).is_err());
    /// w.set_grad(None)?;
    /// assert!(w.grad().is_none());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn set_grad(&self, g: Option<Tensor>) -> Result<()> {
        if let Some(g) = &g
            && (g.shape() != self.shape()
                || g.dtype() != self.dtype()
                || g.device() != self.device())
        {
            return Err(Error::argument(
                "set_grad",
                "grad",
                format!("a tensor like {}", self.meta()),
                format!("{}", g.meta()),
            ));
        }
        *self.0.autograd.grad.lock() = g;
        Ok(())
    }

    /// Clears the accumulated gradient.
    pub fn zero_grad(&self) {
        *self.0.autograd.grad.lock() = None;
    }

    /// Name of the op that produced this tensor (`None` for leaves).
    pub fn grad_fn_name(&self) -> Option<&str> {
        self.0.autograd.grad_fn.as_ref().map(|e| e.node.name())
    }

    pub(crate) fn grad_edge(&self) -> Option<&GradEdge> {
        self.0.autograd.grad_fn.as_ref()
    }

    /// Adds `g` into `.grad` atomically (backward passes on several threads may share a leaf).
    ///
    /// A first gradient that is a strided view of a contiguous leaf (a weight's gradient often
    /// arrives as the transpose of a product) is stored contiguous, as the leaf is laid out: the
    /// optimizers' fused in-place kernels and user code then read `.grad` as dense memory.
    pub(crate) fn accumulate_grad(&self, g: Tensor) -> Result<()> {
        let g = if !g.is_contiguous() && self.is_contiguous() && g.shape() == self.shape() {
            g.contiguous()?
        } else {
            g
        };
        let mut slot = self.0.autograd.grad.lock();
        let new = match slot.take() {
            None => g,
            Some(prev) => match prev.add(&g) {
                Ok(sum) => sum,
                Err(e) => {
                    *slot = Some(prev);
                    return Err(e);
                }
            },
        };
        *slot = Some(new);
        Ok(())
    }

    /// Registers `hook` to run after each `backward()` pass has delivered all of its gradient
    /// contributions into this leaf's `.grad` (PyTorch's `register_post_accumulate_grad_hook`):
    /// once per pass that reaches the leaf, on the thread running the pass, with the leaf as
    /// argument. An error from a hook fails the `backward()` call. `autograd::grad` does not run
    /// hooks (it writes no `.grad`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use tensorplay_core::{DType, Tensor};
    /// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let s = seen.clone();
    /// let handle = w.register_post_accumulate_grad_hook(Arc::new(move |leaf: &Tensor| {
    ///     assert!(leaf.grad().is_some());
    ///     s.fetch_add(1, Ordering::SeqCst);
    ///     Ok(())
    /// }))?;
    /// // `w` is used twice: the hook runs once, after both contributions.
    /// (&w * &w)?.add(&w)?.sum_all()?.backward()?;
    /// assert_eq!(seen.load(Ordering::SeqCst), 1);
    /// handle.remove();
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn register_post_accumulate_grad_hook(&self, hook: GradHook) -> Result<HookHandle> {
        if !self.is_leaf() || !self.requires_grad() {
            return Err(Error::argument(
                "register_post_accumulate_grad_hook",
                "self",
                "a leaf tensor that requires grad",
                if self.is_leaf() {
                    "a tensor that does not require grad".to_string()
                } else {
                    format!(
                        "a non-leaf tensor (produced by {})",
                        self.grad_fn_name().unwrap_or("?")
                    )
                },
            ));
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.0
            .autograd
            .post_accumulate_hooks
            .lock()
            .push((id, hook));
        Ok(HookHandle {
            tensor: Arc::downgrade(&self.0),
            id,
        })
    }

    /// Runs the post-accumulate hooks of this leaf (the backward engine calls it once a pass has
    /// delivered all the leaf's gradient).
    pub(crate) fn run_post_accumulate_grad_hooks(&self) -> Result<()> {
        // Cloned out of the lock: a hook may register or remove hooks.
        let hooks: Vec<GradHook> = self
            .0
            .autograd
            .post_accumulate_hooks
            .lock()
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for h in hooks {
            h(self)?;
        }
        Ok(())
    }

    /// True when hooks are registered (the engine skips leaf bookkeeping otherwise).
    pub(crate) fn has_post_accumulate_grad_hooks(&self) -> bool {
        !self.0.autograd.post_accumulate_hooks.lock().is_empty()
    }

    /// A new handle to the same data with no autograd history (a leaf that does not require grad).
    pub fn detach(&self) -> Tensor {
        if let Some(info) = self.batch_info() {
            // Batched over the detached physical tensor.
            return Tensor::batched(info.physical.detach(), info.bdim, info.level);
        }
        let mut t = TensorImpl::new(
            self.0.storage.clone(),
            self.0.shape.clone(),
            self.0.strides.clone(),
            self.0.offset,
            self.0.dtype,
            self.0.device,
        );
        t.wrapped_number = self.0.wrapped_number;
        let t = Tensor::from_impl(t);
        if self.is_fake() {
            note_alias(self, &t);
        }
        t
    }

    /// Returns this tensor with `edge` as its grad_fn, re-wrapping the handle if it is shared.
    pub(crate) fn with_grad_fn(mut self, edge: GradEdge) -> Tensor {
        let mut aliased_from = None;
        if Arc::get_mut(&mut self.0).is_none() {
            let shared =
                self.alias_with(self.0.shape.clone(), self.0.strides.clone(), self.0.offset);
            aliased_from = Some(std::mem::replace(&mut self, shared));
        }
        let inner = Arc::get_mut(&mut self.0).expect("freshly aliased tensor is unique");
        inner.autograd.requires_grad.store(true, Ordering::Relaxed);
        inner.autograd.grad_fn = Some(edge);
        if let Some(from) = aliased_from
            && from.is_fake()
        {
            note_alias(&from, &self);
        }
        self
    }

    /// Checks that `self` has exactly `shape`, naming `op` otherwise.
    pub(crate) fn expect_shape(&self, op: &str, what: &str, shape: &[usize]) -> Result<()> {
        if self.shape() != shape {
            return Err(Error::shape(
                op,
                format!(
                    "{what} has shape {}, expected {}",
                    fmt_shape(self.shape()),
                    fmt_shape(shape)
                ),
            ));
        }
        Ok(())
    }
}

/// What makes a tensor batched (inside `vmap`): the physical tensor, which of its dims is the
/// batch dim, and the `vmap` level that owns that dim. The batching rules live in `crate::vmap`.
pub(crate) struct BatchInfo {
    pub(crate) physical: Tensor,
    pub(crate) bdim: usize,
    pub(crate) level: u64,
}

/// Batched tensors alive in the process; while it is zero the dispatcher skips the argument scan.
static LIVE_BATCHED: AtomicUsize = AtomicUsize::new(0);

impl Drop for BatchInfo {
    fn drop(&mut self) {
        LIVE_BATCHED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// True when some batched tensor exists (on any thread).
pub(crate) fn any_batched_alive() -> bool {
    LIVE_BATCHED.load(Ordering::Relaxed) > 0
}

impl Tensor {
    /// A batched tensor over `physical` with batch dim `bdim` at `vmap` level `level` (no
    /// autograd link).
    ///
    /// The logical shape is the physical shape without `bdim`, with contiguous strides; the
    /// storage handle is the physical one, so aliasing and version checks see the real storage.
    pub(crate) fn batched(physical: Tensor, bdim: usize, level: u64) -> Tensor {
        debug_assert!(
            bdim < physical.rank(),
            "batch dim inside the physical tensor"
        );
        let mut shape: Shape = physical.0.shape.clone();
        shape.remove(bdim);
        let strides = contiguous_strides(&shape);
        let mut inner = TensorImpl::new(
            physical.0.storage.clone(),
            shape,
            strides,
            physical.0.offset,
            physical.0.dtype,
            physical.0.device,
        );
        LIVE_BATCHED.fetch_add(1, Ordering::Relaxed);
        inner.batch = Some(Box::new(BatchInfo {
            physical,
            bdim,
            level,
        }));
        Tensor::from_impl(inner)
    }
}

/// What a tensor tells a tracer running on this thread (the compiler's capture, through
/// `crate::capture::install`): which sizes of its fake tensors code read as plain integers,
/// which symbolic sizes it knows, which handles stand for the same value, and which facts about
/// symbolic sizes code relied on. Real tensors never report anything.
pub trait TraceHook {
    /// The traced code read a size of fake tensor `t` as a plain integer (`dim: None` for the
    /// whole shape): the size is now baked into whatever the code computes from it, so the
    /// tracer guards it. Batched tensors are reported as their innermost physical tensor.
    fn on_size_read(&self, _t: &Tensor, _dim: Option<usize>) {}
    /// The traced code turned a symbolic size into a plain fact (see `crate::SymInt`): the
    /// graph is valid only while `guard` holds.
    fn on_sym_guard(&self, _guard: SymGuard) {}
    /// Dim `dim` of fake tensor `t` as an expression over the input dims, when the tracer knows
    /// one (`None`: the size is read as a plain, guarded integer instead).
    fn sym_size(&self, _t: &Tensor, _dim: usize) -> Option<SymExpr> {
        None
    }
    /// `to` is a new handle standing for the same value as fake tensor `from` (a `detach()`, or
    /// the re-wrapped output autograd attaches its grad_fn to): the tracer maps it to `from`'s
    /// graph value.
    fn on_alias(&self, _from: &Tensor, _to: &Tensor) {}
}

thread_local! {
    static TRACER: RefCell<Option<Rc<dyn TraceHook>>> = const { RefCell::new(None) };
}

/// Sets this thread's tracer (`None` removes it), returning the previous one.
pub(crate) fn set_tracer(hook: Option<Rc<dyn TraceHook>>) -> Option<Rc<dyn TraceHook>> {
    TRACER.with(|t| std::mem::replace(&mut *t.borrow_mut(), hook))
}

fn tracer() -> Option<Rc<dyn TraceHook>> {
    TRACER.with(|t| t.borrow().clone())
}

/// True while a tracer runs on this thread (tensors without data are then its proxies).
pub(crate) fn is_tracing() -> bool {
    TRACER.with(|t| t.borrow().is_some())
}

/// Reports a size read of fake tensor `t` to the tracer, if any (called by the size accessors;
/// real tensors never get here).
#[cold]
fn note_size_read(t: &Tensor, dim: Option<usize>) {
    let Some(hook) = tracer() else { return };
    // A batched tensor's logical sizes are its physical sizes minus the batch dim: guard the
    // innermost physical tensor's whole shape.
    let mut t = t;
    let mut dim = dim;
    while let Some(info) = t.batch_info() {
        t = &info.physical;
        dim = None;
    }
    hook.on_size_read(t, dim);
}

/// Reports that `to` is a new handle for fake tensor `from`'s value to the tracer, if any.
#[cold]
pub(crate) fn note_alias(from: &Tensor, to: &Tensor) {
    if let Some(hook) = tracer() {
        hook.on_alias(from, to);
    }
}

/// Reports a guard on symbolic sizes to the tracer, if any.
pub(crate) fn note_sym_guard(g: SymGuard) {
    if let Some(hook) = tracer() {
        hook.on_sym_guard(g);
    }
}

/// Dim `dim` of fake tensor `t` as the tracer knows it (`None` without a tracer, for batched
/// tensors, or when it has no symbolic size for it).
pub(crate) fn traced_sym_size(t: &Tensor, dim: usize) -> Option<SymExpr> {
    let hook = tracer()?;
    if t.is_batched() {
        return None;
    }
    hook.sym_size(t, dim)
}

/// Bytes needed by a contiguous tensor of `shape` and `dtype`, or a shape error naming `op` when
/// the shape cannot exist: its strides or its byte size would overflow `isize`.
///
/// Every tensor satisfies this bound, so element counts and offsets computed from a tensor's shape
/// never overflow. Meta rules that build shapes from user arguments can call it to fail early.
///
/// ```
/// use tensorplay_core::{DType, tensor::checked_nbytes};
/// assert_eq!(checked_nbytes("zeros", &[2, 3], DType::F32)?, 24);
/// assert_eq!(checked_nbytes("zeros", &[1 << 40, 0], DType::F32)?, 0);
/// assert!(checked_nbytes("zeros", &[1 << 40, 1 << 40], DType::F32).is_err());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn checked_nbytes(op: &str, shape: &[usize], dtype: DType) -> Result<usize> {
    // The contiguous strides multiply every dim (zero-size dims count as 1), so bound that product.
    let span = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)))
        .and_then(|n| n.checked_mul(dtype.size()))
        .filter(|&b| b <= isize::MAX as usize);
    match span {
        Some(_) if shape.contains(&0) => Ok(0),
        Some(b) => Ok(b),
        None => Err(Error::shape(
            op,
            format!(
                "shape {} of dtype {dtype} is too large: its size in bytes overflows isize",
                fmt_shape(shape)
            ),
        )),
    }
}

fn alloc_error(op: &str, shape: &[usize], dtype: DType, bytes: usize) -> Error {
    Error::unsupported(
        op,
        format!(
            "out of memory: cannot allocate {bytes} bytes for a tensor of shape {} and dtype {dtype}",
            fmt_shape(shape)
        ),
    )
}
