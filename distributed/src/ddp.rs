//! `DistributedDataParallel`: data-parallel training over a group. Gradients are averaged over
//! the ranks during `backward()`, bucket by bucket as they become ready, so communication
//! overlaps the rest of the backward pass (PyTorch's DDP reducer).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tensorplay_nn::Module;
use tensorplay_runtime::autograd::{self, no_grad};
use tensorplay_runtime::tensor::HookHandle;
use tensorplay_runtime::{DType, Device, Error, Result, Tensor};

use crate::collectives::{all_reduce_async, broadcast};
use crate::group::{ProcessGroup, resolve};
use crate::reduce_op::ReduceOp;
use crate::work::Work;

/// PyTorch's default bucket capacity, 25 MiB.
pub const DEFAULT_BUCKET_CAP_BYTES: usize = 25 * 1024 * 1024;

/// Parameters whose gradients are all-reduced together (one flat buffer: one dtype, one device).
#[derive(Debug)]
struct Bucket {
    params: Vec<usize>,
    numel: usize,
    dtype: DType,
    device: Device,
}

/// What one backward pass has done so far.
#[derive(Default)]
struct Pass {
    /// Gradients delivered, per bucket.
    ready: Vec<usize>,
    /// The next bucket to launch (buckets launch in index order on every rank, so they match).
    next: usize,
    /// Launched buckets: the flat buffer being reduced and its handle.
    launched: Vec<(usize, Tensor, Work)>,
    /// Alive while this pass's end-of-pass callback is queued (dead before the pass's first
    /// gradient, and after a failed pass, which drops its callbacks unrun).
    callback_alive: Weak<()>,
}

struct Reducer {
    params: Vec<Tensor>,
    buckets: Vec<Bucket>,
    /// The bucket of each parameter.
    bucket_of: Vec<usize>,
    group: ProcessGroup,
    sync: AtomicBool,
    pass: Mutex<Pass>,
}

/// Data-parallel training of a set of parameters (PyTorch's `DistributedDataParallel`).
///
/// At construction it broadcasts the parameters from the group's first rank, so all replicas
/// start equal. Then every `backward()` that reaches the parameters averages their gradients over
/// the group before it returns: parameters are put in buckets (reverse order, as gradients
/// arrive; at most `bucket_cap_bytes` each, 25 MiB by default), and a bucket's all-reduce starts
/// on the communication thread as soon as its last gradient is in, while the backward pass goes
/// on. Optimizers (`Sgd`, `Adam`, fused or not) then see averaged gradients; compiled training
/// works the same way (its backward delivers the gradients through the same pass).
///
/// [`DistributedDataParallel::no_sync`] skips the averaging for gradient accumulation: the next
/// synchronised backward averages the accumulated sum. A parameter that received no gradient in
/// a pass is averaged as zeros (so replicas stay equal) and gets a gradient.
pub struct DistributedDataParallel {
    reducer: Arc<Reducer>,
    hooks: Vec<HookHandle>,
}

/// Re-enables gradient synchronisation when dropped (see [`DistributedDataParallel::no_sync`]).
pub struct NoSyncGuard<'a> {
    ddp: &'a DistributedDataParallel,
}

impl Drop for NoSyncGuard<'_> {
    fn drop(&mut self) {
        self.ddp.reducer.sync.store(true, Ordering::SeqCst);
    }
}

impl DistributedDataParallel {
    /// Wraps `params` (those that require grad take part) on `group` (the world when `None`)
    /// with the default bucket capacity.
    pub fn new(
        params: Vec<Tensor>,
        group: Option<&ProcessGroup>,
    ) -> Result<DistributedDataParallel> {
        DistributedDataParallel::with_bucket_cap(params, DEFAULT_BUCKET_CAP_BYTES, group)
    }

    /// Wraps a module's parameters, and broadcasts its buffers (batch norm's running statistics)
    /// from the first rank too.
    pub fn from_module(
        module: &dyn Module,
        group: Option<&ProcessGroup>,
    ) -> Result<DistributedDataParallel> {
        let g = resolve("DistributedDataParallel", group)?;
        if let Some(&root) = g.ranks().first() {
            for (_, b) in module.named_buffers() {
                broadcast(&b, root, Some(&g))?;
            }
        }
        DistributedDataParallel::new(module.parameters(), Some(&g))
    }

