//! Triton-style ops: kernels launched over a grid of program ids through [`wrap_triton`].
//!
//! A grid launcher is anything that can run a kernel over a grid: a compiled GPU kernel
//! ([`GpuKernel`], PTX or cubin plus launch metadata, run by the CUDA backend) or a
//! [`CpuLauncher`] that runs a Rust closure once per program id on the thread pool, so triton ops
//! work and are tested without a GPU. Inside a triton op's body, launches may only write to
//! tensors the op declared as mutated or to tensors the body allocated itself.

use std::cell::RefCell;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use rayon::prelude::*;
use tensorplay_ir::{DType, Device, Error, Result};

use tensorplay_core::cuda;
use tensorplay_core::parallel;
use tensorplay_core::tensor::Tensor;

/// Marker stored on operators created by `triton_op`.
#[derive(Debug, Clone, Default)]
pub struct TritonInfo;

/// One argument of a grid launch.
#[derive(Clone)]
pub enum LaunchArg {
    /// A tensor the kernel only reads.
    In(Tensor),
    /// A tensor the kernel writes.
    Out(Tensor),
    Int(i64),
    Float(f64),
}

impl fmt::Debug for LaunchArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchArg::In(t) => write!(f, "In({t:?})"),
            LaunchArg::Out(t) => write!(f, "Out({t:?})"),
            LaunchArg::Int(v) => write!(f, "Int({v})"),
            LaunchArg::Float(v) => write!(f, "Float({v})"),
        }
    }
}

/// A raw view of a tensor argument handed to a CPU program.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor {
    ptr: *mut u8,
    numel: usize,
    dtype: DType,
}

// SAFETY: a `RawTensor` is an address plus metadata and owns nothing; every access through it is
// an `unsafe` method whose caller upholds bounds, typing and write disjointness. The launcher
// keeps the tensors alive for the whole launch.
unsafe impl Send for RawTensor {}
// SAFETY: as for `Send`; `&RawTensor` only reads the address and metadata.
unsafe impl Sync for RawTensor {}

impl RawTensor {
    /// Number of elements (the tensor is contiguous).
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Element dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Reads element `i` as `T`.
    ///
    /// # Safety
    /// `T` must be the tensor's element type and `i < numel`.
    pub unsafe fn read<T: Copy>(&self, i: usize) -> T {
        // SAFETY: the caller guarantees `T` is the element type and `i < numel`; the tensor is
        // contiguous and alive during the launch, so element `i` is in bounds and initialised.
        unsafe { self.ptr.cast::<T>().add(i).read() }
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// `T` must be the element type, `i < numel`, the argument must be `LaunchArg::Out`, and no
    /// other program may write element `i` concurrently.
    pub unsafe fn write<T: Copy>(&self, i: usize, v: T) {
        // SAFETY: the caller guarantees the type, the bound and that no one else touches element
        // `i` concurrently; `write` never reads the (possibly uninitialised) old value.
        unsafe { self.ptr.cast::<T>().add(i).write(v) }
    }
}

/// A CPU program's view of the launch arguments.
#[derive(Debug, Clone)]
pub enum ProgramArg {
    Tensor(RawTensor),
    Int(i64),
    Float(f64),
}

/// Runs a kernel over a grid.
pub trait GridLauncher: Send + Sync {
    /// The kernel's name (for errors and graphs).
    fn name(&self) -> &str;
    /// Runs every program id of `grid` with `args`.
    fn launch(&self, grid: [u32; 3], args: &[LaunchArg]) -> Result<()>;
}

/// The body of a CPU program: `(program_id, args)`.
pub type ProgramFn = Arc<dyn Fn([u32; 3], &[ProgramArg]) -> Result<()> + Send + Sync>;

/// Runs a Rust closure once per program id, in parallel on the shared pool.
pub struct CpuLauncher {
    name: String,
    body: ProgramFn,
}

impl CpuLauncher {
    /// A launcher named `name` running `body` per program id.
    pub fn new(
        name: &str,
        body: impl Fn([u32; 3], &[ProgramArg]) -> Result<()> + Send + Sync + 'static,
    ) -> CpuLauncher {
        CpuLauncher {
            name: name.to_string(),
            body: Arc::new(body),
        }
    }
}

fn program_args(args: &[LaunchArg], name: &str) -> Result<Vec<ProgramArg>> {
    args.iter()
        .map(|a| match a {
            LaunchArg::In(t) | LaunchArg::Out(t) => {
                if !t.is_contiguous() {
                    return Err(Error::argument(
                        name,
                        "args",
                        "contiguous tensors (call .contiguous())",
                        format!("{t:?} with strides {:?}", t.strides()),
                    ));
                }
                Ok(ProgramArg::Tensor(RawTensor {
                    ptr: t.data_ptr(name)?,
                    numel: t.numel(),
                    dtype: t.dtype(),
                }))
            }
            LaunchArg::Int(v) => Ok(ProgramArg::Int(*v)),
            LaunchArg::Float(v) => Ok(ProgramArg::Float(*v)),
        })
        .collect()
}

impl GridLauncher for CpuLauncher {
    fn name(&self) -> &str {
        &self.name
    }

