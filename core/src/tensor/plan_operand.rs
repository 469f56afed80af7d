//! Tensors as launch-plan operands: what `tensorplay-kernel`'s planner reads of a tensor (its
//! geometry, dtype, device, data address and storage identity).

use tensorplay_ir::{DType, Device, Result};
use tensorplay_kernel::plan::PlanOperand;

use super::Tensor;

impl PlanOperand for Tensor {
    fn shape(&self) -> &[usize] {
        Tensor::shape(self)
    }

    fn strides(&self) -> &[isize] {
        Tensor::strides(self)
    }

    fn dtype(&self) -> DType {
        Tensor::dtype(self)
    }

    fn device(&self) -> Device {
        Tensor::device(self)
    }

    fn address(&self) -> Result<*mut u8> {
        match self.device() {
            // A device address, carried as a pointer the CPU never dereferences.
            Device::Cuda(_) => Ok(self.data_ptr_cuda()? as *mut u8),
            _ => self.data_ptr_raw(),
        }
    }

    fn shares_storage(&self, other: &Tensor) -> bool {
        self.storage().same(other.storage())
    }
}
