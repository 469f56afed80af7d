//! `matmul` on CUDA tensors through cuBLAS (`tensorplay-cuda`'s `blas`): the op table's batch
//! plan (`ops::linalg`) mapped onto column-major strided batched GEMMs.

use tensorplay_cuda::blas;
use tensorplay_ir::{DType, Device, Error, Result};

use crate::backend::cuda::memory::fresh;
use crate::ops::linalg::{Layout, MATMUL, batch_offsets, layout, matmul_meta, plan};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// matmul on CUDA tensors: one strided batched cuBLAS GEMM where the batch strides allow it,
/// one GEMM per batch entry otherwise.
///
/// cuBLAS is column-major and a row-major `m x n` result read column-major is its transpose, so
/// the product is computed as `C^T = B^T · A^T`: cuBLAS's first operand is `y`, its second `x`.
/// A row-major operand (unit column stride) read column-major already *is* the transpose wanted;
/// a column-major one (a transposed view) is used with `op = T`; any other layout is copied to
/// a contiguous tensor first.
pub(super) fn matmul(args: &[Value], device: Device) -> Result<Vec<Tensor>> {
    let op = MATMUL.name;
    let a = Args::new(op, args);
    let spec = matmul_meta(a)?.remove(0);
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    if !matches!(
        x.dtype(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    ) {
        return Err(Error::device(
            op,
            format!(
                "matmul of {} tensors has no kernel on {device} (cuBLAS multiplies floating \
                 types only); use a floating dtype or compute it on the CPU",
                x.dtype()
            ),
        ));
    }
    let p = plan(op, x.shape(), y.shape())?;
    if p.k == 0 {
        // SAFETY: zero-filled.
        return Ok(vec![unsafe {
            fresh(op, &spec.shape, spec.dtype, device, true)?
        }]);
    }
    // SAFETY: every element is written below (beta = 0), or there is none.
    let out = unsafe { fresh(op, &spec.shape, spec.dtype, device, false)? };
    if out.numel() == 0 {
        return Ok(vec![out]);
    }
    let (x, lx) = blas_operand(op, x, &p.batch, true, p.m, p.k)?;
    let (y, ly) = blas_operand(op, y, &p.batch, false, p.k, p.n)?;
    let bases = batch_offsets(&p, &lx.layout, &ly.layout);
    let size = spec.dtype.size() as u64;
    let (px, py, po) = (x.data_ptr_cuda()?, y.data_ptr_cuda()?, out.data_ptr_cuda()?);
    let at = |base: u64, offset: isize| base + offset as u64 * size;
    let gemm =
        |(oo, ox, oy): (isize, isize, isize), count: usize, (sx, sy): (usize, usize)| blas::Gemm {
            dtype: spec.dtype,
            m: p.n,
            n: p.m,
            k: p.k,
            a: blas::Operand {
                ptr: at(py, oy),
                stride: sy,
                ..ly.operand
            },
            b: blas::Operand {
                ptr: at(px, ox),
                stride: sx,
                ..lx.operand
            },
            c: at(po, oo),
            ldc: p.n,
            stride_c: p.m * p.n,
            batch: count,
        };
    let calls: Vec<blas::Gemm> = match uniform_strides(&bases) {
        Some(strides) => vec![gemm(bases[0], bases.len(), strides)],
        None => bases.iter().map(|&b| gemm(b, 1, (0, 0))).collect(),
    };
    let d = tensorplay_cuda::device(op, device)?;
    for g in &calls {
        // SAFETY: `bases` addresses, per batch entry, one `m x k` and one `k x n` matrix inside
        // `x` and `y` (their own strides, checked by `blas_operand` to be what `ld` says) and
        // one `m x n` matrix inside the fresh contiguous `out`, all on `device`; `out` aliases
        // neither input.
        unsafe { blas::gemm(d, g) }.map_err(|e| Error::device(op, format!("on {device}: {e}")))?;
    }
    Ok(vec![out])
}

/// An operand as cuBLAS reads it (see [`matmul`]): the tensor (copied to contiguous when
/// its matrix strides fit neither reading), its batch layout, and the column-major description.
struct BlasOperand {
    layout: Layout,
    operand: blas::Operand,
}

/// `t`'s matrices (`rows x cols` each) as the transposed operand cuBLAS's `C^T = B^T A^T` needs.
fn blas_operand(
    op: &str,
    t: &Tensor,
    batch: &[usize],
    lhs: bool,
    rows: usize,
    cols: usize,
) -> Result<(Tensor, BlasOperand)> {
    let l = layout(op, t, batch, lhs)?;
    let fits = |inner: isize, outer: isize, n_outer: usize, n_inner: usize| {
        (inner == 1 || n_inner <= 1) && (n_outer <= 1 || outer >= n_inner.max(1) as isize)
    };
    let described = |ld: usize, transposed: bool, layout: Layout| BlasOperand {
        layout,
        operand: blas::Operand {
            ptr: 0,
            ld,
            transposed,
            stride: 0,
        },
    };
    // Row-major: read column-major with ld = row stride, it is the transpose itself.
    if fits(l.cs, l.rs, rows, cols) {
        let ld = if rows <= 1 {
            cols.max(1)
        } else {
            l.rs as usize
        };
        return Ok((t.clone(), described(ld, false, l)));
    }
    // Column-major (a transposed view): it is the matrix itself, used transposed.
    if fits(l.rs, l.cs, cols, rows) {
        let ld = if cols <= 1 {
            rows.max(1)
        } else {
            l.cs as usize
        };
        return Ok((t.clone(), described(ld, true, l)));
    }
    let c = t.contiguous()?;
    let l = layout(op, &c, batch, lhs)?;
    Ok((c, described(cols.max(1), false, l)))
}

/// The common step between consecutive batch entries of each operand, when there is one that
/// is non-negative (what a strided batched GEMM can express); the output's is always `m * n`.
fn uniform_strides(bases: &[(isize, isize, isize)]) -> Option<(usize, usize)> {
    let step = |f: fn(&(isize, isize, isize)) -> isize| -> Option<usize> {
        let d = match bases {
            [a, b, ..] => f(b) - f(a),
            _ => 0,
        };
        let uniform = bases.windows(2).all(|w| f(&w[1]) - f(&w[0]) == d);
        (uniform && d >= 0).then_some(d as usize)
    };
    Some((step(|b| b.1)?, step(|b| b.2)?))
}
