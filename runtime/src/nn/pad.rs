//! Padding (`torch.nn.functional.pad`): constant padding of any trailing dims (negative sizes
//! crop), and reflect, replicate and circular padding of the last one to three dims of a batched
//! or unbatched input. Constant padding is `narrow` + `cat` with filled blocks; the other modes
//! are one `index_select` per padded dim with indices computed from the (guarded) sizes, so
//! autograd, vmap and the compiler see ordinary ops.

use tensorplay_core::tensor::Tensor;
use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

/// How [`pad`] fills the new border (PyTorch's `mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PadMode {
    /// Every new element is `value`.
    #[default]
    Constant,
    /// Mirrored about the edge element, which is not repeated (`[1, 2, 3]` padded by 2 on the
    /// left is `[3, 2, 1, 2, 3]`).
    Reflect,
    /// The edge element repeated.
    Replicate,
    /// Wrapped around from the other end.
    Circular,
}

impl PadMode {
    /// The mode named as PyTorch spells it (`"constant"`, `"reflect"`, `"replicate"`,
    /// `"circular"`).
    ///
    /// ```
    /// use tensorplay_runtime::nn::PadMode;
    /// assert_eq!(PadMode::parse("reflect")?, PadMode::Reflect);
    /// assert!(PadMode::parse("mirror").is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn parse(mode: &str) -> Result<PadMode> {
        Ok(match mode {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "replicate" => PadMode::Replicate,
            "circular" => PadMode::Circular,
            other => {
                return Err(Error::argument(
                    "pad",
                    "mode",
                    "one of constant, reflect, replicate, circular",
                    format!("{other:?}"),
                ));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Replicate => "replicate",
            PadMode::Circular => "circular",
        }
    }
}

/// Pads `input` by `pad = [left, right]` of the last dim, then `[top, bottom]` of the one before,
/// and so on (PyTorch's order: last dim first); a negative size removes elements. `value` fills
/// [`PadMode::Constant`] padding (converted to the input's dtype, an error if it does not fit) and
/// is ignored by the other modes, which pad the last 1, 2 or 3 dims of an input with one or two
/// more dims (unbatched or batched), as PyTorch does.
///
/// ```
/// use tensorplay_runtime::nn::{self, PadMode};
/// use tensorplay_runtime::Tensor;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3])?;
/// let r = nn::pad(&x, &[2, 1], PadMode::Reflect, 0.0)?;
/// assert_eq!(r.to_vec::<f32>()?, vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
/// let c = nn::pad(&x, &[1, -1], PadMode::Constant, 9.0)?;
/// assert_eq!(c.to_vec::<f32>()?, vec![9.0, 1.0, 2.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn pad(input: &Tensor, pad: &[i64], mode: PadMode, value: f64) -> Result<Tensor> {
    let rank = input.rank();
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > rank {
        return Err(Error::argument(
            "pad",
            "pad",
            format!(
                "an even number of sizes, at most 2 * rank = {} (two per padded dim)",
                2 * rank
            ),
            format!("{} sizes", pad.len()),
        ));
    }
    let k = pad.len() / 2;
    if mode != PadMode::Constant && (!(1..=3).contains(&k) || !(k + 1..=k + 2).contains(&rank)) {
        return Err(Error::argument(
            "pad",
            "pad",
            format!(
                "for mode {}, 2 sizes for a 2-D or 3-D input, 4 for 3-D or 4-D, 6 for 4-D or 5-D",
                mode.name()
            ),
            format!("{} sizes for a {rank}-D input", pad.len()),
        ));
    }
    if mode == PadMode::Constant {
        Tensor::try_full(&[], value, input.dtype()).map_err(|_| {
            Error::argument(
                "pad",
                "value",
                format!(
                    "a value representable in the input's dtype {}",
                    input.dtype()
                ),
                value.to_string(),
            )
        })?;
    }
    let shape = input.shape().to_vec();
    if mode != PadMode::Constant && shape[rank - k..].contains(&0) {
        return Err(Error::argument(
            "pad",
            "input",
            format!(
                "no zero size in the {k} padded dims for mode {}",
                mode.name()
            ),
            format!("shape {}", fmt_shape(&shape)),
        ));
    }
    let mut x = input.clone();
    // Whether `x` is a new tensor yet (not the input or a view of it).
    let mut copied = false;
    for (i, side) in pad.chunks(2).enumerate() {
        let d = rank - 1 - i;
        let (l, r) = (side[0], side[1]);
        if l == 0 && r == 0 {
            continue;
        }
        let n = shape[d] as i64;
        // What is left of the dim after the negative sides crop it must not be negative.
        let kept = n
            .checked_add(l.min(0))
            .and_then(|v| v.checked_add(r.min(0)));
        let out = kept
            .filter(|&v| v >= 0)
            .and_then(|_| n.checked_add(l)?.checked_add(r))
            .ok_or_else(|| {
                Error::argument(
                    "pad",
                    "pad",
                    format!("negative sizes that remove at most the {n} elements of dim {d}"),
                    format!("({l}, {r})"),
                )
            })?;
        check_side(mode, d, n, l, r, &shape)?;
        copied |= mode != PadMode::Constant || l > 0 || r > 0;
        x = match mode {
            PadMode::Constant => pad_constant(&x, d, l, r, value)?,
            _ => {
                let mut index = table("pad", "pad", out as usize)?;
                index.extend((0..out).map(|j| source(mode, j - l, n)));
                let index = Tensor::from_vec(index, &[out as usize])?.to_device(x.device())?;
                x.index_select(d as i64, &index)?
            }
        };
    }
    // As PyTorch, the result never aliases the input (padding by zeros or only cropping copies).
    if copied { Ok(x) } else { x.clone_tensor() }
}