    /// [`DistributedDataParallel::new`] with buckets of at most `bucket_cap_bytes` (a parameter
    /// larger than that gets a bucket of its own).
    pub fn with_bucket_cap(
        params: Vec<Tensor>,
        bucket_cap_bytes: usize,
        group: Option<&ProcessGroup>,
    ) -> Result<DistributedDataParallel> {
        const OP: &str = "DistributedDataParallel";
        let group = resolve(OP, group)?;
        let params: Vec<Tensor> = params.into_iter().filter(Tensor::requires_grad).collect();
        for (i, p) in params.iter().enumerate() {
            if !p.is_leaf() {
                return Err(Error::argument(
                    OP,
                    format!("params[{i}]"),
                    "a leaf tensor (a parameter)",
                    format!(
                        "a tensor produced by {}",
                        p.grad_fn_name().unwrap_or("an op")
                    ),
                ));
            }
        }
        if let Some(&root) = group.ranks().first() {
            for p in &params {
                broadcast(p, root, Some(&group))?;
            }
        }
        let buckets = plan_buckets(&params, bucket_cap_bytes);
        let mut bucket_of = vec![0; params.len()];
        for (b, bucket) in buckets.iter().enumerate() {
            for &p in &bucket.params {
                bucket_of[p] = b;
            }
        }
        let reducer = Arc::new(Reducer {
            params,
            buckets,
            bucket_of,
            group,
            sync: AtomicBool::new(true),
            pass: Mutex::new(Pass::default()),
        });
        let mut hooks = Vec::with_capacity(reducer.params.len());
        // In a group of one the average is the gradient itself: nothing to hook.
        let members = if reducer.group.size() > 1 {
            &reducer.params[..]
        } else {
            &[]
        };
        for (i, p) in members.iter().enumerate() {
            let weak: Weak<Reducer> = Arc::downgrade(&reducer);
            hooks.push(
                p.register_post_accumulate_grad_hook(Arc::new(move |_: &Tensor| {
                    match weak.upgrade() {
                        Some(r) => Reducer::grad_ready(&r, i),
                        None => Ok(()),
                    }
                }))?,
            );
        }
        Ok(DistributedDataParallel { reducer, hooks })
    }

    /// The parameters taking part (those that require grad).
    pub fn parameters(&self) -> &[Tensor] {
        &self.reducer.params
    }

    /// The number of buckets.
    pub fn num_buckets(&self) -> usize {
        self.reducer.buckets.len()
    }

    /// Turns gradient averaging off until the guard is dropped (PyTorch's `no_sync()` context):
    /// backward passes meanwhile only accumulate local gradients.
    pub fn no_sync(&self) -> NoSyncGuard<'_> {
        self.reducer.sync.store(false, Ordering::SeqCst);
        NoSyncGuard { ddp: self }
    }

    /// Averages the current `.grad` of every parameter over the group now (for gradients made
    /// outside `backward()`, e.g. set by hand); a parameter without one counts as zeros.
    pub fn sync_gradients(&self) -> Result<()> {
        let r = &self.reducer;
        let launched: Vec<(usize, Tensor, Work)> = (0..r.buckets.len())
            .map(|b| r.launch(b))
            .collect::<Result<_>>()?;
        r.finish(launched)
    }
}

impl Drop for DistributedDataParallel {
    fn drop(&mut self) {
        for h in self.hooks.drain(..) {
            h.remove();
        }
    }
}

/// Buckets over the parameters in reverse order (gradients of the last layers arrive first),
/// one dtype and device per bucket, closed when the next parameter would pass `cap` bytes.
fn plan_buckets(params: &[Tensor], cap: usize) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut open: Vec<Bucket> = Vec::new();
    for i in (0..params.len()).rev() {
        let (dtype, device, numel) = (params[i].dtype(), params[i].device(), params[i].numel());
        let empty = || Bucket {
            params: Vec::new(),
            numel: 0,
            dtype,
            device,
        };
        let pos = match open
            .iter()
            .position(|b| b.dtype == dtype && b.device == device)
        {
            Some(pos) => pos,
            None => {
                open.push(empty());
                open.len() - 1
            }
        };
        let b = &mut open[pos];
        if !b.params.is_empty() && (b.numel + numel) * dtype.size() > cap {
            buckets.push(std::mem::replace(b, empty()));
        }
        let b = &mut open[pos];
        b.params.push(i);
        b.numel += numel;
    }
    buckets.extend(open.into_iter().filter(|b| !b.params.is_empty()));
    buckets
}

