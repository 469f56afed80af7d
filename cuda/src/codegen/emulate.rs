//! Host emulation of generated CUDA kernels: the exact source [`emit`](super::emit) produced is
//! built by the system C++ compiler against `emulation.h` (blockIdx/threadIdx, `__syncthreads`
//! as a real barrier across a block's threads run as fibers, `__shared__` per block, warp
//! shuffles) into a shared library, and launched over a grid on CPU memory. This is how index
//! math, broadcasting, vector paths and reduction trees are checked on machines without a GPU.
//!
//! Many kernels build in one compiler invocation ([`build`]); the work is split into `jobs`
//! translation units compiled in parallel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use libloading::Library;
use tensorplay_ir::{CompileKind, Error, Result};

use super::{CudaKernel, CudaLayout, EMULATION_HEADER, pack_args};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::plan::LaunchPlan;
use tensorplay_kernel::spec::KernelSpec;

type EmuFn = unsafe extern "C" fn(*const u64, u32, u32) -> *const std::ffi::c_char;

fn err(msg: impl Into<String>) -> Error {
    Error::compile(
        CompileKind::Launch,
        format!("cuda emulation: {}", msg.into()),
    )
}

/// The C++ compiler: `$CXX`, else `g++`.
fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".into())
}

/// Whether a host C++ compiler is available (`CXX` or `g++`).
pub fn compiler_available() -> bool {
    Command::new(compiler())
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// What [`Emulated::run_plan`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The emulated kernel ran.
    Ran,
    /// No kernel for the spec and layout was built.
    NotBuilt,
    /// Too many rows to emulate in reasonable time.
    TooLarge,
}

/// Emulated kernels loaded from the libraries [`build`] made.
pub struct Emulated {
    libs: Vec<Library>,
    entries: HashMap<String, (Arc<CudaKernel>, EmuFn)>,
}

/// One translation unit: the header, then each kernel's full source (its prelude is guarded)
/// and an `extern "C"` wrapper `<name>_emu(args, grid, block)` that launches it.
fn translation_unit(kernels: &[Arc<CudaKernel>]) -> String {
    let mut s = String::from("#include \"tp_emulation.h\"\n");
    for k in kernels {
        s.push_str(&k.source);
        s.push_str(&format!(
            "extern \"C\" const char* {n}_emu(const unsigned long long* w, unsigned grid, \
             unsigned block) {{\n  const {n}_args& a = *reinterpret_cast<const {n}_args*>(w);\n  \
             return tp_emu::launch(grid, block, {b}, [&] {{ {n}(a); }});\n}}\n",
            n = k.name,
            b = k.uses_barriers()
        ));
    }
    s
}

/// Builds `kernels` into shared libraries under `dir` (`jobs` compiler processes at once) and
/// loads them. Compiler errors carry the compiler's output.
pub fn build(kernels: &[Arc<CudaKernel>], dir: &Path, jobs: usize) -> Result<Emulated> {
    std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let header = dir.join("tp_emulation.h");
    std::fs::write(&header, EMULATION_HEADER).map_err(|e| err(e.to_string()))?;
    let jobs = jobs.max(1).min(kernels.len().max(1));
    let per = kernels.len().div_ceil(jobs).max(1);
    let mut children = Vec::new();
    for (i, chunk) in kernels.chunks(per).enumerate() {
        let src = dir.join(format!("kernels{i}.cpp"));
        let lib = dir.join(format!("libkernels{i}.so"));
        std::fs::write(&src, translation_unit(chunk)).map_err(|e| err(e.to_string()))?;
        let child = Command::new(compiler())
            .args([
                "-std=c++17",
                "-O1",
                "-shared",
                "-fPIC",
                "-ffp-contract=off",
                "-w",
            ])
            .arg("-I")
            .arg(dir)
            .arg("-o")
            .arg(&lib)
            .arg(&src)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| err(format!("cannot run {}: {e}", compiler())))?;
        children.push((child, lib, chunk));
    }
    let mut libs = Vec::new();
    let mut entries = HashMap::new();
    let mut failures = Vec::new();
    for (child, lib_path, chunk) in children {
        let out = child.wait_with_output().map_err(|e| err(e.to_string()))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            failures.push(text.lines().take(40).collect::<Vec<_>>().join("\n"));
            continue;
        }
        // SAFETY: the library was just built from our own translation unit, whose only
        // initializers are the emulation header's thread-local variables.
        let lib = unsafe { Library::new(&lib_path) }.map_err(|e| err(e.to_string()))?;
        for k in chunk {
            let sym = format!("{}_emu\0", k.name);
            // SAFETY: `<name>_emu` is defined in the translation unit with the `EmuFn`
            // signature; the library stays loaded in `libs` for as long as `entries` exists.
            let f: EmuFn = unsafe {
                *lib.get::<EmuFn>(sym.as_bytes())
                    .map_err(|e| err(e.to_string()))?
            };
            entries.insert(k.name.clone(), (k.clone(), f));
        }
        libs.push(lib);
    }
    if !failures.is_empty() {
        return Err(err(format!(
            "the C++ compiler failed:\n{}",
            failures.join("\n")
        )));
    }
    Ok(Emulated { libs, entries })
}

