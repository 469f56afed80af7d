//! matmul with `torch.matmul` semantics: 1-D·1-D dot (0-d result), matrix products, vector-matrix
//! products (a 1-D operand gains a dim that is removed again) and batched N-D products with
//! broadcast batch dims.
//!
//! Floating products go through the `gemm` crate, which takes arbitrary row and column strides, so
//! transposed and sliced operands are read in place without a copy. f32, f64 and f16 are native
//! (gemm's f16 kernel computes in f32); bf16 converts to f32, multiplies, and rounds once. gemm has
//! no integer kernels, and integer results must wrap exactly like PyTorch's, so i32/i64 use a plain
//! row-times-matrix loop with wrapping i64 accumulation (exact modulo 2^64, hence also modulo 2^32).

use rayon::prelude::*;
use tensorplay_ir::shape::{broadcast_shapes, broadcast_strides, contiguous_strides, fmt_shape};
use tensorplay_ir::{DType, Device, Error, OpClass, Result, Shape, Strides};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::element::Element;
use crate::kernels::iter::{Nest, SendPtr};
use crate::parallel;
use crate::symint::SymInt;
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};

/// `matmul(Tensor self, Tensor other) -> Tensor`
pub static MATMUL: OpDef = OpDef {
    name: "matmul",
    schema: "matmul(Tensor self, Tensor other) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: matmul_meta,
        fill: matmul_fill,
    },
    derivative: Some(matmul_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::LowPrecision,
    vmap: VmapRule::Matmul,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&MATMUL];

/// Products with at least this many multiply-adds use the pool.
const PAR_MIN_FLOPS: usize = 1 << 17;
/// Batched products each this large parallelize inside one product rather than across products.
const BIG_PRODUCT_FLOPS: usize = 1 << 21;

/// The shape of one matmul call: broadcast batch dims, the matrix sizes, and which operands were
/// vectors.
pub(crate) struct Plan {
    pub(crate) batch: Shape,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) out_shape: Shape,
}

pub(crate) fn plan(op: &str, a: &[usize], b: &[usize]) -> Result<Plan> {
    if a.is_empty() || b.is_empty() {
        return Err(Error::shape(
            op,
            format!(
                "both arguments must be at least 1-D, got shapes {} and {}",
                fmt_shape(a),
                fmt_shape(b)
            ),
        ));
    }
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if ra == 1 {
        (1, a[0])
    } else {
        (a[ra - 2], a[ra - 1])
    };
    let (kb, n) = if rb == 1 {
        (b[0], 1)
    } else {
        (b[rb - 2], b[rb - 1])
    };
    if ka != kb {
        let which = if rb == 1 {
            "its size"
        } else {
            "its second-to-last dim"
        };
        return Err(Error::shape(
            op,
            format!(
                "shapes {} and {} cannot be multiplied: the last dim of self ({ka}) must equal {which} of other ({kb})",
                fmt_shape(a),
                fmt_shape(b)
            ),
        ));
    }
    let batch_a = &a[..ra.saturating_sub(2)];
    let batch_b = &b[..rb.saturating_sub(2)];
    let batch = broadcast_shapes(op, batch_a, batch_b).map_err(|_| {
        Error::shape(
            op,
            format!(
                "batch dims {} of {} and {} of {} cannot be broadcast",
                fmt_shape(batch_a),
                fmt_shape(a),
                fmt_shape(batch_b),
                fmt_shape(b)
            ),
        )
    })?;
    let mut out_shape = batch.clone();
    if ra > 1 {
        out_shape.push(m);
    }
    if rb > 1 {
        out_shape.push(n);
    }
    Ok(Plan {
        batch,
        m,
        k: ka,
        n,
        out_shape,
    })
}

pub(crate) fn matmul_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    if x.dtype() == DType::Bool || y.dtype() == DType::Bool {
        return Err(Error::dtype(a.op, "bool tensors are not supported"));
    }
    if x.dtype() != y.dtype() {
        return Err(Error::dtype(
            a.op,
            format!(
                "expected both operands to have the same dtype, got {} and {} (convert one with to_dtype)",
                x.dtype(),
                y.dtype()
            ),
        ));
    }
    let p = plan(a.op, x.shape(), y.shape())?;
    Ok(vec![OutSpec::new(&p.out_shape, x.dtype())])
}

