//! CUDA verification without a GPU, shared by the test files that run real programs (the
//! regression suite, the fuzzer, the op-table sweep): a body that compiles and checks programs
//! against eager runs twice under a region hook. The first run collects the CUDA kernel of every
//! fused region it launches (spec and loop layout); every kernel is then compiled with NVRTC to
//! PTX for sm_90 and built for the host emulation in a few C++ compiler invocations; the second
//! run executes every region through its emulated CUDA kernel, so the body's own comparisons
//! with eager (under the numerics contract) check the CUDA code.
//!
//! NVRTC or a C++ compiler missing is a failure when `TP_REQUIRE_NVRTC=1` or `CI` is set (CI
//! installs NVRTC), a skip with the reason elsewhere. Each file includes it with
//! `#[path = "common/cuda_emu.rs"] mod cuda_emu;`.

#![allow(dead_code)]

/// Prints a count or skip line straight to the process's stderr, past the test harness's output
/// capture, so CI logs show what the CUDA checks proved (or why they skipped) without
/// `--nocapture`.
macro_rules! ci_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

use tensorplay_compiler::codegen::cpu::{LaunchPlan, ScalarArgs};
use tensorplay_compiler::codegen::cuda::emulate::{self, Emulated, Outcome};
use tensorplay_compiler::codegen::cuda::{CudaKernel, CudaLayout, get_or_emit, nvrtc};
use tensorplay_compiler::codegen::hook::{RegionHook, with_region_hook};
use tensorplay_compiler::codegen::kernel::KernelSpec;
use tensorplay_ir::Result;

/// Whether missing tools are failures (CI) rather than skips.
pub fn required() -> bool {
    let set = |k: &str| {
        std::env::var(k)
            .map(|v| !v.is_empty() && v != "0" && v != "false")
            .unwrap_or(false)
    };
    set("TP_REQUIRE_NVRTC") || set("CI")
}

/// Records the kernel of every region launched (and lets the CPU kernel run it).
#[derive(Default)]
pub struct Collector {
    pub kernels: RefCell<Vec<Arc<CudaKernel>>>,
    seen: RefCell<HashSet<String>>,
}

impl RegionHook for Collector {
    fn run(&self, spec: &KernelSpec, plan: &LaunchPlan, _: &ScalarArgs) -> Result<bool> {
        let k = get_or_emit(spec, &CudaLayout::from(plan.layout()))?;
        if self.seen.borrow_mut().insert(k.name.clone()) {
            self.kernels.borrow_mut().push(k);
        }
        Ok(false)
    }
}

/// Runs every region through its emulated CUDA kernel (launches with too many rows to emulate
/// run on the CPU; each kernel must be emulated at least once, on smaller sizes).
pub struct Runner {
    pub emu: Emulated,
    pub launches: Cell<usize>,
    pub on_cpu: Cell<usize>,
    pub used: RefCell<HashSet<String>>,
}

impl RegionHook for Runner {
    fn run(&self, spec: &KernelSpec, plan: &LaunchPlan, params: &ScalarArgs) -> Result<bool> {
        let layout = CudaLayout::from(plan.layout());
        match self.emu.run_plan(spec, plan, params)? {
            Outcome::Ran => {}
            Outcome::TooLarge => {
                self.on_cpu.set(self.on_cpu.get() + 1);
                return Ok(false);
            }
            Outcome::NotBuilt => panic!(
                "the second run launched a kernel the first did not (layout {layout}):\n{spec}"
            ),
        }
        self.launches.set(self.launches.get() + 1);
        self.used
            .borrow_mut()
            .insert(get_or_emit(spec, &layout)?.name.clone());
        Ok(true)
    }
}

/// Compiles every kernel with NVRTC to PTX for sm_90, in batches of many kernels per program;
/// checks every entry point is in the PTX. `None` (with the reason printed) when NVRTC is
/// missing and not required.
pub fn nvrtc_compile_all(kernels: &[Arc<CudaKernel>], what: &str) -> Option<usize> {
    let nv = match nvrtc::load() {
        Ok(nv) => nv,
        Err(e) if !required() => {
            ci_line!("nvrtc: skipped ({what}): {e}");
            return None;
        }
        Err(e) => panic!("NVRTC is required here (TP_REQUIRE_NVRTC or CI is set): {e}"),
    };
    let t0 = std::time::Instant::now();
    for (i, chunk) in kernels.chunks(64).enumerate() {
        let src: String = chunk.iter().map(|k| k.source.as_str()).collect();
        let ptx = nv
            .compile_ptx(&src, &format!("{what}_{i}.cu"), "compute_90")
            .unwrap_or_else(|e| panic!("NVRTC rejected a generated kernel ({what}): {e}"));
        for k in chunk {
            assert!(
                ptx.contains(&format!(".entry {}(", k.name)),
                "{} is missing from the PTX",
                k.name
            );
        }
    }
    let (major, minor) = nv.version();
    ci_line!(
        "nvrtc: compiled {} kernels for sm_90 ({what}; NVRTC {major}.{minor}, {:.1} s)",
        kernels.len(),
        t0.elapsed().as_secs_f64()
    );
    Some(kernels.len())
}

/// The two-phase check of `body` (see the module docs). Returns the number of kernels that
/// matched eager, or `None` when the emulation was skipped.
pub fn check(what: &str, body: impl Fn()) -> Option<usize> {
    let collector = Rc::new(Collector::default());
    with_region_hook(collector.clone(), &body);
    let kernels = collector.kernels.borrow().clone();
    assert!(!kernels.is_empty(), "{what}: no fused region ran");
    // NVRTC compiles in a thread of its own while the C++ compiler builds the emulation.
    let t0 = std::time::Instant::now();
    let dir = emulate::scratch_dir(what);
    let emu = std::thread::scope(|s| {
        s.spawn(|| nvrtc_compile_all(&kernels, what));
        if !emulate::compiler_available() {
            if required() {
                panic!("a C++ compiler (CXX or g++) is required for the CUDA emulation");
            }
            ci_line!("cuda-emulation: skipped ({what}): no C++ compiler (CXX or g++)");
            return None;
        }
        Some(
            emulate::build(&kernels, &dir, 2)
                .unwrap_or_else(|e| panic!("building the emulated kernels failed ({what}): {e}")),
        )
    });
    let emu = emu?;
    let built = t0.elapsed().as_secs_f64();
    let runner = Rc::new(Runner {
        emu,
        launches: Cell::new(0),
        on_cpu: Cell::new(0),
        used: RefCell::new(HashSet::new()),
    });
    with_region_hook(runner.clone(), &body);
    let used = runner.used.borrow().len();
    let missed: Vec<String> = kernels
        .iter()
        .filter(|k| !runner.used.borrow().contains(&k.name))
        .map(|k| format!("{} ({}):\n{}", k.name, k.layout, k.spec))
        .collect();
    assert!(
        missed.is_empty(),
        "{what}: {} kernels ran only at sizes too large to emulate:\n{}",
        missed.len(),
        missed.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
    ci_line!(
        "cuda-emulation: {used} kernels matched eager ({what}; {} launches emulated, {} above \
         the emulation budget on the CPU; build {built:.1} s, total {:.1} s)",
        runner.launches.get(),
        runner.on_cpu.get(),
        t0.elapsed().as_secs_f64()
    );
    Some(used)
}
