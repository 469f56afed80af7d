//! Where a tensor lives.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A device: the host CPU, a CUDA GPU by index, or `meta` (shapes only, never data).
///
/// ```
/// use tensorplay_ir::Device;
/// assert_eq!("cuda:1".parse::<Device>().unwrap(), Device::Cuda(1));
/// assert_eq!(Device::Cuda(0).kind(), "cuda");
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(u16),
    Meta,
}

impl Device {
    /// The device type without index: `cpu`, `cuda` or `meta` (the kernel-slot name).
    pub const fn kind(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Meta => "meta",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            d => f.write_str(d.kind()),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `meta`, `cuda` (index 0) and `cuda:N`, case-insensitively.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::argument(
                "device",
                "name",
                "`cpu`, `meta`, `cuda` or `cuda:N`",
                format!("`{s}`"),
            )
        };
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "cpu" => Ok(Device::Cpu),
            "meta" => Ok(Device::Meta),
            "cuda" => Ok(Device::Cuda(0)),
            _ => {
                let idx = lower.strip_prefix("cuda:").ok_or_else(bad)?;
                idx.parse::<u16>().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for d in [Device::Cpu, Device::Meta, Device::Cuda(0), Device::Cuda(3)] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
        assert_eq!("CUDA".parse::<Device>().unwrap(), Device::Cuda(0));
        assert!("tpu".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
    }
}
