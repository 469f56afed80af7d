//! `TP_LOGS=profile`: the wall time of every step of a compiled graph on the CPU, summed over
//! its calls, grouped by op class, and printed to stderr when the graph is dropped (or read
//! with [`CompiledGraph::profile`]).
//!
//! A step is what the executor runs as one unit: an op node through the dispatcher (a matrix
//! product, fused attention, an embedding gather...), a fused region's kernel, or a product
//! with its epilogue. The clock reads `Instant::now()` around each step only when `TP_LOGS`
//! names `profile` itself (`all` does not turn it on: timing perturbs what it measures a
//! little); otherwise a step costs one branch on a `None`. CUDA graphs are not timed (their
//! launches are asynchronous, so host time says little), nor are graphs that are one region
//! (their hot call skips the step loop).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tensorplay_ir::graph::NodeKind;

use super::{CompiledGraph, Exec};
use crate::passes::logging;

/// How many of the most expensive steps the report lists one by one.
const TOP_STEPS: usize = 24;

/// Summed wall time per step (and of whole calls), when `TP_LOGS` names `profile`.
pub(super) struct StepClock {
    cells: Option<Box<[Cell]>>,
}

#[derive(Default)]
struct Cell {
    nanos: AtomicU64,
    calls: AtomicU64,
}

impl Cell {
    fn add(&self, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (
            self.nanos.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
        )
    }
}

impl StepClock {
    /// A clock for `steps` steps: running only when `TP_LOGS` names `profile`.
    pub(super) fn new(steps: usize) -> Self {
        let cells = logging::named("profile").then(|| {
            // One cell per step, and one more for whole calls.
            (0..=steps).map(|_| Cell::default()).collect()
        });
        StepClock { cells }
    }

    /// The start of a timed span (`None` when the clock is off).
    #[inline]
    pub(super) fn start(&self) -> Option<Instant> {
        self.cells.as_ref().map(|_| Instant::now())
    }

    /// Adds the time since `start` to step `step`.
    #[inline]
    pub(super) fn step_done(&self, step: usize, start: Option<Instant>) {
        if let (Some(cells), Some(t0)) = (&self.cells, start) {
            cells[step].add(t0);
        }
    }

    /// Adds the time since `start` to the whole-call total.
    #[inline]
    pub(super) fn call_done(&self, start: Option<Instant>) {
        if let (Some(cells), Some(t0)) = (&self.cells, start) {
            cells[cells.len() - 1].add(t0);
        }
    }

    /// `(nanoseconds, calls)` per step, then the whole-call cell; `None` when off.
    fn totals(&self) -> Option<Vec<(u64, u64)>> {
        self.cells
            .as_ref()
            .map(|cells| cells.iter().map(Cell::read).collect())
    }
}

