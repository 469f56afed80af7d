//! Fused scaled dot-product attention: `_fused_attention` (output and per-row log-sum-exp) and
//! its backward `_fused_attention_backward`, the ops `nn::scaled_dot_product_attention` runs on
//! CPU tensors.
//!
//! One call computes `softmax(scale * q k^T + mask) v` head by head without materializing the
//! `L x S` score matrix ([`kernel`]); the backward recomputes the probabilities from the saved
//! log-sum-exp. Both are opaque in compiled graphs (barriers, like matmul), so a compiled
//! transformer runs one kernel per attention call and one per its backward instead of two
//! products, a mask, a softmax and their backwards.
//!
//! Semantics (those of PyTorch 2.15's fused CPU kernels): batch dims broadcast; a bool mask
//! keeps the `true` positions, a float mask is added to the scores; `is_causal` keeps key `j`
//! for query `i` when `j <= i` (top-left aligned); a row whose every score is masked gives a zero
//! output row (the decomposed formula would give NaN). f16/bf16 inputs are computed in f32 and
//! rounded once. The log-sum-exp output is f32 (f64 for f64 inputs); its gradient is supported
//! by the fused backward (not under `create_graph`).
//!
//! Attention dropout (`dropout_p > 0`): the probabilities (after the log-sum-exp, which stays
//! the undropped one) are zeroed with probability `p` and the kept ones scaled by `1 / (1 - p)`.
//! No mask tensor exists: each decision is a counter-based hash of a seed drawn once per call
//! from the global generator (`manual_seed`) and the element's `(head, i, j)` ([`dropout`]); the
//! seed is the forward's third output, which the backward takes to regenerate the decisions.
//! The op draws it when it runs, so a compiled graph (where the op is opaque) draws a fresh one
//! per call, as eager does. `dropout_p = 0` draws nothing and runs the kernels unchanged.
//!
//! Derivative: the fused backward op when the backward is not itself recorded; under
//! `create_graph` the gradients come from the decomposed formula (differentiable again), with
//! the dropout mask materialized from the seed ([`dropout_keep_mask`]).

mod dropout;
mod kernel;

use rayon::prelude::*;
use tensorplay_ir::shape::{broadcast_shapes, fmt_shape};
use tensorplay_ir::{DType, Error, OpClass, Result};

use self::dropout::{Dropout, draw_seed};
pub use self::dropout::{check_dropout_p, dropout_keep_mask};
use self::kernel::{Dims, Mask, Real, Rows, Workspace};
use crate::autograd::is_grad_enabled;
use crate::dispatch::call;
use crate::element::Element;
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `_fused_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None,
/// float dropout_p=0.0, bool is_causal=False, float? scale=None) -> (Tensor output,
/// Tensor logsumexp, Tensor seed)`. `seed` is the 0-d i64 seed of the call's dropout (drawn from
/// the global generator when `dropout_p > 0`, else 0, drawing nothing).
pub static FUSED_ATTENTION: OpDef = OpDef {
    name: "_fused_attention",
    schema: "_fused_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, \
             float dropout_p=0.0, bool is_causal=False, float? scale=None) -> (Tensor output, \
             Tensor logsumexp, Tensor seed)",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: forward_meta,
        fill: forward_fill,
    },
    derivative: Some(attention_grad),
    // The outputs are read as data (the fused backward's operands, the seed): `create_graph`
    // must not recompute the forward, which would draw another dropout seed.
    saved: Saved::AllAsData,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `_fused_attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value,
/// Tensor? attn_mask, Tensor output, Tensor logsumexp, bool is_causal, float scale,
/// Tensor? grad_logsumexp=None, float dropout_p=0.0, Tensor? seed=None) -> (Tensor grad_query,
/// Tensor grad_key, Tensor grad_value)`: `dropout_p` and the forward's `seed` regenerate its
/// dropout decisions.
pub static FUSED_ATTENTION_BACKWARD: OpDef = OpDef {
    name: "_fused_attention_backward",
    schema: "_fused_attention_backward(Tensor grad_output, Tensor query, Tensor key, \
             Tensor value, Tensor? attn_mask, Tensor output, Tensor logsumexp, bool is_causal, \
             float scale, Tensor? grad_logsumexp=None, float dropout_p=0.0, \
             Tensor? seed=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: backward_meta,
        fill: backward_fill,
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&FUSED_ATTENTION, &FUSED_ATTENTION_BACKWARD];

