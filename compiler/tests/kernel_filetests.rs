//! Kernel file tests: every `compiler/filetests/kernels/*.tpir` holds a graph in the printed IR
//! syntax, the kernel specs its fused regions lower to and the CUDA C they emit as.
//!
//! ```text
//! ; Free text: what the test is about.
//! ; layout: dims=1 reduced=0 classes=[unit, unit]   (optional: one `LoopLayout` per region)
//! graph(%x: f32[s0]) {
//!   %0 = tp::exp(%x) : f32[s0]
//!   return (%0)
//! }
//! ; kernel:                  (each region's `KernelSpec`, in plan order)
//! ; kernel pointwise rank=1 inputs=[f32] outputs=[f32]
//! ; ...
//! ; cuda:                    (with layouts: each region's kernel as `tensorplay_cuda::codegen::emit`
//! ; // kernel pointwise ...   prints it for its layout, without the prelude)
//! ; ...
//! ```
//!
//! For each file the runner parses the graph, partitions it (a barrier is a failure; free views
//! are fine), lowers each region with the builtin op table and compares the sections with a line
//! diff. Each spec in the expected `; kernel:` section must also parse back
//! (`KernelSpec::parse`) to the spec its region lowers to, and each layout line must read back
//! with `LoopLayout::parse`. No NVRTC is needed: the CUDA section is the emitted text.
//!
//! Failures are collected over all files and reported with the file name and a diff.
//! `TP_FILETESTS_BLESS=1` rewrites the expected sections from the actual output instead.

use std::path::Path;

use tensorplay_compiler::codegen::kernel::{KernelSpec, LoopLayout, lower};
use tensorplay_compiler::passes::fusion::{NodeStepKind, partition};
use tensorplay_cuda::codegen::{CudaLayout, emit};
use tensorplay_ir::graph::Graph;

#[path = "common/filetest.rs"]
mod filetest;
use filetest::{blessing, class_of, render, tpir_paths, write_blessed};

/// An expected-output section of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Kernel,
    Cuda,
}

impl Section {
    fn marker(self) -> &'static str {
        match self {
            Section::Kernel => "; kernel:",
            Section::Cuda => "; cuda:",
        }
    }

    fn from_marker(line: &str) -> Option<Section> {
        [Section::Kernel, Section::Cuda]
            .into_iter()
            .find(|s| line.trim_end() == s.marker())
    }
}

/// A parsed file.
struct FileTest {
    /// Everything before the first expected section, kept verbatim when blessing.
    head: String,
    graph_text: String,
    /// The `; layout:` lines, in order, with their line numbers.
    layouts: Vec<(usize, String)>,
    expected: Vec<(Section, String)>,
}

fn parse_file(text: &str) -> Result<FileTest, String> {
    let mut test = FileTest {
        head: String::new(),
        graph_text: String::new(),
        layouts: Vec::new(),
        expected: Vec::new(),
    };
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
            if test.expected.iter().any(|(s, _)| *s == section) {
                return Err(format!("line {number}: a second `{}`", section.marker()));
            }
            test.expected.push((section, String::new()));
            continue;
        }
        if let Some((_, body)) = test.expected.last_mut() {
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
        test.head.push_str(line);
        test.head.push('\n');
        match state {
            State::Before if line.starts_with(';') => {
                if let Some(layout) = line[1..].trim().strip_prefix("layout:") {
                    test.layouts.push((number, layout.trim().to_string()));
                }
            }
            State::After if line.starts_with(';') => {
                if line[1..].trim().starts_with("layout:") {
                    return Err(format!("line {number}: layout lines go before the graph"));
                }
            }
            State::Before | State::After if line.trim().is_empty() => {}
            State::Before | State::Graph => {
                state = State::Graph;
                test.graph_text.push_str(line);
                test.graph_text.push('\n');
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
    if test.graph_text.is_empty() {
        return Err("the file holds no graph".into());
    }
    Ok(test)
}

/// A line diff of `want` and `got` (longest common subsequence), `-` for expected lines that are
/// missing and `+` for actual lines that are new, with three lines of context around changes.
fn diff(want: &str, got: &str) -> String {
    let lines = diff_lines(want, got);
    let changed: Vec<usize> = (0..lines.len())
        .filter(|&i| !lines[i].starts_with("   "))
        .collect();
    let near = |i: usize| changed.iter().any(|&c| c.abs_diff(i) <= 3);
    let mut out = String::new();
    let mut skipped = false;
    for (i, line) in lines.iter().enumerate() {
        if near(i) {
            out.push_str(line);
            out.push('\n');
            skipped = false;
        } else if !skipped {
            out.push_str("   ...\n");
            skipped = true;
        }
    }
    out
}

/// Every line of the diff, marked `   `, ` + ` or ` - `.
fn diff_lines(want: &str, got: &str) -> Vec<String> {
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
    let mut out = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!("   {}", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!(" + {}", b[j]));
            j += 1;
        } else {
            out.push(format!(" - {}", a[i]));
            i += 1;
        }
    }
    out
}

