//! Launching compiled kernels: validating tensors against the spec, planning the loop nest
//! (broadcast strides, dropping unit dims, merging dims that step uniformly), and splitting the
//! work across the shared thread pool. A plan depends only on the spec and the operands' shapes
//! and strides, so callers that launch repeatedly keep it ([`LaunchPlan::detach`]) and
//! [relaunch](CompiledKernel::relaunch) it with fresh data pointers, skipping the planning.

use rayon::prelude::*;
use tensorplay_ir::CompileKind;
use tensorplay_ir::{DType, Device, Error, ReduceOp, Result};
pub use tensorplay_kernel::plan::{LaunchPlan, PlanKey};
use tensorplay_kernel::plan::{Ptrs, bind};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::parallel;

use super::args::{KernelArgs, KernelFn, ScalarArgs};
use super::compile::CompiledKernel;
use crate::codegen::kernel::{KernelSpec, Lit, LoopKind, f32_to_bf16_bits, f32_to_f16_bits};

/// The op name errors of this module carry.
const OP: &str = "compiled kernel";

/// Below twice this much work (elements × work weight) a launch runs on the calling thread; it
/// is also the smallest chunk handed to a pool thread. Measured on the transformer step at 2
/// threads (PERFORMANCE.md, "Two threads"): 2^13 and 2^14 beat 2^16 by 15–20 %.
pub const MIN_CHUNK: usize = 1 << 13;

/// Plans a launch of `spec` on these tensors. `iter_shape` overrides the iteration shape the
/// planner would infer (pointwise and softmax: the output shape; reductions: the broadcast of the
/// inputs, widened to the output's kept sizes) — needed only for reductions whose reduced sizes
/// come from a broadcast inside the region.
///
/// Errors when counts, dtypes, devices, ranks or shapes do not fit the spec, for fake tensors,
/// for outputs that overlap themselves (stride 0 along a dim of size > 1), and for `amax`/`amin`
/// over an empty reduced space.
pub fn plan(
    spec: &KernelSpec,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    iter_shape: Option<&[usize]>,
) -> Result<LaunchPlan> {
    plan_on(spec, inputs, outputs, iter_shape, Device::Cpu)
}

/// [`plan`] for operands on `device` (all of them there): on a CUDA device the plan carries
/// device addresses, for the CUDA launcher. The geometry is the CPU kernel's: a reduction over
/// a strided dim runs as columns when the CPU kernel vectorizes.
pub(crate) fn plan_on(
    spec: &KernelSpec,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
    iter_shape: Option<&[usize]>,
    device: Device,
) -> Result<LaunchPlan> {
    tensorplay_kernel::plan::plan_on(
        spec,
        inputs,
        outputs,
        iter_shape,
        device,
        super::emit::kernel_lanes(spec) > 1,
    )
}

/// Kernel arguments shared by the threads of one launch.
struct Shared(KernelArgs);
// SAFETY: the pointers in the arguments stay valid for the whole launch (the tensors are
// borrowed by it); each call writes only its own part of the outputs.
unsafe impl Sync for Shared {}
// SAFETY: see `Sync`.
unsafe impl Send for Shared {}

fn call(entry: KernelFn, args: &KernelArgs, start: usize, end: usize) {
    let mut a = *args;
    a.start = start as i64;
    a.end = end as i64;
    // SAFETY: `args` was built by `plan` for this kernel's spec and layout (checked by the
    // callers), so every pointer is valid over the iteration and `[start, end)` lies inside it.
    unsafe { entry(&a) };
}

