//! The strided, broadcasting loop driver behind every elementwise kernel.
//!
//! Operands (output first) are viewed with strides broadcast to the output shape. Unit dims are
//! dropped and adjacent dims that step uniformly for every operand are merged, so a contiguous
//! tensor of any rank becomes one flat run. The driver then hands the typed kernel *runs*: a
//! starting element offset per operand, a length, and the inner stride per operand; kernels
//! specialise the all-unit-stride case into a slice loop the compiler vectorizes.

use std::ops::Range;

use rayon::prelude::*;
use smallvec::SmallVec;
use tensorplay_ir::Shape;

use crate::parallel;

pub(crate) use super::raw::SendPtr;

/// Below this many elements a loop runs on the calling thread; larger loops split into chunks
/// of at least half of it. Measured on the eager transformer step at 2 threads (PERFORMANCE.md,
/// "Two threads"): 2^14 and 2^15 beat 2^16 by ~25 % (a split costs a deque push now that the
/// calling thread is a pool worker, see `parallel.rs`).
pub const PAR_MIN_ELEMS: usize = 1 << 14;

/// A loop nest over `shape` for `N` operands, after dropping unit dims and merging dims.
pub(crate) struct Nest<const N: usize> {
    shape: Shape,
    strides: [SmallVec<[isize; 6]>; N],
}

impl<const N: usize> Nest<N> {
    /// Builds the nest; every `strides[k]` must have `shape.len()` entries (already broadcast).
    pub(crate) fn new(shape: &[usize], strides: [&[isize]; N]) -> Nest<N> {
        let mut dims: Vec<(usize, [isize; N])> = Vec::with_capacity(shape.len());
        for (d, &size) in shape.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let s: [isize; N] = std::array::from_fn(|k| strides[k][d]);
            if let Some((psize, ps)) = dims.last_mut()
                && (0..N).all(|k| ps[k] == s[k] * size as isize)
            {
                *psize *= size;
                *ps = s;
                continue;
            }
            dims.push((size, s));
        }
        if dims.is_empty() {
            dims.push((1, [0; N]));
        }
        Nest {
            shape: dims.iter().map(|d| d.0).collect(),
            strides: std::array::from_fn(|k| dims.iter().map(|d| d.1[k]).collect()),
        }
    }

    /// Total number of elements.
    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Inner-dim stride of each operand.
    pub(crate) fn inner_strides(&self) -> [isize; N] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }

    /// Calls `f(offsets, len)` for each run covering the flat index range `range` (row-major order).
    pub(crate) fn for_each_run(&self, range: Range<usize>, mut f: impl FnMut([isize; N], usize)) {
        if range.is_empty() {
            return;
        }
        let rank = self.shape.len();
        let inner = self.shape[rank - 1];
        // Multi-index of range.start.
        let mut idx: SmallVec<[usize; 6]> = SmallVec::from_elem(0, rank);
        let mut rem = range.start;
        for d in (0..rank).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs: [isize; N] = std::array::from_fn(|k| {
            (0..rank)
                .map(|d| idx[d] as isize * self.strides[k][d])
                .sum()
        });
        let mut left = range.len();
        while left > 0 {
            let len = (inner - idx[rank - 1]).min(left);
            f(offs, len);
            left -= len;
            if left == 0 {
                break;
            }
            // Advance to the start of the next row.
            for (k, o) in offs.iter_mut().enumerate() {
                *o += (len as isize) * self.strides[k][rank - 1];
            }
            idx[rank - 1] += len;
            let mut d = rank - 1;
            while idx[d] == self.shape[d] && d > 0 {
                for (k, o) in offs.iter_mut().enumerate() {
                    *o -= self.shape[d] as isize * self.strides[k][d];
                    *o += self.strides[k][d - 1];
                }
                idx[d] = 0;
                d -= 1;
                idx[d] += 1;
            }
        }
    }

    /// Runs `f` over all runs, splitting large nests across the thread pool.
    pub(crate) fn run(&self, f: impl Fn([isize; N], usize) + Sync) {
        let n = self.numel();
        let threads = parallel::num_threads();
        if n < PAR_MIN_ELEMS || threads == 1 {
            self.for_each_run(0..n, f);
            return;
        }
        let chunks = (n / (PAR_MIN_ELEMS / 2)).clamp(1, threads * 4);
        let per = n.div_ceil(chunks);
        parallel::pool().install(|| {
            (0..chunks).into_par_iter().for_each(|c| {
                let start = c * per;
                let end = (start + per).min(n);
                if start < end {
                    self.for_each_run(start..end, &f);
                }
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs<const N: usize>(nest: &Nest<N>, range: Range<usize>) -> Vec<([isize; N], usize)> {
        let mut v = Vec::new();
        nest.for_each_run(range, |o, l| v.push((o, l)));
        v
    }

    #[test]
    fn contiguous_tensors_merge_into_one_run() {
        let nest = Nest::<2>::new(&[2, 3, 4], [&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(runs(&nest, 0..24), vec![([0, 0], 24)]);
        assert_eq!(runs(&nest, 5..9), vec![([5, 5], 4)]);
    }

    #[test]
    fn transposed_operand_walks_rows() {
        // out contiguous [2, 3]; input is a transposed [3, 2] buffer.
        let nest = Nest::<2>::new(&[2, 3], [&[3, 1], &[1, 2]]);
        assert_eq!(runs(&nest, 0..6), vec![([0, 0], 3), ([3, 1], 3)]);
        assert_eq!(runs(&nest, 2..5), vec![([2, 4], 1), ([3, 1], 2)]);
        assert_eq!(nest.inner_strides(), [1, 2]);
    }

    #[test]
    fn broadcast_operand_has_zero_stride() {
        let nest = Nest::<2>::new(&[2, 1, 3], [&[3, 3, 1], &[0, 0, 1]]);
        assert_eq!(runs(&nest, 0..6), vec![([0, 0], 3), ([3, 0], 3)]);
    }

    #[test]
    fn scalars_and_empty_shapes() {
        let nest = Nest::<1>::new(&[], [&[]]);
        assert_eq!(runs(&nest, 0..1), vec![([0], 1)]);
        let empty = Nest::<1>::new(&[0, 3], [&[3, 1]]);
        assert_eq!(empty.numel(), 0);
        assert!(runs(&empty, 0..0).is_empty());
    }
}
