//! The small decoder-only transformer of `transformer.rs` and `ddp_transformer.rs`: its
//! training text, sizes, parameters (a flat list), loss and batch sampler.

use tensorplay::nn::{self, Reduction};
use tensorplay::{DType, Result, Tensor};

/// The training text: a few sentences, repeated by the batch sampler.
pub const TEXT: &str = "the quick brown fox jumps over the lazy dog. \
    a small model learns the text one character at a time. \
    attention looks back at what came before, never ahead. \
    the loss goes down as the model remembers the words. ";

/// Model sizes.
#[derive(Clone, Copy)]
pub struct Config {
    pub vocab: usize,
    pub context: usize,
    pub dim: usize,
    pub heads: usize,
    pub layers: usize,
}

/// Parameters per block, in the order `block` reads them.
const PER_BLOCK: usize = 10;

/// All parameters: token and position embeddings, `layers` blocks, the final norm and the
/// output projection.
pub fn params(c: Config) -> Result<Vec<Tensor>> {
    let mut seed = 0u64;
    let mut p = |shape: &[usize], scale: f64| -> Result<Tensor> {
        seed += 1;
        Tensor::randn_seeded(shape, DType::F32, seed)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    };
    let ones = |n: usize| Tensor::ones(&[n], DType::F32).requires_grad_(true);
    let zeros = |n: usize| Tensor::zeros(&[n], DType::F32).requires_grad_(true);
    let d = c.dim;
    let s = (1.0 / d as f64).sqrt();
    let mut v = vec![p(&[c.vocab, d], 0.1)?, p(&[c.context, d], 0.1)?];
    for _ in 0..c.layers {
        v.extend([
            ones(d)?,
            zeros(d)?,
            p(&[3 * d, d], s)?,
            p(&[d, d], s / (2.0 * c.layers as f64).sqrt())?,
            ones(d)?,
            zeros(d)?,
            p(&[4 * d, d], s)?,
            zeros(4 * d)?,
            p(&[d, 4 * d], 0.5 * s / (2.0 * c.layers as f64).sqrt())?,
            zeros(d)?,
        ]);
    }
    v.extend([ones(d)?, zeros(d)?, p(&[c.vocab, d], s)?]);
    Ok(v)
}

/// One pre-norm block: `x + attn(ln(x))`, then `x + mlp(ln(x))`.
fn block(x: &Tensor, p: &[Tensor], c: Config) -> Result<Tensor> {
    let (b, t, d) = (x.shape()[0], x.shape()[1], c.dim);
    let (h, hd) = (c.heads, c.dim / c.heads);
    let a = nn::layer_norm(x, &[d], Some(&p[0]), Some(&p[1]), 1e-5)?;
    let qkv = nn::linear(&a, &p[2], None)?.chunk(3, -1)?;
    let heads = |t_: &Tensor| t_.reshape(&[b, t, h, hd])?.transpose(1, 2);
    let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
    let y = nn::scaled_dot_product_attention(&q, &k, &v, None, true, None)?;
    let y = y.transpose(1, 2)?.reshape(&[b, t, d])?;
    let x = x.add(&nn::linear(&y, &p[3], None)?)?;
    let m = nn::layer_norm(&x, &[d], Some(&p[4]), Some(&p[5]), 1e-5)?;
    let m = nn::linear(&m, &p[6], Some(&p[7]))?.gelu("tanh")?;
    x.add(&nn::linear(&m, &p[8], Some(&p[9]))?)
}

/// Mean next-character cross-entropy; inputs: token ids `[B, T]`, targets `[B, T]`, then the
/// parameters.
pub fn loss(xs: &[Tensor], c: Config) -> Result<Vec<Tensor>> {
    let (ids, targets, p) = (&xs[0], &xs[1], &xs[2..]);
    let (b, t) = (ids.shape()[0], ids.shape()[1]);
    let pos = p[1].narrow(0, 0, t)?;
    let mut x = nn::embedding(ids, &p[0])?.add(&pos)?;
    for l in 0..c.layers {
        x = block(&x, &p[2 + l * PER_BLOCK..2 + (l + 1) * PER_BLOCK], c)?;
    }
    let f = 2 + c.layers * PER_BLOCK;
    let x = nn::layer_norm(&x, &[c.dim], Some(&p[f]), Some(&p[f + 1]), 1e-5)?;
    let logits = nn::linear(&x, &p[f + 2], None)?;
    let l = nn::cross_entropy(
        &logits.reshape(&[b * t, c.vocab])?,
        &targets.reshape(&[b * t])?,
        -100,
        0.0,
        Reduction::Mean,
    )?;
    Ok(vec![l])
}

/// `batch` windows of `context + 1` characters from deterministic offsets of step `step`.
pub fn batch(data: &[i64], step: usize, batch: usize, context: usize) -> Result<(Tensor, Tensor)> {
    let mut ids = Vec::with_capacity(batch * context);
    let mut targets = Vec::with_capacity(batch * context);
    for i in 0..batch {
        // A fixed pseudo-random walk over start positions (a 64-bit LCG).
        let r = (step * batch + i) as u64;
        let r = r
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let start = (r >> 33) as usize % (data.len() - context - 1);
        ids.extend_from_slice(&data[start..start + context]);
        targets.extend_from_slice(&data[start + 1..start + context + 1]);
    }
    Ok((
        Tensor::from_vec(ids, &[batch, context])?,
        Tensor::from_vec(targets, &[batch, context])?,
    ))
}

/// The text as character ids, and the vocabulary size.
pub fn encode(text: &str) -> (Vec<i64>, usize) {
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let data = text
        .chars()
        .map(|ch| chars.binary_search(&ch).map(|i| i as i64).unwrap_or(0))
        .collect();
    (data, chars.len())
}

/// The bundled text as ids and the examples' model sizes.
pub fn setup() -> (Vec<i64>, Config) {
    let (data, vocab) = encode(TEXT);
    let c = Config {
        vocab,
        context: 32,
        dim: 64,
        heads: 4,
        layers: 2,
    };
    (data, c)
}

/// The number of steps: `STEPS` from the environment, else `default` (at least 2).
pub fn steps_from_env(default: usize) -> usize {
    std::env::var("STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .max(2)
}
