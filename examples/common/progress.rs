//! The examples' progress bar (indicatif): step, loss and step time of a training run, drawn
//! only when stdout is a terminal, so logs and piped output (CI, `scripts/bench/e2e.py`) stay
//! exactly the printed lines.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `steps` steps labelled `label`, starting at step `start`; hidden (drawing
/// nothing) unless stdout is a terminal. Print through `bar.suspend(|| println!(..))` while it
/// is shown, and call `bar.finish_and_clear()` at the end of the run.
pub fn bar(label: &str, start: usize, steps: usize) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stdout());
    let style = ProgressStyle::with_template("{prefix:>9} [{bar:30}] step {pos}/{len} {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar.set_position(start as u64);
    bar
}

/// Advances `bar` by one step that ended with `loss` and took `time`.
pub fn step(bar: &ProgressBar, loss: f32, time: Duration) {
    if bar.is_hidden() {
        return;
    }
    bar.set_message(format!(
        "loss {loss:.4}, {:.2} ms/step",
        time.as_secs_f64() * 1e3
    ));
    bar.inc(1);
}