/// Runs `entry` over `[0, range)`, split across the pool when there is enough work. `align`
/// rounds chunk boundaries (vector-friendly splits for pointwise kernels).
/// `weight`: the relative cost of one element ([`CompiledKernel::work_weight`]).
fn run_range(
    entry: KernelFn,
    args: &KernelArgs,
    range: usize,
    per_unit: usize,
    align: usize,
    weight: usize,
) {
    let threads = parallel::num_threads();
    let work = range
        .saturating_mul(per_unit.max(1))
        .saturating_mul(weight.max(1));
    if threads <= 1 || work < 2 * MIN_CHUNK || range < 2 {
        call(entry, args, 0, range);
        return;
    }
    let chunks = (work / MIN_CHUNK).min(threads * 4).min(range).max(1);
    let per = range.div_ceil(chunks).next_multiple_of(align.max(1));
    let chunks = range.div_ceil(per);
    if chunks <= 1 {
        call(entry, args, 0, range);
        return;
    }
    let shared = Shared(*args);
    let shared = &shared;
    parallel::pool().install(move || {
        (0..chunks).into_par_iter().for_each(move |c| {
            let s = (c * per).min(range);
            let e = ((c + 1) * per).min(range);
            if s < e {
                call(entry, &shared.0, s, e);
            }
        })
    });
}

