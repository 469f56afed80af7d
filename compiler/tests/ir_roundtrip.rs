//! The IR text round trip over the differential fuzzer's random programs: every graph capture
//! records (static and dynamic shapes), and the graph the compiler keeps after its passes, prints
//! as text that `Graph::parse` reads back into a graph that validates, prints identically, and has
//! the same nodes (kinds, classes, attributes, metadata) in the same order.
//!
//! `TP_ROUNDTRIP_CASES` sets the number of programs (default 1000); the seed is the fuzzer's
//! (`TP_FUZZ_SEED`).

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::tp_compile;
use tensorplay_ir::graph::{Graph, Node};
use tensorplay_ir::{OpClass, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::library::registry;

#[path = "common/fuzzgen.rs"]
mod fuzzgen;

use fuzzgen::{DEFAULT_SEED, InputSpec, Program, env_u64, program_strategy, seed_bytes};

/// The runtime's class of an op, the resolver every compiler-side parse uses.
fn class_of(name: &str) -> Option<OpClass> {
    registry().find(name).map(|op| op.class())
}

fn nodes_in_order(g: &Graph) -> Vec<Node> {
    g.topo_order()
        .unwrap()
        .into_iter()
        .map(|id| g.node(id).unwrap().clone())
        .collect()
}

/// print → parse → print, with the checks of the module doc.
fn round_trip(what: &str, g: &Graph) -> Result<(), String> {
    let text = g.to_string();
    let parsed = Graph::parse(&text, class_of).map_err(|e| format!("{what}: {e}\n{text}"))?;
    parsed
        .validate()
        .map_err(|e| format!("{what}: the parsed graph is invalid: {e}\n{text}"))?;
    let again = parsed.to_string();
    if again != text {
        return Err(format!(
            "{what}: printed differently after parsing\n--- printed\n{text}--- reparsed\n{again}"
        ));
    }
    // Float attributes compare by bits; a NaN keeps its bits because the fuzzer's NaNs are
    // Rust's default NaN, which is what `nan` parses to.
    let (a, b) = (nodes_in_order(g), nodes_in_order(&parsed));
    if a != b {
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!(
            "{what}: node {first} differs after parsing: {:?} vs {:?}\n{text}",
            a.get(first),
            b.get(first)
        ));
    }
    Ok(())
}

fn check(p: &Program) -> Result<usize, String> {
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .map(InputSpec::build)
        .collect::<tensorplay_runtime::Result<_>>()
        .map_err(|e| format!("building the inputs failed: {e}"))?;
    let p = p.repaired(&inputs);
    let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
    let mut checked = 0;
    for dynamic in [false, true] {
        let body = p.clone();
        let Ok(g) = capture(
            move |xs| Ok(body.trace(xs)?.outputs),
            &metas,
            CaptureOptions { dynamic },
        ) else {
            continue; // eager rejects the program; capture does too
        };
        round_trip(&format!("captured graph (dynamic: {dynamic})"), &g)?;
        checked += 1;
        if let Ok(c) = tp_compile(&g) {
            round_trip("graph after the passes", c.graph())?;
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn printed_graphs_of_random_programs_parse_back() {
    let cases = env_u64("TP_ROUNDTRIP_CASES").unwrap_or(1000) as u32;
    let seed = env_u64("TP_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 1024,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let checked = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&program_strategy(), |p| {
        let n = check(&p).map_err(TestCaseError::fail)?;
        checked.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    let checked = checked.into_inner();
    eprintln!("ir round trip: {checked} graphs parsed back");
    match result {
        Ok(()) => assert!(
            checked > cases as usize,
            "too few graphs were captured: {checked}"
        ),
        Err(TestError::Fail(why, p)) => {
            panic!("round trip failed (TP_FUZZ_SEED={seed:#x}); shrunk program:\n{p}\n{why}")
        }
        Err(TestError::Abort(why)) => panic!("aborted: {why}"),
    }
}
