//! Random factories inside `vmap`: the `randomness` mode of every active level decides whether
//! a draw is an error, batched (one draw per example) or shared.

use tensorplay_ir::{Error, Result};

use super::level::{Randomness, levels};
use crate::tensor::Tensor;

/// Draws a random tensor of per-example shape `shape` with `draw` (which takes the full physical
/// shape). Outside `vmap` this is `draw(shape)`. Inside, a level with `randomness = "error"` makes
/// it an error; each `"different"` level adds a leading batch dim to the draw and wraps the
/// result as batched at that level; `"same"` levels share the draw.
pub(crate) fn random(
    op: &str,
    shape: &[usize],
    draw: impl FnOnce(&[usize]) -> Result<Tensor>,
) -> Result<Tensor> {
    let active = levels();
    if active.is_empty() {
        return draw(shape);
    }
    if active.iter().any(|l| l.randomness == Randomness::Error) {
        return Err(Error::unsupported(
            op,
            "random operation inside vmap with randomness=\"error\"; use \
             vmap_with_randomness(..., \"different\") for independent draws per example or \
             \"same\" for one draw shared by all examples",
        ));
    }
    let different: Vec<_> = active
        .iter()
        .filter(|l| l.randomness == Randomness::Different)
        .collect();
    let mut full: Vec<usize> = different.iter().map(|l| l.batch_size).collect();
    full.extend_from_slice(shape);
    let mut t = draw(&full)?;
    // Outermost level first: each wrap peels the leading dim.
    for level in different {
        t = Tensor::batched(t, 0, level.id);
    }
    Ok(t)
}
