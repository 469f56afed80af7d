//! State dicts: a module's parameters and buffers by dotted name, in order, and loading one
//! into a module with every mismatch reported at once.

use tensorplay_runtime::{DType, Error, Result, Tensor, autograd};

/// An ordered map from dotted name to tensor (PyTorch's `OrderedDict` state dict). Keys keep
/// their insertion order; inserting an existing key replaces its tensor in place.
///
/// ```
/// use tensorplay_nn::{Linear, Module, StateDict};
/// let layer = Linear::new(4, 2, true)?;
/// let sd: StateDict = layer.state_dict();
/// assert_eq!(sd.keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// assert_eq!(sd.get("weight").unwrap().shape(), &[2, 4]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> StateDict {
        StateDict::default()
    }

    /// Sets `name` to `tensor` (replacing an existing entry, keeping its position).
    pub fn insert(&mut self, name: impl Into<String>, tensor: Tensor) {
        let name = name.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = tensor,
            None => self.entries.push((name, tensor)),
        }
    }

    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Removes and returns the tensor named `name`.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(i).1)
    }

    /// Whether `name` is a key.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// A copy with every floating-point tensor converted to the floating-point `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<StateDict> {
        let mut out = StateDict::new();
        for (n, t) in self.iter() {
            let t = if t.dtype().is_float() {
                t.detach().to_dtype(dtype)?
            } else {
                t.clone()
            };
            out.insert(n, t);
        }
        Ok(out)
    }
}

impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> StateDict {
        let mut d = StateDict::new();
        for (n, t) in iter {
            d.insert(n, t);
        }
        d
    }
}

impl IntoIterator for StateDict {
    type Item = (String, Tensor);
    type IntoIter = std::vec::IntoIter<(String, Tensor)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

/// What a non-strict [`Module::load_state_dict`](crate::Module::load_state_dict) skipped
/// (PyTorch's `_IncompatibleKeys`); both lists are empty after a strict load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// The module's keys the state dict did not have (left as they were).
    pub missing_keys: Vec<String>,
    /// The state dict's keys the module does not have (ignored).
    pub unexpected_keys: Vec<String>,
}

/// Loads `state` into the tensors of `own` (a module's state dict of handles): checks every key
/// first and copies only when nothing is wrong.
pub(crate) fn load_into(own: &StateDict, state: &StateDict, strict: bool) -> Result<LoadReport> {
    let missing: Vec<String> = own
        .keys()
        .filter(|k| !state.contains_key(k))
        .map(String::from)
        .collect();
    let unexpected: Vec<String> = state
        .keys()
        .filter(|k| !own.contains_key(k))
        .map(String::from)
        .collect();
    let mut problems = Vec::new();
    if strict && !missing.is_empty() {
        problems.push(format!("missing keys: {}", missing.join(", ")));
    }
    if strict && !unexpected.is_empty() {
        problems.push(format!("unexpected keys: {}", unexpected.join(", ")));
    }
    for (name, mine) in own.iter() {
        let Some(theirs) = state.get(name) else {
            continue;
        };
        if mine.shape() != theirs.shape() {
            problems.push(format!(
                "{name}: shape mismatch: expected {:?}, got {:?}",
                mine.shape(),
                theirs.shape()
            ));
        } else if mine.dtype() != theirs.dtype() {
            problems.push(format!(
                "{name}: dtype mismatch: expected {}, got {}",
                mine.dtype(),
                theirs.dtype()
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Error::argument(
            "load_state_dict",
            "state_dict",
            "the module's keys, shapes and dtypes",
            problems.join("; "),
        ));
    }
    for (name, mine) in own.iter() {
        if let Some(theirs) = state.get(name) {
            copy_no_grad(mine, theirs)?;
        }
    }
    Ok(LoadReport {
        missing_keys: missing,
        unexpected_keys: unexpected,
    })
}

/// Copies `src` into `dst` without recording autograd (a state-dict load).
fn copy_no_grad(dst: &Tensor, src: &Tensor) -> Result<()> {
    let _guard = autograd::no_grad();
    let src = if src.device() == dst.device() {
        src.clone()
    } else {
        src.to_device(dst.device())?
    };
    dst.copy_(&src)?;
    Ok(())
}
