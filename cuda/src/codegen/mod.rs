//! The CUDA back end's code generator: a [`KernelSpec`] (a fused region, or one eager op)
//! emitted as CUDA C — the second consumer of the op table's scalar lowering (the spec's
//! `ScalarOp`s and dtypes come from the same `OpDef::lower` the Cranelift back end reads) — and
//! launched on a device ([`launch`]).
//!
//! - [`emit`] (in `emit.rs`) prints a spec for a [`CudaLayout`] (the loop geometry the CPU
//!   launcher's plan gives: merged dims, which of them are reduced): an argument struct, the body
//!   as a device function, and a grid-stride loop (pointwise, with 16-byte vector accesses when
//!   contiguous and aligned) or one block per row with block-level trees (reductions, softmax).
//!   Sizes, strides and scalar constants are kernel arguments, so one kernel serves every size.
//! - `prelude.cuh` holds the scalar semantics (one overload per register type); `emulation.h`
//!   runs the same source on the host ([`emulate`]).
//! - [`nvrtc`] loads NVRTC at run time (no toolkit needed to build) and compiles to PTX;
//!   [`disk_cache`] keeps its output on disk across processes (`TP_CUDA_KERNEL_DIR`).
//!
//! - [`launch`] runs a spec over a launch plan on a device: NVRTC's PTX loaded through the driver,
//!   or the host emulation's build on an emulated device.
//!
//! Kernels are cached by region structure ([`get_or_emit`]); `TP_LOGS=cuda` prints each
//! kernel's source when it is first emitted.

pub mod disk_cache;
mod emit;
pub mod emulate;
pub mod launch;
pub mod nvrtc;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use tensorplay_ir::{CompileKind, Error, LibmFn, LibmFn2, MathFn, Result};

use tensorplay_kernel::log as logging;
use tensorplay_kernel::spec::{KernelSpec, LoopKind, LoopLayout};

/// The hand-written part of the prelude; `prelude()` fills in the function tables.
const PRELUDE_TEMPLATE: &str = include_str!("prelude.cuh");

/// Where the template takes the generated `TP_MATH` lines.
const TABLES_MARKER: &str = "// @TP_MATH_TABLES@\n";

/// The scalar semantics every generated kernel includes (guarded, so many kernels can share one
/// translation unit): `prelude.cuh` with one `TP_MATH`/`TP_MATH2` line per function of the math
/// library's tables ([`MathFn`], [`LibmFn`], [`LibmFn2`]), so a function declared there has its
/// CUDA form without an edit here.
///
/// ```
/// let p = tensorplay_cuda::codegen::prelude();
/// assert!(p.contains("TP_MATH(tp_gelu_tanh, tp_gelu_tanh_f64(x))"));
/// assert!(p.contains("TP_MATH2(tp_atan2, atan2(a, b))"));
/// ```
pub fn prelude() -> &'static str {
    static PRELUDE: OnceLock<String> = OnceLock::new();
    PRELUDE.get_or_init(|| {
        let mut lines = String::new();
        let unary = MathFn::ALL
            .iter()
            .map(|f| (f.name(), f.cuda_f64()))
            .chain(LibmFn::ALL.iter().map(|f| (f.name(), f.cuda_f64())));
        for (name, expr) in unary {
            lines.push_str(&format!("TP_MATH(tp_{name}, {expr})\n"));
        }
        for f in LibmFn2::ALL {
            lines.push_str(&format!("TP_MATH2(tp_{}, {})\n", f.name(), f.cuda_f64()));
        }
        PRELUDE_TEMPLATE.replacen(TABLES_MARKER, &lines, 1)
    })
}

/// The host emulation header (see [`emulate`]).
pub const EMULATION_HEADER: &str = include_str!("emulation.h");

/// The loop geometry a CUDA kernel is generated for: how many loop dims, how many of them are
/// reduced and where (the structural part of the CPU launcher's [`LoopLayout`]; stride classes
/// are checked at run time instead, by the vector path's guard).
///
/// ```
/// use tensorplay_cuda::codegen::CudaLayout;
/// let l = CudaLayout { dims: 2, reduced: 1, kept_inner: false };
/// assert_eq!(l.to_string(), "dims=2 reduced=1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CudaLayout {
    /// Loop dims (at least 1).
    pub dims: usize,
    /// Reduced loop dims (0 for pointwise kernels, 1 for softmax).
    pub reduced: usize,
    /// Reductions: the loop dims are `[kept outer.., reduced.., kept inner]` rather than
    /// `[kept.., reduced..]`.
    pub kept_inner: bool,
}

impl From<&LoopLayout> for CudaLayout {
    fn from(l: &LoopLayout) -> Self {
        CudaLayout {
            dims: l.dims,
            reduced: l.reduced,
            kept_inner: l.kept_inner,
        }
    }
}

impl fmt::Display for CudaLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dims={} reduced={}", self.dims, self.reduced)?;
        if self.kept_inner {
            f.write_str(" kept_inner")?;
        }
        Ok(())
    }
}

/// A generated CUDA kernel.
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// The entry point (`extern "C"`), unique per spec and layout.
    pub name: String,
    /// The complete translation unit: [`prelude()`] then the kernel.
    pub source: String,
    /// The spec it computes.
    pub spec: KernelSpec,
    /// The loop geometry it expects.
    pub layout: CudaLayout,
}