/// The validated geometry of a call: broadcast batch dims and the per-head sizes.
struct Geometry {
    batch: Vec<usize>,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

impl Geometry {
    fn heads(&self) -> usize {
        self.batch.iter().product()
    }

    fn shape(&self, tail: &[usize]) -> Vec<usize> {
        let mut v = self.batch.clone();
        v.extend_from_slice(tail);
        v
    }
}

/// Checks query, key, value and mask (arguments `qi..qi+4`) and returns the geometry.
fn geometry(op: &str, a: Args, qi: usize) -> Result<Geometry> {
    let (q, k, v) = (a.tensor(qi)?, a.tensor(qi + 1)?, a.tensor(qi + 2)?);
    for (name, t) in [("query", q), ("key", k), ("value", v)] {
        if t.rank() < 2 {
            return Err(Error::argument(
                op,
                name,
                "a tensor with at least 2 dims",
                format!("shape {}", fmt_shape(t.shape())),
            ));
        }
        if !t.dtype().is_float() || t.dtype() != q.dtype() {
            return Err(Error::dtype(
                op,
                format!(
                    "{name}: expected a floating tensor of the query's dtype {}, got {}",
                    q.dtype(),
                    t.dtype()
                ),
            ));
        }
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (l, e) = (qs[qs.len() - 2], qs[qs.len() - 1]);
    let (s, ek) = (ks[ks.len() - 2], ks[ks.len() - 1]);
    if ek != e {
        return Err(Error::argument(
            op,
            "key",
            format!("last dim {e} (the query's)"),
            format!("shape {}", fmt_shape(ks)),
        ));
    }
    if vs[vs.len() - 2] != s {
        return Err(Error::argument(
            op,
            "value",
            format!("{s} rows (the key's)"),
            format!("shape {}", fmt_shape(vs)),
        ));
    }
    let batch = broadcast_shapes(op, &qs[..qs.len() - 2], &ks[..ks.len() - 2])?;
    let batch = broadcast_shapes(op, &batch, &vs[..vs.len() - 2])?.to_vec();
    let g = Geometry {
        batch,
        l,
        s,
        e,
        ev: vs[vs.len() - 1],
    };
    if let Some(m) = a.opt_tensor(qi + 3)? {
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(Error::dtype(
                op,
                format!(
                    "attn_mask: expected bool or the query's dtype {}, got {}",
                    q.dtype(),
                    m.dtype()
                ),
            ));
        }
        let full = g.shape(&[l, s]);
        let fits = broadcast_shapes(op, m.shape(), &full).is_ok_and(|b| b.as_slice() == full);
        if !fits {
            return Err(Error::argument(
                op,
                "attn_mask",
                format!("a shape broadcastable to {}", fmt_shape(&full)),
                format!("shape {}", fmt_shape(m.shape())),
            ));
        }
    }
    Ok(g)
}

/// The log-sum-exp's dtype: f64 for f64 inputs, else f32.
fn lse_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

fn forward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = geometry(a.op, a, 0)?;
    check_dropout_p(a.op, a.float(4)?)?;
    let dtype = a.tensor(0)?.dtype();
    Ok(vec![
        OutSpec::new(&g.shape(&[g.l, g.ev]), dtype),
        OutSpec::new(&g.shape(&[g.l]), lse_dtype(dtype)),
        OutSpec::new(&[], DType::I64),
    ])
}

fn backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = geometry(a.op, a, 1)?;
    let dtype = a.tensor(1)?.dtype();
    let expect = [
        ("grad_output", 0, g.shape(&[g.l, g.ev])),
        ("output", 5, g.shape(&[g.l, g.ev])),
        ("logsumexp", 6, g.shape(&[g.l])),
        ("grad_logsumexp", 9, g.shape(&[g.l])),
        ("seed", 11, Vec::new()),
    ];
    let p = a.float(10)?;
    check_dropout_p(a.op, p)?;
    if p > 0.0 && a.opt_tensor(11)?.is_none_or(|t| t.dtype() != DType::I64) {
        return Err(Error::argument(
            a.op,
            "seed",
            "the forward's 0-d i64 seed when dropout_p > 0",
            "none or another dtype",
        ));
    }
    for (name, i, shape) in expect {
        let Some(t) = a.opt_tensor(i)? else {
            continue;
        };
        if t.shape() != shape.as_slice() {
            return Err(Error::argument(
                a.op,
                name,
                format!("shape {}", fmt_shape(&shape)),
                format!("shape {}", fmt_shape(t.shape())),
            ));
        }
    }
    Ok(vec![
        OutSpec::new(&g.shape(&[g.l, g.e]), dtype),
        OutSpec::new(&g.shape(&[g.s, g.e]), dtype),
        OutSpec::new(&g.shape(&[g.s, g.ev]), dtype),
    ])
}

