//! Sweeps the op table (`ops::all_ops()`): every entry is complete. Elementwise ops have a
//! scalar lowering whose operand count matches the schema, a dtype rule and a cost; every op
//! with a sample runs on fake tensors (its meta rule) with the shapes and dtypes of the real
//! run; every differentiable op passes gradcheck. A new op without a sample the sweep can
//! build fails here, so nothing is forgotten silently.

use tensorplay_ir::graph::Attr;
use tensorplay_ir::schema::Schema;
use tensorplay_ir::{DType, Device, OpClass};
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::ops::{self, Kernel, Lower, OpDef};
use tensorplay_runtime::{Result, Tensor, Value};

/// Values away from 0, integers and half-integers (so floor/round/sign/remainder/clamp are
/// differentiable there), differing per tensor input.
fn data(op: &str, input: usize, n: usize) -> Vec<f64> {
    let base = [
        0.73, -1.21, 1.57, -0.64, 1.13, -1.87, 0.91, -0.38, 1.44, -1.06, 0.62, -1.69,
    ];
    let positive = matches!(
        op,
        "log" | "sqrt" | "rsqrt" | "reciprocal" | "log1p" | "pow" | "prod"
    ) || (op == "remainder" && input == 1);
    (0..n)
        .map(|i| {
            let v: f64 = base[(i * 5 + input * 7) % base.len()] * (1.0 + 0.1 * input as f64);
            if positive { v.abs() } else { v }
        })
        .collect()
}

fn tensor(op: &str, input: usize, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(data(op, input, n), shape).unwrap()
}

/// A valid call of `op`: its positional arguments with tensors marked. Ops whose non-tensor
/// arguments have no usable default are listed by name.
enum Arg {
    T(Vec<usize>),
    List(Vec<Vec<usize>>),
    V(Value),
}

fn sample(op: &OpDef) -> Option<Vec<Arg>> {
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
        "cat" | "stack" => vec![List(vec![vec![2, 3], vec![2, 3]])],
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

/// The sample's values with tensors from `tensors` (in order) or as given.
fn values(args: &[Arg], tensors: &[Tensor]) -> Vec<Value> {
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

fn shapes(args: &[Arg]) -> Vec<Vec<usize>> {
    args.iter()
        .flat_map(|a| match a {
            Arg::T(s) => vec![s.clone()],
            Arg::List(l) => l.clone(),
            Arg::V(_) => vec![],
        })
        .collect()
}

fn qualname(op: &OpDef) -> String {
    format!("tp::{}", op.name)
}

#[test]
fn every_elementwise_op_has_a_lowering_dtype_rule_and_cost() {
    for op in ops::all_ops() {
        if op.class != OpClass::Elementwise || matches!(op.kernel, Kernel::Mutate { .. }) {
            continue;
        }
        let Lower::Pointwise(p) = op.lower else {
            panic!("{}: elementwise but no scalar lowering", op.name);
        };
        // The expression builds from the schema's defaults (no attributes) and from a sample's.
        let expr = (p.expr)(&[]).unwrap_or_else(|e| panic!("{}: {e}", op.name));
        let schema = Schema::parse(&format!("tp::{}", op.schema)).unwrap();
        let tensors = schema.params.iter().filter(|q| q.ty.is_tensor()).count();
        assert_eq!(
            expr.arity(),
            tensors,
            "{}: lowering arity vs schema",
            op.name
        );
        // A cost is defined for every op of the expression; transcendental lowerings weigh more.
        let _ = expr.cost();
        let _ = p.dtype;
        if let Some(a) = sample(op) {
            let attrs: Vec<Attr> = a
                .iter()
                .filter_map(|x| match x {
                    Arg::V(Value::Float(f)) => Some(Attr::Float(*f)),
                    _ => None,
                })
                .collect();
            let refs: Vec<&Attr> = attrs.iter().collect();
            (p.expr)(&refs).unwrap_or_else(|e| panic!("{}: {e}", op.name));
        }
    }
}

#[test]
fn costs_follow_the_work() {
    let cost = |op: &OpDef| match op.lower {
        Lower::Pointwise(p) => (p.expr)(&[]).unwrap().cost(),
        _ => unreachable!(),
    };
    use tensorplay_runtime::ops::{activation, binary, unary};
    assert_eq!(cost(&binary::ADD), 0);
    assert_eq!(cost(&unary::EXP), 8);
    assert_eq!(cost(&unary::LOG1P), 8);
    // softplus: exp + log1p + one division.
    assert_eq!(cost(&activation::SOFTPLUS), 17);
    // remainder: one division.
    assert_eq!(cost(&binary::REMAINDER), 1);
}

#[test]
fn meta_rules_match_real_runs() {
    for op in ops::all_ops() {
        if matches!(op.kernel, Kernel::Mutate { .. }) {
            continue;
        }
        let Some(args) = sample(op) else {
            assert!(
                op.derivative.is_none() && op.class != OpClass::Elementwise,
                "{}: no sample for a differentiable or elementwise op",
                op.name
            );
            continue;
        };
        let real: Vec<Tensor> = shapes(&args)
            .iter()
            .enumerate()
            .map(|(i, s)| tensor(op.name, i, s))
            .collect();
        let fake: Vec<Tensor> = real
            .iter()
            .map(|t| Tensor::empty_fake(t.shape(), t.dtype(), Device::Cpu))
            .collect();
        let got = ops::call(&qualname(op), &values(&args, &real))
            .unwrap_or_else(|e| panic!("{}: {e}", op.name));
        let meta = ops::call(&qualname(op), &values(&args, &fake))
            .unwrap_or_else(|e| panic!("{} on fake tensors: {e}", op.name));
        assert_eq!(got.len(), meta.len(), "{}", op.name);
        for (g, m) in got.iter().zip(&meta) {
            assert!(m.is_fake(), "{}", op.name);
            assert_eq!(g.shape(), m.shape(), "{}", op.name);
            assert_eq!(g.dtype(), m.dtype(), "{}", op.name);
        }
    }
}

#[test]
fn every_differentiable_op_passes_gradcheck() {
    let mut checked = 0;
    for op in ops::all_ops() {
        if op.derivative.is_none() || matches!(op.kernel, Kernel::Mutate { .. }) {
            continue;
        }
        let args = sample(op).unwrap_or_else(|| panic!("{}: no gradcheck sample", op.name));
        let inputs: Vec<Tensor> = shapes(&args)
            .iter()
            .enumerate()
            .map(|(i, s)| tensor(op.name, i, s).requires_grad_(true).unwrap())
            .collect();
        let name = qualname(op);
        let f = |xs: &[Tensor]| -> Result<Tensor> {
            Ok(ops::call(&name, &values(&args, xs))?.swap_remove(0))
        };
        gradcheck(f, &inputs, GradcheckOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", op.name));
        checked += 1;
    }
    assert!(checked > 40, "only {checked} ops checked");
}
