//! The on-disk cache of NVRTC's output, so a generated kernel is compiled once per machine
//! rather than once per process (NVRTC takes milliseconds to tens of milliseconds a kernel; a
//! cache hit is a file read).
//!
//! Where: `TP_CUDA_KERNEL_DIR`, else `$XDG_CACHE_HOME/tensorplay/cuda-kernels`, else
//! `$HOME/.cache/tensorplay/cuda-kernels`; `TP_CUDA_KERNEL_DIR=off` turns the cache off. An entry
//! is two files named by a hash of everything the PTX depends on: `<hash>.key` holds that whole
//! key (NVRTC's version, the options, the source) and `<hash>.ptx` the PTX. A read compares the
//! whole key, so a hash collision or a stale entry is a miss, never a wrong kernel. Entries are
//! written to temporary files and renamed into place, so concurrent processes never read a half
//! written one. The cache never makes a compile fail: an unreadable or unwritable directory is a
//! miss (a write failure is logged under `TP_LOGS=cuda`).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorplay_ir::Result;

use super::nvrtc;
use tensorplay_kernel::log as logging;

static HITS: AtomicUsize = AtomicUsize::new(0);

/// Kernels this process read from the disk cache instead of compiling.
pub fn hits() -> usize {
    HITS.load(Ordering::Relaxed)
}

/// The cache directory from the environment (see the module docs), `None` when it is off.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os("TP_CUDA_KERNEL_DIR") {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })
            .map(|base| base.join("tensorplay").join("cuda-kernels")),
    }
}

/// PTX of `source` for `arch` (e.g. `compute_90`), from the cache in `dir` or compiled by NVRTC
/// and stored there; `dir = None` always compiles.
pub fn compile_ptx(
    dir: Option<&Path>,
    source: &str,
    file_name: &str,
    arch: &str,
) -> Result<String> {
    let nv = nvrtc::load()?;
    let Some(dir) = dir else {
        return nv.compile_ptx(source, file_name, arch);
    };
    let (major, minor) = nv.version();
    let key = format!(
        "nvrtc {major}.{minor}\noptions {}\n{source}",
        nvrtc::options(arch).join(" ")
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    let stem = dir.join(format!("{:016x}", h.finish()));
    let (key_path, ptx_path) = (stem.with_extension("key"), stem.with_extension("ptx"));
    if std::fs::read_to_string(&key_path).is_ok_and(|k| k == key)
        && let Ok(ptx) = std::fs::read_to_string(&ptx_path)
    {
        HITS.fetch_add(1, Ordering::Relaxed);
        return Ok(ptx);
    }
    let ptx = nv.compile_ptx(source, file_name, arch)?;
    // The PTX lands before its key, so a key that matches always has its PTX next to it.
    if let Err(e) = std::fs::create_dir_all(dir)
        .and_then(|()| write_atomically(&ptx_path, &ptx))
        .and_then(|()| write_atomically(&key_path, &key))
    {
        logging::log("cuda", || {
            format!("kernel cache: cannot write {}: {e}", stem.display())
        });
    }
    Ok(ptx)
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!(
        "tmp{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