/// One operand seen as a batch of matrices: batch strides broadcast to the plan's batch shape,
/// and the row and column strides of each matrix.
pub(crate) struct Layout {
    pub(crate) batch_strides: Strides,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

pub(crate) fn layout(op: &str, t: &Tensor, batch: &[usize], lhs: bool) -> Result<Layout> {
    let (shape, strides) = (t.shape(), t.strides());
    let r = shape.len();
    if r == 1 {
        // lhs: a 1 x k row; rhs: a k x 1 column. The stride of the size-1 dim is never used.
        let s = strides[0];
        let (rs, cs) = if lhs {
            (s * shape[0].max(1) as isize, s)
        } else {
            (s, 1)
        };
        return Ok(Layout {
            batch_strides: smallvec::smallvec![0; batch.len()],
            rs,
            cs,
        });
    }
    Ok(Layout {
        batch_strides: broadcast_strides(op, &shape[..r - 2], &strides[..r - 2], batch)?,
        rs: strides[r - 2],
        cs: strides[r - 1],
    })
}

/// Element offsets `(out, lhs, rhs)` of every matrix product in the batch, in row-major order.
pub(crate) fn batch_offsets(p: &Plan, a: &Layout, b: &Layout) -> Vec<(isize, isize, isize)> {
    let mn = (p.m * p.n) as isize;
    let out_strides: Strides = contiguous_strides(&p.batch)
        .iter()
        .map(|s| s * mn)
        .collect();
    let nest = Nest::<3>::new(&p.batch, [&out_strides, &a.batch_strides, &b.batch_strides]);
    let [so, sa, sb] = nest.inner_strides();
    let mut v = Vec::with_capacity(nest.numel());
    nest.for_each_run(0..nest.numel(), |[o, x, y], len| {
        for i in 0..len as isize {
            v.push((o + i * so, x + i * sa, y + i * sb));
        }
    });
    v
}

/// A strided matrix (element pointer, row stride, column stride), as [`gemm_into`] reads it.
pub(crate) type Strided<P> = (P, isize, isize);

/// `dst := lhs · rhs` for an `m x k` and a `k x n` matrix, every matrix given by its row and
/// column strides in elements (the `gemm` crate takes them column first), computed on the
/// calling thread or as `par` says.
///
/// # Safety
/// Every element the sizes and strides address must lie in live memory holding `T`, and `dst`
/// must not overlap `lhs` or `rhs`.
pub(crate) unsafe fn gemm_into<T: Element>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs, dst_cs): Strided<*mut T>,
    (lhs, lhs_rs, lhs_cs): Strided<*const T>,
    (rhs, rhs_rs, rhs_cs): Strided<*const T>,
    par: gemm::Parallelism,
) {
    // SAFETY: forwarded contract. dst := beta * lhs * rhs (read_dst = false: alpha is unused).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs,
            dst_rs,
            false,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            T::from_f64(0.0),
            T::from_f64(1.0),
            false,
            false,
            false,
            par,
        )
    }
}

/// The row count of one product equivalent to the whole batch, when every batch entry uses the
/// same right-hand matrix and the left-hand matrices follow each other row by row (a
/// contiguous `[.., m, k]` input times a 2-D weight): then the batch is one `(batch * m) x k`
/// product writing the contiguous output in the same order.
fn folded_rows(p: &Plan, la: &Layout, bases: &[(isize, isize, isize)]) -> Option<usize> {
    let (first, rest) = bases.split_first()?;
    if rest.is_empty() || p.m < 2 {
        return None;
    }
    let step = p.m as isize * la.rs;
    let out_step = (p.m * p.n) as isize;
    let fits = bases.iter().enumerate().all(|(t, &(o, a, b))| {
        let t = t as isize;
        o == first.0 + t * out_step && a == first.1 + t * step && b == first.2
    });
    fits.then_some(p.m * bases.len())
}