/// The scale a call uses: its argument, or `1 / sqrt(E)`.
fn resolved_scale(a: Args, at: usize, e: usize) -> Result<f64> {
    Ok(a.opt_float(at)?.unwrap_or(1.0 / (e as f64).sqrt()))
}

/// An operand broadcast to `batch ++ [rows, width]` in the compute dtype: a view whose rows
/// are contiguous (a copy only when they are not, or for a dtype conversion), each head's
/// element offset, and the row stride.
struct Operand {
    view: Tensor,
    offsets: Vec<usize>,
    rs: usize,
}

/// `t` as an [`Operand`] of the compute dtype (f32 for halves). A head split by
/// `reshape + transpose` (`[B, T, H, E] -> [B, H, T, E]`) is read where it lies.
fn operand(t: &Tensor, g: &Geometry, tail: &[usize], compute: DType) -> Result<Operand> {
    let mut view = t.expand(&g.shape(tail))?.to_dtype(compute)?;
    let rows_ok = |v: &Tensor| {
        let st = v.strides();
        let (rs, cs) = (st[st.len() - 2], st[st.len() - 1]);
        // Rows may overlap (a broadcast row dim): the kernels only read operands.
        rs >= 0 && st.iter().all(|&x| x >= 0) && (cs == 1 || tail[1] <= 1)
    };
    if !rows_ok(&view) {
        view = view.contiguous()?;
    }
    let st = view.strides();
    let rs = st[st.len() - 2] as usize;
    let offsets = head_offsets(g, st);
    Ok(Operand { view, offsets, rs })
}

/// The element offset of every head in a view of `batch ++ [.., ..]` with `strides`.
fn head_offsets(g: &Geometry, strides: &[isize]) -> Vec<usize> {
    let nb = g.batch.len();
    (0..g.heads())
        .map(|h| {
            let (mut rest, mut off) = (h, 0isize);
            for d in (0..nb).rev() {
                off += (rest % g.batch[d]) as isize * strides[d];
                rest /= g.batch[d];
            }
            off as usize
        })
        .collect()
}

/// The mask broadcast to `batch ++ [L, S]` (a view: broadcast dims keep stride 0), in the
/// compute dtype when it is a float mask, with its per-head element offsets.
fn mask_view(m: &Tensor, g: &Geometry, compute: DType) -> Result<(Tensor, Vec<usize>)> {
    let m = if m.dtype() == DType::Bool {
        m.clone()
    } else {
        m.to_dtype(compute)?
    };
    let m = m.expand(&g.shape(&[g.l, g.s]))?;
    let offsets = head_offsets(g, m.strides());
    Ok((m, offsets))
}

/// Whether a call is big enough for the thread pool (work per head times heads).
fn parallel_worth(g: &Geometry) -> bool {
    const PAR_MIN_FLOPS: usize = 1 << 18;
    parallel::num_threads() > 1
        && g.heads() > 1
        && g.heads() * g.l * g.s * (g.e + g.ev) >= PAR_MIN_FLOPS
}

/// Runs `f(workspace, head)` for every head, on the pool when worth it; each task reuses one
/// [`Workspace`] across the heads it runs.
fn for_heads<F: Send>(g: &Geometry, f: impl Fn(&mut Workspace<F>, usize) + Send + Sync) {
    if parallel_worth(g) {
        parallel::pool().install(|| {
            (0..g.heads())
                .into_par_iter()
                .for_each_init(Workspace::new, |ws, h| f(ws, h))
        });
    } else {
        let mut ws = Workspace::new();
        (0..g.heads()).for_each(|h| f(&mut ws, h));
    }
}

/// A raw base pointer handed to head tasks, each of which writes its own disjoint block.
#[derive(Clone, Copy)]
struct Base<F>(*mut F);
// SAFETY: heads write disjoint blocks (see the `// SAFETY:` at each use).
unsafe impl<F> Send for Base<F> {}
// SAFETY: as above.
unsafe impl<F> Sync for Base<F> {}