/// An empty vector with room for `len` entries of an index or weight table, or an error naming
/// `op`'s argument `arg` when that much memory cannot be had (a size far beyond any input).
pub(super) fn table<T>(op: &str, arg: &str, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        Error::argument(
            op,
            arg,
            "an output size whose index table fits in memory",
            format!("{len} elements along one dim"),
        )
    })?;
    Ok(v)
}

/// PyTorch's limits on one dim's padding: reflect pads less than the size, circular at most it.
fn check_side(mode: PadMode, d: usize, n: i64, l: i64, r: i64, shape: &[usize]) -> Result<()> {
    let (ok, limit) = match mode {
        PadMode::Reflect => (l < n && r < n, "less than"),
        PadMode::Circular => (l <= n && r <= n, "at most"),
        PadMode::Constant | PadMode::Replicate => return Ok(()),
    };
    if ok {
        return Ok(());
    }
    Err(Error::argument(
        "pad",
        "pad",
        format!(
            "{} padding {limit} the size {n} of dim {d} of input {}",
            mode.name(),
            fmt_shape(shape)
        ),
        format!("({l}, {r})"),
    ))
}

/// The input position output position `j - left` reads, for a non-constant mode over `n` > 0.
fn source(mode: PadMode, s: i64, n: i64) -> i64 {
    match mode {
        PadMode::Reflect => {
            let s = s.abs();
            if s >= n { 2 * (n - 1) - s } else { s }
        }
        PadMode::Replicate => s.clamp(0, n - 1),
        PadMode::Circular | PadMode::Constant => s.rem_euclid(n),
    }
}

/// Crops negative sides with `narrow`, then concatenates `value` blocks for positive ones.
fn pad_constant(x: &Tensor, d: usize, l: i64, r: i64, value: f64) -> Result<Tensor> {
    let n = x.shape()[d];
    let start = (-l).max(0) as usize;
    let end = (n as i64 + r.min(0)).max(start as i64) as usize;
    let mut core = x.clone();
    if start > 0 || end < n {
        core = core.narrow(d as i64, start, end - start)?;
    }
    if l <= 0 && r <= 0 {
        return Ok(core);
    }
    let block = |len: i64| -> Result<Tensor> {
        let mut s = core.shape().to_vec();
        s[d] = len as usize;
        Tensor::try_full(&s, value, core.dtype())?.to_device(core.device())
    };
    let mut parts = Vec::with_capacity(3);
    if l > 0 {
        parts.push(block(l)?);
    }
    parts.push(core.clone());
    if r > 0 {
        parts.push(block(r)?);
    }
    Tensor::cat(&parts, d as i64)
}