/// Floating matmul through `gemm` for `T` in {f32, f64, f16}.
fn gemm_matmul<T: Element>(op: &str, x: &Tensor, y: &Tensor, out: &Tensor, p: &Plan) -> Result<()> {
    if out.numel() == 0 {
        return Ok(());
    }
    if p.k == 0 {
        return super::inplace::fill_scalar(op, out, Scalar::Int(0));
    }
    let (la, lb) = (
        layout(op, x, &p.batch, true)?,
        layout(op, y, &p.batch, false)?,
    );
    let mut bases = batch_offsets(p, &la, &lb);
    let mut m = p.m;
    if let Some(rows) = folded_rows(p, &la, &bases) {
        // One tall product instead of a batch that shares its right operand (a linear layer
        // over `[batch, seq, features]`): the right operand is packed once, not per batch entry.
        m = rows;
        bases.truncate(1);
    }
    let pa = SendPtr(x.data_ptr(op)? as *mut T);
    let pb = SendPtr(y.data_ptr(op)? as *mut T);
    let po = SendPtr(out.data_ptr(op)? as *mut T);
    let (n, k) = (p.n, p.k);
    // SAFETY: `bases` holds, per batch entry, the offsets of one `m x k`, `k x n` and `m x n`
    // matrix inside `x`, `y` and the fresh contiguous `out`, with `la`/`lb` the inputs' own
    // strides (or, folded, one entry whose `m` rows address exactly the batch's rows, as
    // `folded_rows` checked), so gemm stays in bounds; batch entries write disjoint output matrices, so parallel
    // products never share an output element, and `out` aliases no input.
    let product = |(oo, oa, ob): (isize, isize, isize), par: gemm::Parallelism| unsafe {
        gemm_into(
            (m, n, k),
            (po.at(oo), n as isize, 1),
            (pa.at(oa) as *const T, la.rs, la.cs),
            (pb.at(ob) as *const T, lb.rs, lb.cs),
            par,
        )
    };
    let flops = m * n * k;
    let threads = parallel::num_threads();
    if threads > 1
        && bases.len() > 1
        && flops < BIG_PRODUCT_FLOPS
        && flops * bases.len() >= PAR_MIN_FLOPS
    {
        // Many small products: one product per task.
        parallel::pool().install(|| {
            bases
                .par_iter()
                .for_each(|&b| product(b, gemm::Parallelism::None));
        });
    } else if threads > 1 && flops >= PAR_MIN_FLOPS {
        parallel::pool().install(|| {
            for &b in &bases {
                product(b, gemm::Parallelism::Rayon(threads));
            }
        });
    } else {
        for &b in &bases {
            product(b, gemm::Parallelism::None);
        }
    }
    Ok(())
}

/// A 2-D floating matrix product `out = x @ y` prepared to be computed a panel of output rows
/// at a time, each panel on the calling thread — for a compiled graph that runs a fused
/// elementwise epilogue on each panel right after it is computed, while it is in cache.
///
/// Panels are `gemm` calls of their own, so each repacks `y`: panels of fewer than about 64
/// rows cost the product noticeably more (measured in `docs/PERFORMANCE.md`).
///
/// ```
/// use tensorplay_core::ops::linalg::RowPanels;
/// use tensorplay_core::{DType, Tensor};
/// let x = Tensor::randn_seeded(&[5, 3], DType::F32, 1)?;
/// let y = Tensor::randn_seeded(&[3, 4], DType::F32, 2)?;
/// let out = Tensor::zeros(&[5, 4], DType::F32);
/// let p = RowPanels::new(&x, &y, &out).expect("a 2-D f32 product");
/// // SAFETY: one thread, disjoint rows, nothing else touches `out` meanwhile.
/// unsafe {
///     p.compute(0..2);
///     p.compute(2..5);
/// }
/// assert_eq!(out.to_vec::<f32>()?, x.matmul(&y)?.to_vec::<f32>()?);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub struct RowPanels {
    /// Held so the memory behind `ptrs` stays alive.
    _tensors: [Tensor; 3],
    /// Data addresses of `x`, `y` and `out`, resolved once.
    ptrs: [usize; 3],
    /// Row and column strides of `x` and `y`, in elements.
    x_strides: (isize, isize),
    y_strides: (isize, isize),
    dtype: DType,
    m: usize,
    k: usize,
    n: usize,
}

impl RowPanels {
    /// `None` unless `x` (`m x k`) and `y` (`k x n`) are 2-D CPU tensors with data, of one dtype
    /// `f32` or `f64`, and `out` a contiguous `m x n` CPU tensor of that dtype sharing memory
    /// with neither.
    pub fn new(x: &Tensor, y: &Tensor, out: &Tensor) -> Option<RowPanels> {
        let dtype = x.dtype();
        let plain = |t: &Tensor| t.device() == Device::Cpu && !t.is_fake() && t.dtype() == dtype;
        let (&[m, k], &[k2, n]) = (x.shape(), y.shape()) else {
            return None;
        };
        let fits = matches!(dtype, DType::F32 | DType::F64)
            && k == k2
            && [x, y, out].into_iter().all(plain)
            && out.shape() == [m, n]
            && out.is_contiguous()
            && !out.storage().same(x.storage())
            && !out.storage().same(y.storage());
        if !fits {
            return None;
        }
        let op = MATMUL.name;
        let ptrs = [
            x.data_ptr(op).ok()? as usize,
            y.data_ptr(op).ok()? as usize,
            out.data_ptr(op).ok()? as usize,
        ];
        let (xs, ys) = (x.strides(), y.strides());
        Some(RowPanels {
            _tensors: [x.clone(), y.clone(), out.clone()],
            ptrs,
            x_strides: (xs[0], xs[1]),
            y_strides: (ys[0], ys[1]),
            dtype,
            m,
            k,
            n,
        })
    }

