//! NVRTC, loaded at run time: building needs no CUDA toolkit, and NVRTC compiles to PTX on a
//! machine without a GPU (CI installs the library from the Python package index).
//!
//! The library is found through `TP_NVRTC` (a path to `libnvrtc.so.*` or a directory holding one)
//! or the dynamic loader's search path (`libnvrtc.so.12`, `libnvrtc.so.13`, `libnvrtc.so`). Kernels
//! compile with `--fmad=false`: the numerics contract forbids contracting a user's `a * b + c`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;
use tensorplay_ir::{CompileKind, Error, Result};

type Program = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// A loaded NVRTC library.
pub struct Nvrtc {
    /// Keeps the functions below valid.
    _lib: Library,
    path: String,
    version: (i32, i32),
    create: CreateFn,
    compile: CompileFn,
    ptx_size: SizeFn,
    ptx: GetFn,
    log_size: SizeFn,
    log: GetFn,
    destroy: DestroyFn,
    error_string: ErrorStringFn,
}

fn err(msg: impl Into<String>) -> Error {
    Error::compile(CompileKind::Launch, format!("nvrtc: {}", msg.into()))
}

/// Where to look for the library, in order.
fn candidates() -> Vec<PathBuf> {
    let names = ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"];
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("TP_NVRTC").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_dir() {
            v.extend(names.iter().map(|n| p.join(n)));
        } else {
            v.push(p);
        }
    }
    v.extend(names.iter().map(PathBuf::from));
    v
}

impl Nvrtc {
    /// Loads NVRTC from the first candidate that opens and has the API.
    fn open() -> std::result::Result<Nvrtc, String> {
        let mut tried = Vec::new();
        for path in candidates() {
            if path.components().count() > 1 && !path.exists() {
                tried.push(format!("{} (no such file)", path.display()));
                continue;
            }
            match Self::open_at(&path) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(format!(
            "no NVRTC library could be loaded (set TP_NVRTC to libnvrtc.so.* or its directory); \
             tried: {}",
            tried.join("; ")
        ))
    }

    fn open_at(path: &Path) -> std::result::Result<Nvrtc, String> {
        // SAFETY: loading NVRTC runs its initializers, which have no preconditions; the symbols
        // below are NVRTC's C API with the signatures declared above (nvrtc.h), and `_lib` keeps
        // them loaded for the life of `Nvrtc`.
        unsafe {
            let lib = Library::new(path).map_err(|e| e.to_string())?;
            let sym = |name: &[u8]| -> std::result::Result<*const c_void, String> {
                lib.get::<*const c_void>(name)
                    .map(|s| *s)
                    .map_err(|e| e.to_string())
            };
            let create: CreateFn = std::mem::transmute(sym(b"nvrtcCreateProgram\0")?);
            let compile: CompileFn = std::mem::transmute(sym(b"nvrtcCompileProgram\0")?);
            let ptx_size: SizeFn = std::mem::transmute(sym(b"nvrtcGetPTXSize\0")?);
            let ptx: GetFn = std::mem::transmute(sym(b"nvrtcGetPTX\0")?);
            let log_size: SizeFn = std::mem::transmute(sym(b"nvrtcGetProgramLogSize\0")?);
            let log: GetFn = std::mem::transmute(sym(b"nvrtcGetProgramLog\0")?);
            let destroy: DestroyFn = std::mem::transmute(sym(b"nvrtcDestroyProgram\0")?);
            let version_fn: VersionFn = std::mem::transmute(sym(b"nvrtcVersion\0")?);
            let error_string: ErrorStringFn = std::mem::transmute(sym(b"nvrtcGetErrorString\0")?);
            let (mut major, mut minor) = (0, 0);
            if version_fn(&mut major, &mut minor) != 0 {
                return Err("nvrtcVersion failed".into());
            }
            Ok(Nvrtc {
                _lib: lib,
                path: path.display().to_string(),
                version: (major, minor),
                create,
                compile,
                ptx_size,
                ptx,
                log_size,
                log,
                destroy,
                error_string,
            })
        }
    }

    /// The library's version, e.g. `(12, 9)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn check(&self, what: &str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let text = unsafe { CStr::from_ptr((self.error_string)(code)) };
        Err(err(format!("{what} failed: {}", text.to_string_lossy())))
    }

    /// Compiles `source` (entry points `extern "C"`) to PTX for `arch` (e.g. `"compute_90"`).
    /// A compile error carries NVRTC's log.
    pub fn compile_ptx(&self, source: &str, file_name: &str, arch: &str) -> Result<String> {
        let src = CString::new(source).map_err(|_| err("the source contains a NUL byte"))?;
        let name = CString::new(file_name).map_err(|_| err("the file name contains a NUL"))?;
        let options: Vec<CString> = options(arch)
            .into_iter()
            .map(|o| CString::new(o).map_err(|_| err("the architecture contains a NUL")))
            .collect::<Result<_>>()?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: the pointers are valid NUL-terminated strings for the duration of each call;
        // `prog` is created here and destroyed exactly once below, on every path.
        unsafe {
            self.check(
                "nvrtcCreateProgram",
                (self.create)(
                    &mut prog,
                    src.as_ptr(),
                    name.as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                ),
            )?;
            let result = self.compile_created(prog, &option_ptrs);
            (self.destroy)(&mut prog);
            result
        }
    }

    /// # Safety
    /// `prog` must be a live program created by this library.
    unsafe fn compile_created(&self, prog: Program, options: &[*const c_char]) -> Result<String> {
        // SAFETY: `prog` is live (the caller's contract); buffers are sized by NVRTC's answers.
        unsafe {
            let code = (self.compile)(prog, options.len() as c_int, options.as_ptr());
            if code != 0 {
                let mut n = 0usize;
                (self.log_size)(prog, &mut n);
                let mut buf = vec![0u8; n.max(1)];
                (self.log)(prog, buf.as_mut_ptr() as *mut c_char);
                let log = String::from_utf8_lossy(&buf[..n.saturating_sub(1)]).into_owned();
                self.check("nvrtcCompileProgram", code)
                    .map_err(|e| err(format!("{e}\n{log}")))?;
            }
            let mut n = 0usize;
            self.check("nvrtcGetPTXSize", (self.ptx_size)(prog, &mut n))?;
            let mut buf = vec![0u8; n.max(1)];
            self.check(
                "nvrtcGetPTX",
                (self.ptx)(prog, buf.as_mut_ptr() as *mut c_char),
            )?;
            buf.truncate(n.saturating_sub(1));
            String::from_utf8(buf).map_err(|_| err("the PTX is not UTF-8"))
        }
    }
}

/// The options every kernel is compiled with for `arch`: no contraction of a multiply and an add
/// into an FMA (the numerics contract: generated code rounds as eager does), C++17.
pub fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".to_string(),
        "-std=c++17".to_string(),
    ]
}

/// The process's NVRTC, loaded on first use; the error says what was tried.
pub fn load() -> Result<&'static Nvrtc> {
    static NVRTC: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
    NVRTC
        .get_or_init(Nvrtc::open)
        .as_ref()
        .map_err(|e| err(e.clone()))
}
