//! `Sequential`: layers applied in order.

use tensorplay_runtime::{Result, Tensor};

use crate::module::{Forward, Layer, Module, Visit, VisitMut, combine_modes, join_name};

/// Layers applied one after another (PyTorch's `nn.Sequential`): layer `i` is the child named
/// `i`, so its tensors are `0.weight`, `2.bias`, …
///
/// ```
/// use tensorplay_nn::{Forward, Linear, Module, ReLU, Sequential};
/// use tensorplay_runtime::{DType, Tensor};
/// let mlp = Sequential::new()
///     .append(Linear::new(4, 8, true)?)
///     .append(ReLU::new())
///     .append(Linear::new(8, 2, true)?);
/// let names: Vec<String> = mlp.state_dict().keys().map(String::from).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// assert_eq!(mlp.forward(&Tensor::ones(&[3, 4], DType::F32))?.shape(), &[3, 2]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// No layers (the identity).
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends `layer` (builder style, like PyTorch's `append`).
    pub fn append(mut self, layer: impl Layer + 'static) -> Sequential {
        self.push(layer);
        self
    }

    /// Appends `layer`.
    pub fn push(&mut self, layer: impl Layer + 'static) {
        self.layers.push(Box::new(layer));
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `i`.
    pub fn get(&self, i: usize) -> Option<&dyn Layer> {
        self.layers.get(i).map(|l| &**l)
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl Module for Sequential {
    fn visit(&self, prefix: &str, f: &mut Visit<'_>) {
        for (i, l) in self.layers.iter().enumerate() {
            l.visit(&join_name(prefix, &i.to_string()), f);
        }
    }
    fn visit_mut(&mut self, prefix: &str, f: &mut VisitMut<'_>) -> Result<()> {
        for (i, l) in self.layers.iter_mut().enumerate() {
            l.visit_mut(&join_name(prefix, &i.to_string()), f)?;
        }
        Ok(())
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.layers
            .iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), &**l as &dyn Module))
            .collect()
    }
    fn set_training(&mut self, training: bool) {
        for l in &mut self.layers {
            l.set_training(training);
        }
    }
    fn mode(&self) -> Option<bool> {
        combine_modes(self.layers.iter().map(|l| l.mode()))
    }
}

impl Forward for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for l in &self.layers {
            y = l.forward(&y)?;
        }
        Ok(y)
    }
}