impl<F> Base<F> {
    /// # Safety
    /// `[at, at + len)` lies inside the tensor this points into and no other live slice covers
    /// it.
    unsafe fn block<'a>(self, at: usize, len: usize) -> &'a mut [F] {
        // SAFETY: forwarded contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}

/// A contiguous tensor's elements as a slice.
fn elements<'t, F: Element>(op: &str, t: &'t Tensor) -> Result<&'t [F]> {
    let p = t.data_ptr(op)? as *const F;
    // SAFETY: `t` is contiguous with `numel` elements of `F` from `p`, alive while `t` is
    // borrowed; this module never writes through a tensor it reads.
    Ok(unsafe { std::slice::from_raw_parts(p, t.numel()) })
}

/// A head's mask from the (optional) broadcast mask view.
fn head_mask<'a, F: Element>(m: Option<&'a MaskData<'a, F>>, h: usize) -> Mask<'a, F> {
    match m {
        None => Mask::None,
        Some((t, offs, bools, floats)) => {
            let st = t.strides();
            let (rs, cs) = (st[st.len() - 2], st[st.len() - 1]);
            if t.dtype() == DType::Bool {
                Mask::Bool(bools, rs, cs, offs[h])
            } else {
                Mask::Float(floats, rs, cs, offs[h])
            }
        }
    }
}

/// A view's storage as a slice from its data pointer, covering every element the view's
/// (non-negative) strides reach.
fn strided_slice<'t, T: Element>(op: &str, m: &'t Tensor) -> Result<&'t [T]> {
    if m.numel() == 0 {
        return Ok(&[]);
    }
    let span = 1 + m
        .shape()
        .iter()
        .zip(m.strides())
        .map(|(&n, &s)| (n.saturating_sub(1) as isize * s) as usize)
        .sum::<usize>();
    let p = m.data_ptr(op)? as *const T;
    // SAFETY: the view has elements and non-negative strides (operands are checked; masks are
    // expands of tensors with non-negative strides), so it addresses `span` elements from `p`,
    // all inside its live storage.
    Ok(unsafe { std::slice::from_raw_parts(p, span) })
}

/// Mask data of a call: the view, per-head offsets, and its elements as bool or `F`.
type MaskData<'a, F> = (Tensor, Vec<usize>, &'a [bool], &'a [F]);

fn mask_data<'a, F: Element>(
    op: &str,
    view: &'a Option<(Tensor, Vec<usize>)>,
) -> Result<Option<MaskData<'a, F>>> {
    let Some((m, offs)) = view else {
        return Ok(None);
    };
    let (bools, floats): (&[bool], &[F]) = if m.dtype() == DType::Bool {
        (strided_slice(op, m)?, &[])
    } else {
        (&[], strided_slice(op, m)?)
    };
    Ok(Some((m.clone(), offs.clone(), bools, floats)))
}

/// An operand's elements and the per-head offsets into them.
struct Heads<'a, F> {
    data: &'a [F],
    offsets: &'a [usize],
    rs: usize,
}

impl<'a, F: Element> Heads<'a, F> {
    fn of(op: &str, o: &'a Operand) -> Result<Heads<'a, F>> {
        Ok(Heads {
            data: strided_slice(op, &o.view)?,
            offsets: &o.offsets,
            rs: o.rs,
        })
    }

    /// Head `h`'s rows.
    fn head(&self, h: usize) -> Rows<'a, F> {
        Rows {
            data: self.data.get(self.offsets[h]..).unwrap_or(&[]),
            rs: self.rs,
        }
    }
}

