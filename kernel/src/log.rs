//! `TP_LOGS`: which compiler stages print what they did to stderr.
//!
//! `TP_LOGS` is a comma-separated list of stage names (`graph`, `fusion`, `clif`, `fallback`,
//! `aot`, `recompiles`, `cuda`, or `all` for every stage), read once per process. Stages call
//! [`enabled`] before formatting anything, so logging costs nothing when it is off.

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

fn stages() -> &'static [String] {
    static STAGES: OnceLock<Vec<String>> = OnceLock::new();
    STAGES.get_or_init(|| {
        std::env::var("TP_LOGS")
            .map(|s| parse(&s))
            .unwrap_or_default()
    })
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
