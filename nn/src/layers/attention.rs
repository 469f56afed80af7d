//! `MultiheadAttention` on `scaled_dot_product_attention`.

use tensorplay_runtime::{DType, Error, Result, Tensor, nn};

use super::linear::{Linear, float_dtype};
use crate::Module;
use crate::init::{parameter, uniform};
use crate::module::Forward;

/// Multi-head attention (PyTorch's `nn.MultiheadAttention` with its parameter names, shapes
/// and initialisation): the packed input projection `in_proj_weight` `[3E, E]` (Xavier
/// uniform) and `in_proj_bias` `[3E]` (zeros), and `out_proj` (a [`Linear`] `E → E` whose bias
/// starts at zero). Heads attend through [`nn::scaled_dot_product_attention`].
///
/// Inputs are `[L, N, E]` (PyTorch's default) or `[N, L, E]` with `batch_first`, or unbatched
/// `[L, E]`. Attention dropout ([`MultiheadAttention::with_dropout`], PyTorch's `dropout`
/// argument, 0 by default) drops attention probabilities in training mode only (the fused
/// kernel's dropout, from the global generator). Differences from PyTorch: no
/// `key_padding_mask`, separate key/value sizes (`kdim`/`vdim`) or bias-kv; the call returns
/// the output only (no averaged attention weights).
///
/// ```
/// use tensorplay_nn::{Forward, Module, MultiheadAttention};
/// use tensorplay_runtime::{DType, Tensor};
/// let mha = MultiheadAttention::new(8, 2, true)?;
/// let names: Vec<String> = mha.state_dict().keys().map(String::from).collect();
/// assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
/// let x = Tensor::randn_seeded(&[2, 5, 8], DType::F32, 0)?; // [N, L, E]
/// assert_eq!(mha.forward(&x)?.shape(), &[2, 5, 8]);
/// assert!(MultiheadAttention::new(8, 3, true).is_err()); // 8 is not a multiple of 3
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct MultiheadAttention {
    /// The query, key and value projections stacked: `[3 * embed_dim, embed_dim]`.
    pub in_proj_weight: Tensor,
    /// Their biases, `[3 * embed_dim]`, when the layer has biases.
    pub in_proj_bias: Option<Tensor>,
    /// The output projection.
    pub out_proj: Linear,
    /// `E`.
    pub embed_dim: usize,
    /// The number of heads (divides `E`).
    pub num_heads: usize,
    /// Inputs are `[N, L, E]` (else `[L, N, E]`).
    pub batch_first: bool,
    /// The attention dropout probability (applied in training mode only).
    pub dropout: f64,
    /// Training mode (attention dropout active) or evaluation mode.
    pub training: bool,
}

impl MultiheadAttention {
    /// Attention over `embed_dim` features in `num_heads` heads, with biases, in f32.
    pub fn new(embed_dim: usize, num_heads: usize, batch_first: bool) -> Result<Self> {
        MultiheadAttention::with_options(embed_dim, num_heads, true, batch_first, DType::F32)
    }