/// The specs of the graph's regions, in plan order (every node must be in a region).
fn lowered_specs(g: &Graph) -> Result<Vec<KernelSpec>, String> {
    let plan = partition(g).map_err(|e| format!("partition failed: {e}"))?;
    let barrier = plan
        .node_steps
        .iter()
        .find(|(_, step)| step.kind == NodeStepKind::Barrier);
    if let Some((node, step)) = barrier {
        return Err(format!(
            "{} does not fuse into a region ({})",
            g.describe(*node),
            step.reason
        ));
    }
    plan.regions
        .iter()
        .map(|r| {
            lower(g, r)
                .map(|l| l.spec)
                .map_err(|e| format!("region {} does not lower: {e}", r.id))
        })
        .collect()
}

/// The CUDA section: each region's kernel for its layout.
fn cuda_text(specs: &[KernelSpec], layouts: &[LoopLayout]) -> Result<String, String> {
    let mut out = String::new();
    for (k, (spec, layout)) in specs.iter().zip(layouts).enumerate() {
        let kernel = emit(spec, &CudaLayout::from(layout))
            .map_err(|e| format!("region {k} does not emit for `{layout}`: {e}"))?;
        out.push_str(kernel.kernel_source());
    }
    Ok(out)
}

/// The specs of a `; kernel:` section: each starts at a `kernel` line.
fn split_specs(text: &str) -> Vec<String> {
    let mut specs: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("kernel ") || specs.is_empty() {
            specs.push(String::new());
        }
        let last = specs.last_mut().expect("pushed");
        last.push_str(line);
        last.push('\n');
    }
    specs
}

/// Checks that the expected kernel section parses back to the lowered specs.
fn check_parses_back(name: &str, want: &str, specs: &[KernelSpec]) -> Vec<String> {
    let texts = split_specs(want);
    if texts.len() != specs.len() {
        return vec![format!(
            "{name}: `; kernel:` holds {} specs, the graph lowers to {}",
            texts.len(),
            specs.len()
        )];
    }
    let mut failures = Vec::new();
    for (k, (text, spec)) in texts.iter().zip(specs).enumerate() {
        match KernelSpec::parse(text) {
            Ok(parsed) if parsed == *spec => {}
            Ok(parsed) => failures.push(format!(
                "{name}: spec {k} of `; kernel:` parses to a spec other than region {k}'s \
                 (- lowered, + parsed from the file):\n{}",
                diff(&spec.to_string(), &parsed.to_string())
            )),
            Err(e) => failures.push(format!(
                "{name}: spec {k} of `; kernel:` does not parse: {e}"
            )),
        }
    }
    failures
}

