//! The small decoder-only transformer of `transformer.rs`, `ddp_transformer.rs` and
//! `tests/checkpoint_resume.rs`: the model (`Gpt`, a tree of `tensorplay::nn` modules), its
//! training text, sizes and batch sampler, and a `Trainer` that steps it eagerly or compiled and
//! checkpoints it.

use std::path::Path;
use std::sync::Mutex;

use tensorplay::compiler::optim::{Adam, Optimizer};
use tensorplay::compiler::{CompiledFn, compile};
use tensorplay::nn::{
    self, Embedding, Forward, GELU, LayerNorm, Linear, Module, Reduction, functional_call,
};
use tensorplay::{DType, Result, Tensor};

/// The training text: a few sentences, repeated by the batch sampler.
pub const TEXT: &str = "the quick brown fox jumps over the lazy dog. \
    a small model learns the text one character at a time. \
    attention looks back at what came before, never ahead. \
    the loss goes down as the model remembers the words. ";

/// Model sizes.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab: usize,
    pub context: usize,
    pub dim: usize,
    pub heads: usize,
    pub layers: usize,
}

/// Causal multi-head self-attention: one `qkv` projection, `heads` heads, an output projection
/// (both without bias).
#[derive(Module, Clone)]
pub struct Attention {
    pub qkv: Linear,
    pub proj: Linear,
    pub heads: usize,
}

impl Forward for Attention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (h, hd) = (self.heads, d / self.heads);
        let qkv = self.qkv.forward(x)?.chunk(3, -1)?;
        let split = |z: &Tensor| z.reshape(&[b, t, h, hd])?.transpose(1, 2);
        let (q, k, v) = (split(&qkv[0])?, split(&qkv[1])?, split(&qkv[2])?);
        let y = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None)?;
        self.proj.forward(&y.transpose(1, 2)?.reshape(&[b, t, d])?)
    }
}

/// The feed-forward part of a block: `proj(gelu_tanh(fc(x)))`, 4× wide, with biases.
#[derive(Module, Clone)]
pub struct Mlp {
    pub fc: Linear,
    pub act: GELU,
    pub proj: Linear,
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.proj.forward(&self.act.forward(&self.fc.forward(x)?)?)
    }
}

/// One pre-norm block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
#[derive(Module, Clone)]
pub struct Block {
    pub ln1: LayerNorm,
    pub attn: Attention,
    pub ln2: LayerNorm,
    pub mlp: Mlp,
}

impl Forward for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.add(&self.attn.forward(&self.ln1.forward(x)?)?)?;
        x.add(&self.mlp.forward(&self.ln2.forward(&x)?)?)
    }
}

/// The model: token and learned position embeddings, `layers` blocks, a final layer norm and
/// an output projection (untied from the token embedding, no bias). Its state dict names
/// follow the fields: `tok_emb.weight`, `blocks.0.attn.qkv.weight`, `ln_f.bias`, `head.weight`.
#[derive(Module, Clone)]
pub struct Gpt {
    pub tok_emb: Embedding,
    pub pos_emb: Embedding,
    pub blocks: Vec<Block>,
    pub ln_f: LayerNorm,
    pub head: Linear,
    #[skip]
    pub config: Config,
}

impl Gpt {
    /// A model of sizes `c`. The weights are seeded normals with GPT-2-style scales (0.1 for
    /// the embeddings, `1/sqrt(dim)` for the projections, and the two residual projections of
    /// each block shrunk by `1/sqrt(2 * layers)`, the MLP's by half again); layer norms start
    /// as the identity and the biases at zero. Seeds `seed + 1, seed + 2, …` are drawn in
    /// parameter order, so a model does not depend on the global generator.
    pub fn new(c: Config, seed: u64) -> Result<Gpt> {
        let mut next = seed;
        let mut normal = |shape: &[usize], scale: f64| -> Result<Tensor> {
            next += 1;
            Tensor::randn_seeded(shape, DType::F32, next)?
                .mul_scalar(scale)?
                .requires_grad_(true)
        };
        let d = c.dim;
        let s = (1.0 / d as f64).sqrt();
        let residual = s / (2.0 * c.layers as f64).sqrt();
        let embedding = |weight| Embedding {
            weight,
            padding_idx: None,
        };
        let tok_emb = embedding(normal(&[c.vocab, d], 0.1)?);
        let pos_emb = embedding(normal(&[c.context, d], 0.1)?);
        let mut blocks = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            blocks.push(Block {
                ln1: LayerNorm::new(&[d])?,
                attn: Attention {
                    qkv: linear(normal(&[3 * d, d], s)?, None)?,
                    proj: linear(normal(&[d, d], residual)?, None)?,
                    heads: c.heads,
                },
                ln2: LayerNorm::new(&[d])?,
                mlp: Mlp {
                    fc: linear(normal(&[4 * d, d], s)?, Some(4 * d))?,
                    act: GELU::tanh(),
                    proj: linear(normal(&[d, 4 * d], 0.5 * residual)?, Some(d))?,
                },
            });
        }
        Ok(Gpt {
            tok_emb,
            pos_emb,
            blocks,
            ln_f: LayerNorm::new(&[d])?,
            head: linear(normal(&[c.vocab, d], s)?, None)?,
            config: c,
        })
    }

    /// Next-character logits `[B, T, vocab]` for token ids `[B, T]` (`T <= context`).
    pub fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        let t = ids.shape()[1];
        let pos = self.pos_emb.weight.narrow(0, 0, t)?;
        let mut x = self.tok_emb.forward(ids)?.add(&pos)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }

    /// Mean next-character cross-entropy of ids `[B, T]` against targets `[B, T]`.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let logits = self.logits(ids)?;
        nn::cross_entropy(
            &logits.reshape(&[b * t, self.config.vocab])?,
            &targets.reshape(&[b * t])?,
            -100,
            0.0,
            Reduction::Mean,
        )
    }
}