    /// Every option.
    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        bias: bool,
        batch_first: bool,
        dtype: DType,
    ) -> Result<Self> {
        float_dtype("MultiheadAttention", dtype)?;
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            return Err(Error::argument(
                "MultiheadAttention",
                "num_heads",
                format!("a divisor of embed_dim = {embed_dim}"),
                num_heads.to_string(),
            ));
        }
        // Xavier uniform over the packed [3E, E] matrix, as PyTorch initialises it.
        let bound = (6.0 / (4 * embed_dim) as f64).sqrt();
        let in_proj_weight = parameter(uniform(&[3 * embed_dim, embed_dim], bound, dtype)?)?;
        let in_proj_bias = bias
            .then(|| parameter(Tensor::zeros(&[3 * embed_dim], dtype)))
            .transpose()?;
        let mut out_proj = Linear::with_dtype(embed_dim, embed_dim, bias, dtype)?;
        if let Some(b) = &out_proj.bias {
            out_proj.bias = Some(parameter(Tensor::zeros(b.shape(), dtype))?);
        }
        Ok(MultiheadAttention {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            embed_dim,
            num_heads,
            batch_first,
            dropout: 0.0,
            training: true,
        })
    }

    /// The layer with attention dropout `p` in `[0, 1]` (PyTorch's `dropout` argument), active
    /// in training mode only.
    ///
    /// ```
    /// use tensorplay_nn::{Forward, Module, MultiheadAttention};
    /// use tensorplay_runtime::{DType, Tensor, manual_seed};
    /// let mut mha = MultiheadAttention::new(8, 2, true)?.with_dropout(0.5)?;
    /// let x = Tensor::randn_seeded(&[2, 5, 8], DType::F32, 0)?;
    /// manual_seed(1);
    /// let a = mha.forward(&x)?.to_vec::<f32>()?;
    /// manual_seed(1);
    /// assert_eq!(mha.forward(&x)?.to_vec::<f32>()?, a); // the same masks
    /// mha.eval(); // no dropout: the plain attention
    /// let plain = MultiheadAttention { dropout: 0.0, ..mha.clone() };
    /// assert_eq!(mha.forward(&x)?.to_vec::<f32>()?, plain.forward(&x)?.to_vec::<f32>()?);
    /// assert!(MultiheadAttention::new(8, 2, true)?.with_dropout(1.5).is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn with_dropout(mut self, p: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::argument(
                "MultiheadAttention",
                "dropout",
                "a probability in [0, 1]",
                p.to_string(),
            ));
        }
        self.dropout = p;
        Ok(self)
    }

    /// Attention of `query` over `key`/`value`. `attn_mask` follows PyTorch's
    /// `MultiheadAttention`: a bool mask is **true where attending is not allowed**, a float
    /// mask is added to the scores; `[L, S]` or `[N * num_heads, L, S]`. `is_causal` masks
    /// future positions instead (and excludes `attn_mask`). In training mode the attention
    /// probabilities are dropped with probability [`MultiheadAttention::dropout`].
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        attn_mask: Option<&Tensor>,
        is_causal: bool,
    ) -> Result<Tensor> {
        const OP: &str = "MultiheadAttention";
        let unbatched = query.rank() == 2;
        for (arg, t) in [("query", query), ("key", key), ("value", value)] {
            let ok = t.rank() == query.rank() && matches!(t.rank(), 2 | 3);
            if !ok || t.shape().last() != Some(&self.embed_dim) {
                return Err(Error::argument(
                    OP,
                    arg,
                    format!(
                        "a 2-D or 3-D tensor (as the query) with last dim {}",
                        self.embed_dim
                    ),
                    format!("shape {:?}", t.shape()),
                ));
            }
        }
        // To [N, L, E].
        let batch = |t: &Tensor| -> Result<Tensor> {
            match (unbatched, self.batch_first) {
                (true, _) => t.unsqueeze(0),
                (false, true) => Ok(t.clone()),
                (false, false) => t.transpose(0, 1),
            }
        };
        let (e, h) = (self.embed_dim, self.num_heads);
        let proj = |t: &Tensor, i: usize| -> Result<Tensor> {
            let w = self.in_proj_weight.narrow(0, i * e, e)?;
            let b = self
                .in_proj_bias
                .as_ref()
                .map(|b| b.narrow(0, i * e, e))
                .transpose()?;
            let y = nn::linear(&batch(t)?, &w, b.as_ref())?;
            let (n, l) = (y.shape()[0], y.shape()[1]);
            y.reshape(&[n, l, h, e / h])?.transpose(1, 2)
        };
        let (q, k, v) = (proj(query, 0)?, proj(key, 1)?, proj(value, 2)?);
        let (n, l) = (q.shape()[0], q.shape()[2]);
        let mask = attn_mask.map(|m| sdpa_mask(m, n, h)).transpose()?;
        let p = if self.training { self.dropout } else { 0.0 };
        let y = nn::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), p, is_causal, None)?;
        let y = self
            .out_proj
            .forward(&y.transpose(1, 2)?.reshape(&[n, l, e])?)?;
        match (unbatched, self.batch_first) {
            (true, _) => y.squeeze(Some(0)),
            (false, true) => Ok(y),
            (false, false) => y.transpose(0, 1),
        }
    }
}

/// PyTorch's `MultiheadAttention` mask as an attention mask of `scaled_dot_product_attention`
/// over `[N, H, L, S]`: bool masks inverted (true = attend), per-head masks unflattened.
fn sdpa_mask(mask: &Tensor, n: usize, h: usize) -> Result<Tensor> {
    let m = if mask.dtype() == DType::Bool {
        mask.logical_not()?
    } else {
        mask.clone()
    };
    if m.rank() == 3 {
        let (l, s) = (m.shape()[1], m.shape()[2]);
        m.reshape(&[n, h, l, s])
    } else {
        Ok(m)
    }
}

impl Forward for MultiheadAttention {
    /// Self-attention: `attend(x, x, x, None, false)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, x, x, None, false)
    }
}