impl CompiledKernel {
    /// Runs the kernel: `inputs` and `outputs` must match the spec's dtypes (and count), the
    /// outputs the iteration shape (pointwise, softmax) or its reduction, and the tensors must
    /// plan to this kernel's [`LoopLayout`] — any mismatch is an error, never undefined
    /// behaviour. Inputs broadcast to the iteration shape. Work of 16K elements or more
    /// (fewer for compute-heavy kernels: elements × [`CompiledKernel::work_weight`]) is split
    /// across the shared pool (`TP_NUM_THREADS`). Outputs are written in place (their
    /// version counters are not bumped: they are meant to be fresh buffers). A pointwise
    /// kernel's output may be exactly an input's elements (same address, dtype, shape and
    /// strides: an update in place); any other overlap of an output with an input is an error
    /// (a staged kernel reads inputs again after writing outputs).
    ///
    /// ```
    /// use tensorplay_compiler::codegen::{cache, kernel::lower};
    /// use tensorplay_compiler::passes::region::{Region, RegionKind};
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// use tensorplay_runtime::Tensor;
    ///
    /// let m = TensorMeta::new(&[2, 3], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let bias = b.input("bias", TensorMeta::new(&[3], DType::F32, Device::Cpu));
    /// let y = b.op("tp::add", OpClass::Elementwise, vec![x.into(), bias.into()], vec![m])?;
    /// b.output(&y)?;
    /// let g = b.finish()?;
    /// let region = Region { id: 0, kind: RegionKind::Pointwise, nodes: vec![y[0].node],
    ///                       inputs: vec![x, bias], outputs: vec![y[0]] };
    /// let spec = lower(&g, &region)?.spec;
    /// let xt = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let bt = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], &[3])?;
    /// let out = Tensor::zeros(&[2, 3], DType::F32);
    /// let k = cache::kernel_for(&spec, &[&xt, &bt], &[&out])?;
    /// k.launch(&[&xt, &bt], &[&out])?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    ///
    /// A kernel with scalar arguments ([`Inst::Param`](crate::codegen::kernel::Inst::Param))
    /// is launched with [`CompiledKernel::launch_with_params`]; here it is an error.
    pub fn launch(&self, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<()> {
        self.launch_with_params(inputs, outputs, &[])
    }

    /// [`CompiledKernel::launch`] passing `params`, the values of the kernel's scalar
    /// arguments (one per [`Inst::Param`](crate::codegen::kernel::Inst::Param), as in
    /// [`LoweredRegion::params`](crate::codegen::kernel::LoweredRegion)).
    pub fn launch_with_params(
        &self,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        params: &[Lit],
    ) -> Result<()> {
        let args = ScalarArgs::new(self.param_dtypes(), params)?;
        let p = plan(self.spec(), inputs, outputs, None)?;
        self.launch_plan(&p, &args)
    }

    /// [`CompiledKernel::launch`] with an explicit iteration shape (see [`plan`]).
    pub fn launch_with_shape(
        &self,
        iter_shape: &[usize],
        inputs: &[&Tensor],
        outputs: &[&Tensor],
    ) -> Result<()> {
        let args = ScalarArgs::new(self.param_dtypes(), &[])?;
        let p = plan(self.spec(), inputs, outputs, Some(iter_shape))?;
        self.launch_plan(&p, &args)
    }

    /// Runs a plan made by [`plan`] for this kernel's spec (its layout must be this kernel's)
    /// with the data pointers it holds. Crate-internal: those pointers carry no lifetime, so only
    /// code that made the plan from tensors it still borrows may use them; callers outside keep
    /// detached plans and go through [`CompiledKernel::relaunch`], which binds fresh tensors.
    pub(crate) fn launch_plan(&self, p: &LaunchPlan, params: &ScalarArgs) -> Result<()> {
        if p.device() != Device::Cpu {
            return Err(Error::device(
                OP,
                format!("a plan over {} tensors cannot run a CPU kernel", p.device()),
            ));
        }
        self.run_plan(p, p.ptrs(), params)
    }

    /// Runs elements `start..end` of pointwise plan `p` (made by [`plan`] for this kernel's spec
    /// from tensors the caller still borrows, as for [`CompiledKernel::launch_plan`]) on the
    /// calling thread. Element `i` is the `i`-th point of the iteration shape in row-major
    /// order, so a range of whole rows of a row-major output is a panel of it: a fused epilogue
    /// runs on each panel a matrix product has just computed.
    pub(crate) fn launch_plan_range(
        &self,
        p: &LaunchPlan,
        params: &ScalarArgs,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        if p.device() != Device::Cpu || !matches!(p.made_for().1, LoopKind::Pointwise) {
            return Err(Error::compile(
                CompileKind::Launch,
                format!("{OP}: only a pointwise plan on the CPU runs by element ranges"),
            ));
        }
        if range.start > range.end || range.end > p.range() {
            return Err(Error::compile(
                CompileKind::Launch,
                format!(
                    "{OP}: elements {range:?} are outside the plan's 0..{}",
                    p.range()
                ),
            ));
        }
        if range.is_empty() {
            return self.check_params(params);
        }
        let args = self.kernel_args(p, p.ptrs(), params)?;
        // SAFETY: `kernel_args` checked that `p` (built by `plan` for this spec from live
        // tensors) has this kernel's layout, and `range` lies inside the plan's iteration.
        call(unsafe { self.entry() }, &args, range.start, range.end);
        Ok(())
    }

    /// Launches `p` — a plan made earlier by [`plan`] for this kernel's spec, usually
    /// [detached](LaunchPlan::detach) and kept by the caller — on new tensors, skipping the
    /// planning when they [fit](LaunchPlan::fits) it: same shapes and strides (and explicit
    /// iteration shape) as the tensors the plan was made from; only the data pointers are taken
    /// afresh (dtypes and devices are checked, and outputs must not overlap inputs). Returns
    /// `Ok(false)`, having run nothing, when the tensors do not fit or alias each other where the
    /// plan's did not (the caller plans anew; this
    /// is also the answer for a plan made for other tensors of another spec), and an error when
    /// the tensors fit but the plan's rank, loop kind or layout is not this kernel's, or
    /// `params` are not for this kernel's scalar arguments.
    pub fn relaunch(
        &self,
        p: &LaunchPlan,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        iter_shape: Option<&[usize]>,
        params: &ScalarArgs,
    ) -> Result<bool> {
        if !p.fits(inputs, outputs, iter_shape) {
            return Ok(false);
        }
        let spec = self.spec();
        if p.made_for() != (spec.rank, &spec.kind) {
            return Err(Error::compile(
                CompileKind::Launch,
                format!("{OP}: a launch plan made for another kernel spec"),
            ));
        }
        let (ptrs, in_place) = bind(spec, inputs, outputs, Device::Cpu)?;
        if in_place && !p.layout().in_place {
            // Aliased operands need the in-place variant of the kernel: plan anew.
            return Ok(false);
        }
        self.run_plan(p, &ptrs, params)?;
        Ok(true)
    }

    /// Runs this pointwise kernel over several operand sets — `(inputs, outputs)` each, as for
    /// [`CompiledKernel::launch`] — in one launch: the work of all sets is split across the
    /// pool together, so a list of small tensors (an optimizer's parameters) costs one pool
    /// dispatch and keeps every thread busy. Each set must plan to this kernel's layout
    /// (outputs may be exactly their inputs' elements, see [`LoopLayout::in_place`]); a set that
    /// does not is an error naming it, and nothing has run.
    ///
    /// ```
    /// use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind, Lit};
    /// use tensorplay_compiler::codegen::{cache, cpu};
    /// use tensorplay_ir::{DType, ScalarOp};
    /// use tensorplay_runtime::Tensor;
    /// // x <- x * 2 + y, in place.
    /// let spec = KernelSpec { rank: 1, inputs: vec![DType::F32; 2], outputs: vec![DType::F32],
    ///     insts: vec![
    ///         Inst::Load { input: 0 },
    ///         Inst::Param { index: 0, dtype: DType::F32 },
    ///         Inst::Op { op: ScalarOp::Mul, args: vec![0, 1], compute: DType::F32, out: DType::F32 },
    ///         Inst::Load { input: 1 },
    ///         Inst::Op { op: ScalarOp::Add, args: vec![2, 3], compute: DType::F32, out: DType::F32 },
    ///         Inst::Store { output: 0, value: 4 },
    ///     ],
    ///     kind: LoopKind::Pointwise };
    /// let (a, b) = (Tensor::from_vec(vec![1.0f32, 2.0], &[2])?, Tensor::ones(&[3], DType::F32));
    /// let (ya, yb) = (Tensor::ones(&[2], DType::F32), Tensor::ones(&[3], DType::F32));
    /// let plan = cpu::plan(&spec, &[&a, &ya], &[&a], None)?;
    /// let k = cache::get_or_compile(&spec, plan.layout())?;
    /// k.launch_group(&[(&[&a, &ya], &[&a]), (&[&b, &yb], &[&b])], &[Lit::Float(2.0)])?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![3.0, 5.0]);
    /// assert_eq!(b.to_vec::<f32>()?, vec![3.0; 3]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn launch_group(&self, sets: &[(&[&Tensor], &[&Tensor])], params: &[Lit]) -> Result<()> {
        if !matches!(self.spec().kind, LoopKind::Pointwise) {
            return Err(Error::compile(
                CompileKind::Launch,
                format!("{OP}: only pointwise kernels launch over groups of operand sets"),
            ));
        }
        let scalars = ScalarArgs::new(self.param_dtypes(), params)?;
        let mut plans = Vec::with_capacity(sets.len());
        for (k, (inputs, outputs)) in sets.iter().enumerate() {
            let p = plan(self.spec(), inputs, outputs, None)?;
            if !p.is_empty() && p.layout() != self.layout() {
                return Err(Error::argument(
                    OP,
                    format!("sets[{k}]"),
                    format!("tensors with the loop layout {}", self.layout()),
                    format!("the layout {}", p.layout()),
                ));
            }
            plans.push(p);
        }
        plans.retain(|p| !p.is_empty());
        let mut args = Vec::with_capacity(plans.len());
        for p in &plans {
            args.push(self.kernel_args(p, p.ptrs(), &scalars)?);
        }
        // SAFETY: (for the entry calls below) every plan was built by `plan` for this spec and
        // has this kernel's layout; `plans` (whose pointer lists `args` point into) is not
        // touched again until the calls are done.
        let entry = unsafe { self.entry() };
        let total: usize = plans.iter().map(|p| p.range()).sum();
        let work = total.saturating_mul(self.work_weight().max(1));
        let threads = parallel::num_threads();
        if threads <= 1 || work < 2 * MIN_CHUNK {
            for (a, p) in args.iter().zip(&plans) {
                call(entry, a, 0, p.range());
            }
            return Ok(());
        }
        let chunks = (work / MIN_CHUNK).min(threads * 4).max(1);
        let per = total.div_ceil(chunks).next_multiple_of(64);
        let mut pieces = Vec::with_capacity(chunks + plans.len());
        for (k, p) in plans.iter().enumerate() {
            let mut s = 0;
            while s < p.range() {
                let e = (s + per).min(p.range());
                pieces.push((k, s, e));
                s = e;
            }
        }
        let shared: Vec<Shared> = args.into_iter().map(Shared).collect();
        let shared = &shared;
        parallel::pool().install(move || {
            pieces
                .into_par_iter()
                .for_each(move |(k, s, e)| call(entry, &shared[k].0, s, e))
        });
        Ok(())
    }

