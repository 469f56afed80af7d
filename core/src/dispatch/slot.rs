//! Kernel slots: where a custom op's kernels, autocast dtypes and enable flags are kept — one
//! per concrete device type, plus the device-agnostic default.

use std::fmt;

use tensorplay_ir::{Device, Error, Result};

/// A kernel slot: a concrete device type, or the device-agnostic default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    Cpu,
    Cuda,
    Default,
}

impl Slot {
    /// Parses a device type or dispatch key: `cpu`/`CPU`, `cuda`/`CUDA`, `default`, and every
    /// `Composite…` spelling (→ `Default`). Device indices (`cuda:0`) and other devices are errors.
    pub fn parse(op: &str, arg: &str, s: &str) -> Result<Slot> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "cpu" => Ok(Slot::Cpu),
            "cuda" => Ok(Slot::Cuda),
            "default" => Ok(Slot::Default),
            _ if lower.starts_with("composite") => Ok(Slot::Default),
            _ => Err(Error::argument(
                op,
                arg,
                "`cpu`, `cuda`, `default` or a Composite… dispatch key",
                format!("`{s}`"),
            )),
        }
    }

    /// The slot that serves tensors on `device` (meta has none).
    pub fn for_device(device: Device) -> Option<Slot> {
        match device {
            Device::Cpu => Some(Slot::Cpu),
            Device::Cuda(_) => Some(Slot::Cuda),
            Device::Meta => None,
        }
    }

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Slot::Cpu => "cpu",
            Slot::Cuda => "cuda",
            Slot::Default => "default",
        }
    }
}

impl Slot {
    /// Every slot, in order.
    pub const ALL: [Slot; 3] = [Slot::Cpu, Slot::Cuda, Slot::Default];

    /// The slot's position in [`Slot::ALL`] (for per-slot arrays).
    pub fn index(self) -> usize {
        match self {
            Slot::Cpu => 0,
            Slot::Cuda => 1,
            Slot::Default => 2,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
