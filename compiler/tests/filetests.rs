//! File tests: every `compiler/filetests/*.tpir` holds a graph in the printed IR syntax, the
//! expected outputs of the passes, and run lines checking compiled == eager.
//!
//! ```text
//! ; Free text: what the test is about.
//! ; pass: dce                         (optional: run dead-code elimination first)
//! ; run: shapes [4, 8] [8]            (one input shape per graph input; seed=N, tol=... optional)
//! graph(%x: f32[s0, 8], %b: f32[8]) {
//!   %0 = tp::add(%x, %b) : f32[s0, 8]
//!   return (%0)
//! }
//! ; plan:                             (the expected `FusionPlan::explain`)
//! ; fusion plan: 1 step (1 region, 0 barriers, 0 free views)
//! ; ...
//! ; buffers:                          (optional: the expected buffer plan)
//! ; ...
//! ; graph:                            (optional: the graph after the `; pass:` passes)
//! ; ...
//! ```
//!
//! Ops take their class from the runtime's registry; an op it does not know states its class in
//! the line's comment (`# class: opaque`). For each file the runner parses the graph (and checks
//! that its printed form parses back to the same text), partitions it, checks the plan's
//! structural invariants and compares the expected sections. Each run line makes seeded inputs
//! of the given shapes (the fuzzer's data: moderate values with NaN, ±inf, ±0 and extremes mixed
//! in) and compares `CompiledGraph::run` with `CompiledGraph::interpret` (eager kernels, node by
//! node) under the numerics contract: bit-identical by default, `tol=value` (NaN-aware `==`),
//! `tol=ulps:N` or `tol=abs:X` where the file says so.
//!
//! Failures are collected over all files and reported with the file name and a line diff.
//! `TP_FILETESTS_BLESS=1` rewrites the expected sections from the actual output instead.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use tensorplay_compiler::passes::buffer_plan;
use tensorplay_compiler::passes::dce::dce;
use tensorplay_compiler::passes::fusion::partition;
use tensorplay_compiler::tp_compile;
use tensorplay_ir::OpClass;
use tensorplay_ir::graph::Graph;

#[path = "common/filetest.rs"]
mod filetest;
use filetest::{blessing, class_of, render, tpir_paths, write_blessed};
use tensorplay_runtime::{Result, Tensor};

#[path = "common/fuzzgen.rs"]
mod fuzzgen;
#[path = "common/numerics.rs"]
mod numerics;
#[path = "common/plans.rs"]
mod plans;

use numerics::{Tol, compare};

/// An expected-output section of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// The graph after the passes the file asks for (`; pass: dce`).
    Graph,
    Plan,
    Buffers,
}

impl Section {
    fn marker(self) -> &'static str {
        match self {
            Section::Graph => "; graph:",
            Section::Plan => "; plan:",
            Section::Buffers => "; buffers:",
        }
    }

    fn from_marker(line: &str) -> Option<Section> {
        [Section::Graph, Section::Plan, Section::Buffers]
            .into_iter()
            .find(|s| line.trim_end() == s.marker())
    }
}

/// One `; run:` line.
#[derive(Debug)]
struct Run {
    line: usize,
    shapes: Vec<Vec<usize>>,
    seed: u64,
    tol: Tol,
}

/// A parsed `.tpir` file.
struct FileTest {
    /// Everything before the first expected section, kept verbatim when blessing.
    head: String,
    graph_text: String,
    dce: bool,
    runs: Vec<Run>,
    expected: Vec<(Section, String)>,
}

fn parse_shapes(spec: &str) -> std::result::Result<Vec<Vec<usize>>, String> {
    let mut shapes = Vec::new();
    let mut rest = spec.trim();
    while !rest.is_empty() {
        let inner = rest
            .strip_prefix('[')
            .ok_or_else(|| format!("expected `[` in shapes, found `{rest}`"))?;
        let end = inner
            .find(']')
            .ok_or_else(|| "unclosed `[` in shapes".to_string())?;
        let dims = inner[..end]
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| d.parse().map_err(|_| format!("bad size `{d}`")))
            .collect::<std::result::Result<Vec<usize>, String>>()?;
        shapes.push(dims);
        rest = inner[end + 1..].trim_start();
    }
    Ok(shapes)
}

