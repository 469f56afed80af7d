//! Sample calls of the op table's entries (`ops::all_ops()`), shared by the op-table sweep
//! (`runtime/tests/op_table.rs`) and the compiled-training sweep (`compiler/tests/
//! training_ops.rs`), each including it with `#[path = "…/op_samples.rs"] mod op_samples;`.

use tensorplay_ir::schema::Schema;
use tensorplay_runtime::ops::OpDef;
use tensorplay_runtime::{DType, Tensor, Value};

/// Values away from 0, integers and half-integers (so floor/round/sign/remainder/clamp are
/// differentiable there), differing per tensor input.
pub fn data(op: &str, input: usize, n: usize) -> Vec<f64> {
    let base = [
        0.73, -1.21, 1.57, -0.64, 1.13, -1.87, 0.91, -0.38, 1.44, -1.06, 0.62, -1.69,
    ];
    let positive = matches!(
        op,
        "log" | "sqrt" | "rsqrt" | "reciprocal" | "log1p" | "pow" | "prod" | "log2" | "log10"
    ) || (op == "remainder" && input == 1);
    // Inside the domain of the inverse trigonometric functions and logit.
    let domain = |v: f64| match op {
        "asin" | "acos" | "atanh" => v * 0.5,
        "acosh" => v.abs() + 1.0,
        "logit" => v.abs() * 0.4 + 0.05,
        _ => v,
    };
    (0..n)
        .map(|i| {
            let v: f64 = base[(i * 5 + input * 7) % base.len()] * (1.0 + 0.1 * input as f64);
            domain(if positive { v.abs() } else { v })
        })
        .collect()
}

pub fn tensor(op: &str, input: usize, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    if op.starts_with("bitwise") {
        // Integer operands (shift amounts 0..6).
        let v: Vec<i64> = data(op, input, n)
            .iter()
            .map(|x| (x.abs() * 4.0) as i64)
            .collect();
        return Tensor::from_vec(v, shape).unwrap();
    }
    Tensor::from_vec(data(op, input, n), shape).unwrap()
}

/// A valid call of `op`: its positional arguments with tensors marked. Ops whose non-tensor
/// arguments have no usable default are listed by name.
pub enum Arg {
    T(Vec<usize>),
    List(Vec<Vec<usize>>),
    V(Value),
}

