//! `Embedding`: a lookup table of row vectors.

use tensorplay_runtime::{DType, Error, Result, Tensor, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::{normal, parameter};
use crate::module::Forward;

/// A table of `num_embeddings` vectors of size `embedding_dim` (PyTorch's `nn.Embedding`):
/// `weight` `[num_embeddings, embedding_dim]`, initialised standard normal (with the
/// `padding_idx` row zeroed, whose gradient is then always zero).
///
/// ```
/// use tensorplay_nn::{Embedding, Forward};
/// use tensorplay_runtime::Tensor;
/// let emb = Embedding::new(10, 4)?;
/// let ids = Tensor::from_vec(vec![1i64, 7, 7], &[3])?;
/// assert_eq!(emb.forward(&ids)?.shape(), &[3, 4]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
    /// A row whose gradient is zero and that starts as zeros.
    pub padding_idx: Option<usize>,
}

impl Embedding {
    /// A table with PyTorch's default initialisation, in f32.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Result<Embedding> {
        Embedding::with_options(num_embeddings, embedding_dim, None, DType::F32)
    }

    /// A table with a padding row and a floating-point `dtype`.
    pub fn with_options(
        num_embeddings: usize,
        embedding_dim: usize,
        padding_idx: Option<usize>,
        dtype: DType,
    ) -> Result<Embedding> {
        float_dtype("Embedding", dtype)?;
        if let Some(p) = padding_idx.filter(|&p| p >= num_embeddings) {
            return Err(Error::argument(
                "Embedding",
                "padding_idx",
                format!("an index below num_embeddings = {num_embeddings}"),
                p.to_string(),
            ));
        }
        let w = normal(&[num_embeddings, embedding_dim], dtype)?;
        if let Some(p) = padding_idx {
            w.narrow(0, p, 1)?.zero_()?;
        }
        Ok(Embedding {
            weight: parameter(w)?,
            padding_idx,
        })
    }
}

impl Forward for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match self.padding_idx {
            None => nn::embedding(ids, &self.weight),
            Some(p) => nn::embedding_padded(ids, &self.weight, Some(p as i64)),
        }
    }
}
