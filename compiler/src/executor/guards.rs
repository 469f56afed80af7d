//! The static guards of a compiled graph: what each input's dtype, device, rank and dims must be
//! for the compiled code to apply, checked on every call before anything else.

use tensorplay_ir::CompileKind;
use tensorplay_ir::{DType, Device, Dim, Error, Result, SymExpr, TensorMeta};
use tensorplay_runtime::Tensor;

use super::CompiledGraph;

/// Run-time facts about each graph input that the compiled code relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Guard {
    dtype: DType,
    device: Device,
    dims: Vec<DimGuard>,
}

/// What one input dim must be, checked on every call before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DimGuard {
    /// Exactly this size (static dims, and the specialised sizes 0 and 1).
    Size(usize),
    /// A symbol `s{k}`: any size >= 2 (0 and 1 are specialised at capture).
    Symbol,
    /// An expression over symbols bound by other dims (a backward graph's saved value shaped
    /// `[s0 * s1]`): any size here; shape inference checks that it equals the expression.
    Derived(SymExpr),
}

impl Guard {
    /// The guard for an input of metadata `m`.
    pub(super) fn of(m: &TensorMeta) -> Guard {
        Guard {
            dtype: m.dtype,
            device: m.device,
            dims: m.shape.iter().map(|&d| DimGuard::of(d)).collect(),
        }
    }
}

impl DimGuard {
    fn of(d: Dim) -> DimGuard {
        match d {
            Dim::Static(n) => DimGuard::Size(n),
            Dim::Sym(_) => DimGuard::Symbol,
            Dim::Expr(e) => DimGuard::Derived(e),
        }
    }

    fn holds(self, size: usize) -> bool {
        match self {
            DimGuard::Size(n) => size == n,
            DimGuard::Symbol => size >= 2,
            DimGuard::Derived(_) => true,
        }
    }
}

impl std::fmt::Display for DimGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimGuard::Size(n) => write!(f, "{n}"),
            DimGuard::Symbol => write!(f, "s"),
            DimGuard::Derived(e) => write!(f, "{e}"),
        }
    }
}

impl CompiledGraph {
    /// Whether `t` passes guard `g` (no allocation: this runs on every call).
    fn guard_holds(g: &Guard, t: &Tensor) -> bool {
        t.dtype() == g.dtype
            && t.device() == g.device
            && t.rank() == g.dims.len()
            && t.shape()
                .iter()
                .zip(&g.dims)
                // A symbolic dim stands for sizes >= 2 (0 and 1 are specialised at capture).
                .all(|(&s, d)| d.holds(s))
    }

    pub(super) fn check_guards(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.guards.len() {
            return Err(Error::compile(
                CompileKind::Guard,
                format!(
                    "guard failed: the graph takes {} inputs, got {}",
                    self.guards.len(),
                    inputs.len()
                ),
            ));
        }
        for (i, (t, g)) in inputs.iter().zip(&self.guards).enumerate() {
            if !Self::guard_holds(g, t) {
                let want: Vec<String> = g.dims.iter().map(|d| d.to_string()).collect();
                return Err(Error::compile(
                    CompileKind::Guard,
                    format!(
                        "guard failed for input {i}: compiled for {}[{}] on {}, got {}{} on {} (rank, dtype, device and sizes 0 and 1 must match; recompile for this input)",
                        g.dtype,
                        want.join(", "),
                        g.device,
                        t.dtype(),
                        tensorplay_ir::shape::fmt_shape(t.shape()),
                        t.device()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Why `inputs` fail this graph's guards, or `None` when they pass: a static guard (which
    /// input, what was compiled for and what came), else a size guard (which input and dim,
    /// what the captured code assumed and what came — and, when an op's inputs then disagree,
    /// that op's own error).
    pub fn guard_failure(&self, inputs: &[Tensor]) -> Option<String> {
        if let Err(e) = self.check_guards(inputs) {
            return Some(e.to_string());
        }
        match self.admit(inputs) {
            Ok(super::Admission::Run(_)) => None,
            Ok(super::Admission::Miss(why)) => Some(format!("size guard failed: {why}")),
            Err(e) => Some(e.to_string()),
        }
    }

    /// True when `inputs` pass this graph's static guards (count, dtype, device, rank, size-1
    /// dims); the size guards are checked by shape inference when the graph runs.
    pub fn accepts(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.guards.len()
            && inputs
                .iter()
                .zip(&self.guards)
                .all(|(t, g)| Self::guard_holds(g, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use crate::executor::test_util::f;
    use tensorplay_ir::TensorMeta;

    #[test]
    fn guards_accept_or_reject_and_errors_name_the_failing_input() -> Result<()> {
        let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        let x = Tensor::ones(&[4], DType::F32);
        assert!(c.accepts(&[x.clone(), x.clone()]));
        assert!(!c.accepts(std::slice::from_ref(&x)));
        let i = Tensor::ones(&[4], DType::I32);
        assert!(!c.accepts(&[x.clone(), i.clone()]));
        let e = c.run(&[x, i]).unwrap_err().to_string();
        assert!(e.contains("guard failed for input 1"), "{e}");
        Ok(())
    }
}
