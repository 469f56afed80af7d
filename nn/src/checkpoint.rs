//! Checkpoints in the safetensors format (through the `safetensors` crate): state dicts and
//! optimizer states, written and read with PyTorch's key names, loaded through a memory map.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView, View};
use tensorplay_compiler::optim::OptimizerState;
use tensorplay_runtime::{DType, Element, Error, Result, Tensor};

use crate::state::StateDict;

/// Tensors by name.
type Named = Vec<(String, Tensor)>;

/// A tensor's bytes as safetensors stores them (little-endian, row-major).
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The safetensors dtype of `dtype` (every dtype has one).
fn st_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::Bool => Dtype::BOOL,
    }
}

/// The elements of `t` as little-endian bytes.
fn to_bytes(t: &Tensor) -> Result<Bytes> {
    fn le<T: Element, const N: usize>(t: &Tensor, f: fn(T) -> [u8; N]) -> Result<Vec<u8>> {
        Ok(t.to_vec::<T>()?.into_iter().flat_map(f).collect())
    }
    let t = t.detach().to_device(tensorplay_runtime::Device::Cpu)?;
    let data = match t.dtype() {
        DType::F32 => le(&t, f32::to_le_bytes)?,
        DType::F64 => le(&t, f64::to_le_bytes)?,
        DType::F16 => le(&t, f16::to_le_bytes)?,
        DType::BF16 => le(&t, bf16::to_le_bytes)?,
        DType::I64 => le(&t, i64::to_le_bytes)?,
        DType::I32 => le(&t, i32::to_le_bytes)?,
        DType::Bool => le(&t, |b: bool| [u8::from(b)])?,
    };
    Ok(Bytes {
        dtype: st_dtype(t.dtype()),
        shape: t.shape().to_vec(),
        data,
    })
}

/// A tensor holding the elements of a stored view.
fn from_view(op: &str, name: &str, v: &TensorView<'_>) -> Result<Tensor> {
    fn read<T: Element, const N: usize>(
        bytes: &[u8],
        shape: &[usize],
        f: fn([u8; N]) -> T,
    ) -> Result<Tensor> {
        let data = bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks_exact gives N bytes")))
            .collect();
        Tensor::from_vec(data, shape)
    }
    let (b, s) = (v.data(), v.shape());
    match v.dtype() {
        Dtype::F32 => read(b, s, f32::from_le_bytes),
        Dtype::F64 => read(b, s, f64::from_le_bytes),
        Dtype::F16 => read(b, s, f16::from_le_bytes),
        Dtype::BF16 => read(b, s, bf16::from_le_bytes),
        Dtype::I64 => read(b, s, i64::from_le_bytes),
        Dtype::I32 => read(b, s, i32::from_le_bytes),
        Dtype::BOOL => read(b, s, |[x]: [u8; 1]| x != 0),
        other => Err(Error::argument(
            op,
            name,
            "a tensor of dtype F32, F64, F16, BF16, I64, I32 or BOOL",
            format!("dtype {other:?}"),
        )),
    }
}

/// Writes named tensors (and string metadata) to `path`.
fn write(
    op: &str,
    tensors: &[(&str, &Tensor)],
    metadata: Option<HashMap<String, String>>,
    path: &Path,
) -> Result<()> {
    let bytes = tensors
        .iter()
        .map(|(n, t)| Ok((n.to_string(), to_bytes(t)?)))
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(bytes.iter().map(|(n, b)| (n, b)), metadata, path).map_err(|e| {
        Error::argument(
            op,
            "path",
            "a writable file",
            format!("{}: {e}", path.display()),
        )
    })
}