fn parse_run(line: usize, spec: &str) -> std::result::Result<Run, String> {
    let spec = spec.trim().strip_prefix("shapes").ok_or_else(|| {
        "a run line reads `; run: shapes [..] [..] [seed=N] [tol=...]`".to_string()
    })?;
    let mut shapes_part = spec;
    let mut seed = 1;
    let mut tol = Tol::Exact;
    // Options follow the last `]`.
    if let Some(i) = spec.rfind(']') {
        shapes_part = &spec[..=i];
        for opt in spec[i + 1..].split_whitespace() {
            match opt.split_once('=') {
                Some(("seed", v)) => seed = v.parse().map_err(|_| format!("bad seed `{v}`"))?,
                Some(("tol", "exact")) => tol = Tol::Exact,
                Some(("tol", "value")) => tol = Tol::ValueEq,
                Some(("tol", v)) if v.starts_with("ulps:") => {
                    tol = Tol::Ulps(v[5..].parse().map_err(|_| format!("bad tolerance `{v}`"))?)
                }
                Some(("tol", v)) if v.starts_with("abs:") => {
                    let b: f64 = v[4..].parse().map_err(|_| format!("bad tolerance `{v}`"))?;
                    tol = Tol::Bound(vec![b]);
                }
                _ => return Err(format!("unknown run option `{opt}`")),
            }
        }
    }
    Ok(Run {
        line,
        shapes: parse_shapes(shapes_part)?,
        seed,
        tol,
    })
}

fn parse_file(text: &str) -> std::result::Result<FileTest, String> {
    let mut head = String::new();
    let mut graph_text = String::new();
    let mut dce = false;
    let mut runs = Vec::new();
    let mut expected: Vec<(Section, String)> = Vec::new();
    #[derive(PartialEq)]
    enum State {
        Before,
        Graph,
        After,
    }
    let mut state = State::Before;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some(section) = Section::from_marker(line) {
            if state != State::After {
                return Err(format!(
                    "line {number}: `{}` before the graph",
                    section.marker()
                ));
            }
            expected.push((section, String::new()));
            continue;
        }
        if let Some((_, body)) = expected.last_mut() {
            let content = match line.strip_prefix("; ") {
                Some(c) => c,
                None if line.trim_end() == ";" => "",
                None => {
                    return Err(format!(
                        "line {number}: expected-output lines start with `; `, found `{line}`"
                    ));
                }
            };
            body.push_str(content);
            body.push('\n');
            continue;
        }
        head.push_str(line);
        head.push('\n');
        match state {
            State::Before | State::After if line.starts_with(';') => {
                let directive = line[1..].trim();
                if let Some(spec) = directive.strip_prefix("run:") {
                    if state == State::After {
                        return Err(format!("line {number}: run lines go before the graph"));
                    }
                    runs.push(parse_run(number, spec).map_err(|e| format!("line {number}: {e}"))?);
                } else if let Some(pass) = directive.strip_prefix("pass:") {
                    match pass.trim() {
                        "dce" => dce = true,
                        other => return Err(format!("line {number}: unknown pass `{other}`")),
                    }
                }
            }
            State::Before | State::After if line.trim().is_empty() => {}
            State::Before => {
                state = State::Graph;
                graph_text.push_str(line);
                graph_text.push('\n');
            }
            State::Graph => {
                graph_text.push_str(line);
                graph_text.push('\n');
                if line.trim_end() == "}" {
                    state = State::After;
                }
            }
            State::After => {
                return Err(format!(
                    "line {number}: only `;` lines may follow the graph, found `{line}`"
                ));
            }
        }
    }
    if graph_text.is_empty() {
        return Err("the file holds no graph".into());
    }
    Ok(FileTest {
        head,
        graph_text,
        dce,
        runs,
        expected,
    })
}

/// A line diff of `want` and `got` (longest common subsequence), `-` for expected lines that are
/// missing and `+` for actual lines that are new.
fn diff(want: &str, got: &str) -> String {
    let a: Vec<&str> = want.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "   {}", a[i]);
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            let _ = writeln!(out, " + {}", b[j]);
            j += 1;
        } else {
            let _ = writeln!(out, " - {}", a[i]);
            i += 1;
        }
    }
    out
}

