//! Matrix products on CUDA devices, in cuBLAS's terms.
//!
//! A [`Gemm`] is one strided batched GEMM as `cublasGemmStridedBatchedEx` defines it: column-major
//! matrices, `op(A)` and `op(B)` optionally transposed, `C[i] = op(A[i]) · op(B[i])` (alpha 1,
//! beta 0) for every batch entry `i`. On the driver it runs through cuBLAS (cudarc's bindings,
//! `libcublas` loaded at run time, one handle per device on the device's stream); on an emulated
//! device a host implementation reads the *same* arguments with cuBLAS's meaning. Both first pass
//! [`check`], which enforces cuBLAS's argument rules, so a wrong mapping from row-major tensors to
//! these arguments (in `ops::linalg`) fails in CI on machines without a GPU.

use tensorplay_ir::DType;

use super::device::{CudaDevice, Engine};

/// One strided batched GEMM (column-major, as cuBLAS reads it). Addresses are device addresses;
/// leading dimensions and batch strides count elements.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemm {
    /// Element type of A, B and C (f32, f64, f16 or bf16; half types accumulate in f32).
    pub dtype: DType,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand,
    pub b: Operand,
    pub c: u64,
    pub ldc: usize,
    pub stride_c: usize,
    pub batch: usize,
}

/// An input matrix of a [`Gemm`]: stored column-major with leading dimension `ld`, used as
/// `op(X) = X` or, when `transposed`, `X^T`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Operand {
    pub ptr: u64,
    pub ld: usize,
    pub transposed: bool,
    /// Elements between batch entries (0 reuses one matrix for every entry).
    pub stride: usize,
}

impl Operand {
    /// Rows of the matrix as stored (before `op`).
    fn stored_rows(&self, rows: usize, cols: usize) -> usize {
        if self.transposed { cols } else { rows }
    }
}

/// cuBLAS's argument rules (`CUBLAS_STATUS_INVALID_VALUE` otherwise), plus the 32-bit limits of
/// its integer arguments.
pub(crate) fn check(g: &Gemm) -> Result<(), String> {
    let fits = |what: &str, v: usize| {
        i32::try_from(v)
            .map(|_| ())
            .map_err(|_| format!("{what} = {v} exceeds cuBLAS's 32-bit limit"))
    };
    for (what, v) in [
        ("m", g.m),
        ("n", g.n),
        ("k", g.k),
        ("lda", g.a.ld),
        ("ldb", g.b.ld),
        ("ldc", g.ldc),
        ("batch", g.batch),
    ] {
        fits(what, v)?;
    }
    let rule = |what: &str, ld: usize, rows: usize| {
        if ld >= rows.max(1) {
            Ok(())
        } else {
            Err(format!(
                "{what} = {ld} is below the stored matrix's {rows} rows"
            ))
        }
    };
    rule("lda", g.a.ld, g.a.stored_rows(g.m, g.k))?;
    rule("ldb", g.b.ld, g.b.stored_rows(g.k, g.n))?;
    rule("ldc", g.ldc, g.m)?;
    if !matches!(g.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(format!("cuBLAS has no {} matrix product", g.dtype));
    }
    Ok(())
}

/// Runs `g` on `device` (queued on its stream).
///
/// # Safety
/// Every matrix `g` describes must lie in live memory of `device`, and C must not overlap A or B.
pub(crate) unsafe fn gemm(device: &CudaDevice, g: &Gemm) -> Result<(), String> {
    check(g)?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    match &device.engine {
        #[cfg(feature = "cuda")]
        // SAFETY: forwarded contract.
        Engine::Driver(c) => unsafe { c.gemm(g) },
        // SAFETY: forwarded contract; emulated device memory is host memory.
        Engine::Emulated => unsafe { emulated::gemm(g) },
    }
}

/// The host implementation of a [`Gemm`] on emulated devices.
mod emulated {
    use half::{bf16, f16};
    use tensorplay_ir::DType;

