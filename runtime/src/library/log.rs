//! `TP_LOGS=library` (or `all`): registration warnings printed to stderr, as the compiler's
//! stages print theirs.

use std::sync::OnceLock;

/// True when `TP_LOGS` (read once) names `library` or `all`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| tensorplay_kernel::log::enabled("library"))
}

/// Prints a warning line under `[tp:library]` when logging is on.
pub(crate) fn warn(text: &str) {
    if enabled() {
        eprintln!("[tp:library] warning: {text}");
    }
}
