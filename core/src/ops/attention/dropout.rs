//! Attention dropout without a mask tensor: whether probability `(i, j)` of head `h` is kept is
//! a pure function of the call's seed and the counter `(h * L + i) * S + j`, so the fused
//! forward and backward regenerate the same decisions element by element, and the decomposed
//! (`create_graph`) path materializes exactly the same mask ([`dropout_keep_mask`]).
//!
//! The seed is drawn once per call from the global generator (the one `manual_seed` sets and
//! `rand`/`dropout_global` draw from), so `manual_seed` makes the masks reproducible. The hash
//! is SplitMix64's finalizer over `key + (n + 1) * γ`, with `key` the seed put through the same
//! finalizer: a counter-based generator whose 53 high bits are the uniform draw `u`; an element
//! is kept when `u >= p` (so `p = 1` drops everything).

use tensorplay_ir::{DType, Error, Result};

use crate::tensor::Tensor;

/// SplitMix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijective 64-bit mix.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The dropout of one call: keep/drop decisions and the survivors' scale `1 / (1 - p)`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dropout<F> {
    /// The mixed seed.
    key: u64,
    /// Keep when the 53-bit draw is at least this (`p · 2^53`, rounded up).
    threshold: u64,
    /// `1 / (1 - p)` (infinite for `p = 1`, when nothing is kept).
    pub inv_keep: F,
}

impl<F> Dropout<F> {
    /// The dropout of probability `p` (in `(0, 1]`) drawn from `seed`; `inv_keep` is
    /// `1 / (1 - p)` in the compute type.
    pub(super) fn new(p: f64, seed: u64, inv_keep: F) -> Dropout<F> {
        Dropout {
            key: mix(seed),
            threshold: threshold(p),
            inv_keep,
        }
    }

    /// Whether the probability at counter `n` (`(h * L + i) * S + j`) is kept.
    #[inline(always)]
    pub(super) fn keep(&self, n: u64) -> bool {
        mix(self.key.wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA))) >> 11 >= self.threshold
    }
}

/// `ceil(p · 2^53)`: a 53-bit draw `u` is kept when `u >= threshold`, i.e. `u · 2^-53 >= p`.
fn threshold(p: f64) -> u64 {
    (p * (1u64 << 53) as f64).ceil() as u64
}

/// Checks the `dropout_p` argument of `op`: a probability in `[0, 1]` (NaN is not). The error
/// names `op`, the argument, the expected range and the value got; the fused attention ops and
/// `nn::scaled_dot_product_attention` share it.
///
/// ```
/// use tensorplay_core::ops::attention::check_dropout_p;
/// assert!(check_dropout_p("my_attention", 0.0).is_ok());
/// assert!(check_dropout_p("my_attention", 1.0).is_ok());
/// let err = check_dropout_p("my_attention", 1.5).unwrap_err().to_string();
/// assert!(err.contains("my_attention") && err.contains("dropout_p") && err.contains("1.5"));
/// assert!(check_dropout_p("my_attention", f64::NAN).is_err());
/// ```
pub fn check_dropout_p(op: &str, p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::argument(
            op,
            "dropout_p",
            "a probability in [0, 1]",
            p.to_string(),
        ));
    }
    Ok(())
}

/// Draws the seed of one call with dropout from the global generator (`manual_seed`).
pub(super) fn draw_seed() -> u64 {
    crate::tensor::factory::next_stream()
}

/// The keep mask (`true` = kept) the fused kernel applies to the attention probabilities of a
/// call with broadcast batch dims `batch`, `l` queries, `s` keys, dropout probability `p` and
/// seed `seed` (the fused op's third output), as a bool tensor `batch ++ [l, s]`. Only the
/// decomposed path and tests materialize it; the kernels never do.
///
/// ```
/// use tensorplay_core::ops::attention::dropout_keep_mask;
/// let keep = dropout_keep_mask(&[2, 3], 8, 8, 0.25, 42)?;
/// assert_eq!(keep.shape(), &[2, 3, 8, 8]);
/// let kept = keep.to_vec::<bool>()?.iter().filter(|&&k| k).count();
/// assert!((250..=330).contains(&kept)); // about 3/4 of 384
/// assert_eq!(keep.to_vec::<bool>()?, dropout_keep_mask(&[2, 3], 8, 8, 0.25, 42)?.to_vec::<bool>()?);
/// assert!(dropout_keep_mask(&[1], 2, 2, 1.5, 0).is_err());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn dropout_keep_mask(batch: &[usize], l: usize, s: usize, p: f64, seed: u64) -> Result<Tensor> {
    check_dropout_p("dropout_keep_mask", p)?;
    let heads: usize = batch.iter().product();
    let n = heads * l * s;
    let d = Dropout::new(p, seed, 0.0f64);
    let keep: Vec<bool> = if p == 0.0 {
        vec![true; n]
    } else {
        (0..n as u64).map(|i| d.keep(i)).collect()
    };
    let mut shape = batch.to_vec();
    shape.extend([l, s]);
    let t = Tensor::from_vec(keep, &shape)?;
    debug_assert_eq!(t.dtype(), DType::Bool);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_fraction_follows_p_and_the_extremes_are_exact() {
        for p in [0.1, 0.5, 0.9] {
            let d = Dropout::new(p, 7, 0.0f64);
            let n = 200_000u64;
            let kept = (0..n).filter(|&i| d.keep(i)).count() as f64 / n as f64;
            assert!((kept - (1.0 - p)).abs() < 0.005, "p {p}: kept {kept}");
        }
        let all = Dropout::new(1.0, 7, 0.0f64);
        assert!((0..10_000).all(|i| !all.keep(i)));
        assert_eq!(threshold(0.0), 0);
    }

    #[test]
    fn other_seeds_give_other_masks() {
        let (a, b) = (Dropout::new(0.5, 1, 0.0f64), Dropout::new(0.5, 2, 0.0f64));
        let same = (0..1000).filter(|&i| a.keep(i) == b.keep(i)).count();
        assert!((400..600).contains(&same), "{same}");
    }
}