    /// Rows of the product (`m`).
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Whether the whole product is large enough for the pool (eager matmul's threshold).
    pub fn worth_splitting(&self) -> bool {
        self.m.saturating_mul(self.k).saturating_mul(self.n) >= PAR_MIN_FLOPS
    }

    /// Computes output rows `rows` (clamped to `0..m`) on the calling thread.
    ///
    /// # Safety
    /// No other thread may compute an overlapping range, or read or write those rows of `out`,
    /// while this runs.
    pub unsafe fn compute(&self, rows: std::ops::Range<usize>) {
        let (r0, r1) = (rows.start.min(self.m), rows.end.min(self.m));
        if r0 >= r1 || self.n == 0 {
            return;
        }
        // SAFETY: forwarded contract; `r0 < r1 <= m`.
        unsafe {
            match self.dtype {
                DType::F64 => self.compute_as::<f64>(r0, r1),
                _ => self.compute_as::<f32>(r0, r1),
            }
        }
    }

    /// # Safety
    /// As [`RowPanels::compute`], with `r0 < r1 <= m` and `T` the operands' element type.
    unsafe fn compute_as<T: Element>(&self, r0: usize, r1: usize) {
        let [px, py, po] = self.ptrs;
        let (px, py, po) = (px as *const T, py as *const T, po as *mut T);
        let ((xr, xc), (yr, yc)) = (self.x_strides, self.y_strides);
        // SAFETY: the tensors behind the pointers are held by `self`; rows `r0..r1` of `x` (row
        // stride xr) and of the contiguous `out` lie inside them; `y` is read whole with its
        // own strides; the caller guarantees nobody else touches these output rows, and `out`
        // shares memory with neither input (`new`).
        unsafe {
            let (x0, o0) = (px.offset(r0 as isize * xr), po.add(r0 * self.n));
            if self.k == 0 {
                std::ptr::write_bytes(o0, 0, (r1 - r0) * self.n);
                return;
            }
            gemm_into(
                (r1 - r0, self.n, self.k),
                (o0, self.n as isize, 1),
                (x0, xr, xc),
                (py, yr, yc),
                gemm::Parallelism::None,
            );
        }
    }
}

/// Integer matmul (`T` in {i32, i64}) with wrapping i64 accumulation.
fn int_matmul<T: Element>(op: &str, x: &Tensor, y: &Tensor, out: &Tensor, p: &Plan) -> Result<()> {
    if out.numel() == 0 {
        return Ok(());
    }
    let (la, lb) = (
        layout(op, x, &p.batch, true)?,
        layout(op, y, &p.batch, false)?,
    );
    let bases = batch_offsets(p, &la, &lb);
    let pa = SendPtr(x.data_ptr(op)? as *mut T);
    let pb = SendPtr(y.data_ptr(op)? as *mut T);
    let po = SendPtr(out.data_ptr(op)? as *mut T);
    let (m, n, k) = (p.m, p.n, p.k);
    // One output row: out[i, :] = sum_p a[i, p] * b[p, :], walking b row by row.
    // SAFETY: as in `float_matmul`: `bases` addresses matrices inside `x`, `y` and the fresh
    // `out`; row `u` writes only its own output row, so parallel rows never share an element.
    let row = |u: usize, acc: &mut Vec<i64>| unsafe {
        let (oo, oa, ob) = bases[u / m];
        let i = (u % m) as isize;
        acc.clear();
        acc.resize(n, 0);
        for q in 0..k as isize {
            let av = (*pa.at(oa + i * la.rs + q * la.cs)).to_i64();
            if av == 0 {
                continue;
            }
            let brow = ob + q * lb.rs;
            for (j, s) in acc.iter_mut().enumerate() {
                let bv = (*pb.at(brow + j as isize * lb.cs)).to_i64();
                *s = s.wrapping_add(av.wrapping_mul(bv));
            }
        }
        let orow = oo + i * n as isize;
        for (j, &s) in acc.iter().enumerate() {
            *po.at(orow + j as isize) = T::from_i64(s);
        }
    };
    let rows = bases.len() * m;
    let threads = parallel::num_threads();
    if threads > 1 && rows > 1 && m * n * k * bases.len() >= PAR_MIN_FLOPS {
        let chunks = rows.min(threads * 4);
        let per = rows.div_ceil(chunks);
        parallel::pool().install(|| {
            (0..chunks).into_par_iter().for_each(|c| {
                let mut acc = Vec::new();
                for u in (c * per).min(rows)..((c + 1) * per).min(rows) {
                    row(u, &mut acc);
                }
            })
        });
    } else {
        let mut acc = Vec::new();
        for u in 0..rows {
            row(u, &mut acc);
        }
    }
    Ok(())
}

fn matmul_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, y, out) = (a.tensor(0)?, a.tensor(1)?, &outs[0]);
    let p = plan(a.op, x.shape(), y.shape())?;
    match out.dtype() {
        DType::F32 => gemm_matmul::<f32>(a.op, x, y, out, &p),
        DType::F64 => gemm_matmul::<f64>(a.op, x, y, out, &p),
        // gemm's f16 kernels accumulate in f32 for matrix products but not for the vector
        // shapes (a 1-D operand makes `m` or `n` 1): those go through f32 like bf16, so every
        // shape accumulates in f32 and rounds once (PyTorch's rule).
        DType::F16 if x.rank() > 1 && y.rank() > 1 => gemm_matmul::<gemm::f16>(a.op, x, y, out, &p),
        DType::F16 | DType::BF16 => {
            let (x32, y32) = (x.to_dtype(DType::F32)?, y.to_dtype(DType::F32)?);
            let tmp = Tensor::empty(out.shape(), DType::F32);
            gemm_matmul::<f32>(a.op, &x32, &y32, &tmp, &p)?;
            super::cast::copy_convert(a.op, out, &tmp)
        }
        DType::I32 => int_matmul::<i32>(a.op, x, y, out, &p),
        DType::I64 => int_matmul::<i64>(a.op, x, y, out, &p),
        DType::Bool => Err(Error::dtype(a.op, "bool tensors are not supported")),
    }
}

