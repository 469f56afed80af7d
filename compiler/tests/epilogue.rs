//! Matmul epilogues: a matmul whose product only the following pointwise region reads runs with
//! that region, one panel of rows per pool thread (`compiler/src/epilogue.rs`). Compiled results
//! must match eager for every size class the panel split meets (one panel on the calling thread,
//! one per thread, a shorter last one, rows not a multiple of the vector width), for every kind
//! of epilogue input (a row bias, a column, a full residual), and the pairs that must not fuse
//! must not.

use tensorplay_compiler::compile;
use tensorplay_ir::{DType, Result};
use tensorplay_runtime::Tensor;

#[path = "common/graphs.rs"]
mod graphs;
use graphs::{graph_of, max_rel_diff};

fn layer(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    // gelu(x @ w + b), then a second product with a residual and a column scale: two epilogues.
    let h = xs[0].matmul(&xs[1])?.add(&xs[2])?.gelu("tanh")?;
    let y = h.matmul(&xs[3])?.add(&xs[0])?.mul(&xs[4])?.relu()?;
    Ok(vec![y])
}

#[test]
fn fused_layers_match_eager_at_every_panel_split() -> Result<()> {
    // (m, k, hidden): one row; odd sizes (one panel); the quickstart's; an odd row count (a
    // shorter last panel on two threads); many rows of an odd width.
    for (i, &(m, k, hidden)) in [
        (1, 3, 5),
        (7, 5, 37),
        (64, 128, 512),
        (301, 16, 1000),
        (1030, 8, 129),
    ]
    .iter()
    .enumerate()
    {
        for dtype in [DType::F32, DType::F64] {
            let seed = 10 * i as u64;
            let inputs = [
                Tensor::randn_seeded(&[m, k], dtype, seed)?,
                Tensor::randn_seeded(&[k, hidden], dtype, seed + 1)?.mul_scalar(0.3)?,
                Tensor::randn_seeded(&[hidden], dtype, seed + 2)?,
                Tensor::randn_seeded(&[hidden, k], dtype, seed + 3)?.mul_scalar(0.1)?,
                Tensor::randn_seeded(&[m, 1], dtype, seed + 4)?,
            ];
            let graph = graph_of(layer, &inputs)?;
            let plan = graph.explain();
            assert_eq!(
                plan.matches("matmul epilogue:").count(),
                2,
                "both products fuse:\n{plan}"
            );
            let want = layer(&inputs)?.remove(0);
            // Twice: the second call reuses the arena's product buffer and the kernel.
            for call in 0..2 {
                let got = graph.run(&inputs)?.remove(0);
                let d = max_rel_diff(&got, &want)?;
                let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
                assert!(
                    d <= tol,
                    "[{m}, {k}] x [{k}, {hidden}] {dtype}, call {call}: relative difference {d}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn products_read_elsewhere_or_returned_do_not_fuse() -> Result<()> {
    let x = Tensor::randn_seeded(&[9, 6], DType::F32, 1)?;
    let w = Tensor::randn_seeded(&[6, 11], DType::F32, 2)?;
    let inputs = [x, w];
    type Case = fn(&[Tensor]) -> Result<Vec<Tensor>>;
    let cases: [(&str, Case); 3] = [
        ("the product is also an output", |xs| {
            let p = xs[0].matmul(&xs[1])?;
            Ok(vec![p.relu()?, p])
        }),
        ("a later step reads the product", |xs| {
            let p = xs[0].matmul(&xs[1])?;
            let a = p.relu()?;
            Ok(vec![a.cumsum(0, None)?.add(&p)?])
        }),
        ("a batched product", |xs| {
            let b = xs[0].unsqueeze(0)?.expand(&[2, 9, 6])?;
            Ok(vec![b.matmul(&xs[1])?.exp()?])
        }),
    ];
    for (what, f) in cases {
        let graph = graph_of(f, &inputs)?;
        let plan = graph.explain();
        assert!(!plan.contains("matmul epilogue"), "{what}:\n{plan}");
        for (got, want) in graph.run(&inputs)?.iter().zip(f(&inputs)?) {
            assert!(max_rel_diff(got, &want)? <= 1e-5, "{what}");
        }
    }
    Ok(())
}

#[test]
fn half_precision_products_run_unfused_and_match_eager() -> Result<()> {
    // The fused path computes f32/f64 products; f16 falls back per call (same results as eager).
    let f = |xs: &[Tensor]| Ok(vec![xs[0].matmul(&xs[1])?.add(&xs[2])?.relu()?]);
    let inputs = [
        Tensor::randn_seeded(&[20, 8], DType::F16, 1)?,
        Tensor::randn_seeded(&[8, 12], DType::F16, 2)?,
        Tensor::randn_seeded(&[12], DType::F16, 3)?,
    ];
    let compiled = compile(f);
    let got = compiled.call(&inputs)?.remove(0);
    let want = f(&inputs)?.remove(0);
    assert_eq!(got.to_vec_f64()?, want.to_vec_f64()?);
    Ok(())
}
