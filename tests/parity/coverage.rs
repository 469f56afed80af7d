//! Every op docs/ops.md lists has parity cases: a forward case, and a gradient case when it is
//! differentiable. A new op added to the tables without cases in `tests/data/parity.json`
//! fails `every_documented_op_has_parity_cases`; the exemptions below are the only way out, and
//! each says why.

use std::collections::BTreeSet;

use serde_json::Value as J;

/// Ops without a case of their own, and why.
const NO_CASE: &[(&str, &str)] = &[
    (
        "randint_seeded",
        "random: PyTorch's generator draws other numbers",
    ),
    (
        "bernoulli_seeded",
        "random: PyTorch's generator draws other numbers",
    ),
    (
        "bernoulli_p_seeded",
        "random: PyTorch's generator draws other numbers",
    ),
    ("randint", "random: PyTorch's generator draws other numbers"),
    (
        "bernoulli",
        "random: PyTorch's generator draws other numbers",
    ),
    (
        "bernoulli_p",
        "random: PyTorch's generator draws other numbers",
    ),
    ("dropout", "random: its mask comes from our generator"),
    (
        "dropout_global",
        "random: its mask comes from our generator",
    ),
    (
        "index_put_",
        "in-place form of index_put (index_put's cases), then copy_",
    ),
];

/// Ops whose forward runs inside another op's cases: (op, the op whose cases run it, whether
/// they are that op's gradient cases, why).
const COVERED_BY: &[(&str, &str, bool, &str)] = &[
    (
        "gelu_backward",
        "gelu",
        true,
        "what gelu's derivative records",
    ),
    ("conv2d_backward", "conv2d", true, "conv2d's derivative"),
    (
        "conv_transpose2d_backward",
        "conv_transpose2d",
        true,
        "conv_transpose2d's derivative",
    ),
    (
        "max_pool2d_with_indices_backward",
        "max_pool2d_with_indices",
        true,
        "max_pool2d_with_indices's derivative",
    ),
    (
        "avg_pool2d_backward",
        "avg_pool2d",
        true,
        "avg_pool2d's derivative",
    ),
    (
        "adaptive_avg_pool2d_backward",
        "adaptive_avg_pool2d",
        true,
        "adaptive_avg_pool2d's derivative",
    ),
    (
        "_fused_attention",
        "scaled_dot_product_attention",
        false,
        "the kernel scaled_dot_product_attention runs on CPU (PyTorch has no public twin)",
    ),
    (
        "_fused_attention_backward",
        "scaled_dot_product_attention",
        true,
        "scaled_dot_product_attention's derivative on CPU",
    ),
];

/// Ops that have no gradient to compare, and why. (The backward ops of `COVERED_BY` are
/// differentiable too — double backward — which these cases do not record.)
const NOT_DIFFERENTIABLE: &[(&str, &str)] = &[
    ("isnan", "bool result"),
    ("isinf", "bool result"),
    ("isfinite", "bool result"),
    ("bitwise_and", "integer/bool operands"),
    ("bitwise_or", "integer/bool operands"),
    ("bitwise_xor", "integer/bool operands"),
    ("bitwise_not", "integer/bool operands"),
    ("bitwise_left_shift", "integer operands"),
    ("bitwise_right_shift", "integer operands"),
    ("eq", "bool result"),
    ("ne", "bool result"),
    ("lt", "bool result"),
    ("le", "bool result"),
    ("gt", "bool result"),
    ("ge", "bool result"),
    ("logical_and", "bool result"),
    ("logical_or", "bool result"),
    ("logical_xor", "bool result"),
    ("logical_not", "bool result"),
    ("argmax", "integer result"),
    ("argmin", "integer result"),
    ("nonzero", "integer result"),
    ("argwhere", "integer result"),
    ("any", "bool result"),
    ("all", "bool result"),
    ("count_nonzero", "integer result"),
    ("floor_divide", "not differentiable (PyTorch neither)"),
    ("eye", "a factory: no tensor input"),
    ("linspace", "a factory: no tensor input"),
    ("gelu_backward", "double backward: not recorded"),
    ("conv2d_backward", "double backward: not recorded"),
    ("conv_transpose2d_backward", "double backward: not recorded"),
    (
        "max_pool2d_with_indices_backward",
        "double backward: not recorded",
    ),
    ("avg_pool2d_backward", "double backward: not recorded"),
    (
        "adaptive_avg_pool2d_backward",
        "double backward: not recorded",
    ),
    (
        "_fused_attention",
        "scaled_dot_product_attention's gradient cases run it",
    ),
    ("_fused_attention_backward", "double backward: not recorded"),
];