/// Seeded inputs of `shapes`, with the graph inputs' dtypes.
fn inputs_for(g: &Graph, run: &Run) -> Result<Vec<Tensor>> {
    let metas: Vec<_> = g
        .inputs()
        .iter()
        .map(|v| g.meta(*v).cloned().expect("inputs have metadata"))
        .collect();
    if metas.len() != run.shapes.len() {
        return Err(tensorplay_runtime::Error::compile(
            tensorplay_runtime::CompileKind::Graph,
            format!(
                "the run line gives {} shapes for {} graph inputs",
                run.shapes.len(),
                metas.len()
            ),
        ));
    }
    metas
        .iter()
        .zip(&run.shapes)
        .enumerate()
        .map(|(k, (m, shape))| {
            let n: usize = shape.iter().product();
            let seed = run.seed.wrapping_mul(0x9E37_79B9).wrapping_add(k as u64);
            fuzzgen::data(n, m.dtype, seed)?.reshape(shape)
        })
        .collect()
}

/// Runs one run line: compiled vs the eager interpreter.
fn check_run(g: &Graph, run: &Run) -> std::result::Result<(), String> {
    let inputs = inputs_for(g, run).map_err(|e| format!("making the inputs failed: {e}"))?;
    let compiled = tp_compile(g).map_err(|e| format!("compiling failed: {e}"))?;
    let eager = compiled
        .interpret(&inputs)
        .map_err(|e| format!("the eager interpreter failed: {e}"))?;
    let got = compiled
        .run(&inputs)
        .map_err(|e| format!("the compiled run failed (eager succeeded): {e}"))?;
    if got.len() != eager.len() {
        return Err(format!(
            "{} outputs compiled, {} eager",
            got.len(),
            eager.len()
        ));
    }
    let mut problems = Vec::new();
    for (k, (c, e)) in got.iter().zip(&eager).enumerate() {
        let tol = match &run.tol {
            Tol::Bound(b) => Tol::Bound(vec![b[0]; e.numel()]),
            other => other.clone(),
        };
        if let Some(msg) = compare(c, e, &tol, &inputs) {
            problems.push(format!("output {k}: {msg}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The actual text of each section.
fn actual(g: &Graph, section: Section) -> std::result::Result<String, String> {
    let plan = || -> std::result::Result<_, String> {
        let plan = partition(g).map_err(|e| format!("partition failed: {e}"))?;
        plans::check_plan(g, &plan);
        Ok(plan)
    };
    Ok(match section {
        Section::Graph => g.to_string(),
        Section::Plan => plan()?.explain(g),
        Section::Buffers => buffer_plan::plan(g, &plan()?)
            .map_err(|e| format!("buffer planning failed: {e}"))?
            .to_string(),
    })
}

/// Checks one file; returns its failures (or, when blessing, rewrites it).
fn check_file(path: &Path, bless: bool) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: cannot read: {e}")],
    };
    let test = match parse_file(&text) {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let parsed = Graph::parse(&test.graph_text, class_of);
    let mut g = match parsed {
        Ok(g) => g,
        Err(e) => return vec![format!("{name}: the graph does not parse: {e}")],
    };
    let mut failures = Vec::new();
    // The printed form carries no classes; read it back with the parsed graph's own.
    let classes: HashMap<String, OpClass> = g
        .node_ids()
        .into_iter()
        .filter_map(|id| g.node(id)?.as_op().map(|c| (c.name.clone(), c.class)))
        .collect();
    let printed = g.to_string();
    match Graph::parse(&printed, |n| classes.get(n).copied()) {
        Ok(again) if again.to_string() == printed => {}
        Ok(again) => failures.push(format!(
            "{name}: the printed graph does not round-trip:\n{}",
            diff(&printed, &again.to_string())
        )),
        Err(e) => failures.push(format!("{name}: the printed graph does not parse: {e}")),
    }
    if test.dce {
        g = match dce(&g) {
            Ok(g) => g,
            Err(e) => return vec![format!("{name}: dce failed: {e}")],
        };
    }
    let mut sections = test.expected.clone();
    if sections.is_empty() {
        sections.push((Section::Plan, String::new()));
        if !bless {
            failures.push(format!(
                "{name}: no `; plan:` section (run with TP_FILETESTS_BLESS=1 to write it)"
            ));
        }
    }
    let mut blessed = Vec::new();
    for (section, want) in &sections {
        match actual(&g, *section) {
            Ok(got) => {
                if !bless && got.trim_end() != want.trim_end() && !test.expected.is_empty() {
                    failures.push(format!(
                        "{name}: `{}` differs (- expected, + actual; TP_FILETESTS_BLESS=1 updates it):\n{}",
                        section.marker(),
                        diff(want, &got)
                    ));
                }
                blessed.push((*section, got));
            }
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                blessed.push((*section, want.clone()));
            }
        }
    }
    for run in &test.runs {
        if let Err(e) = check_run(&g, run) {
            failures.push(format!(
                "{name}:{}: run {:?} (seed {}): {e}",
                run.line, run.shapes, run.seed
            ));
        }
    }
    if bless {
        let sections = blessed
            .iter()
            .map(|(section, body)| (section.marker(), body.as_str()));
        let new = render(&test.head, sections);
        write_blessed(path, &name, &text, &new, &mut failures);
    }
    failures
}

#[test]
fn filetests() {
    let bless = blessing();
    let paths = tpir_paths("filetests");
    assert!(!paths.is_empty(), "no .tpir files found");
    let failures: Vec<String> = paths.iter().flat_map(|p| check_file(p, bless)).collect();
    eprintln!("filetests: {} files", paths.len());
    assert!(
        failures.is_empty(),
        "{} file test failure(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The runner itself: it reports a wrong expectation with the file name and a diff, rejects a
/// malformed file, and a run line catches a graph whose compiled result differs from eager.
#[test]
fn runner_reports_failures() {
    let dir = std::env::temp_dir().join(format!("tp_filetests_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let graph = "graph(%x: f32[s0]) {\n  %0 = tp::exp(%x) : f32[s0]\n  return (%0)\n}\n";
    // A stale expectation: reported with the file name and a diff; blessing fixes it.
    let stale = write(
        "stale.tpir",
        &format!("; run: shapes [5] [5]\n{graph}; plan:\n; fusion plan: 7 steps\n"),
    );
    let f = check_file(&stale, false);
    assert!(
        f.iter()
            .any(|m| m.starts_with("stale.tpir: `; plan:` differs")
                && m.contains(" - fusion plan: 7 steps")
                && m.contains(" + fusion plan: 1 step")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|m| m.contains("gives 2 shapes for 1 graph inputs")),
        "{f:?}"
    );
    let fixed = write("fixed.tpir", &format!("; run: shapes [5]\n{graph}"));
    assert!(!check_file(&fixed, false).is_empty());
    assert!(check_file(&fixed, true).is_empty());
    let blessed = std::fs::read_to_string(&fixed).unwrap();
    assert!(
        blessed.contains("; plan:\n; fusion plan: 1 step"),
        "{blessed}"
    );
    assert!(check_file(&fixed, false).is_empty());
    // Parse errors name the file and the line.
    let bad = write("bad.tpir", "graph(%x: f32[4]) {\n  return (%y)\n}\n");
    let f = check_file(&bad, false);
    assert!(
        f[0].starts_with("bad.tpir: the graph does not parse") && f[0].contains("line 2"),
        "{f:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_lines_parse() {
    let r = parse_run(3, " shapes [4, 8] [8] [] seed=9 tol=ulps:8").unwrap();
    assert_eq!(r.shapes, vec![vec![4, 8], vec![8], vec![]]);
    assert_eq!(r.seed, 9);
    assert!(matches!(r.tol, Tol::Ulps(u) if u == 8.0));
    assert!(parse_run(1, "shapes [4").is_err());
    assert!(parse_run(1, "shapes [4] speed=3").is_err());
    assert!(parse_run(1, "sizes [4]").is_err());
    assert!(parse_file("; plan:\n").is_err());
}