/// A linear layer with the given weight `[out, in]` and, with `bias = Some(out)`, a zero bias.
fn linear(weight: Tensor, bias: Option<usize>) -> Result<Linear> {
    let (out_features, in_features) = (weight.shape()[0], weight.shape()[1]);
    let bias = bias
        .map(|n| Tensor::zeros(&[n], DType::F32).requires_grad_(true))
        .transpose()?;
    Ok(Linear {
        weight,
        bias,
        in_features,
        out_features,
    })
}

/// The loss of `model` compiled: the function takes ids, targets and then the model's
/// parameters (in [`Module::parameters`] order) as inputs, so they are graph inputs —
/// `functional_call` runs the model on them while the function is captured — and an optimizer
/// step changes what it computes.
pub fn compiled_loss(model: &Gpt) -> CompiledFn {
    // A clone shares the tensors; it only gives the capture a module to swap parameters into.
    let m = Mutex::new(model.clone());
    compile(move |xs: &[Tensor]| {
        let mut m = m.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (ids, targets) = (&xs[0], &xs[1]);
        let l = functional_call(&mut *m, &xs[2..], |m| m.loss(ids, targets))?;
        Ok(vec![l])
    })
}

/// A model, its Adam optimizer and, when compiled, its compiled loss: one training step at a
/// time, and checkpoints of both model and optimizer.
pub struct Trainer {
    pub model: Gpt,
    pub opt: Adam,
    params: Vec<Tensor>,
    compiled: Option<CompiledFn>,
}

/// The checkpoint's file names inside its directory.
const MODEL_FILE: &str = "model.safetensors";
const OPTIMIZER_FILE: &str = "optimizer.safetensors";

impl Trainer {
    /// Adam (lr 3e-3, betas (0.9, 0.99), eps 1e-8) over `model`'s parameters; the loss
    /// compiled when `compiled`.
    pub fn new(model: Gpt, compiled: bool) -> Result<Trainer> {
        let params = model.parameters();
        let opt = Adam::new(params.clone(), 3e-3, (0.9, 0.99), 1e-8)?;
        let compiled = compiled.then(|| compiled_loss(&model));
        Ok(Trainer {
            model,
            opt,
            params,
            compiled,
        })
    }

    /// One step on a batch: the loss, its backward, an Adam update (fused when compiled, op by
    /// op eagerly) and cleared gradients. Returns the loss (before the update).
    pub fn step(&mut self, ids: Tensor, targets: Tensor) -> Result<Tensor> {
        let l = match &self.compiled {
            Some(f) => {
                let mut ins = Vec::with_capacity(2 + self.params.len());
                ins.extend([ids, targets]);
                ins.extend(self.params.iter().cloned());
                f.call(&ins)?.swap_remove(0)
            }
            None => self.model.loss(&ids, &targets)?,
        };
        l.backward()?;
        if self.compiled.is_some() {
            self.opt.step()?;
        } else {
            self.opt.step_eager()?;
        }
        self.opt.zero_grad();
        Ok(l)
    }

    /// The compiled loss, when training compiled.
    pub fn compiled(&self) -> Option<&CompiledFn> {
        self.compiled.as_ref()
    }

    /// Writes the model's state dict and the optimizer's state (moments and step counts) to
    /// `dir` (created if missing) as two safetensors files.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| {
            tensorplay::Error::argument(
                "Trainer::save",
                "dir",
                "a directory that can be created",
                format!("{}: {e}", dir.display()),
            )
        })?;
        self.model.save_safetensors(dir.join(MODEL_FILE))?;
        nn::save_optimizer_safetensors(&self.opt.state_dict(), dir.join(OPTIMIZER_FILE))
    }

    /// Restores a checkpoint written by [`Trainer::save`] into this trainer's model and
    /// optimizer (in place: the optimizer and the compiled loss keep their handles).
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        self.model.load_safetensors(dir.join(MODEL_FILE), true)?;
        self.opt
            .load_state_dict(&nn::load_optimizer_safetensors(dir.join(OPTIMIZER_FILE))?)
    }
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