fn forward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = geometry(a.op, a, 0)?;
    let dtype = a.tensor(0)?.dtype();
    let compute = lse_dtype(dtype);
    let scale = resolved_scale(a, 6, g.e)?;
    let causal = a.bool(5)?;
    let p = a.float(4)?;
    // One seed per call, drawn only with dropout (p = 0 leaves the generator alone).
    let seed = if p > 0.0 { draw_seed() } else { 0 };
    let at = outs[2].data_ptr(a.op)? as *mut i64;
    // SAFETY: `outs[2]` is the fresh 0-d i64 output: one element at `at`, no other reference.
    unsafe { at.write(seed as i64) };
    let drop = (p, seed);
    let [q, k, v] = [(0, [g.l, g.e]), (1, [g.s, g.e]), (2, [g.s, g.ev])]
        .map(|(i, tail)| a.tensor(i).and_then(|t| operand(t, &g, &tail, compute)));
    let (q, k, v) = (q?, k?, v?);
    let mask = a
        .opt_tensor(3)?
        .map(|m| mask_view(m, &g, compute))
        .transpose()?;
    let out = if dtype == compute {
        outs[0].clone()
    } else {
        Tensor::empty(outs[0].shape(), compute)
    };
    // The kernels instantiated for the compute type (f64, else f32).
    let forward = match compute {
        DType::F64 => forward_heads::<f64>,
        _ => forward_heads::<f32>,
    };
    forward(
        a.op,
        &g,
        (&q, &k, &v),
        &mask,
        (&out, &outs[1]),
        causal,
        scale,
        drop,
    )?;
    if dtype != compute {
        super::cast::copy_convert(a.op, &outs[0], &out)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn forward_heads<F: Real + Element>(
    op: &str,
    g: &Geometry,
    (q, k, v): (&Operand, &Operand, &Operand),
    mask: &Option<(Tensor, Vec<usize>)>,
    (out, lse): (&Tensor, &Tensor),
    causal: bool,
    scale: f64,
    drop: (f64, u64),
) -> Result<()> {
    let (q, k, v) = (
        Heads::<F>::of(op, q)?,
        Heads::<F>::of(op, k)?,
        Heads::<F>::of(op, v)?,
    );
    let md = mask_data::<F>(op, mask)?;
    let dims = Dims {
        l: g.l,
        s: g.s,
        e: g.e,
        ev: g.ev,
        causal,
        scale: F::of(scale),
        dropout: call_dropout(drop),
        head: 0,
    };
    let (po, pl) = (
        Base(out.data_ptr(op)? as *mut F),
        Base(lse.data_ptr(op)? as *mut F),
    );
    let (l, ev) = (g.l, g.ev);
    for_heads(g, |ws, h| {
        let ins = (q.head(h), k.head(h), v.head(h));
        // SAFETY: `out` and `lse` are fresh contiguous outputs of `heads x L x Ev` and
        // `heads x L` elements; head `h` writes only its own block.
        let (o, m) = unsafe { (po.block(h * l * ev, l * ev), pl.block(h * l, l)) };
        let dims = Dims { head: h, ..dims };
        run_forward(&dims, ins, head_mask(md.as_ref(), h), (o, m), ws);
    });
    Ok(())
}

fn backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = geometry(a.op, a, 1)?;
    let dtype = a.tensor(1)?.dtype();
    let compute = lse_dtype(dtype);
    let (causal, scale) = (a.bool(7)?, a.float(8)?);
    let p = a.float(10)?;
    let seed = match a.opt_tensor(11)? {
        Some(t) if p > 0.0 => t.item::<i64>()? as u64,
        _ => 0,
    };
    let tails = [
        (0, [g.l, g.ev]),
        (1, [g.l, g.e]),
        (2, [g.s, g.e]),
        (3, [g.s, g.ev]),
        (5, [g.l, g.ev]),
    ];
    let [gr, q, k, v, o] =
        tails.map(|(i, tail)| a.tensor(i).and_then(|t| operand(t, &g, &tail, compute)));
    let lse = a.tensor(6)?.to_dtype(compute)?.contiguous()?;
    let glse = match a.opt_tensor(9)? {
        Some(t) => t.to_dtype(compute)?.contiguous()?,
        None => Tensor::zeros(lse.shape(), compute),
    };
    let mask = a
        .opt_tensor(4)?
        .map(|m| mask_view(m, &g, compute))
        .transpose()?;
    let grads: Vec<Tensor> = if dtype == compute {
        outs.to_vec()
    } else {
        outs.iter()
            .map(|t| Tensor::empty(t.shape(), compute))
            .collect()
    };
    let ins = (&q?, &k?, &v?);
    let saved = (&o?, &lse, &gr?, &glse);
    // The kernels instantiated for the compute type (f64, else f32).
    let backward = match compute {
        DType::F64 => backward_heads::<f64>,
        _ => backward_heads::<f32>,
    };
    backward(
        a.op,
        &g,
        ins,
        &mask,
        saved,
        &grads,
        causal,
        scale,
        (p, seed),
    )?;
    if dtype != compute {
        for (dst, src) in outs.iter().zip(&grads) {
            super::cast::copy_convert(a.op, dst, src)?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn backward_heads<F: Real + Element>(
    op: &str,
    g: &Geometry,
    (q, k, v): (&Operand, &Operand, &Operand),
    mask: &Option<(Tensor, Vec<usize>)>,
    (out, lse, grad, glse): (&Operand, &Tensor, &Operand, &Tensor),
    grads: &[Tensor],
    causal: bool,
    scale: f64,
    drop: (f64, u64),
) -> Result<()> {
    let (q, k, v) = (
        Heads::<F>::of(op, q)?,
        Heads::<F>::of(op, k)?,
        Heads::<F>::of(op, v)?,
    );
    let (out, grad) = (Heads::<F>::of(op, out)?, Heads::<F>::of(op, grad)?);
    let (lse, glse) = (elements::<F>(op, lse)?, elements::<F>(op, glse)?);
    let md = mask_data::<F>(op, mask)?;
    let dims = Dims {
        l: g.l,
        s: g.s,
        e: g.e,
        ev: g.ev,
        causal,
        scale: F::of(scale),
        dropout: call_dropout(drop),
        head: 0,
    };
    let [pq, pk, pv] = [0, 1, 2].map(|i| grads[i].data_ptr(op).map(|p| Base(p as *mut F)));
    let (pq, pk, pv) = (pq?, pk?, pv?);
    let (l, s, e, ev) = (g.l, g.s, g.e, g.ev);
    for_heads(g, |ws, h| {
        let ins = (q.head(h), k.head(h), v.head(h));
        let saved = (
            out.head(h),
            &lse[h * l..(h + 1) * l],
            grad.head(h),
            &glse[h * l..(h + 1) * l],
        );
        // SAFETY: the three gradients are fresh contiguous tensors of `heads x L x E`,
        // `heads x S x E` and `heads x S x Ev` elements; head `h` writes only its own blocks.
        let (dq, dk, dv) = unsafe {
            (
                pq.block(h * l * e, l * e),
                pk.block(h * s * e, s * e),
                pv.block(h * s * ev, s * ev),
            )
        };
        let dims = Dims { head: h, ..dims };
        run_backward(
            &dims,
            ins,
            head_mask(md.as_ref(), h),
            saved,
            (dq, dk, dv),
            ws,
        );
    });
    Ok(())
}

/// A call's dropout from `(dropout_p, seed)`: none when `dropout_p` is 0.
fn call_dropout<F: Real>((p, seed): (f64, u64)) -> Option<Dropout<F>> {
    (p > 0.0).then(|| Dropout::new(p, seed, F::of(1.0 / (1.0 - p))))
}

/// The forward of one head (output rows and log-sum-exp), built for the widest vector ISA the
/// host has.
fn run_forward<F: Real>(
    d: &Dims<F>,
    ins: (Rows<F>, Rows<F>, Rows<F>),
    m: Mask<F>,
    (o, l): (&mut [F], &mut [F]),
    ws: &mut Workspace<F>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa::avx512() {
            // SAFETY: the host supports the features the function is built for.
            return unsafe { isa::forward_avx512(d, ins, m, (o, l), ws) };
        }
        if isa::avx2() {
            // SAFETY: as above.
            return unsafe { isa::forward_avx2(d, ins, m, (o, l), ws) };
        }
    }
    kernel::forward(d, ins, m, o, l, ws)
}

/// Output gradients of one head: query, key, value.
type HeadGrads<'a, F> = (&'a mut [F], &'a mut [F], &'a mut [F]);

/// The backward of one head, built for the widest vector ISA the host has.
fn run_backward<F: Real>(
    d: &Dims<F>,
    ins: (Rows<F>, Rows<F>, Rows<F>),
    m: Mask<F>,
    saved: (Rows<F>, &[F], Rows<F>, &[F]),
    (dq, dk, dv): HeadGrads<F>,
    ws: &mut Workspace<F>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa::avx512() {
            // SAFETY: the host supports the features the function is built for.
            return unsafe { isa::backward_avx512(d, ins, m, saved, (dq, dk, dv), ws) };
        }
        if isa::avx2() {
            // SAFETY: as above.
            return unsafe { isa::backward_avx2(d, ins, m, saved, (dq, dk, dv), ws) };
        }
    }
    kernel::backward(d, ins, m, saved, dq, dk, dv, ws)
}

