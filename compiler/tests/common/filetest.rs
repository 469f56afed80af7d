//! What the two file-test runners (`filetests.rs`: graphs, plans and runs; `kernel_filetests.rs`:
//! kernel specs and CUDA C) share: finding the `.tpir` files, resolving op classes for the graph
//! parser, writing expected sections back as `; ` comments, and blessing a file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tensorplay_ir::OpClass;
use tensorplay_runtime::library::registry;

/// Whether `TP_FILETESTS_BLESS=1` asks the runners to rewrite the expected sections.
pub fn blessing() -> bool {
    std::env::var("TP_FILETESTS_BLESS").is_ok_and(|v| v == "1")
}

/// The `.tpir` files of `compiler/<dir>`, sorted.
pub fn tpir_paths(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tpir"))
        .collect();
    paths.sort();
    paths
}

/// An op's class as the graph parser needs it: from the registry.
pub fn class_of(name: &str) -> Option<OpClass> {
    registry().find(name).map(|op| op.class())
}

/// The file text: `head`, then each section as its marker line and its body's lines as `; `
/// comments (an empty line as a bare `;`).
pub fn render<'a>(head: &str, sections: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = head.to_string();
    for (marker, body) in sections {
        out.push_str(marker);
        out.push('\n');
        for line in body.lines() {
            if line.is_empty() {
                out.push_str(";\n");
            } else {
                let _ = writeln!(out, "; {line}");
            }
        }
    }
    out
}

/// Writes `new` over the file at `path` when it differs from its current `text`; a failure to
/// write is reported in `failures`.
pub fn write_blessed(path: &Path, name: &str, text: &str, new: &str, failures: &mut Vec<String>) {
    if new != text
        && let Err(e) = std::fs::write(path, new)
    {
        failures.push(format!("{name}: cannot write: {e}"));
    }
}