/// The text with trailing spaces cut from every line (the emitted CUDA has some; files keep none,
/// so editors that strip them do not break the tests).
fn normalize(text: &str) -> String {
    text.lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect()
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
    let g = match Graph::parse(&test.graph_text, class_of) {
        Ok(g) => g,
        Err(e) => return vec![format!("{name}: the graph does not parse: {e}")],
    };
    let specs = match lowered_specs(&g) {
        Ok(s) => s,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut failures = Vec::new();
    let mut layouts = Vec::new();
    for (line, l) in &test.layouts {
        match LoopLayout::parse(l) {
            Ok(layout) => layouts.push(layout),
            Err(e) => failures.push(format!("{name}:{line}: {e}")),
        }
    }
    if !layouts.is_empty() && layouts.len() != specs.len() {
        failures.push(format!(
            "{name}: {} layout lines for {} regions",
            layouts.len(),
            specs.len()
        ));
    }
    let kernel_text: String = specs.iter().map(|s| s.to_string()).collect();
    let mut actual = vec![(Section::Kernel, Ok(normalize(&kernel_text)))];
    if !layouts.is_empty() {
        actual.push((
            Section::Cuda,
            cuda_text(&specs, &layouts).map(|t| normalize(&t)),
        ));
    }
    let mut blessed = Vec::new();
    for (section, got) in actual {
        let want = test
            .expected
            .iter()
            .find(|(s, _)| *s == section)
            .map(|(_, w)| w.as_str());
        match (got, want) {
            (Err(e), want) => {
                failures.push(format!("{name}: {e}"));
                blessed.push((section, want.unwrap_or_default().to_string()));
            }
            (Ok(got), None) => {
                if !bless {
                    failures.push(format!(
                        "{name}: no `{}` section (run with TP_FILETESTS_BLESS=1 to write it)",
                        section.marker()
                    ));
                }
                blessed.push((section, got));
            }
            (Ok(got), Some(want)) => {
                if !bless && got.trim_end() != normalize(want).trim_end() {
                    failures.push(format!(
                        "{name}: `{}` differs (- expected, + actual; TP_FILETESTS_BLESS=1 updates it):\n{}",
                        section.marker(),
                        diff(want, &got)
                    ));
                }
                if section == Section::Kernel {
                    failures.extend(check_parses_back(
                        &name,
                        if bless { &got } else { want },
                        &specs,
                    ));
                }
                blessed.push((section, got));
            }
        }
    }
    if layouts.is_empty() && test.expected.iter().any(|(s, _)| *s == Section::Cuda) {
        failures.push(format!(
            "{name}: a `; cuda:` section needs `; layout:` lines"
        ));
    }
    if bless {
        let bodies: Vec<String> = blessed.iter().map(|(_, body)| normalize(body)).collect();
        let sections = blessed.iter().zip(&bodies);
        let new = render(
            &test.head,
            sections.map(|((section, _), body)| (section.marker(), body.as_str())),
        );
        write_blessed(path, &name, &text, &new, &mut failures);
    }
    failures
}

#[test]
fn kernel_filetests() {
    let bless = blessing();
    let paths = tpir_paths("filetests/kernels");
    assert!(paths.len() >= 8, "{} kernel file tests", paths.len());
    let failures: Vec<String> = paths.iter().flat_map(|p| check_file(p, bless)).collect();
    eprintln!("kernel filetests: {} files", paths.len());
    assert!(
        failures.is_empty(),
        "{} kernel file test failure(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The runner itself: a stale expectation is reported with the file name and a diff, blessing
/// writes the sections, a kernel section that parses to another spec or not at all is caught,
/// and malformed files and layouts are rejected.
#[test]
fn runner_reports_failures() {
    let dir = std::env::temp_dir().join(format!("tp_kernel_filetests_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let layout = "; layout: dims=1 reduced=0 classes=[unit, unit]\n";
    let graph = "graph(%x: f32[s0]) {\n  %0 = tp::exp(%x) : f32[s0]\n  return (%0)\n}\n";
    // Blessing writes both sections; then the file passes.
    let fresh = write("fresh.tpir", &format!("{layout}{graph}"));
    let f = check_file(&fresh, false);
    assert!(
        f.iter().any(|m| m.contains("no `; kernel:` section")),
        "{f:?}"
    );
    assert!(check_file(&fresh, true).is_empty());
    let blessed = std::fs::read_to_string(&fresh).unwrap();
    assert!(
        blessed.contains("; kernel:\n; kernel pointwise rank=1 inputs=[f32] outputs=[f32]\n")
            && blessed.contains(";   %1 = exp(%0) : f32\n")
            && blessed.contains("; cuda:\n; // kernel pointwise")
            && blessed.contains("tp_exp(v0)"),
        "{blessed}"
    );
    assert!(check_file(&fresh, false).is_empty());
    // A stale spec: a diff, and the section parses to another spec.
    let stale = write("stale.tpir", &blessed.replace("exp(%0)", "log(%0)"));
    let f = check_file(&stale, false);
    assert!(
        f.iter()
            .any(|m| m.starts_with("stale.tpir: `; kernel:` differs")
                && m.contains(" -   %1 = log(%0) : f32")
                && m.contains(" +   %1 = exp(%0) : f32")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|m| m.contains("parses to a spec other than region 0's")),
        "{f:?}"
    );
    // A kernel section that does not parse.
    let broken = write("broken.tpir", &blessed.replace("= exp(%0)", "= exp(0)"));
    let f = check_file(&broken, false);
    assert!(
        f.iter().any(|m| m.contains("does not parse")
            && m.contains("line 3, column 12: expected a value `%N`")),
        "{f:?}"
    );
    // Bad layouts, and a node that does not fuse.
    let bad = write(
        "bad_layout.tpir",
        &format!("; layout: dims=1 reduced=0 classes=[diagonal]\n{graph}"),
    );
    let f = check_file(&bad, false);
    assert!(
        f.iter()
            .any(|m| m.starts_with("bad_layout.tpir:1:") && m.contains("expected a stride class")),
        "{f:?}"
    );
    let barrier = write(
        "barrier.tpir",
        "graph(%a: f32[4, 4]) {\n  %0 = tp::matmul(%a, %a) : f32[4, 4]\n  return (%0)\n}\n",
    );
    let f = check_file(&barrier, false);
    assert!(f[0].contains("does not fuse into a region"), "{f:?}");
    assert!(parse_file("; kernel:\n").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