/// The kernels compiled for AVX-512 and AVX2 (the loops vectorize along rows).
#[cfg(target_arch = "x86_64")]
mod isa {
    use super::HeadGrads;
    use super::kernel::{self, Dims, Mask, Real, Rows, Workspace};

    pub(super) fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("fma")
    }

    pub(super) fn avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) fn forward_avx512<F: Real>(
        d: &Dims<F>,
        ins: (Rows<F>, Rows<F>, Rows<F>),
        m: Mask<F>,
        (o, l): (&mut [F], &mut [F]),
        ws: &mut Workspace<F>,
    ) {
        kernel::forward(d, ins, m, o, l, ws)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn forward_avx2<F: Real>(
        d: &Dims<F>,
        ins: (Rows<F>, Rows<F>, Rows<F>),
        m: Mask<F>,
        (o, l): (&mut [F], &mut [F]),
        ws: &mut Workspace<F>,
    ) {
        kernel::forward(d, ins, m, o, l, ws)
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) fn backward_avx512<F: Real>(
        d: &Dims<F>,
        ins: (Rows<F>, Rows<F>, Rows<F>),
        m: Mask<F>,
        saved: (Rows<F>, &[F], Rows<F>, &[F]),
        (dq, dk, dv): HeadGrads<F>,
        ws: &mut Workspace<F>,
    ) {
        kernel::backward(d, ins, m, saved, dq, dk, dv, ws)
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn backward_avx2<F: Real>(
        d: &Dims<F>,
        ins: (Rows<F>, Rows<F>, Rows<F>),
        m: Mask<F>,
        saved: (Rows<F>, &[F], Rows<F>, &[F]),
        (dq, dk, dv): HeadGrads<F>,
        ws: &mut Workspace<F>,
    ) {
        kernel::backward(d, ins, m, saved, dq, dk, dv, ws)
    }
}

/// `softmax(scale * q k^T + mask) v` from differentiable ops (the `create_graph` path). Rows
/// that see no key give zeros, as the fused kernel does.
pub fn attention_composite(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
) -> Result<Tensor> {
    attention_composite_dropout(q, k, v, mask, causal, scale, None)
}

/// [`attention_composite`] with attention dropout: `dropout` is the keep mask (`true` = kept,
/// broadcastable to the probabilities' `batch ++ [L, S]`, e.g. [`dropout_keep_mask`] of the
/// fused op's seed) and `dropout_p`; the kept probabilities are scaled by `1 / (1 - p)`.
///
/// ```
/// use tensorplay_core::ops::attention::{attention_composite_dropout, dropout_keep_mask};
/// use tensorplay_core::{DType, Tensor};
/// let q = Tensor::randn_seeded(&[2, 4, 8], DType::F64, 0)?;
/// let keep = dropout_keep_mask(&[2], 4, 4, 0.5, 9)?;
/// let y = attention_composite_dropout(&q, &q, &q, None, true, 0.3, Some((&keep, 0.5)))?;
/// assert_eq!(y.shape(), &[2, 4, 8]);
/// // Dropping everything gives zeros.
/// let none = dropout_keep_mask(&[2], 4, 4, 1.0, 9)?;
/// let z = attention_composite_dropout(&q, &q, &q, None, true, 0.3, Some((&none, 1.0)))?;
/// assert!(z.to_vec::<f64>()?.iter().all(|&x| x == 0.0));
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn attention_composite_dropout(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
    dropout: Option<(&Tensor, f64)>,
) -> Result<Tensor> {
    let scores = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(scale)?;
    let keep = if causal {
        let (l, s) = (q.size(-2)?, k.size(-2)?);
        let rows = Tensor::arange(0.0, l as f64, 1.0, DType::I64)?.reshape(&[l, 1])?;
        let cols = Tensor::arange(0.0, s as f64, 1.0, DType::I64)?.reshape(&[1, s])?;
        Some(cols.le(&rows)?)
    } else {
        mask.filter(|m| m.dtype() == DType::Bool).cloned()
    };
    let scores = match (&keep, mask) {
        (Some(keep), _) => scores.masked_fill(&keep.logical_not()?, f64::NEG_INFINITY)?,
        (None, Some(m)) => scores.add(m)?,
        (None, None) => scores,
    };
    let p = scores.softmax(-1)?;
    // A row with no visible key is NaN after softmax; PyTorch's fused kernels give zeros.
    let p = p.masked_fill(&p.isnan()?, 0.0)?;
    let p = match dropout {
        None => p,
        // Nothing kept: zeros (not 0 · inf).
        Some((_, prob)) if prob >= 1.0 => p.mul_scalar(0.0)?,
        Some((keep, prob)) => p
            .masked_fill(&keep.logical_not()?, 0.0)?
            .mul_scalar(1.0 / (1.0 - prob))?,
    };
    p.matmul(v)
}

fn attention_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let glse = c.grads.get(1).cloned().flatten();
    let mask = c.args.opt_tensor(3)?;
    let p = c.args.float(4)?;
    let causal = c.args.bool(5)?;
    let scale = resolved_scale(c.args, 6, c.args.tensor(0)?.size(-1)?)?;
    let seed = (p > 0.0).then(|| c.outputs[2].clone());
    let g = c.grad(0)?;
    let record = is_grad_enabled();
    let mask_grad = mask.is_some_and(|m| m.dtype() != DType::Bool && m.requires_grad());
    if record || mask_grad {
        // A recorded backward (or a float mask that wants a gradient): differentiate the
        // decomposed formula, so the result is differentiable again.
        if glse.is_some() {
            return Err(Error::unsupported(
                c.args.op,
                "a gradient of the logsumexp output under create_graph or with a float mask \
                 that requires grad",
            ));
        }
        return composite_grad(c, mask_grad, (causal, scale, p), g, record);
    }
    let mut args = vec![Value::Tensor(g)];
    args.extend(c.args.values[..4].iter().cloned());
    args.extend([
        Value::Tensor(c.outputs[0].clone()),
        Value::Tensor(c.outputs[1].clone()),
        Value::Bool(causal),
        Value::Float(scale),
        Value::OptionalTensor(glse),
        Value::Float(p),
        Value::OptionalTensor(seed),
    ]);
    let grads = call(&FUSED_ATTENTION_BACKWARD, &args)?;
    // Broadcast batch dims: each input's gradient sums over the dims it was expanded along.
    let mut out = Vec::with_capacity(4);
    for (i, g) in grads.iter().enumerate() {
        out.push(Some(g.sum_to_shape_of(c.args.tensor(i)?)?));
    }
    if mask.is_some() {
        out.push(None);
    }
    Ok(out)
}