impl Reducer {
    /// A parameter's gradient for this pass is in: counts it, and launches every bucket that is
    /// complete and next in order. The first call of a pass queues the end-of-pass wait.
    fn grad_ready(self: &Arc<Reducer>, param: usize) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut pass = self.pass.lock();
        if pass.callback_alive.upgrade().is_none() {
            // The first gradient of a pass. What a failed previous pass left (its launched
            // buckets finish as their handles drop; nothing of it is written back) goes.
            *pass = Pass::default();
            pass.ready = vec![0; self.buckets.len()];
            let weak = Arc::downgrade(self);
            let alive = Arc::new(());
            pass.callback_alive = Arc::downgrade(&alive);
            autograd::queue_callback(Box::new(move || {
                let _alive = alive;
                match weak.upgrade() {
                    Some(r) => r.end_of_pass(),
                    None => Ok(()),
                }
            }))?;
        }
        pass.ready[self.bucket_of[param]] += 1;
        while pass.next < self.buckets.len()
            && pass.ready[pass.next] == self.buckets[pass.next].params.len()
        {
            let b = pass.next;
            pass.launched.push(self.launch(b)?);
            pass.next += 1;
        }
        Ok(())
    }

    /// After the pass: launches the buckets still waiting (parameters that got no gradient count
    /// as zeros), waits for all, and writes the averages into the gradients.
    fn end_of_pass(&self) -> Result<()> {
        let mut launched = {
            let mut pass = self.pass.lock();
            let launched = std::mem::take(&mut pass.launched);
            let from = pass.next;
            *pass = Pass::default();
            (launched, from)
        };
        for b in launched.1..self.buckets.len() {
            launched.0.push(self.launch(b)?);
        }
        self.finish(launched.0)
    }

    /// Flattens bucket `b`'s gradients and starts averaging them.
    fn launch(&self, b: usize) -> Result<(usize, Tensor, Work)> {
        let _g = no_grad();
        let bucket = &self.buckets[b];
        let flat = Tensor::zeros(&[bucket.numel], bucket.dtype).to_device(bucket.device)?;
        let mut at = 0;
        for &p in &bucket.params {
            let n = self.params[p].numel();
            if let Some(g) = self.params[p].grad() {
                flat.narrow(0, at as i64, n)?.copy_(&g.reshape(&[n])?)?;
            }
            at += n;
        }
        let work = all_reduce_async(&flat, ReduceOp::Avg, Some(&self.group))?;
        Ok((b, flat, work))
    }

    /// Waits for the launched buckets and copies the averages into the gradients.
    fn finish(&self, launched: Vec<(usize, Tensor, Work)>) -> Result<()> {
        let _g = no_grad();
        for (b, flat, work) in launched {
            work.wait()?;
            let mut at = 0;
            for &p in &self.buckets[b].params {
                let param = &self.params[p];
                let n = param.numel();
                let avg = flat.narrow(0, at as i64, n)?.reshape(param.shape())?;
                match param.grad() {
                    Some(g) => {
                        g.copy_(&avg)?;
                    }
                    None => param.set_grad(Some(avg.clone_tensor()?))?,
                }
                at += n;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_reverse_order_cap_and_dtype() -> Result<()> {
        let p = |n: usize, d: DType| Tensor::zeros(&[n], d);
        let params = vec![
            p(4, DType::F32),
            p(4, DType::F32),
            p(2, DType::F64),
            p(8, DType::F32),
        ];
        // 32 bytes: two 4-element f32 parameters fit, the 8-element one is alone.
        let b = plan_buckets(&params, 32);
        let got: Vec<(Vec<usize>, DType)> = b.iter().map(|b| (b.params.clone(), b.dtype)).collect();
        assert_eq!(
            got,
            vec![
                (vec![3], DType::F32),
                (vec![1, 0], DType::F32),
                (vec![2], DType::F64),
            ]
        );
        Ok(())
    }
}