impl CompiledGraph {
    /// The time each step of this graph took, summed over its CPU calls so far, as a table: by
    /// op class (matrix products, fused attention, fused regions by kind, each other op by
    /// name), then the most expensive steps one by one. `None` unless `TP_LOGS` names
    /// `profile` (when it does, the table is also printed to stderr when the graph is dropped).
    ///
    /// ```
    /// use tensorplay_compiler::compile;
    /// use tensorplay_runtime::{DType, Tensor};
    /// let f = compile(|x: &[Tensor]| Ok(vec![x[0].exp()?.add(&x[0])?]));
    /// f.call(&[Tensor::ones(&[8], DType::F32)])?;
    /// // Only with TP_LOGS=profile is there a table.
    /// let named = std::env::var("TP_LOGS")
    ///     .is_ok_and(|s| s.split(',').any(|w| w.trim().eq_ignore_ascii_case("profile")));
    /// assert_eq!(f.latest().unwrap().profile().is_some(), named);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn profile(&self) -> Option<String> {
        let totals = self.clock.totals()?;
        let (call_ns, calls) = totals[totals.len() - 1];
        let per_call = |ns: u64| ns as f64 / calls.max(1) as f64 / 1e6;
        let mut by_class: HashMap<String, (u64, usize)> = HashMap::new();
        let mut steps: Vec<(usize, u64)> = Vec::new();
        let mut steps_ns = 0u64;
        for (si, &(ns, _)) in totals[..totals.len() - 1].iter().enumerate() {
            let class = by_class.entry(self.step_class(si)).or_default();
            class.0 += ns;
            class.1 += 1;
            steps.push((si, ns));
            steps_ns += ns;
        }
        let share = |ns: u64| 100.0 * ns as f64 / call_ns.max(1) as f64;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "compiled graph of {} steps: {calls} call(s), {:.3} ms per call",
            self.steps.len(),
            per_call(call_ns)
        );
        let _ = writeln!(text, "  by class (steps): ms per call, share of the call");
        let mut classes: Vec<_> = by_class.into_iter().collect();
        classes.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
        for (class, (ns, n)) in &classes {
            let _ = writeln!(
                text,
                "    {:<40} {:>3} {:>9.3} {:>6.1} %",
                class,
                n,
                per_call(*ns),
                share(*ns)
            );
        }
        let rest = call_ns.saturating_sub(steps_ns);
        let _ = writeln!(
            text,
            "    {:<40} {:>3} {:>9.3} {:>6.1} %",
            "(between steps: env, frees, outputs)",
            "",
            per_call(rest),
            share(rest)
        );
        steps.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let _ = writeln!(text, "  most expensive steps: ms per call, share");
        for &(si, ns) in steps.iter().take(TOP_STEPS) {
            let _ = writeln!(
                text,
                "    step {si:>3} {:<60} {:>9.3} {:>6.1} %",
                self.step_label(si),
                per_call(ns),
                share(ns)
            );
        }
        Some(text)
    }

    /// The op name of node `call` as captured (`matmul`, `_fused_attention`...).
    fn op_name(&self, node: tensorplay_ir::NodeId) -> String {
        match self.graph.node(node).map(|n| &n.kind) {
            Some(NodeKind::Op(call)) => call
                .name
                .rsplit("::")
                .next()
                .unwrap_or(&call.name)
                .to_string(),
            _ => self.graph.describe(node),
        }
    }

    /// The class step `si` is counted under.
    fn step_class(&self, si: usize) -> String {
        match &self.steps[si] {
            Exec::Node(c) => self.op_name(c.node),
            Exec::Region(r) => format!("region: {}", self.plan.regions[r.index].kind),
            Exec::Epilogue(e) => format!("{} + epilogue region", self.op_name(e.product.node)),
        }
    }

    /// Step `si` in a few words: the node, or the region's kind and first ops.
    fn step_label(&self, si: usize) -> String {
        const OPS_SHOWN: usize = 4;
        let region = |index: usize| {
            let r = &self.plan.regions[index];
            let mut ops: Vec<String> = r
                .nodes
                .iter()
                .take(OPS_SHOWN)
                .map(|&n| self.op_name(n))
                .collect();
            if r.nodes.len() > OPS_SHOWN {
                ops.push(format!("+{}", r.nodes.len() - OPS_SHOWN));
            }
            format!("region {index} {} [{}]", r.kind, ops.join(" "))
        };
        match &self.steps[si] {
            Exec::Node(c) => self.graph.describe(c.node),
            Exec::Region(r) => region(r.index),
            Exec::Epilogue(e) => format!(
                "{} + {}",
                self.graph.describe(e.product.node),
                region(e.region.index)
            ),
        }
    }
}

impl Drop for CompiledGraph {
    fn drop(&mut self) {
        let called = self
            .clock
            .totals()
            .is_some_and(|t| t.last().is_some_and(|&(_, calls)| calls > 0));
        if let Some(text) = self.profile().filter(|_| called) {
            eprintln!("[tp:profile]\n{}", text.trim_end());
        }
    }
}
