//! `TP_LOGS`: which compiler stages print what they did to stderr.
//!
//! `TP_LOGS` is a comma-separated list of stage names ([`STAGES`]: `graph`, `fusion`, `clif`,
//! `fallback`, `aot`, `recompiles`, `cuda`, `library`, `dispatch`, `profile`, or `all` for every
//! stage but `dispatch` and `profile`), read once per process — here, for every crate that logs.
//! Stages call [`enabled`] before formatting anything, so logging costs nothing when it is off. A word that names no
//! stage is reported once on stderr with the valid ones (a misspelled stage would otherwise
//! print nothing, silently).

use std::sync::OnceLock;

/// Splits a `TP_LOGS` value into stage names: comma-separated, trimmed, lower-cased, empty items
/// dropped.
///
/// ```
/// use tensorplay_kernel::log::parse;
/// assert_eq!(parse("graph, Fusion,,clif"), vec!["graph", "fusion", "clif"]);
/// assert!(parse("").is_empty());
/// ```
pub fn parse(spec: &str) -> Vec<String> {
    spec.split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Every word `TP_LOGS` understands. `all` turns on every stage except `dispatch` (a line per
/// layer of every op call) and `profile` (timing every compiled step): those only when named.
pub const STAGES: &[&str] = &[
    "graph",
    "fusion",
    "clif",
    "fallback",
    "aot",
    "recompiles",
    "cuda",
    "library",
    "dispatch",
    "profile",
    "all",
];

/// The warning for the words of `stages` that name no stage (`None` when every word does).
///
/// ```
/// use tensorplay_kernel::log::{parse, unknown_stages_warning};
/// assert_eq!(unknown_stages_warning(&parse("graph,recompiles")), None);
/// let w = unknown_stages_warning(&parse("graph,recompile")).unwrap();
/// assert!(w.contains("`recompile`") && w.contains("recompiles") && w.contains("dispatch"));
/// ```
pub fn unknown_stages_warning(stages: &[String]) -> Option<String> {
    let unknown: Vec<String> = stages
        .iter()
        .filter(|s| !STAGES.contains(&s.as_str()))
        .map(|s| format!("`{s}`"))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    Some(format!(
        "TP_LOGS names no stage {}; the stages are {} (comma-separated)",
        unknown.join(", "),
        STAGES.join(", ")
    ))
}

/// True when `stage` is in `stages` (or `stages` holds `all`).
///
/// ```
/// use tensorplay_kernel::log::{parse, stage_in};
/// assert!(stage_in(&parse("graph,fusion"), "fusion"));
/// assert!(stage_in(&parse("all"), "clif"));
/// assert!(!stage_in(&parse("graph"), "fusion"));
/// ```
pub fn stage_in(stages: &[String], stage: &str) -> bool {
    stages
        .iter()
        .any(|s| s == "all" || s.eq_ignore_ascii_case(stage))
}

/// The stages `TP_LOGS` names, read at the first call (which warns once about unknown words).
pub fn stages() -> &'static [String] {
    static PARSED: OnceLock<Vec<String>> = OnceLock::new();
    PARSED.get_or_init(|| {
        let stages = std::env::var("TP_LOGS")
            .map(|s| parse(&s))
            .unwrap_or_default();
        if let Some(warning) = unknown_stages_warning(&stages) {
            eprintln!("[tp:logs] warning: {warning}");
        }
        stages
    })
}

/// True when `TP_LOGS` names `stage` itself (`all` does not count): for stages too verbose for
/// `all`, such as `dispatch`.
pub fn named(stage: &str) -> bool {
    stages().iter().any(|s| s.eq_ignore_ascii_case(stage))
}

/// True when `TP_LOGS` (read once, at the first call) names `stage` or `all`.
///
/// ```
/// use tensorplay_kernel::log::enabled;
/// // Whatever TP_LOGS holds, an unknown stage name is never enabled unless it says `all`.
/// let all = std::env::var("TP_LOGS").is_ok_and(|s| s.split(',').any(|p| p.trim() == "all"));
/// assert_eq!(enabled("no-such-stage"), all);
/// ```
pub fn enabled(stage: &str) -> bool {
    stage_in(stages(), stage)
}

/// Prints `text` to stderr under a `[tp:<stage>]` header when [`enabled`]`(stage)`; `text` is
/// only built when the stage is on.
///
/// ```
/// use tensorplay_kernel::log::log;
/// log("no-such-stage", || "not printed unless TP_LOGS=all".to_string());
/// ```
pub fn log(stage: &str, text: impl FnOnce() -> String) {
    if enabled(stage) {
        let body = text();
        eprintln!("[tp:{stage}]\n{}", body.trim_end());
    }
}
