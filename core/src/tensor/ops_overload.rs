//! Operator overloading: `&a + &b`, `&a * 2.0`, `-&a`. Results are `Result<Tensor>` because shapes
//! may not broadcast; write `(&a + &b)?`.

use std::ops::{Add, Div, Mul, Neg, Sub};

use tensorplay_ir::Result;

use super::Tensor;

macro_rules! overload {
    ($Trait:ident, $method:ident, $scalar_method:ident) => {
        impl $Trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $Trait<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(self, &rhs)
            }
        }
        impl $Trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }
        impl $Trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self, &rhs)
            }
        }
        impl $Trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar_method(rhs)
            }
        }
        impl $Trait<f64> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.$scalar_method(rhs)
            }
        }
        impl $Trait<&Tensor> for f64 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::wrapped_scalar(self.into()).$method(rhs)
            }
        }
    };
}

overload!(Add, add, add_scalar);
overload!(Sub, sub, sub_scalar);
overload!(Mul, mul, mul_scalar);
overload!(Div, div, div_scalar);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