    /// The kernel arguments of plan `p` on operand pointers `ptrs` (inputs, then outputs),
    /// after checking that the plan fits this kernel (layout, dims, operand count) and `params`
    /// its scalar arguments. For a non-empty plan.
    fn kernel_args(
        &self,
        p: &LaunchPlan,
        ptrs: &[*mut u8],
        params: &ScalarArgs,
    ) -> Result<KernelArgs> {
        self.check_params(params)?;
        if p.layout() != self.layout() {
            return Err(Error::argument(
                OP,
                "inputs, outputs",
                format!("tensors with the loop layout {}", self.layout()),
                format!("the layout {}", p.layout()),
            ));
        }
        let dims = p.layout().dims;
        let nops = self.spec().inputs.len() + self.spec().outputs.len();
        if p.shape().len() != dims || ptrs.len() != nops || p.strides().len() != dims * nops {
            return Err(Error::compile(
                CompileKind::Launch,
                format!(
                    "{OP}: a launch plan for {dims} dims is inconsistent (or detached from its \
                 tensors: launch it with `relaunch`)"
                ),
            ));
        }
        Ok(KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: p.shape().as_ptr(),
            strides: p.strides().as_ptr(),
            start: 0,
            end: p.range() as i64,
            partials: std::ptr::null_mut(),
            params: params.slots().as_ptr(),
        })
    }

    fn check_params(&self, params: &ScalarArgs) -> Result<()> {
        if params.dtypes() != self.param_dtypes() {
            return Err(Error::argument(
                OP,
                "params",
                format!("scalar arguments of dtypes {:?}", self.param_dtypes()),
                format!("{:?}", params.dtypes()),
            ));
        }
        Ok(())
    }

    /// Runs the geometry of `p` on the operand pointers `ptrs` (inputs, then outputs).
    fn run_plan(&self, p: &LaunchPlan, ptrs: &[*mut u8], params: &ScalarArgs) -> Result<()> {
        if p.is_empty() {
            return self.check_params(params);
        }
        let args = self.kernel_args(p, ptrs, params)?;
        // SAFETY: (for the entry calls below) `kernel_args` checked that `p` (built by `plan`
        // for this spec) has this kernel's layout.
        let entry = unsafe { self.entry() };
        let weight = self.work_weight();
        match &self.spec().kind {
            LoopKind::Pointwise => run_range(entry, &args, p.range(), 1, 64, weight),
            LoopKind::Softmax { .. } => run_range(entry, &args, p.range(), p.per_unit(), 1, weight),
            // Column mode: whole panels per thread, so each reduced point streams at least a
            // panel's worth of contiguous memory (narrow column chunks would touch a new page per
            // reduced point and thrash the TLB).
            LoopKind::Reduce { .. } if p.layout().kept_inner => run_range(
                entry,
                &args,
                p.range(),
                p.per_unit(),
                super::loops::PANEL as usize,
                weight,
            ),
            LoopKind::Reduce { op, value, .. } => {
                let threads = parallel::num_threads();
                if p.range() == 1 && threads > 1 && p.per_unit() >= 4 * MIN_CHUNK {
                    self.split_reduction(p, ptrs, params, *op, *value, threads)?;
                } else {
                    run_range(entry, &args, p.range(), p.per_unit(), 1, weight);
                }
            }
        }
        Ok(())
    }

    /// One long reduction (a single output element) split across the pool: the outermost
    /// reduced loop dim `R0` becomes `C` chunks of `q` (the kept loop dim, of size 1, takes the
    /// chunk index) plus a remainder call; raw accumulators come back through `partials` and
    /// are merged here in a fixed order (deterministic for a given thread count).
    fn split_reduction(
        &self,
        p: &LaunchPlan,
        ptrs: &[*mut u8],
        params: &ScalarArgs,
        op: ReduceOp,
        value: usize,
        threads: usize,
    ) -> Result<()> {
        let dims = p.layout().dims;
        let nops = ptrs.len();
        let nin = self.spec().inputs.len();
        // Loop dim 0 is the (size-1) kept dim, dim 1 the outermost reduced dim.
        let r0 = p.shape()[1] as usize;
        let chunks = (p.per_unit() / MIN_CHUNK).min(threads * 4).min(r0);
        // SAFETY: (for the entry calls below) `launch_plan` checked that `p` was built for this
        // spec and layout, and the chunk arguments below stay inside the plan's range.
        let entry = unsafe { self.entry() };
        if chunks < 2 {
            let args = KernelArgs {
                ptrs: ptrs.as_ptr(),
                shape: p.shape().as_ptr(),
                strides: p.strides().as_ptr(),
                start: 0,
                end: 1,
                partials: std::ptr::null_mut(),
                params: params.slots().as_ptr(),
            };
            call(entry, &args, 0, 1);
            return Ok(());
        }
        let q = r0 / chunks;
        let rem = r0 - q * chunks;
        let mut partials = vec![0u64; chunks + 1];
        // Main call: kept dim = chunk index (stride q * s0 per input), reduced dim 0 = q.
        let mut shape = p.shape().to_vec();
        shape[0] = chunks as i64;
        shape[1] = q as i64;
        let mut strides = p.strides().to_vec();
        for op in 0..nops {
            strides[op * dims] = if op < nin {
                q as i64 * p.strides()[op * dims + 1]
            } else {
                0
            };
        }
        let main = KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
            start: 0,
            end: chunks as i64,
            partials: partials.as_mut_ptr() as *mut u8,
            params: params.slots().as_ptr(),
        };
        run_range(
            entry,
            &main,
            chunks,
            q * (p.per_unit() / r0),
            1,
            self.work_weight(),
        );
        let mut used = chunks;
        if rem > 0 {
            let mut tail_ptrs: Ptrs = ptrs.iter().copied().collect();
            for (op, ptr) in tail_ptrs.iter_mut().enumerate().take(nin) {
                let off = (chunks * q) as isize * p.strides()[op * dims + 1] as isize;
                let size = self.spec().inputs[op].size() as isize;
                *ptr = ptr.wrapping_offset(off * size);
            }
            let mut rshape = p.shape().to_vec();
            rshape[0] = 1;
            rshape[1] = rem as i64;
            let tail = KernelArgs {
                ptrs: tail_ptrs.as_ptr(),
                shape: rshape.as_ptr(),
                strides: p.strides().as_ptr(),
                start: 0,
                end: 1,
                partials: partials[chunks..].as_mut_ptr() as *mut u8,
                params: params.slots().as_ptr(),
            };
            call(entry, &tail, 0, 1);
            used += 1;
        }
        let d = self.spec().value_dtype(value).ok_or_else(|| {
            Error::compile(
                CompileKind::Launch,
                format!("{OP}: reduced value has no dtype"),
            )
        })?;
        let out_dtype = self.spec().outputs[0];
        let out = ptrs[nin];
        let parts = &partials[..used];
        // SAFETY: `out` points at the single output element, of `out_dtype`.
        unsafe { write_merged(op, d, out_dtype, parts, p.per_unit(), out) };
        Ok(())
    }
}