    use super::{Gemm, Operand};
    use crate::element::Element;
    use crate::ops::linalg::gemm_into;

    /// Row and column strides of `op(X)` for an operand stored column-major.
    fn op_strides(x: &Operand) -> (isize, isize) {
        if x.transposed {
            (x.ld as isize, 1)
        } else {
            (1, x.ld as isize)
        }
    }

    /// # Safety
    /// As [`super::gemm`], on host memory.
    pub(super) unsafe fn gemm(g: &Gemm) -> Result<(), String> {
        // SAFETY: forwarded contract for each element type.
        unsafe {
            match g.dtype {
                DType::F32 => native::<f32>(g),
                DType::F64 => native::<f64>(g),
                DType::F16 => widened::<f16>(g, f16::to_f32, f16::from_f32),
                DType::BF16 => widened::<bf16>(g, bf16::to_f32, bf16::from_f32),
                other => return Err(format!("cuBLAS has no {other} matrix product")),
            }
        }
        Ok(())
    }

    /// f32 and f64: the matrices are multiplied where they lie.
    unsafe fn native<T: Element>(g: &Gemm) {
        let size = std::mem::size_of::<T>();
        let ((ars, acs), (brs, bcs)) = (op_strides(&g.a), op_strides(&g.b));
        for i in 0..g.batch {
            let a = (g.a.ptr as usize + i * g.a.stride * size) as *const T;
            let b = (g.b.ptr as usize + i * g.b.stride * size) as *const T;
            let c = (g.c as usize + i * g.stride_c * size) as *mut T;
            if g.k == 0 {
                for col in 0..g.n {
                    for row in 0..g.m {
                        // SAFETY: C's entry is inside the caller's C (ldc >= m).
                        unsafe { *c.add(row + col * g.ldc) = T::from_f64(0.0) };
                    }
                }
                continue;
            }
            // SAFETY: the caller guarantees every matrix; `check` made the strides valid for
            // the sizes, so gemm reads and writes only their elements. C is column-major.
            unsafe {
                gemm_into(
                    (g.m, g.n, g.k),
                    (c, 1, g.ldc as isize),
                    (a, ars, acs),
                    (b, brs, bcs),
                    gemm::Parallelism::None,
                )
            };
        }
    }

    /// Half types: each product accumulates in f32 and rounds once, as cuBLAS's
    /// `CUBLAS_COMPUTE_32F` does.
    unsafe fn widened<H: Copy>(g: &Gemm, widen: fn(H) -> f32, narrow: fn(f32) -> H) {
        let size = std::mem::size_of::<H>();
        let ((ars, acs), (brs, bcs)) = (op_strides(&g.a), op_strides(&g.b));
        let (m, n, k) = (g.m, g.n, g.k);
        let mut acc = vec![0f32; m * n];
        for i in 0..g.batch {
            let a = (g.a.ptr as usize + i * g.a.stride * size) as *const H;
            let b = (g.b.ptr as usize + i * g.b.stride * size) as *const H;
            let c = (g.c as usize + i * g.stride_c * size) as *mut H;
            acc.fill(0.0);
            for col in 0..n {
                for p in 0..k {
                    // SAFETY: (p, col) of op(B) lies in the caller's B.
                    let bv = widen(unsafe { *b.offset(p as isize * brs + col as isize * bcs) });
                    for row in 0..m {
                        // SAFETY: (row, p) of op(A) lies in the caller's A.
                        let av = widen(unsafe { *a.offset(row as isize * ars + p as isize * acs) });
                        acc[row + col * m] += av * bv;
                    }
                }
            }
            for col in 0..n {
                for row in 0..m {
                    // SAFETY: C's entry is inside the caller's C (ldc >= m).
                    unsafe { *c.add(row + col * g.ldc) = narrow(acc[row + col * m]) };
                }
            }
        }
    }
}