pub fn sample(op: &OpDef) -> Option<Vec<Arg>> {
    use Arg::*;
    let t = |s: &[usize]| T(s.to_vec());
    let v = |x: Value| V(x);
    Some(match op.name {
        "clamp" => vec![t(&[2, 3]), v(Value::Float(-1.0)), v(Value::Float(1.0))],
        "where" => vec![
            v(Value::Tensor(
                Tensor::from_vec(vec![true, false, true, true, false, false], &[2, 3]).unwrap(),
            )),
            t(&[2, 3]),
            t(&[2, 3]),
        ],
        "to_dtype" => vec![t(&[2, 3]), v(Value::DType(DType::F64))],
        "view" => vec![t(&[2, 3]), v(Value::IntList(vec![3, 2]))],
        "permute" => vec![t(&[2, 3]), v(Value::IntList(vec![1, 0]))],
        "expand" => vec![t(&[1, 3]), v(Value::IntList(vec![2, 3]))],
        "slice" => vec![
            t(&[4, 3]),
            v(Value::Int(0)),
            v(Value::Int(1)),
            v(Value::Int(3)),
        ],
        "slice_backward" => vec![
            t(&[2, 3]),
            v(Value::IntList(vec![4, 3])),
            v(Value::Int(0)),
            v(Value::Int(1)),
            v(Value::Int(3)),
            v(Value::Int(1)),
        ],
        "max_dim" | "min_dim" | "softmax" | "log_softmax" => vec![t(&[2, 3]), v(Value::Int(1))],
        "matmul" => vec![t(&[2, 3]), t(&[3, 2])],
        "gather" => vec![t(&[2, 3]), v(Value::Int(1)), v(Value::Tensor(index_2x2()))],
        "scatter" | "scatter_add" => vec![
            t(&[2, 3]),
            v(Value::Int(1)),
            v(Value::Tensor(index_2x2())),
            t(&[2, 2]),
        ],
        // "mean" divides by how many values met (exercising the count in the derivative).
        "scatter_reduce" => vec![
            t(&[2, 3]),
            v(Value::Int(1)),
            v(Value::Tensor(index_2x2())),
            t(&[2, 2]),
            v(Value::from("mean")),
        ],
        // Data-dependent output size: no fake kernel to compare with (tests/ops_issue12_index.rs).
        "nonzero" => return None,
        "flip" => vec![t(&[2, 3]), v(Value::IntList(vec![0, -1]))],
        "cumsum" => vec![t(&[2, 3]), v(Value::Int(1))],
        // A 3-long scan, so the gradient's exclusive products cover more than one step.
        "cumprod" => vec![t(&[2, 3]), v(Value::Int(1))],
        "diagonal" => vec![
            t(&[2, 3]),
            v(Value::Int(1)),
            v(Value::Int(1)),
            v(Value::Int(0)),
        ],
        "diagonal_backward" => vec![
            t(&[2]),
            v(Value::IntList(vec![3, 2])),
            v(Value::Int(-1)),
            v(Value::Int(0)),
            v(Value::Int(1)),
        ],
        "cat" | "stack" => vec![List(vec![vec![2, 3], vec![2, 3]])],
        // Stride, asymmetric padding and two groups: output [1, 4, 3, 2].
        "conv2d" => with_conv_sizes(vec![t(&[1, 2, 4, 4]), t(&[4, 1, 3, 3]), t(&[4])]),
        // Pooling: 3x2 windows, stride 2x1, padding 1, ceil_mode: output [1, 2, 3, 5]. The
        // sample data repeats every 12 elements, farther apart than a window reaches, so
        // windows hold no ties.
        "max_pool2d_with_indices" => vec![
            t(&[1, 2, 5, 4]),
            v(Value::IntList(vec![3, 2])),
            v(Value::IntList(vec![2, 1])),
            v(Value::IntList(vec![1, 1])),
            v(Value::IntList(vec![1, 1])),
            v(Value::Bool(true)),
        ],
        "max_pool2d_with_indices_backward" => {
            let idx: Vec<i64> = (0..30).map(|i| (i * 7) % 20).collect();
            vec![
                t(&[1, 2, 3, 5]),
                t(&[1, 2, 5, 4]),
                v(Value::Tensor(Tensor::from_vec(idx, &[1, 2, 3, 5]).unwrap())),
            ]
        }
        "avg_pool2d" | "avg_pool2d_backward" => {
            let mut a = if op.name == "avg_pool2d" {
                vec![t(&[1, 2, 5, 4])]
            } else {
                vec![t(&[1, 2, 3, 5]), t(&[1, 2, 5, 4])]
            };
            a.extend(
                [
                    Value::IntList(vec![3, 2]),
                    Value::IntList(vec![2, 1]),
                    Value::IntList(vec![1, 1]),
                    Value::Bool(true),
                    Value::Bool(false),
                    Value::None,
                ]
                .map(V),
            );
            a
        }
        "adaptive_avg_pool2d" => vec![t(&[1, 2, 5, 7]), v(Value::IntList(vec![3, 2]))],
        "adaptive_avg_pool2d_backward" => vec![t(&[1, 2, 3, 2]), t(&[1, 2, 5, 7])],
        "conv2d_backward" => {
            with_conv_sizes(vec![t(&[1, 4, 3, 2]), t(&[1, 2, 4, 4]), t(&[4, 1, 3, 3])])
        }
        // Stride, padding, output_padding and two groups: output [1, 2, 3, 6].
        "conv_transpose2d" => {
            with_transposed_sizes(vec![t(&[1, 4, 3, 2]), t(&[4, 1, 3, 3]), t(&[2])])
        }
        "conv_transpose2d_backward" => {
            with_transposed_sizes(vec![t(&[1, 2, 3, 6]), t(&[1, 4, 3, 2]), t(&[4, 1, 3, 3])])
        }
        _ => {
            // Tensors, then defaults: fine for elementwise and reduction ops.
            let schema = Schema::parse(&format!("tp::{}", op.schema)).ok()?;
            let mut args = Vec::new();
            for p in &schema.params {
                if p.ty.is_tensor() {
                    args.push(t(&[2, 3]));
                } else if p.default.is_none() {
                    return None;
                }
            }
            args
        }
    })
}

/// `tensors` followed by `conv2d`'s stride, padding (`[top, bottom, left, right]`), dilation
/// and groups in the samples.
fn with_conv_sizes(mut tensors: Vec<Arg>) -> Vec<Arg> {
    tensors.extend(
        [
            Value::IntList(vec![1, 2]),
            Value::IntList(vec![1, 0, 0, 1]),
            Value::IntList(vec![1, 1]),
            Value::Int(2),
        ]
        .map(Arg::V),
    );
    tensors
}

/// `tensors` followed by `conv_transpose2d`'s stride, padding, output_padding, groups and
/// dilation in the samples.
fn with_transposed_sizes(mut tensors: Vec<Arg>) -> Vec<Arg> {
    tensors.extend(
        [
            Value::IntList(vec![1, 2]),
            Value::IntList(vec![1, 0]),
            Value::IntList(vec![0, 1]),
            Value::Int(2),
            Value::IntList(vec![1, 1]),
        ]
        .map(Arg::V),
    );
    tensors
}

/// An int64 `[2, 2]` index into dim 1 of a `[2, 3]` tensor, distinct per row (so `scatter`'s
/// writes do not overwrite each other).
fn index_2x2() -> Tensor {
    Tensor::from_vec(vec![0i64, 2, 1, 0], &[2, 2]).unwrap()
}

/// The sample's values with tensors from `tensors` (in order) or as given.
pub fn values(args: &[Arg], tensors: &[Tensor]) -> Vec<Value> {
    let mut it = tensors.iter();
    args.iter()
        .map(|a| match a {
            Arg::T(_) => Value::Tensor(it.next().unwrap().clone()),
            Arg::List(l) => {
                Value::TensorList(l.iter().map(|_| it.next().unwrap().clone()).collect())
            }
            Arg::V(v) => v.clone(),
        })
        .collect()
}

pub fn shapes(args: &[Arg]) -> Vec<Vec<usize>> {
    args.iter()
        .flat_map(|a| match a {
            Arg::T(s) => vec![s.clone()],
            Arg::List(l) => l.clone(),
            Arg::V(_) => vec![],
        })
        .collect()
}