/// The launch configuration the emulation uses: small blocks (two warps for a few rows, so both
/// levels of the reduction trees run; one warp otherwise) and a few blocks (so the grid-stride
/// and row loops wrap around).
pub fn emulated_grid(kernel: &CudaKernel, work: usize) -> (u32, u32) {
    if kernel.uses_barriers() {
        let block = if work <= 16 { 64 } else { 32 };
        (work.clamp(1, 3) as u32, block)
    } else {
        let block = 64u32;
        (work.div_ceil(block as usize * 4).clamp(1, 3) as u32, block)
    }
}

/// Most rows a launch of a kernel with barriers is emulated for (each row costs a few thousand
/// fiber switches); [`Emulated::run_plan`] leaves larger launches to the CPU kernel.
pub const MAX_EMULATED_ROWS: usize = 256;

impl Emulated {
    /// Number of kernels loaded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no kernel is loaded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The loaded kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&Arc<CudaKernel>> {
        self.entries.get(name).map(|e| &e.0)
    }

    /// Launches kernel `name` with packed arguments ([`pack_args`]) on a grid of `grid` blocks
    /// of `block` threads.
    ///
    /// # Safety
    /// The pointers in `args` must address CPU memory valid for every element the sizes and
    /// strides reach (as a [`LaunchPlan`] from `plan` guarantees for its tensors).
    pub unsafe fn launch(&self, name: &str, args: &[u64], grid: u32, block: u32) -> Result<()> {
        let (_, f) = self
            .entries
            .get(name)
            .ok_or_else(|| err(format!("no emulated kernel {name}")))?;
        // SAFETY: the caller guarantees the memory; the argument words have the layout of the
        // kernel's struct (`pack_args`), which the wrapper reinterprets.
        let msg = unsafe { f(args.as_ptr(), grid, block) };
        if msg.is_null() {
            Ok(())
        } else {
            // SAFETY: a non-null result is one of the header's static NUL-terminated messages.
            let text = unsafe { std::ffi::CStr::from_ptr(msg) };
            Err(err(text.to_string_lossy().into_owned()))
        }
    }

    /// Runs the kernel for `spec` over a CPU launch plan (the geometry and tensors the CPU
    /// launcher planned), with the region's scalar arguments: `Ran`, `NotBuilt` (no kernel for
    /// this spec and layout was built) or `TooLarge` (more than [`MAX_EMULATED_ROWS`] rows of a
    /// kernel with barriers: left to the caller).
    pub fn run_plan(
        &self,
        spec: &KernelSpec,
        plan: &LaunchPlan,
        params: &ScalarArgs,
    ) -> Result<Outcome> {
        let layout = CudaLayout::from(plan.layout());
        let name = super::get_or_emit(spec, &layout)?.name.clone();
        let Some((kernel, _)) = self.entries.get(&name) else {
            return Ok(Outcome::NotBuilt);
        };
        if plan.is_empty() {
            return Ok(Outcome::Ran);
        }
        if kernel.uses_barriers() && plan.range() > MAX_EMULATED_ROWS {
            return Ok(Outcome::TooLarge);
        }
        let ptrs: Vec<u64> = plan.ptrs().iter().map(|&p| p as u64).collect();
        let args = pack_args(kernel, &ptrs, plan.shape(), plan.strides(), params.slots())?;
        let (grid, block) = emulated_grid(kernel, plan.range());
        // SAFETY: the plan was made by the CPU launcher from live tensors, which checked that
        // every element its sizes and strides reach lies inside each tensor's storage.
        unsafe { self.launch(&name, &args, grid, block)? };
        Ok(Outcome::Ran)
    }

    /// Libraries loaded (one per translation unit).
    pub fn libraries(&self) -> usize {
        self.libs.len()
    }
}

/// A scratch directory for emulation builds: `$TP_CUDA_EMU_DIR`, else under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    std::env::var_os("TP_CUDA_EMU_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!(
            "tensorplay-cuda-emu-{}-{}",
            tag.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
            std::process::id()
        ))
}
