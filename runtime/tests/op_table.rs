//! Sweeps the op table (`ops::all_ops()`): every entry is complete. Elementwise ops have a
//! scalar lowering whose operand count matches the schema, a dtype rule and a cost; every op
//! with a sample runs on fake tensors (its meta rule) with the shapes and dtypes of the real
//! run; every differentiable op passes gradcheck. A new op without a sample the sweep can
//! build fails here, so nothing is forgotten silently.

use tensorplay_ir::graph::Attr;
use tensorplay_ir::schema::Schema;
use tensorplay_ir::{Device, OpClass};
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::ops::{self, Kernel, Lower, OpDef};
use tensorplay_runtime::{Result, Tensor, Value};

#[path = "common/op_samples.rs"]
mod op_samples;
use op_samples::{Arg, sample, shapes, tensor, values};

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