/// The op names of docs/ops.md's tables: the backticked names in the first column of every
/// table headed `op`, `method` or `function`, before the "PyTorch parity" section (whose table
/// lists deviations). `x.index(&[..])` and `Tensor::eye(n, m, dtype)` give `index` and `eye`.
pub(crate) fn documented_ops(text: &str) -> BTreeSet<String> {
    let mut ops = BTreeSet::new();
    let mut header: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("## PyTorch parity") {
            break;
        }
        let Some(row) = line.strip_prefix('|') else {
            header = None;
            continue;
        };
        let first = row.split('|').next().unwrap_or("").trim();
        let Some(h) = &header else {
            header = Some(first.to_string());
            continue;
        };
        if !matches!(h.as_str(), "op" | "method" | "function") || first.starts_with("---") {
            continue;
        }
        for name in first.split('`').skip(1).step_by(2) {
            let name = name
                .strip_prefix("Tensor::")
                .or_else(|| name.get(2..).filter(|_| name.get(1..2) == Some(".")))
                .unwrap_or(name);
            let ident: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !ident.is_empty() {
                ops.insert(ident);
            }
        }
    }
    ops
}

/// The ops of the recorded cases: (forward cases, gradient cases).
fn recorded_ops(data: &J) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut forward, mut grad) = (BTreeSet::new(), BTreeSet::new());
    for c in data["cases"].as_array().unwrap() {
        let op = c["op"].as_str().unwrap().to_string();
        if c.get("grad").is_some() {
            grad.insert(op);
        } else {
            forward.insert(op);
        }
    }
    (forward, grad)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// What `documented` lacks in the recorded forward and gradient ops, one line per gap.
fn missing(
    documented: &BTreeSet<String>,
    forward: &BTreeSet<String>,
    grad: &BTreeSet<String>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for op in documented {
        if NO_CASE.iter().any(|(o, _)| o == op) {
            continue;
        }
        match COVERED_BY.iter().find(|(o, ..)| o == op) {
            Some((_, by, true, _)) if !grad.contains(*by) => {
                missing.push(format!("{op}: no gradient case of {by}"))
            }
            Some((_, by, false, _)) if !forward.contains(*by) => {
                missing.push(format!("{op}: no case of {by}"))
            }
            Some(_) => {}
            None if !forward.contains(op) => missing.push(format!("{op}: no forward case")),
            None => {}
        }
        if !NOT_DIFFERENTIABLE.iter().any(|(o, _)| o == op) && !grad.contains(op) {
            missing.push(format!("{op}: no gradient case"));
        }
    }
    missing
}

#[test]
fn every_documented_op_has_parity_cases() {
    let documented = documented_ops(&read("docs/ops.md"));
    let data: J = serde_json::from_str(&read("tests/data/parity.json")).unwrap();
    let (forward, grad) = recorded_ops(&data);
    let missing = missing(&documented, &forward, &grad);
    assert!(
        missing.is_empty(),
        "ops in docs/ops.md without PyTorch parity cases (add them to scripts/parity/record.py \
         and regenerate tests/data/parity.json, see docs/ops.md \"PyTorch parity\"):\n{}",
        missing.join("\n")
    );
    // Every exemption names an op the tables still list.
    let exempt = NO_CASE.iter().map(|e| e.0);
    let exempt = exempt.chain(COVERED_BY.iter().map(|e| e.0));
    for op in exempt.chain(NOT_DIFFERENTIABLE.iter().map(|e| e.0)) {
        assert!(
            documented.contains(op),
            "exemption `{op}` is not in docs/ops.md's tables"
        );
    }
}

/// A documented op without cases is reported: forward, gradient, and through `COVERED_BY`.
#[test]
fn an_op_without_cases_is_reported() {
    let set = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let documented = set(&["new_op", "eq", "gelu_backward", "dropout", "tanh"]);
    let got = missing(&documented, &set(&["tanh", "eq"]), &set(&["tanh"]));
    assert_eq!(
        got,
        [
            "gelu_backward: no gradient case of gelu",
            "new_op: no forward case",
            "new_op: no gradient case"
        ]
    );
    assert!(
        missing(
            &documented,
            &set(&["tanh", "eq", "new_op"]),
            &set(&["tanh", "new_op", "gelu"])
        )
        .is_empty()
    );
}

/// The table reader finds the ops of each kind of table, and only in op tables.
#[test]
fn the_op_table_reader_reads_names() {
    let text = "\
| op | schema |
|---|---|
| `add`, `sub` | `add(Tensor self) -> Tensor` |
| `x.index(&[..])` | `x[...]` |

| method | PyTorch |
|---|---|
| `Tensor::eye(n, m, dtype)`, `p.bernoulli_seeded(seed)` | `torch.eye` |
| `sum_dtype(&dims, keepdim, dtype)` | `sum(..., dtype=)` |

| function | notes |
|---|---|
| `max_pool2d(input)` / `max_pool2d_with_indices(...)` | pools |

| flag | meaning |
|---|---|
| `not_an_op` | x |

## PyTorch parity

| op | what differs |
|---|---|
| `deviation_only` | x |
";
    let ops: Vec<String> = documented_ops(text).into_iter().collect();
    assert_eq!(
        ops,
        [
            "add",
            "bernoulli_seeded",
            "eye",
            "index",
            "max_pool2d",
            "max_pool2d_with_indices",
            "sub",
            "sum_dtype"
        ]
    );
    let real = documented_ops(&read("docs/ops.md"));
    for op in [
        "add",
        "gelu",
        "linear",
        "index_select",
        "scatter_reduce",
        "conv2d",
    ] {
        assert!(real.contains(op), "{op} not read from docs/ops.md");
    }
}
