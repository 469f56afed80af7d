//! Printing: `Debug` shows metadata, `Display` shows values (summarized when large).

use std::fmt;

use tensorplay_ir::DType;

use super::Tensor;

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}", self.meta())?;
        if self.device() == tensorplay_ir::Device::Cpu {
            f.write_str(", cpu")?;
        }
        if self.is_fake() {
            f.write_str(", fake")?;
        }
        if let Some(name) = self.grad_fn_name() {
            write!(f, ", grad_fn={name}")?;
        } else if self.requires_grad() {
            f.write_str(", requires_grad")?;
        }
        f.write_str(")")
    }
}

/// Elements shown per dim at each end when a tensor is summarized.
const EDGE: usize = 3;
/// Tensors with more elements than this are summarized.
const SUMMARIZE_ABOVE: usize = 1000;

/// The values of a tensor in row-major order, kept in a type that prints them exactly.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

impl Values {
    fn write(&self, f: &mut fmt::Formatter<'_>, i: usize) -> fmt::Result {
        match self {
            Values::Bool(v) => f.write_str(if v[i] { "True" } else { "False" }),
            Values::Int(v) => write!(f, "{}", v[i]),
            Values::Float(v) => {
                let x = v[i];
                if x.is_nan() {
                    f.write_str("nan")
                } else if x.is_infinite() {
                    f.write_str(if x > 0.0 { "inf" } else { "-inf" })
                } else {
                    write!(f, "{x:.4}")
                }
            }
        }
    }
}

fn write_nested(
    f: &mut fmt::Formatter<'_>,
    vals: &Values,
    shape: &[usize],
    strides: &[usize],
    base: usize,
    depth: usize,
    summarize: bool,
) -> fmt::Result {
    if shape.is_empty() {
        return vals.write(f, base);
    }
    let n = shape[0];
    f.write_str("[")?;
    let indices: Vec<Option<usize>> = if summarize && n > 2 * EDGE {
        (0..EDGE)
            .map(Some)
            .chain([None])
            .chain((n - EDGE..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    for (k, i) in indices.iter().enumerate() {
        if k > 0 {
            if shape.len() > 1 {
                write!(f, ",\n{}", " ".repeat(8 + depth))?;
            } else {
                f.write_str(", ")?;
            }
        }
        match i {
            Some(i) => write_nested(
                f,
                vals,
                &shape[1..],
                &strides[1..],
                base + i * strides[0],
                depth + 1,
                summarize,
            )?,
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_fake() {
            return write!(f, "tensor(<fake {}>)", self.meta());
        }
        let device = self.device();
        if device != tensorplay_ir::Device::Cpu {
            // Device values print from a host copy, with the device named (as PyTorch does).
            let Ok(host) = self.to_device(tensorplay_ir::Device::Cpu) else {
                return write!(f, "tensor(<unreadable {}>)", self.meta());
            };
            let text = host.to_string();
            return write!(f, "{}, device='{device}')", &text[..text.len() - 1]);
        }
        let dtype = self.dtype();
        let values = if dtype == DType::Bool {
            self.to_vec::<bool>().map(Values::Bool)
        } else if dtype.is_int() {
            // Through i64, not f64: integers beyond 2^53 must print exactly.
            self.to_dtype(DType::I64)
                .and_then(|t| t.to_vec::<i64>())
                .map(Values::Int)
        } else {
            self.to_vec_f64().map(Values::Float)
        };
        let Ok(values) = values else {
            return write!(f, "tensor(<unreadable {}>)", self.meta());
        };
        let shape = self.shape();
        let mut strides = vec![1usize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        f.write_str("tensor(")?;
        write_nested(
            f,
            &values,
            shape,
            &strides,
            0,
            0,
            self.numel() > SUMMARIZE_ABOVE,
        )?;
        write!(f, ", dtype={dtype})")
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn display_matches_pytorch_layout() {
        let t = Tensor::from_vec(vec![1.0f32, 2.5, f32::NAN, f32::NEG_INFINITY], &[2, 2]).unwrap();
        assert_eq!(
            t.to_string(),
            "tensor([[1.0000, 2.5000],\n        [nan, -inf]], dtype=f32)"
        );
        let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
        assert_eq!(b.to_string(), "tensor([True, False], dtype=bool)");
        assert_eq!(Tensor::scalar(3i64).to_string(), "tensor(3, dtype=i64)");
        let big = Tensor::zeros(&[2000], DType::I32).to_string();
        assert!(big.contains("..."));
        assert_eq!(
            Tensor::scalar(i64::MAX).to_string(),
            "tensor(9223372036854775807, dtype=i64)"
        );
        assert_eq!(
            Tensor::zeros(&[2, 0], DType::F32).to_string(),
            "tensor([[],\n        []], dtype=f32)"
        );
        assert_eq!(
            format!(
                "{:?}",
                Tensor::empty_fake(&[2], DType::F16, tensorplay_ir::Device::Cuda(0))
            ),
            "Tensor(f16[2]@cuda:0, fake)"
        );
    }
}
