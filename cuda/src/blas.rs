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
pub struct Gemm {
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
pub struct Operand {
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
pub fn check(g: &Gemm) -> Result<(), String> {
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
pub unsafe fn gemm(device: &CudaDevice, g: &Gemm) -> Result<(), String> {
    check(g)?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    match &device.engine {
        #[cfg(feature = "cuda")]
        // SAFETY: forwarded contract.
        Engine::Driver(c) => unsafe { cublas_gemm::gemm(c, g) },
        // SAFETY: forwarded contract; emulated device memory is host memory.
        Engine::Emulated => unsafe { emulated::gemm(g) },
    }
}

/// cuBLAS on the driver: one `cublasGemmStridedBatchedEx` per [`Gemm`], on the device's stream.
#[cfg(feature = "cuda")]
mod cublas_gemm {
    use std::ffi::c_void;

    use cudarc::cublas;

    use super::Gemm;
    use crate::driver::Context;

    /// Queues `g` through `cublasGemmStridedBatchedEx` (half types accumulate in f32).
    ///
    /// # Safety
    /// Every matrix of `g` must be device memory of `ctx`; C must not overlap A or B.
    pub(super) unsafe fn gemm(ctx: &Context, g: &Gemm) -> Result<(), String> {
        use cublas::sys::{cublasComputeType_t as Compute, cublasOperation_t as Op};
        use cublas::sys::{cublasGemmAlgo_t, cudaDataType_t as Ty};
        use tensorplay_ir::DType;
        let handle = ctx.cublas()?;
        ctx.bind()?;
        let (ty, compute) = match g.dtype {
            DType::F32 => (Ty::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
            DType::F64 => (Ty::CUDA_R_64F, Compute::CUBLAS_COMPUTE_64F),
            DType::F16 => (Ty::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
            DType::BF16 => (Ty::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
            other => return Err(format!("cuBLAS has no {other} matrix product")),
        };
        // alpha and beta have the compute type's precision.
        let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if g.dtype == DType::F64 {
            ((&raw const one64).cast(), (&raw const zero64).cast())
        } else {
            ((&raw const one32).cast(), (&raw const zero32).cast())
        };
        let op = |t: bool| if t { Op::CUBLAS_OP_T } else { Op::CUBLAS_OP_N };
        // `blas::check` has bounded every size by i32::MAX.
        let int = |v: usize| v as i32;
        // SAFETY: the caller guarantees the matrices; the handle is the context's, on its
        // stream; alpha and beta outlive the call (cuBLAS reads host scalars before returning).
        std::panic::catch_unwind(|| unsafe {
            cublas::result::gemm_strided_batched_ex(
                handle,
                op(g.a.transposed),
                op(g.b.transposed),
                int(g.m),
                int(g.n),
                int(g.k),
                alpha,
                g.a.ptr as *const c_void,
                ty,
                int(g.a.ld),
                g.a.stride as i64,
                g.b.ptr as *const c_void,
                ty,
                int(g.b.ld),
                g.b.stride as i64,
                beta,
                g.c as *mut c_void,
                ty,
                int(g.ldc),
                g.stride_c as i64,
                int(g.batch),
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        })
        .map_err(|_| "cublasGemmStridedBatchedEx is missing from the cuBLAS library".to_string())?
        .map_err(|e| format!("cublasGemmStridedBatchedEx failed: {e}"))
    }
}

/// The host implementation of a [`Gemm`] on emulated devices.
mod emulated {
    use half::{bf16, f16};
    use tensorplay_ir::DType;

    use super::{Gemm, Operand};

    /// The element types multiplied natively (the half types widen to f32).
    trait Native: Copy + 'static {
        const ZERO: Self;
        const ONE: Self;
    }
    impl Native for f32 {
        const ZERO: f32 = 0.0;
        const ONE: f32 = 1.0;
    }
    impl Native for f64 {
        const ZERO: f64 = 0.0;
        const ONE: f64 = 1.0;
    }

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
    unsafe fn native<T: Native>(g: &Gemm) {
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
                        unsafe { *c.add(row + col * g.ldc) = T::ZERO };
                    }
                }
                continue;
            }
            // SAFETY: the caller guarantees every matrix; `check` made the strides valid for
            // the sizes, so gemm reads and writes only their elements. C is column-major.
            unsafe {
                // C := 1 * op(A) * op(B) (read_dst = false: alpha is unused); gemm takes column
                // strides before row strides.
                gemm::gemm(
                    g.m,
                    g.n,
                    g.k,
                    c,
                    g.ldc as isize,
                    1,
                    false,
                    a,
                    acs,
                    ars,
                    b,
                    bcs,
                    brs,
                    T::ZERO,
                    T::ONE,
                    false,
                    false,
                    false,
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
