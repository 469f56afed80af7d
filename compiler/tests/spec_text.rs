//! The kernel spec text round trip over the specs the compiler really lowers: every region of
//! every `.tpir` file test (the pass tests and the kernel tests), and every region of the
//! differential fuzzer's random programs after the compiler's passes. Each spec prints as text
//! that `KernelSpec::parse` reads back into an equal spec (float literals by their bits) that
//! prints identically.
//!
//! `TP_SPEC_ROUNDTRIP_CASES` sets the number of random programs (default 1000); the seed is the
//! fuzzer's (`TP_FUZZ_SEED`).

use std::path::Path;

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::codegen::kernel::{KernelSpec, lower};
use tensorplay_compiler::passes::fusion::partition;
use tensorplay_compiler::tp_compile;
use tensorplay_ir::graph::Graph;
use tensorplay_ir::{OpClass, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::library::registry;

#[path = "common/fuzzgen.rs"]
mod fuzzgen;

use fuzzgen::{DEFAULT_SEED, InputSpec, Program, env_u64, program_strategy, seed_bytes};

fn class_of(name: &str) -> Option<OpClass> {
    registry().find(name).map(|op| op.class())
}

/// print → parse → equal → same text.
fn round_trip(what: &str, spec: &KernelSpec) -> Result<(), String> {
    let text = spec.to_string();
    let parsed = KernelSpec::parse(&text).map_err(|e| format!("{what}: {e}\n{text}"))?;
    if parsed != *spec {
        return Err(format!(
            "{what}: parses to another spec\n--- printed\n{text}--- parsed (debug)\n{parsed:?}\n--- original (debug)\n{spec:?}"
        ));
    }
    let again = parsed.to_string();
    if again != text {
        return Err(format!(
            "{what}: printed differently after parsing\n--- printed\n{text}--- reparsed\n{again}"
        ));
    }
    Ok(())
}

/// Round-trips the spec of every region of `g` that lowers; returns how many.
fn round_trip_regions(what: &str, g: &Graph) -> Result<usize, String> {
    let plan = partition(g).map_err(|e| format!("{what}: partition failed: {e}"))?;
    let mut n = 0;
    for region in &plan.regions {
        if let Ok(lowered) = lower(g, region) {
            round_trip(&format!("{what}, region {}", region.id), &lowered.spec)?;
            n += 1;
        }
    }
    Ok(n)
}

/// The graph of a `.tpir` file: from its first line that is not a comment to its closing `}`.
fn graph_text(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if out.is_empty() && (line.starts_with(';') || line.trim().is_empty()) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if line.trim_end() == "}" {
            break;
        }
    }
    out
}

#[test]
fn specs_of_the_file_tests_parse_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut specs = 0;
    let mut failures = Vec::new();
    for dir in [root.clone(), root.join("kernels")] {
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tpir"))
            .collect();
        paths.sort();
        for path in paths {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let g = match Graph::parse(&graph_text(&text), class_of) {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
            match round_trip_regions(&name, &g) {
                Ok(n) => specs += n,
                Err(e) => failures.push(e),
            }
        }
    }
    eprintln!("spec text: {specs} specs of the file tests parsed back");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(specs >= 40, "too few specs: {specs}");
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
        if let Ok(c) = tp_compile(&g) {
            for region in &c.plan().regions {
                if let Ok(lowered) = lower(c.graph(), region) {
                    let what = format!("region {} (dynamic: {dynamic})", region.id);
                    round_trip(&what, &lowered.spec)?;
                    checked += 1;
                }
            }
        }
    }
    Ok(checked)
}

#[test]
fn specs_of_random_programs_parse_back() {
    let cases = env_u64("TP_SPEC_ROUNDTRIP_CASES").unwrap_or(1000) as u32;
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
    eprintln!("spec text: {checked} specs of random programs parsed back");
    match result {
        Ok(()) => assert!(
            checked > cases as usize,
            "too few specs were lowered: {checked}"
        ),
        Err(TestError::Fail(why, p)) => {
            panic!("round trip failed (TP_FUZZ_SEED={seed:#x}); shrunk program:\n{p}\n{why}")
        }
        Err(TestError::Abort(why)) => panic!("aborted: {why}"),
    }
}