/// `grad_a = g @ b^T`, `grad_b = a^T @ g`, with 1-D operands lifted to matrices and broadcast
/// batch dims summed away. It reads no concrete size (ranks and symbolic sizes only), so a
/// traced backward serves every size.
fn matmul_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (a, b) = (c.args.tensor(0)?, c.args.tensor(1)?);
    let g = c.grad(0)?;
    let (a2, b2, mut g2) = (a.clone(), b.clone(), g);
    let a2 = if a.rank() == 1 { a2.unsqueeze(0)? } else { a2 };
    let b2 = if b.rank() == 1 { b2.unsqueeze(1)? } else { b2 };
    // The gradient with the vector dims restored: batch + [m, n].
    if a.rank() == 1 && b.rank() == 1 {
        // A dot product: the 0-d gradient becomes the [1, 1] product of [1, k] and [k, 1].
        g2 = g2.unsqueeze(0)?.unsqueeze(0)?;
    } else {
        if a.rank() == 1 {
            g2 = g2.unsqueeze(-2)?;
        }
        if b.rank() == 1 {
            g2 = g2.unsqueeze(-1)?;
        }
    }
    let ga = if a.requires_grad() {
        let full = g2.matmul(&b2.transpose(-1, -2)?)?.sum_to_shape_of(&a2)?;
        Some(if a.rank() == 1 {
            full.select(0, 0)?
        } else {
            full
        })
    } else {
        None
    };
    let gb = if b.requires_grad() {
        let full = if b2.rank() == 2 && a2.rank() > 2 {
            // b is shared by the whole batch: fold the batch into the rows, one product.
            let sizes = a2.sym_shape();
            let (k, n) = (a2.sym_size(-1)?, g2.sym_size(-1)?);
            let rows = sizes[..sizes.len() - 1]
                .iter()
                .fold(SymInt::Lit(1), |r, &s| r * s);
            let af = a2.reshape_sym(&[rows, k])?;
            let gf = g2.reshape_sym(&[rows, n])?;
            af.t()?.matmul(&gf)?
        } else {
            a2.transpose(-1, -2)?.matmul(&g2)?.sum_to_shape_of(&b2)?
        };
        Some(if b.rank() == 1 {
            full.select(1, 0)?
        } else {
            full
        })
    } else {
        None
    };
    Ok(vec![ga, gb])
}

impl Tensor {
    /// Matrix product with `torch.matmul` semantics (vectors, matrices, broadcast batches).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let b = Tensor::from_vec(vec![1.0f32, 0.0, -1.0], &[3])?;
    /// assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, vec![-2.0, -2.0]);
    /// assert_eq!(a.matmul(&a.t()?)?.shape(), &[2, 2]);
    /// assert!(a.matmul(&a).is_err()); // [2, 3] @ [2, 3]
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        call1(&MATMUL, &[self.into(), other.into()])
    }
}