    fn launch(&self, grid: [u32; 3], args: &[LaunchArg]) -> Result<()> {
        let pargs = program_args(args, &self.name)?;
        let total = grid.iter().map(|&g| g as usize).product::<usize>();
        let body = &self.body;
        parallel::pool().install(|| {
            (0..total).into_par_iter().try_for_each(|i| {
                let x = (i % grid[0] as usize) as u32;
                let y = ((i / grid[0] as usize) % grid[1] as usize) as u32;
                let z = (i / (grid[0] as usize * grid[1] as usize)) as u32;
                body([x, y, z], &pargs)
            })
        })?;
        for a in args {
            if let LaunchArg::Out(t) = a {
                t.storage().bump_version();
            }
        }
        Ok(())
    }
}

/// A compiled GPU kernel image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuImage {
    Ptx(String),
    Cubin(Vec<u8>),
}

/// A compiled GPU kernel (e.g. from Triton's ahead-of-time output): image, entry point and launch
/// metadata. A launch loads the image once per device (`cuda::load_module`) and queues it on
/// the stream of the device its tensor arguments live on, with `num_warps * 32` threads per
/// block and `shared_mem_bytes` of dynamic shared memory.
///
/// Parameters follow the arguments in order, one 8-byte value each: a tensor is its device
/// address (element 0; tensors must be contiguous CUDA tensors on one device), an `Int` a
/// little-endian 64-bit integer (so it also fills an `i32` parameter when it fits), a `Float`
/// an `f32` (Triton's scalar floats). Tensors elsewhere, emulated devices (which run no PTX) and
/// builds without the `cuda` feature are errors naming the kernel.
#[derive(Debug, Clone)]
pub struct GpuKernel {
    pub name: String,
    pub entry: String,
    pub image: GpuImage,
    pub num_warps: u32,
    pub shared_mem_bytes: u32,
}

impl GridLauncher for GpuKernel {
    fn name(&self) -> &str {
        &self.name
    }

    fn launch(&self, grid: [u32; 3], args: &[LaunchArg]) -> Result<()> {
        let name = self.name.as_str();
        let mut device = None;
        for (k, a) in args.iter().enumerate() {
            let (LaunchArg::In(t) | LaunchArg::Out(t)) = a else {
                continue;
            };
            if !matches!(t.device(), Device::Cuda(_)) || t.is_fake() {
                return Err(Error::unsupported(
                    name,
                    format!(
                        "GPU kernels launch on CUDA tensors; argument {k} is {} (move it with \
                         to_device(Device::Cuda(i)))",
                        t.meta()
                    ),
                ));
            }
            match device {
                Some(d) if d != t.device() => {
                    return Err(Error::device(
                        name,
                        format!("tensor arguments on {d} and {}", t.device()),
                    ));
                }
                _ => device = Some(t.device()),
            }
            if !t.is_contiguous() {
                return Err(Error::argument(
                    name,
                    "args",
                    "contiguous tensors",
                    format!("argument {k} with strides {:?}", t.strides()),
                ));
            }
        }
        let device = device.ok_or_else(|| {
            Error::unsupported(
                name,
                "a GPU kernel needs a CUDA tensor argument to know its device (CUDA)",
            )
        })?;
        if !(1..=32).contains(&self.num_warps) || grid.contains(&0) {
            return Err(Error::argument(
                name,
                "num_warps, grid",
                "1..=32 warps and a grid of at least one block per dim",
                format!("{} warps, grid {grid:?}", self.num_warps),
            ));
        }
        let image = match &self.image {
            GpuImage::Ptx(text) => cuda::ModuleImage::Ptx(text),
            GpuImage::Cubin(bytes) => cuda::ModuleImage::Cubin(bytes),
        };
        let f = cuda::load_module(device, image, &self.entry, self.shared_mem_bytes)?;
        let mut values = args
            .iter()
            .map(|a| match a {
                LaunchArg::In(t) | LaunchArg::Out(t) => t.data_ptr_cuda(),
                LaunchArg::Int(v) => Ok(*v as u64),
                LaunchArg::Float(v) => Ok(u64::from((*v as f32).to_bits())),
            })
            .collect::<Result<Vec<u64>>>()?;
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: the kernel's parameters are the arguments in order (the documented
        // convention, which the kernel's author matches); the device addresses are of live,
        // contiguous tensors on `device`, whose memory stays valid for the stream's later work.
        unsafe {
            cuda::launch(
                &f,
                grid,
                [self.num_warps * 32, 1, 1],
                self.shared_mem_bytes,
                &mut params,
            )
        }?;
        for a in args {
            if let LaunchArg::Out(t) = a {
                t.storage().bump_version();
            }
        }
        Ok(())
    }
}