/// The gradients of the tensor arguments (query, key, value, then the mask when present)
/// through [`attention_composite_dropout`], recorded when `record` (`create_graph`). With
/// dropout the forward's keep mask is materialized from its seed (this rare path only).
fn composite_grad(
    c: &GradCtx,
    mask_grad: bool,
    (causal, scale, p): (bool, f64, f64),
    g: Tensor,
    record: bool,
) -> Result<Vec<Option<Tensor>>> {
    let (q, k, v) = (c.args.tensor(0)?, c.args.tensor(1)?, c.args.tensor(2)?);
    let keep = if p > 0.0 {
        let out = &c.outputs[0];
        let r = out.rank();
        let seed = c.outputs[2].item::<i64>()? as u64;
        let (l, s) = (q.size(-2)?, k.size(-2)?);
        Some(dropout_keep_mask(&out.shape()[..r - 2], l, s, p, seed)?)
    } else {
        None
    };
    let mask = c.args.opt_tensor(3)?;
    let mut wanted: Vec<Tensor> = [q, k, v]
        .into_iter()
        .filter(|t| t.requires_grad())
        .cloned()
        .collect();
    let slots: Vec<bool> = [q, k, v].iter().map(|t| t.requires_grad()).collect();
    if mask_grad {
        wanted.extend(mask.cloned());
    }
    let out = {
        let _on = crate::autograd::enable_grad();
        attention_composite_dropout(q, k, v, mask, causal, scale, keep.as_ref().map(|m| (m, p)))?
    };
    let mut got = crate::autograd::grad(&[out], &wanted, &[Some(g)], record)?.into_iter();
    let mut grads: Vec<Option<Tensor>> = slots
        .iter()
        .map(|&w| if w { got.next().flatten() } else { None })
        .collect();
    if mask.is_some() {
        grads.push(if mask_grad {
            got.next().flatten()
        } else {
            None
        });
    }
    Ok(grads)
}