/// Reads every tensor of the safetensors file at `path` through a memory map, with the file's
/// metadata.
fn read(op: &str, path: &Path) -> Result<(Named, HashMap<String, String>)> {
    let bad = |e: String| {
        Error::argument(
            op,
            "path",
            "a readable safetensors file",
            format!("{}: {e}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    // SAFETY: the map is read only while this function runs and dropped before it returns; the
    // tensors are built from copies of its bytes. Like every memory-mapped read it relies on no
    // other process truncating the file meanwhile (a checkpoint is not written while loading).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| bad(e.to_string()))?;
    let (_, meta) = SafeTensors::read_metadata(&map).map_err(|e| bad(e.to_string()))?;
    let st = SafeTensors::deserialize(&map).map_err(|e| bad(e.to_string()))?;
    // A safetensors file does not keep the dict's order (the writer orders the data by
    // alignment, then name): keys come sorted by name.
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let tensors = views
        .iter()
        .map(|(n, v)| Ok((n.clone(), from_view(op, n, v)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok((tensors, meta.metadata().clone().unwrap_or_default()))
}

/// Writes a state dict to a safetensors file at `path`: what PyTorch's
/// `safetensors.torch.load_file` reads back (every dtype: f32, f64, f16, bf16, i64, i32,
/// bool).
///
/// ```
/// use tensorplay_nn::{load_safetensors, save_safetensors, Linear, Module};
/// let layer = Linear::new(3, 2, true)?;
/// let path = std::env::temp_dir().join("tensorplay_nn_doc_save.safetensors");
/// save_safetensors(&layer.state_dict(), &path)?;
/// let back = load_safetensors(&path)?;
/// assert!(back.get("weight").unwrap().equal(&layer.state_dict().get("weight").unwrap())?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn save_safetensors(state: &StateDict, path: impl AsRef<Path>) -> Result<()> {
    let tensors: Vec<(&str, &Tensor)> = state.iter().collect();
    write("save_safetensors", &tensors, None, path.as_ref())
}

/// Reads a safetensors file (written by [`save_safetensors`] or by PyTorch's
/// `safetensors.torch.save_file`) into a state dict, through a memory map: the file's bytes
/// are copied once, into the tensors. Keys come sorted by name: the format does not keep the
/// order they were saved in (load a state dict by name, as [`Module::load_state_dict`](crate::Module::load_state_dict) does).
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<StateDict> {
    let (tensors, _) = read("load_safetensors", path.as_ref())?;
    Ok(tensors.into_iter().collect())
}

/// The metadata key holding an optimizer's scalars (step counts, group options).
const SCALARS_KEY: &str = "tensorplay.optimizer.scalars";

/// Writes an optimizer's state ([`Optimizer::state_dict`](tensorplay_compiler::optim::Optimizer::state_dict))
/// to a safetensors file: its buffers as tensors (`state.3.exp_avg`) and its numbers (step
/// counts, group options) in the file's metadata, exactly (as the shortest decimal that reads
/// back to the same `f64`).
///
/// ```
/// use tensorplay_compiler::optim::{Adam, Optimizer};
/// use tensorplay_nn::{load_optimizer_safetensors, save_optimizer_safetensors};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[3], DType::F32).requires_grad_(true)?;
/// w.sum_all()?.backward()?;
/// let mut opt = Adam::new(vec![w.clone()], 0.1, (0.9, 0.999), 1e-8)?;
/// opt.step()?;
/// let path = std::env::temp_dir().join("tensorplay_nn_doc_optim.safetensors");
/// save_optimizer_safetensors(&opt.state_dict(), &path)?;
/// let mut resumed = Adam::new(vec![w.clone()], 0.5, (0.9, 0.999), 1e-8)?;
/// resumed.load_state_dict(&load_optimizer_safetensors(&path)?)?;
/// assert_eq!(resumed.lr(), 0.1);
/// assert_eq!(resumed.state_dict().scalar("state.0.step"), Some(1.0));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn save_optimizer_safetensors(state: &OptimizerState, path: impl AsRef<Path>) -> Result<()> {
    let tensors: Vec<(&str, &Tensor)> =
        state.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let scalars = state
        .scalars
        .iter()
        .map(|(n, v)| format!("{n}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n");
    let meta = HashMap::from([(SCALARS_KEY.to_string(), scalars)]);
    write(
        "save_optimizer_safetensors",
        &tensors,
        Some(meta),
        path.as_ref(),
    )
}

/// Reads an optimizer state written by [`save_optimizer_safetensors`]; restore it with
/// [`Optimizer::load_state_dict`](tensorplay_compiler::optim::Optimizer::load_state_dict).
pub fn load_optimizer_safetensors(path: impl AsRef<Path>) -> Result<OptimizerState> {
    const OP: &str = "load_optimizer_safetensors";
    let (tensors, meta) = read(OP, path.as_ref())?;
    let text = meta.get(SCALARS_KEY).ok_or_else(|| {
        Error::argument(
            OP,
            "path",
            format!("a file with `{SCALARS_KEY}` metadata (from save_optimizer_safetensors)"),
            "a file without it",
        )
    })?;
    let scalars = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let parsed = line
                .rsplit_once('=')
                .and_then(|(n, v)| Some((n.to_string(), v.parse::<f64>().ok()?)));
            parsed.ok_or_else(|| {
                Error::argument(OP, "path", "`name=number` scalar lines", line.to_string())
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(OptimizerState { tensors, scalars })
}