/// A kernel marked as launchable from a triton op (the result of [`wrap_triton`]).
#[derive(Clone)]
pub struct TritonKernel {
    inner: Arc<dyn GridLauncher>,
}

impl fmt::Debug for TritonKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TritonKernel({})", self.inner.name())
    }
}

/// What [`wrap_triton`] accepts: any grid launcher, or an already wrapped kernel.
pub trait IntoTritonKernel {
    fn into_triton_kernel(self) -> TritonKernel;
}

impl<L: GridLauncher + 'static> IntoTritonKernel for L {
    fn into_triton_kernel(self) -> TritonKernel {
        TritonKernel {
            inner: Arc::new(self),
        }
    }
}

impl IntoTritonKernel for TritonKernel {
    fn into_triton_kernel(self) -> TritonKernel {
        self
    }
}

/// Marks a kernel as launchable from within a triton op; idempotent on wrapped kernels.
///
/// ```
/// use tensorplay_runtime::library::triton::{wrap_triton, CpuLauncher};
/// let k = wrap_triton(CpuLauncher::new("noop", |_, _| Ok(())));
/// let again = wrap_triton(k.clone());
/// assert!(k.same(&again));
/// ```
pub fn wrap_triton(kernel: impl IntoTritonKernel) -> TritonKernel {
    kernel.into_triton_kernel()
}

/// The triton op whose body is running on this thread: its name and the tensors it may write
/// (declared mutated arguments) or must not write (its other tensor inputs).
pub(crate) struct TritonScope {
    pub(crate) op: String,
    pub(crate) read_only: Vec<Tensor>,
    /// Fake inputs: the body runs for its output shapes only, so launches do nothing.
    pub(crate) skip_launches: bool,
}

thread_local! {
    static SCOPE: RefCell<Vec<TritonScope>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `scope` as the current triton-op scope.
pub(crate) fn with_scope<R>(scope: TritonScope, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            SCOPE.with(|s| s.borrow_mut().pop());
        }
    }
    SCOPE.with(|s| s.borrow_mut().push(scope));
    let _pop = Pop;
    f()
}

impl TritonKernel {
    /// True when both handles wrap the same launcher.
    pub fn same(&self, other: &TritonKernel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Launches over `grid`. Only allowed inside a triton op's body, and `Out` arguments must not
    /// alias an input the op did not declare as mutated.
    pub fn launch(&self, grid: [u32; 3], args: &[LaunchArg]) -> Result<()> {
        let check = SCOPE.with(|s| -> Result<bool> {
            let scopes = s.borrow();
            let Some(scope) = scopes.last() else {
                return Err(Error::unsupported(
                    self.name(),
                    "wrap_triton kernels can only be launched from the body of a triton_op",
                ));
            };
            if scope.skip_launches {
                return Ok(false);
            }
            for a in args {
                if let LaunchArg::Out(t) = a
                    && let Some(ro) = scope.read_only.iter().find(|r| r.storage().same(t.storage()))
                {
                    return Err(Error::argument(
                        &scope.op,
                        "mutates_args",
                        "kernel outputs that are fresh tensors or declared mutated arguments",
                        format!("kernel `{}` writes to an input it does not declare as mutated ({ro:?})", self.name()),
                    ));
                }
            }
            Ok(true)
        });
        if !check? || grid.contains(&0) {
            return Ok(());
        }
        self.inner.launch(grid, args)
    }
}
