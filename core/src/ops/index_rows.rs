//! The row case of `gather` and `scatter_add`: along dim 0, with an index that holds one value
//! per row (stride 0 in every other dim) and covers whole rows of `self`. That is what
//! `index_select(0, ..)` and `embedding` build, and what their gradients scatter back, so a
//! transformer's token lookup and its backward take this path. Each row is one copy (gather) or
//! one vector add (scatter_add) instead of an index computation per element; the results are
//! those of the general loop in `index.rs` bit for bit (rows are visited in the same order, and
//! an `f32`/`f64` add rounds the exact sum once either way).

use tensorplay_ir::{DType, Result};

use super::index::checked_index;
use crate::tensor::Tensor;

/// The row ids of a row-case index, each checked against `size` (the length of dim 0).
pub(super) struct RowIds {
    ids: Vec<usize>,
    /// Elements per row of `self` (the product of its trailing dims).
    row_len: usize,
}

/// The row ids when indexing `x` (contiguous) along `dim` with `index` is the row case; `None`
/// when it is not (the caller takes the general path). An out-of-range id is the same error as
/// the general path's.
pub(super) fn row_case(op: &str, x: &Tensor, index: &Tensor, dim: usize) -> Result<Option<RowIds>> {
    let rank = x.rank();
    let whole_rows = dim == 0
        && rank >= 2
        && index.rank() == rank
        && index.numel() > 0
        && x.is_contiguous()
        && index.shape()[1..] == x.shape()[1..]
        && index.strides()[1..]
            .iter()
            .zip(&index.shape()[1..])
            .all(|(&s, &n)| s == 0 || n == 1)
        && matches!(index.dtype(), DType::I32 | DType::I64);
    if !whole_rows {
        return Ok(None);
    }
    let (n, size) = (index.shape()[0], x.shape()[0]);
    let stride = index.strides()[0];
    let base = index.data_ptr(op)?;
    let ids = (0..n)
        .map(|i| {
            let at = i as isize * stride;
            // SAFETY: element `[i, 0, .., 0]` of `index`, inside its storage (views only
            // address elements of their storage).
            let v = unsafe {
                match index.dtype() {
                    DType::I32 => i64::from(*(base as *const i32).offset(at)),
                    _ => *(base as *const i64).offset(at),
                }
            };
            checked_index(op, v, dim, size)
        })
        .collect::<Result<Vec<_>>>()?;
    let row_len = x.shape()[1..].iter().product();
    Ok(Some(RowIds { ids, row_len }))
}

impl RowIds {
    /// `out[i] = x[ids[i]]`, row by row (`out` fresh and contiguous, of `index`'s shape and
    /// `x`'s dtype). Returns false (nothing written) when `out` is not contiguous.
    pub(super) fn gather(&self, op: &str, x: &Tensor, out: &Tensor) -> Result<bool> {
        if !out.is_contiguous() {
            return Ok(false);
        }
        let bytes = self.row_len * x.dtype().size();
        let (src, dst) = (x.data_ptr(op)? as *const u8, out.data_ptr(op)?);
        for (i, &r) in self.ids.iter().enumerate() {
            // SAFETY: row `r < x.shape()[0]` of contiguous `x` and row `i` of the fresh
            // contiguous `out` (`ids.len()` rows of `row_len` elements); distinct tensors.
            unsafe { std::ptr::copy_nonoverlapping(src.add(r * bytes), dst.add(i * bytes), bytes) }
        }
        Ok(true)
    }

    /// `out = x; out[ids[i]] += src[i]`, rows in order (`out` fresh, of `x`'s shape). Only for
    /// `f32`/`f64` with `src` and `out` contiguous; returns false (nothing written) otherwise.
    pub(super) fn scatter_add(
        &self,
        op: &str,
        x: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<bool> {
        if !(src.is_contiguous()
            && out.is_contiguous()
            && src.numel() == self.ids.len() * self.row_len)
        {
            return Ok(false);
        }
        match x.dtype() {
            DType::F32 => self.add_rows::<f32>(op, x, src, out)?,
            DType::F64 => self.add_rows::<f64>(op, x, src, out)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn add_rows<T: Copy + std::ops::AddAssign>(
        &self,
        op: &str,
        x: &Tensor,
        src: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        let (n, l) = (x.numel(), self.row_len);
        // SAFETY: `x`, `src` and the fresh `out` are contiguous tensors of `T` with `n`,
        // `ids.len() * l` and `n` elements; `out` aliases neither input.
        let (xs, ss, os) = unsafe {
            (
                std::slice::from_raw_parts(x.data_ptr(op)? as *const T, n),
                std::slice::from_raw_parts(src.data_ptr(op)? as *const T, self.ids.len() * l),
                std::slice::from_raw_parts_mut(out.data_ptr(op)? as *mut T, n),
            )
        };
        os.copy_from_slice(xs);
        for (&r, s) in self.ids.iter().zip(ss.chunks_exact(l)) {
            for (o, &v) in os[r * l..(r + 1) * l].iter_mut().zip(s) {
                *o += v;
            }
        }
        Ok(())
    }
}
