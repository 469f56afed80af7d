//! Tensor metadata without data: what fake kernels compute and what every IR node carries.

use std::fmt;

use crate::device::Device;
use crate::dtype::DType;
use crate::shape::{Dim, SymShape, fmt_shape};

/// Shape (possibly symbolic), dtype and device of a tensor.
///
/// ```
/// use tensorplay_ir::{DType, Device, TensorMeta};
/// let m = TensorMeta::new(&[2, 3], DType::F32, Device::Cpu);
/// assert_eq!(m.to_string(), "f32[2, 3]");
/// assert_eq!(m.static_shape().unwrap().as_slice(), &[2, 3]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub shape: SymShape,
    pub dtype: DType,
    pub device: Device,
}

impl TensorMeta {
    /// Metadata with a fully static shape.
    pub fn new(shape: &[usize], dtype: DType, device: Device) -> Self {
        TensorMeta {
            shape: shape.iter().map(|&d| Dim::Static(d)).collect(),
            dtype,
            device,
        }
    }

    /// Rank (number of dims).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The concrete shape, if no dim is symbolic.
    pub fn static_shape(&self) -> Option<crate::shape::Shape> {
        self.shape.iter().map(|d| d.as_static()).collect()
    }
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, fmt_shape(&self.shape))?;
        if self.device != Device::Cpu {
            write!(f, "@{}", self.device)?;
        }
        Ok(())
    }
}
