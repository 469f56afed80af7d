//! Device types as registration arguments: `"cpu"`/`"cuda"` strings (the seed's spelling), a
//! [`Device`] value or a [`Slot`], one or many. Kernel registration (`register_kernel`) also takes
//! the device-agnostic slot's spellings — `default` and every `Composite…` key — as the seed's
//! `register_kernel` does; `custom_op`'s `device_types` names concrete devices only.

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

/// Parses a device type as `register_kernel` takes it: what [`parse_device_type`] accepts, and
/// `default` or any `Composite…` key (`CompositeExplicitAutograd`, `CompositeImplicitAutograd`,
/// …, in any case) for the device-agnostic slot.
///
/// ```
/// use tensorplay_runtime::library::Slot;
/// use tensorplay_runtime::library::device_types::parse_kernel_device_type;
/// assert_eq!(parse_kernel_device_type("op", "device_types", "cuda")?, Slot::Cuda);
/// assert_eq!(
///     parse_kernel_device_type("op", "device_types", "CompositeExplicitAutograd")?,
///     Slot::Default
/// );
/// assert_eq!(
///     parse_kernel_device_type("op", "device_types", "CompositeImplicitAutograd")?,
///     Slot::Default
/// );
/// assert!(parse_kernel_device_type("op", "device_types", "CPU").is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn parse_kernel_device_type(op: &str, arg: &str, s: &str) -> Result<Slot> {
    match s {
        "cpu" => Ok(Slot::Cpu),
        "cuda" => Ok(Slot::Cuda),
        _ if is_default_spelling(s) => Ok(Slot::Default),
        other => Err(Error::argument(
            op,
            arg,
            "a device type `cpu` or `cuda` (lower-case, no index), a Device value, or `default`/a \
             Composite… key for the device-agnostic slot",
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

    /// The slot as kernel registration reads it: [`slot`](DeviceType::slot), except that the
    /// device-agnostic slot's spellings (`default`, `Composite…`) name that slot.
    fn kernel_slot(&self, op: &str, arg: &str) -> Result<Slot> {
        self.slot(op, arg)
    }
}

/// `default` or a `Composite…` key (any case): the spellings of the device-agnostic slot.
fn is_default_spelling(s: &str) -> bool {
    Slot::parse("", "", s).is_ok_and(|slot| slot == Slot::Default)
}

impl DeviceType for &str {
    fn slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_device_type(op, arg, self)
    }
    fn kernel_slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_kernel_device_type(op, arg, self)
    }
    fn names_default_slot(&self) -> bool {
        is_default_spelling(self)
    }
}

impl DeviceType for String {
    fn slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_device_type(op, arg, self)
    }
    fn kernel_slot(&self, op: &str, arg: &str) -> Result<Slot> {
        parse_kernel_device_type(op, arg, self)
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

/// A list of device types for `register_kernel` and `custom_op(..).device_types(..)`; empty
/// means the device-agnostic slot.
///
/// ```
/// use tensorplay_runtime::library::{DeviceTypes, Slot};
/// use tensorplay_runtime::Device;
/// assert_eq!((&["cpu", "cuda"]).slots("op", "device_types")?, vec![Slot::Cpu, Slot::Cuda]);
/// assert_eq!(Device::Cuda(0).slots("op", "device_types")?, vec![Slot::Cuda]);
/// assert_eq!((&[] as &[&str]).slots("op", "device_types")?, vec![Slot::Default]);
/// assert!((&["CUDA"]).slots("op", "device_types").is_err());
/// // Kernel registration also reads the device-agnostic slot's spellings; `slots` does not.
/// let composite = &["CompositeExplicitAutograd"];
/// assert_eq!(composite.kernel_slots("op", "device_types")?, vec![Slot::Default]);
/// assert!(composite.slots("op", "device_types").is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub trait DeviceTypes {
    /// The device types, in order.
    fn device_types(&self) -> Vec<&dyn DeviceType>;

    /// The slots, deduplicated, in order; concrete devices only (`custom_op`'s `device_types`).
    fn slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(&self.device_types(), |d| d.slot(op, arg))
    }

    /// The slots as `register_kernel` reads them: also `default` and `Composite…` keys for the
    /// device-agnostic slot.
    fn kernel_slots(&self, op: &str, arg: &str) -> Result<Vec<Slot>> {
        collect(&self.device_types(), |d| d.kernel_slot(op, arg))
    }
}

fn collect(
    items: &[&dyn DeviceType],
    slot: impl Fn(&dyn DeviceType) -> Result<Slot>,
) -> Result<Vec<Slot>> {
    if items.is_empty() {
        return Ok(vec![Slot::Default]);
    }
    let mut slots = Vec::new();
    for d in items {
        let s = slot(*d)?;
        if !slots.contains(&s) {
            slots.push(s);
        }
    }
    Ok(slots)
}

fn each<T: DeviceType>(items: &[T]) -> Vec<&dyn DeviceType> {
    items.iter().map(|d| d as &dyn DeviceType).collect()
}

// Concrete impls (not generic over the element) so that `&[]` infers as `&[&str; 0]`.
impl<const N: usize> DeviceTypes for &[&str; N] {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(*self)
    }
}

impl DeviceTypes for &[&str] {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(self)
    }
}

impl DeviceTypes for &Vec<&str> {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(self)
    }
}

impl<const N: usize> DeviceTypes for [Device; N] {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(self)
    }
}

impl DeviceTypes for &[Device] {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(self)
    }
}

impl<const N: usize> DeviceTypes for [Slot; N] {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        each(self)
    }
}

impl DeviceTypes for &str {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        vec![self]
    }
}

impl DeviceTypes for Device {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        vec![self]
    }
}

impl DeviceTypes for Slot {
    fn device_types(&self) -> Vec<&dyn DeviceType> {
        vec![self]
    }
}