/// Merges raw partial accumulators (see [`KernelArgs::partials`]) of a reduction of `d` values
/// and writes the finalized result, of `out_dtype`, to `out`.
///
/// # Safety
/// `out` must be valid for writing one element of `out_dtype`.
unsafe fn write_merged(
    op: ReduceOp,
    d: DType,
    out_dtype: DType,
    parts: &[u64],
    count: usize,
    out: *mut u8,
) {
    if d.is_float() {
        let vals = parts.iter().map(|&b| f64::from_bits(b));
        let v = match op {
            ReduceOp::Sum => vals.sum::<f64>(),
            ReduceOp::Mean => vals.sum::<f64>() * (1.0 / count as f64),
            ReduceOp::Prod => vals.product::<f64>(),
            ReduceOp::Amax | ReduceOp::Amin => {
                let mut best: Option<f64> = None;
                for x in vals {
                    best = Some(match best {
                        None => x,
                        Some(b) if b.is_nan() || x.is_nan() => f64::NAN,
                        Some(b) if (op == ReduceOp::Amax) == (x > b) => x,
                        Some(b) => b,
                    });
                }
                best.unwrap_or(f64::NAN)
            }
        };
        // SAFETY: the caller guarantees `out` holds one `out_dtype` element.
        unsafe {
            match out_dtype {
                DType::F64 => (out as *mut f64).write_unaligned(v),
                DType::F32 => (out as *mut f32).write_unaligned(v as f32),
                DType::F16 => (out as *mut u16).write_unaligned(f32_to_f16_bits(v as f32)),
                DType::BF16 => (out as *mut u16).write_unaligned(f32_to_bf16_bits(v as f32)),
                _ => {}
            }
        }
    } else {
        let vals = parts.iter().map(|&b| b as i64);
        let v = match op {
            ReduceOp::Sum | ReduceOp::Mean => vals.fold(0i64, i64::wrapping_add),
            ReduceOp::Prod => vals.fold(1i64, i64::wrapping_mul),
            ReduceOp::Amax => vals.max().unwrap_or(i64::MIN),
            ReduceOp::Amin => vals.min().unwrap_or(i64::MAX),
        };
        // SAFETY: as above.
        unsafe {
            match out_dtype {
                DType::I64 => (out as *mut i64).write_unaligned(v),
                DType::I32 => (out as *mut i32).write_unaligned(v as i32),
                DType::Bool => out.write(u8::from(v != 0)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::cache;
    use crate::codegen::kernel::Inst;
    use tensorplay_ir::ScalarOp;

    fn unary_spec(op: ScalarOp) -> KernelSpec {
        KernelSpec {
            rank: 1,
            inputs: vec![DType::F64],
            outputs: vec![DType::F64],
            insts: vec![
                Inst::Load { input: 0 },
                Inst::Op {
                    op,
                    args: vec![0],
                    compute: DType::F64,
                    out: DType::F64,
                },
                Inst::Store {
                    output: 0,
                    value: 1,
                },
            ],
            kind: LoopKind::Pointwise,
        }
    }

    fn ramp(n: usize, from: f64) -> Tensor {
        Tensor::from_vec((0..n).map(|i| from + i as f64).collect::<Vec<_>>(), &[n]).unwrap()
    }

    #[test]
    fn a_detached_plan_relaunches_only_on_tensors_of_the_same_geometry() -> Result<()> {
        let spec = unary_spec(ScalarOp::Neg);
        let (a, out) = (ramp(8, 1.0), Tensor::zeros(&[8], DType::F64));
        let p = plan(&spec, &[&a], &[&out], None)?;
        let k = cache::get_or_compile(&spec, p.layout())?;
        let p = p.detach();
        let none = ScalarArgs::default();
        // Without its pointers the plan cannot be launched directly.
        assert!(k.launch_plan(&p, &none).is_err());

        // Same shape and strides, other data (and a storage offset): reused, fresh pointers.
        let big = ramp(20, 100.0);
        let b = big.narrow(0, 5, 8)?;
        let o = Tensor::zeros(&[8], DType::F64);
        assert!(p.fits(&[&b], &[&o], None));
        assert!(k.relaunch(&p, &[&b], &[&o], None, &none)?);
        let want: Vec<f64> = (105..113).map(|v| -(v as f64)).collect();
        assert_eq!(o.to_vec::<f64>()?, want);

        // Another stride, size or explicit iteration shape: not reused, nothing written.
        let strided = big.slice(0, Some(0), Some(16), 2)?;
        let o = Tensor::zeros(&[8], DType::F64);
        assert!(!k.relaunch(&p, &[&strided], &[&o], None, &none)?);
        let (c, oc) = (ramp(9, 0.0), Tensor::zeros(&[9], DType::F64));
        assert!(!k.relaunch(&p, &[&c], &[&oc], None, &none)?);
        assert!(!k.relaunch(&p, &[&a], &[&out], Some(&[8][..]), &none)?);
        assert_eq!(o.to_vec::<f64>()?, vec![0.0; 8]);

        // A wrong dtype with the same geometry is an error, as for a fresh plan.
        let f = Tensor::zeros(&[8], DType::F32);
        assert!(k.relaunch(&p, &[&a], &[&f], None, &none).is_err());
        // So is a plan made for a spec of another loop kind, even with the same layout.
        let mut softmax = unary_spec(ScalarOp::Neg);
        softmax.kind = LoopKind::Softmax {
            value: 1,
            log: false,
        };
        let foreign = plan(&softmax, &[&a], &[&out], None)?.detach();
        assert!(k.relaunch(&foreign, &[&a], &[&out], None, &none).is_err());
        Ok(())
    }

    #[test]
    fn outputs_overlapping_inputs_are_rejected() -> Result<()> {
        let spec = unary_spec(ScalarOp::Neg);
        let k = {
            let (a, out) = (ramp(8, 1.0), Tensor::zeros(&[8], DType::F64));
            let p = plan(&spec, &[&a], &[&out], None)?;
            cache::get_or_compile(&spec, p.layout())?
        };
        let buf = ramp(16, 0.0);
        // The same tensor plans to the in-place layout (another kernel: this one refuses it)...
        let a = buf.narrow(0, 0, 8)?;
        let err = k.launch(&[&a], &[&a]).unwrap_err().to_string();
        assert!(err.contains("in_place"), "{err}");
        // ... and a view sharing the middle of the input's bytes is an error naming both.
        let shifted = buf.narrow(0, 4, 8)?;
        let err = k.launch(&[&a], &[&shifted]).unwrap_err().to_string();
        assert!(err.contains("output 0") && err.contains("input 0"), "{err}");
        // Adjacent but disjoint: fine, and the input is intact.
        let next = buf.narrow(0, 8, 8)?;
        k.launch(&[&a], &[&next])?;
        let got = buf.to_vec::<f64>()?;
        assert_eq!(&got[..8], &(0..8).map(|v| v as f64).collect::<Vec<_>>()[..]);
        assert_eq!(
            &got[8..],
            &(0..8).map(|v| -(v as f64)).collect::<Vec<_>>()[..]
        );
        // A stride-0 input overlapping nothing of the output (its own layout, its own kernel).
        let s = Tensor::from_vec(vec![2.0f64], &[1])?.expand(&[8])?;
        let out = Tensor::zeros(&[8], DType::F64);
        let p = plan(&spec, &[&s], &[&out], None)?;
        cache::get_or_compile(&spec, p.layout())?.launch(&[&s], &[&out])?;
        assert_eq!(out.to_vec::<f64>()?, vec![-2.0; 8]);
        Ok(())
    }

    #[test]
    fn plan_errors_name_the_operand() {
        let spec = unary_spec(ScalarOp::Neg);
        let a = ramp(4, 0.0);
        let bad_in = Tensor::zeros(&[4], DType::F32);
        let out = Tensor::zeros(&[4], DType::F64);
        let bad_out = Tensor::zeros(&[4], DType::I64);
        let e = plan(&spec, &[&bad_in], &[&out], None).unwrap_err();
        assert!(e.to_string().contains("input 0"), "{e}");
        let e = plan(&spec, &[&a], &[&bad_out], None).unwrap_err();
        assert!(e.to_string().contains("output 0"), "{e}");
    }
}
