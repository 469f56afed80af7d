//! The reduction loop driver: reduces a strided tensor over a set of dims into a contiguous output.
//!
//! Kept dims index the output; reduced dims form an inner nest walked per output element. When the
//! reduced dims merge into one unit-stride run, the op's slice function sees whole slices (where it
//! can keep several accumulators); otherwise it gets one element at a time. When instead the kept
//! elements are adjacent in memory (reducing an outer dim of a contiguous tensor), the *column
//! path* keeps a row of accumulators and streams whole input rows past them, so memory is read in
//! order rather than one column at a time. Work is split across the pool by output elements (or
//! column blocks), or — for few outputs over a large reduced space — by chunks of the reduced space
//! whose partial results are merged in a fixed order (deterministic for a given thread count).

use rayon::prelude::*;
use smallvec::SmallVec;
use tensorplay_ir::{Error, Result, Shape};

use super::iter::{Nest, PAR_MIN_ELEMS, SendPtr};
use crate::element::Element;
use crate::parallel;
use crate::tensor::Tensor;

/// Normalizes a `dims` argument: `None` or empty means every dim; negatives count from the end;
/// duplicates are an error. Returns a sorted mask.
pub(crate) fn reduced_mask(
    op: &str,
    dims: Option<&[i64]>,
    rank: usize,
) -> Result<SmallVec<[bool; 6]>> {
    let mut mask: SmallVec<[bool; 6]> = SmallVec::from_elem(false, rank);
    match dims {
        None | Some([]) => mask.iter_mut().for_each(|m| *m = true),
        Some(ds) => {
            for &d in ds {
                let i = tensorplay_ir::shape::normalize_dim(op, d, rank)?;
                if rank == 0 {
                    continue;
                }
                if mask[i] {
                    return Err(Error::argument(
                        op,
                        "dim",
                        "distinct dims",
                        format!("dim {d} twice in {ds:?}"),
                    ));
                }
                mask[i] = true;
            }
        }
    }
    Ok(mask)
}

