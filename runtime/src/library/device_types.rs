//! Device types as registration arguments: `"cpu"`/`"cuda"` strings (the seed's spelling), a
//! [`Device`] value or a [`Slot`], one or many.

use tensorplay_ir::{Device, Error, Result};

use super::registry::Slot;

/// Parses a device-type string as `register_kernel` and `set_kernel_enabled` take it: lower-case
/// `cpu` or `cuda`, nothing else (PyTorch's `torch.library` spelling).
pub fn parse_device_type(op: &str, arg: &str, s: &str) -> Result<Slot> {
    match s {
        "cpu" => Ok(Slot::Cpu),
        "cuda" => Ok(Slot::Cuda),
        other => Err(Error::argument(
            op,
            arg,
            "a device type `cpu` or `cuda` (lower-case, no index) or a Device value",
            format!("`{other}`"),
        )),
    }
}

/// One device type: `"cpu"`, `Device::Cuda(0)`, `Slot::Cpu`, …
pub trait DeviceType {
    /// The slot it names; `op` and `arg` name the call in errors.
    fn slot(&self, op: &str, arg: &str) -> Result<Slot>;

    /// True for spellings of the device-agnostic slot (`default`, `Composite…`, `Slot::Default`),
    /// so callers that refuse it can say why.
    fn names_default_slot(&self) -> bool {
        false
    }
}

fn is_default_spelling(s: &str) -> bool {
    Slot::parse("", "", s).is_ok_and(|slot| slot == Slot::Default)
}

impl DeviceType for &str {
    fn slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_device_type(op, arg, self)
    }
    fn names_default_slot(&self) -> bool {
        is_default_spelling(self)
    }
}

impl DeviceType for String {
    fn slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_device_type(op, arg, self)
    }
    fn names_default_slot(&self) -> bool {
        is_default_spelling(self)
    }
}

impl DeviceType for Device {
    fn slot(&self, op: &str, arg: &str) -> Result<Slot> {
        Slot::for_device(*self)
            .ok_or_else(|| Error::argument(op, arg, "a cpu or cuda device", format!("{self}")))
    }
}

impl DeviceType for Slot {
    fn slot(&self, _op: &str, _arg: &str) -> Result<Slot> {
        Ok(*self)
    }
    fn names_default_slot(&self) -> bool {
        *self == Slot::Default
    }
}

/// A list of device types for `register_kernel`; empty means the device-agnostic slot.
///
/// ```
/// use tensorplay_runtime::library::{DeviceTypes, Slot};
/// use tensorplay_runtime::Device;
/// assert_eq!((&["cpu", "cuda"]).slots("op", "device_types")?, vec![Slot::Cpu, Slot::Cuda]);
/// assert_eq!(Device::Cuda(0).slots("op", "device_types")?, vec![Slot::Cuda]);
/// assert_eq!((&[] as &[&str]).slots("op", "device_types")?, vec![Slot::Default]);
/// assert!((&["CUDA"]).slots("op", "device_types").is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub trait DeviceTypes {
    /// The slots, deduplicated, in order.
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>>;
}

fn collect<T: DeviceType>(items: &[T], op: &str, arg: &str) -> Result<Vec<Slot>> {
    if items.is_empty() {
        return Ok(vec![Slot::Default]);
    }
    let mut slots = Vec::new();
    for d in items {
        let s = d.slot(op, arg)?;
        if !slots.contains(&s) {
            slots.push(s);
        }
    }
    Ok(slots)
}

// Concrete impls (not generic over the element) so that `&[]` infers as `&[&str; 0]`.
impl<const N: usize> DeviceTypes for &[&str; N] {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(*self, op, arg)
    }
}

impl DeviceTypes for &[&str] {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(self, op, arg)
    }
}

impl DeviceTypes for &Vec<&str> {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(self, op, arg)
    }
}

impl<const N: usize> DeviceTypes for [Device; N] {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(self, op, arg)
    }
}

impl DeviceTypes for &[Device] {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(self, op, arg)
    }
}

impl<const N: usize> DeviceTypes for [Slot; N] {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(self, op, arg)
    }
}

impl DeviceTypes for &str {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(&[*self], op, arg)
    }
}

impl DeviceTypes for Device {
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(&[*self], op, arg)
    }
}

impl DeviceTypes for Slot {
    fn slots(&self, _op: &str, _arg: &str) -> Result<Vec<Slot>> {
        Ok(vec![*self])
    }
}