impl CudaKernel {
    /// Whether the kernel synchronizes its block (reductions and softmax rows do; pointwise
    /// kernels never do, so their threads are independent).
    pub fn uses_barriers(&self) -> bool {
        !matches!(self.spec.kind, LoopKind::Pointwise)
    }

    /// The kernel without the prelude (what `TP_LOGS=cuda` prints).
    pub fn kernel_source(&self) -> &str {
        &self.source[prelude().len()..]
    }
}

fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Emits `spec` for `layout`. Errors (never panics) for a malformed spec or a layout that does
/// not fit its loop kind.
///
/// ```
/// use tensorplay_cuda::codegen::{CudaLayout, emit};
/// use tensorplay_kernel::spec::{Inst, KernelSpec, LoopKind};
/// use tensorplay_ir::{DType, ScalarOp};
/// let spec = KernelSpec { rank: 1, inputs: vec![DType::F32], outputs: vec![DType::F32],
///     insts: vec![
///         Inst::Load { input: 0 },
///         Inst::Op { op: ScalarOp::Exp, args: vec![0], compute: DType::F32, out: DType::F32 },
///         Inst::Store { output: 0, value: 1 },
///     ],
///     kind: LoopKind::Pointwise };
/// let k = emit(&spec, &CudaLayout { dims: 1, reduced: 0, kept_inner: false })?;
/// assert!(k.source.contains("tp_exp(v0)"));
/// assert!(k.kernel_source().contains(&format!("__global__ void {}(", k.name)));
/// assert!(emit(&spec, &CudaLayout { dims: 1, reduced: 1, kept_inner: false }).is_err());
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn emit(spec: &KernelSpec, layout: &CudaLayout) -> Result<CudaKernel> {
    spec.validate()?;
    let bad = |why: &str| {
        Err(Error::compile(
            CompileKind::Lowering,
            format!(
                "cuda emitter: layout {layout} {why} for a {:?} kernel",
                spec.kind
            ),
        ))
    };
    if layout.dims == 0 || layout.dims > tensorplay_kernel::spec::MAX_RANK + 1 {
        return bad("has no loop dims or too many");
    }
    match &spec.kind {
        LoopKind::Pointwise if layout.reduced != 0 || layout.kept_inner => {
            return bad("reduces dims");
        }
        LoopKind::Reduce { .. } if layout.reduced == 0 || layout.reduced >= layout.dims => {
            return bad("must reduce at least one dim and keep one");
        }
        LoopKind::Softmax { .. } if layout.reduced != 1 || layout.kept_inner || layout.dims < 2 => {
            return bad("must reduce exactly the last of at least two dims");
        }
        _ => {}
    }
    let text = format!("{spec}{layout}");
    let name = format!("tp_{:016x}", fnv1a(&text));
    let body = emit::kernel_source(spec, layout, &name)?;
    Ok(CudaKernel {
        name,
        source: format!("{}{body}", prelude()),
        spec: spec.clone(),
        layout: *layout,
    })
}

type Cache = Mutex<HashMap<(KernelSpec, CudaLayout), Arc<CudaKernel>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// [`emit`] through the process-wide cache keyed by region structure (spec and layout); the
/// first emission of each kernel is logged under `TP_LOGS=cuda`.
pub fn get_or_emit(spec: &KernelSpec, layout: &CudaLayout) -> Result<Arc<CudaKernel>> {
    let key = (spec.clone(), *layout);
    if let Some(k) = cache().lock().map_err(poisoned)?.get(&key) {
        return Ok(k.clone());
    }
    let k = Arc::new(emit(spec, layout)?);
    logging::log("cuda", || {
        format!("cuda kernel {} ({layout}):\n{}", k.name, k.kernel_source())
    });
    let mut c = cache().lock().map_err(poisoned)?;
    Ok(c.entry(key).or_insert(k).clone())
}

fn poisoned<T>(_: T) -> Error {
    Error::compile(
        CompileKind::Launch,
        "the CUDA kernel cache lock is poisoned",
    )
}

/// Number of kernels in the [`get_or_emit`] cache.
pub fn cached_kernels() -> usize {
    cache().lock().map(|c| c.len()).unwrap_or(0)
}

/// The kernel's argument struct as 8-byte words: operand pointers (inputs, then outputs), loop
/// sizes, strides (operand-major, in elements) and scalar-argument slots — the layout of the
/// generated `<name>_args`.
pub fn pack_args(
    kernel: &CudaKernel,
    ptrs: &[u64],
    sizes: &[i64],
    strides: &[i64],
    params: &[u64],
) -> Result<Vec<u64>> {
    let spec = &kernel.spec;
    let nops = spec.inputs.len() + spec.outputs.len();
    let dims = kernel.layout.dims;
    let np = spec.param_dtypes().len();
    if ptrs.len() != nops
        || sizes.len() != dims
        || strides.len() != nops * dims
        || params.len() != np
    {
        return Err(Error::argument(
            "cuda kernel",
            "arguments",
            format!(
                "{nops} pointers, {dims} sizes, {} strides and {np} scalars",
                nops * dims
            ),
            format!(
                "{}, {}, {} and {}",
                ptrs.len(),
                sizes.len(),
                strides.len(),
                params.len()
            ),
        ));
    }
    let mut words = Vec::with_capacity(nops + dims + nops * dims + np);
    words.extend_from_slice(ptrs);
    words.extend(sizes.iter().map(|&s| s as u64));
    words.extend(strides.iter().map(|&s| s as u64));
    words.extend_from_slice(params);
    Ok(words)
}