/// Output shape of a reduction over `mask`.
pub(crate) fn reduced_shape(shape: &[usize], mask: &[bool], keepdim: bool) -> Shape {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&s, &m)| match (m, keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// How one reduction combines elements.
pub(crate) struct Reducer<T, A, O, Init, Step, Slice, Merge, Finish> {
    pub init: Init,
    pub step: Step,
    pub slice: Slice,
    pub merge: Merge,
    pub finish: Finish,
    pub _types: std::marker::PhantomData<fn(T, A) -> O>,
}

/// Builds a [`Reducer`] from its five functions.
pub(crate) fn reducer<T, A, O, Init, Step, Slice, Merge, Finish>(
    init: Init,
    step: Step,
    slice: Slice,
    merge: Merge,
    finish: Finish,
) -> Reducer<T, A, O, Init, Step, Slice, Merge, Finish>
where
    Init: Fn() -> A + Sync,
    Step: Fn(A, T, usize) -> A + Sync,
    Slice: Fn(A, &[T], usize) -> A + Sync,
    Merge: Fn(A, A) -> A + Sync,
    Finish: Fn(A, usize) -> O + Sync,
{
    Reducer {
        init,
        step,
        slice,
        merge,
        finish,
        _types: std::marker::PhantomData,
    }
}

impl<T, A, O, Init, Step, Slice, Merge, Finish> Reducer<T, A, O, Init, Step, Slice, Merge, Finish>
where
    T: Element,
    A: Copy + Send,
    O: Element,
    Init: Fn() -> A + Sync,
    // `step(acc, x, i)` gets the element's position `i` in the reduced space (for argmax).
    Step: Fn(A, T, usize) -> A + Sync,
    // `slice(acc, xs, i0)`: a unit-stride run starting at reduced position `i0`.
    Slice: Fn(A, &[T], usize) -> A + Sync,
    Merge: Fn(A, A) -> A + Sync,
    Finish: Fn(A, usize) -> O + Sync,
{
    /// Reduces `x` over the dims in `mask` into the contiguous tensor `out` (whose element count is
    /// the product of kept dims).
    pub(crate) fn run(&self, op: &str, x: &Tensor, mask: &[bool], out: &Tensor) -> Result<()> {
        let po = SendPtr(out.data_ptr(op)? as *mut O);
        // SAFETY: `run_with` emits each flat output index `o < out.numel()` exactly once, from
        // one thread, and `out` is a contiguous tensor of `O` (the caller's contract), so the write
        // is in bounds and unshared. It does not read the old value.
        self.run_with(op, x, mask, |o, acc, n| unsafe {
            po.at(o as isize).write((self.finish)(acc, n));
        })
    }

    /// Reduces `x` over the dims in `mask`, handing each output's final accumulator to
    /// `emit(flat_output_index, acc, reduced_len)` (the output index is row-major over the kept
    /// dims). Lets one pass write several outputs, e.g. the values and indices of `max_dim`.
    ///
    /// Every output element is emitted exactly once, from one thread; the accumulation order for a
    /// given thread count is fixed, so results are deterministic.
    pub(crate) fn run_with(
        &self,
        op: &str,
        x: &Tensor,
        mask: &[bool],
        emit: impl Fn(usize, A, usize) + Sync,
    ) -> Result<()> {
        let px = SendPtr(x.data_ptr(op)? as *mut T);
        let Some(walk) = Walk::new(px, x, mask) else {
            return Ok(());
        };
        let threads = parallel::num_threads();
        let parallel = threads > 1 && walk.nout * walk.nred >= PAR_MIN_ELEMS;
        let [_, sx] = walk.outer.inner_strides();
        if sx == 1 && walk.istride != 1 && walk.nred > 1 {
            self.by_columns(&walk, parallel, threads, &emit);
        } else if parallel && walk.nout < threads * 4 && walk.nred >= PAR_MIN_ELEMS / 2 {
            self.by_reduced_chunks(&walk, threads, &emit);
        } else {
            self.by_outputs(&walk, parallel, threads, &emit);
        }
        Ok(())
    }

    /// Reduces reduced-space positions `range` of the output whose input starts at element
    /// offset `base`.
    #[inline(always)]
    fn partial(&self, walk: &Walk<T>, base: isize, range: std::ops::Range<usize>) -> A {
        let (px, istride) = (walk.px, walk.istride);
        let mut acc = (self.init)();
        let mut pos = range.start;
        // SAFETY: `base + o` walks `x`'s own strides over its own shape (the nests split `x`'s
        // dims), so each run lies inside `x`'s storage; `x` is initialised and only read here,
        // and a reduction's output is a fresh tensor, never `x`.
        walk.inner.for_each_run(range, |[o], len| unsafe {
            if istride == 1 {
                let xs = std::slice::from_raw_parts(px.at(base + o), len);
                acc = (self.slice)(acc, xs, pos);
            } else {
                for i in 0..len as isize {
                    let v = *px.at(base + o + i * istride);
                    acc = (self.step)(acc, v, pos + i as usize);
                }
            }
            pos += len;
        });
        acc
    }

    /// Accumulates `width` outputs whose input elements are adjacent (unit stride along the
    /// kept dim) over the reduced positions `range`: walks the reduced space once, updating a
    /// row of accumulators per position, so memory is read row by row, not column by column.
    #[inline(always)]
    fn columns(
        &self,
        walk: &Walk<T>,
        base: isize,
        width: usize,
        range: std::ops::Range<usize>,
        accs: &mut Vec<A>,
    ) {
        let (px, istride) = (walk.px, walk.istride);
        accs.clear();
        accs.resize(width, (self.init)());
        let mut pos = range.start;
        walk.inner.for_each_run(range, |[o], len| {
            for i in 0..len {
                let row = base + o + i as isize * istride;
                // SAFETY: `width` adjacent kept elements (unit stride) of row `row` lie
                // inside `x`, which is initialised and only read while `xs` lives.
                let xs = unsafe { std::slice::from_raw_parts(px.at(row), width) };
                for (a, &v) in accs.iter_mut().zip(xs) {
                    *a = (self.step)(*a, v, pos + i);
                }
            }
            pos += len;
        });
    }

    /// Few outputs, long reductions: each output's reduction is split into chunks run on the
    /// pool, whose partial results are merged in chunk order.
    fn by_reduced_chunks(
        &self,
        walk: &Walk<T>,
        threads: usize,
        emit: &(impl Fn(usize, A, usize) + Sync),
    ) {
        let (nout, nred) = (walk.nout, walk.nred);
        let [so, sx] = walk.outer.inner_strides();
        let chunks = (nred / (PAR_MIN_ELEMS / 2)).clamp(1, threads * 4);
        let per = nred.div_ceil(chunks);
        let mut bases: Vec<(isize, isize)> = Vec::with_capacity(nout);
        walk.outer.for_each_run(0..nout, |[oo, ox], len| {
            for i in 0..len as isize {
                bases.push((oo + i * so, ox + i * sx));
            }
        });
        for (oo, ox) in bases {
            let parts: Vec<A> = parallel::pool().install(|| {
                (0..chunks)
                    .into_par_iter()
                    .map(|c| self.partial(walk, ox, (c * per).min(nred)..((c + 1) * per).min(nred)))
                    .collect()
            });
            let acc = parts
                .into_iter()
                .reduce(|a, b| (self.merge)(a, b))
                .unwrap_or_else(|| (self.init)());
            emit(oo as usize, acc, nred);
        }
    }

    /// One whole reduction per output, outputs split across the pool when `parallel`.
    fn by_outputs(
        &self,
        walk: &Walk<T>,
        parallel: bool,
        threads: usize,
        emit: &(impl Fn(usize, A, usize) + Sync),
    ) {
        let (nout, nred) = (walk.nout, walk.nred);
        let [so, sx] = walk.outer.inner_strides();
        let body = |[oo, ox]: [isize; 2], len: usize| {
            for i in 0..len as isize {
                let acc = self.partial(walk, ox + i * sx, 0..nred);
                emit((oo + i * so) as usize, acc, nred);
            }
        };
        if parallel && nout > 1 {
            let chunks = nout.clamp(1, threads * 4);
            let per = nout.div_ceil(chunks);
            parallel::pool().install(|| {
                (0..chunks).into_par_iter().for_each(|c| {
                    let r = (c * per).min(nout)..((c + 1) * per).min(nout);
                    walk.outer.for_each_run(r, body);
                })
            });
        } else {
            walk.outer.for_each_run(0..nout, body);
        }
    }

    /// The column path of [`Reducer::run_with`]: kept elements are adjacent in memory while the
    /// reduction walks a larger stride. Outputs are cut into blocks of up to [`COLS`] adjacent
    /// columns; with too few blocks to feed the pool, each block's reduced range is also split
    /// into chunks whose accumulator rows are merged in chunk order (deterministic).
    fn by_columns(
        &self,
        walk: &Walk<T>,
        parallel: bool,
        threads: usize,
        emit: &(impl Fn(usize, A, usize) + Sync),
    ) {
        let (outer, nout, nred) = (&walk.outer, walk.nout, walk.nred);
        // (first output, first input element, width) of each column block.
        let mut blocks: Vec<(usize, isize, usize)> = Vec::new();
        outer.for_each_run(0..nout, |[oo, ox], len| {
            let mut j = 0;
            while j < len {
                let w = COLS.min(len - j);
                blocks.push((oo as usize + j, ox + j as isize, w));
                j += w;
            }
        });
        let finish_block = |(o0, _, _): (usize, isize, usize), accs: &[A]| {
            for (j, &a) in accs.iter().enumerate() {
                emit(o0 + j, a, nred);
            }
        };
        // Enough blocks (or too little work) for one task per block.
        let splits = if parallel && blocks.len() < threads * 2 {
            let width = blocks.iter().map(|b| b.2).max().unwrap_or(1);
            let min_rows = (PAR_MIN_ELEMS / 2 / width).max(16);
            (threads * 4 / blocks.len()).clamp(1, (nred / min_rows).max(1))
        } else {
            1
        };
        if splits > 1 {
            let per = nred.div_ceil(splits);
            for &b in &blocks {
                let parts: Vec<Vec<A>> = parallel::pool().install(|| {
                    (0..splits)
                        .into_par_iter()
                        .map(|c| {
                            let mut accs = Vec::new();
                            self.columns(
                                walk,
                                b.1,
                                b.2,
                                (c * per).min(nred)..((c + 1) * per).min(nred),
                                &mut accs,
                            );
                            accs
                        })
                        .collect()
                });
                let mut parts = parts.into_iter();
                let mut acc = parts.next().unwrap_or_default();
                for p in parts {
                    for (a, q) in acc.iter_mut().zip(p) {
                        *a = (self.merge)(*a, q);
                    }
                }
                finish_block(b, &acc);
            }
        } else if parallel && blocks.len() > 1 {
            let chunks = blocks.len().min(threads * 4);
            let per = blocks.len().div_ceil(chunks);
            parallel::pool().install(|| {
                (0..chunks).into_par_iter().for_each(|c| {
                    let mut accs = Vec::new();
                    for &b in
                        &blocks[(c * per).min(blocks.len())..((c + 1) * per).min(blocks.len())]
                    {
                        self.columns(walk, b.1, b.2, 0..nred, &mut accs);
                        finish_block(b, &accs);
                    }
                })
            });
        } else {
            let mut accs = Vec::new();
            for &b in &blocks {
                self.columns(walk, b.1, b.2, 0..nred, &mut accs);
                finish_block(b, &accs);
            }
        }
    }
}

/// A strided tensor's dims split for one reduction: the kept dims, walked with the output
/// (`outer`, over output and input offsets), and the reduced dims, walked per output (`inner`).
struct Walk<T> {
    px: SendPtr<T>,
    outer: Nest<2>,
    inner: Nest<1>,
    /// The innermost stride of the reduced dims (1: reduced runs are unit-stride slices).
    istride: isize,
    /// Output elements (the product of the kept sizes).
    nout: usize,
    /// Reduced positions per output (the product of the reduced sizes).
    nred: usize,
}

impl<T> Walk<T> {
    /// Splits the dims of `x` (whose data `px` points at) by `mask`; `None` when the output has
    /// no elements.
    fn new(px: SendPtr<T>, x: &Tensor, mask: &[bool]) -> Option<Walk<T>> {
        let (mut kshape, mut kstr, mut rshape, mut rstr) = (vec![], vec![], vec![], vec![]);
        for ((&s, &st), &m) in x.shape().iter().zip(x.strides()).zip(mask) {
            if m {
                rshape.push(s);
                rstr.push(st);
            } else {
                kshape.push(s);
                kstr.push(st);
            }
        }
        let nout: usize = kshape.iter().product();
        let nred: usize = rshape.iter().product();
        if nout == 0 {
            return None;
        }
        let ostr = tensorplay_ir::shape::contiguous_strides(&kshape);
        let outer = Nest::<2>::new(&kshape, [&ostr, &kstr]);
        let inner = Nest::<1>::new(&rshape, [&rstr]);
        let [istride] = inner.inner_strides();
        Some(Walk {
            px,
            outer,
            inner,
            istride,
            nout,
            nred,
        })
    }
}

/// Widest block of adjacent outputs the column path accumulates at once (the accumulators stay
/// in L1/L2 while whole input rows stream past).
const COLS: usize = 4096;

/// Sums an f32 slice with 16 independent lanes (vectorizable), widening block sums to f64.
pub(crate) fn sum_f32_slice(xs: &[f32]) -> f64 {
    let mut total = 0f64;
    for block in xs.chunks(4096) {
        let mut lanes = [0f32; 16];
        let mut it = block.chunks_exact(16);
        for c in &mut it {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v;
            }
        }
        let mut s: f32 = lanes.iter().sum();
        for &v in it.remainder() {
            s += v;
        }
        total += s as f64;
    }
    total
}
