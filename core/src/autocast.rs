//! Autocast: inside an `autocast(device_type, dtype)` region, ops cast their floating inputs by a
//! policy before running — builtin ops by their `OpDef::autocast` ([`AutocastPolicy`]), custom
//! ops by `register_autocast`.
//!
//! Builtin policies (PyTorch's, reduced to our op set):
//! - **low precision** (`matmul`): floating inputs (not f64) are cast to the region's dtype;
//! - **f32** (reductions, softmax, `exp`, `log`, `log1p`, `expm1`, `pow`, `softplus`): f16/bf16
//!   inputs are cast to f32 so accumulations and range-sensitive math stay accurate;
//! - every other op runs in its input dtypes (mixed inputs promote as usual).

use std::cell::Cell;

use tensorplay_ir::{DType, Device, Error, Result};

use crate::dispatch::Slot;
use crate::ops::{AutocastPolicy, OpDef};
use crate::tensor::Tensor;
use crate::value::Value;

thread_local! {
    static CPU: Cell<Option<DType>> = const { Cell::new(None) };
    static CUDA: Cell<Option<DType>> = const { Cell::new(None) };
}

fn cell(slot: Slot) -> &'static std::thread::LocalKey<Cell<Option<DType>>> {
    match slot {
        Slot::Cuda => &CUDA,
        _ => &CPU,
    }
}

/// Restores the previous autocast state of one device type when dropped.
#[must_use = "autocast ends when the guard is dropped"]
pub struct AutocastGuard {
    slot: Slot,
    prev: Option<DType>,
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        cell(self.slot).with(|c| c.set(self.prev));
    }
}

/// Enables autocast for `device_type` (`"cpu"` or `"cuda"`) with `dtype` (f16 or bf16) on this
/// thread until the guard drops.
///
/// ```
/// use tensorplay_core::{Tensor, DType, autocast::autocast};
/// let a = Tensor::ones(&[2, 2], DType::F32);
/// let _g = autocast("cpu", DType::BF16)?;
/// assert_eq!(a.matmul(&a)?.dtype(), DType::BF16);
/// assert_eq!(a.add(&a)?.dtype(), DType::F32);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn autocast(device_type: &str, dtype: DType) -> Result<AutocastGuard> {
    let slot = Slot::parse("autocast", "device_type", device_type)?;
    if slot == Slot::Default {
        return Err(Error::argument(
            "autocast",
            "device_type",
            "`cpu` or `cuda`",
            format!("`{device_type}`"),
        ));
    }
    if !dtype.is_half() {
        return Err(Error::argument(
            "autocast",
            "dtype",
            "f16 or bf16",
            dtype.to_string(),
        ));
    }
    let prev = cell(slot).with(|c| c.replace(Some(dtype)));
    Ok(AutocastGuard { slot, prev })
}

/// Disables autocast on every device type until the guards drop (kernels run with autocast off;
/// compiled graphs, whose casts were recorded at capture, run with it off too).
pub fn suspend() -> [AutocastGuard; 2] {
    let off = |slot: Slot| AutocastGuard {
        slot,
        prev: cell(slot).with(|c| c.replace(None)),
    };
    [off(Slot::Cpu), off(Slot::Cuda)]
}

/// The autocast dtype active for tensors on `device`, if any.
pub fn active_dtype(device: Device) -> Option<DType> {
    match device {
        Device::Cpu => CPU.with(|c| c.get()),
        Device::Cuda(_) => CUDA.with(|c| c.get()),
        Device::Meta => None,
    }
}

/// The autocast dtype of every device type (cpu, cuda): part of a compiled graph's guards, since
/// the casts autocast inserted were recorded into the graph.
///
/// ```
/// use tensorplay_core::{DType, autocast};
/// assert_eq!(autocast::state(), [None, None]);
/// let _g = autocast::autocast("cpu", DType::BF16)?;
/// assert_eq!(autocast::state(), [Some(DType::BF16), None]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn state() -> [Option<DType>; 2] {
    [CPU.with(|c| c.get()), CUDA.with(|c| c.get())]
}

/// True when autocast is on for any device type (the dispatcher's fast check).
pub fn any_active() -> bool {
    CPU.with(|c| c.get().is_some()) || CUDA.with(|c| c.get().is_some())
}

/// Casts every floating tensor in `args` (except f64, and tensors on other devices) to `dtype`.
pub(crate) fn cast_args(args: &[Value], device: Device, dtype: DType) -> Result<Vec<Value>> {
    let cast = |t: &Tensor| -> Result<Tensor> {
        if t.device() == device
            && t.dtype().is_float()
            && t.dtype() != DType::F64
            && !t.is_wrapped_number()
        {
            t.to_dtype(dtype)
        } else {
            Ok(t.clone())
        }
    };
    args.iter()
        .map(|v| {
            Ok(match v {
                Value::Tensor(t) => Value::Tensor(cast(t)?),
                Value::OptionalTensor(Some(t)) => Value::OptionalTensor(Some(cast(t)?)),
                Value::TensorList(ts) => {
                    Value::TensorList(ts.iter().map(cast).collect::<Result<_>>()?)
                }
                other => other.clone(),
            })
        })
        .collect()
}

/// What autocast does to one call's floating inputs (the op handle says which applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cast {
    /// Cast every floating input (not f64) to this dtype.
    To(DType),
    /// Cast to f32, but only when some input is f16/bf16 (f32 and f64 inputs stay as they are).
    WidenHalf,
}

/// The cast builtin `op`'s declared policy asks for under an autocast region of `region` dtype.
pub(crate) fn builtin_cast(op: &OpDef, region: DType) -> Option<Cast> {
    match op.autocast {
        AutocastPolicy::LowPrecision => Some(Cast::To(region)),
        AutocastPolicy::F32 => Some(Cast::WidenHalf),
        AutocastPolicy::Keep => None,
    }
}

/// Applies `cast` to the tensors of `args` on `device`; `None` when it changes nothing to do.
pub(crate) fn apply(cast: Cast, args: &[Value], device: Device) -> Result<Option<Vec<Value>>> {
    let target = match cast {
        Cast::To(dtype) => dtype,
        Cast::WidenHalf => {
            let needs = args
                .iter()
                .flat_map(Value::tensors)
                .any(|t| t.dtype().is_half());
            if !needs {
                return Ok(None);
            }
            DType::F32
        }
    };
    cast_args(args, device, target).map(Some)
}
