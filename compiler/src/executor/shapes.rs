//! Shape inference and admission: the shapes of every value for a call's input shapes (the
//! captured program replayed on fake tensors, checking the size guards on the way), cached per
//! distinct input shapes, and whether the graph applies to the inputs at all ([`Admission`]).

use std::collections::HashMap;
use std::sync::Arc;

use tensorplay_ir::graph::SizeGuard;
use tensorplay_ir::{Dim, Result, Shape};
use tensorplay_runtime::Tensor;

use super::CompiledGraph;
use super::node::NodeCall;

/// One op node of the captured program, as shape inference replays it.
pub(super) struct ReplayCall {
    pub(super) call: NodeCall,
    /// The size guards on its outputs (dense value id, guard).
    pub(super) guards: Vec<(usize, SizeGuard)>,
    /// A custom op's outputs whose sizes capture bound to expressions over the input dims (its
    /// fake kernel ran at the example sizes only): the replayed sizes must equal them, or the
    /// graph was compiled for a relation these inputs break.
    pub(super) bound_outputs: Vec<(usize, Vec<Dim>)>,
}

/// The shapes of every value (dense ids) for one set of input shapes.
pub(crate) struct ShapeEntry {
    /// The input shapes (the key).
    inputs: Vec<Shape>,
    /// Every value's shape (empty when a size guard failed).
    pub(super) shapes: Vec<Shape>,
    /// The first size guard that failed for these inputs, if any.
    guard_failure: Option<String>,
    /// The value of each symbol `s{k}` for these inputs.
    pub(super) syms: Vec<i64>,
}

/// Whether a graph applies to some inputs.
pub(crate) enum Admission {
    /// It does; the value shapes for the inputs.
    Run(Arc<ShapeEntry>),
    /// A guard failed (why): capture again.
    Miss(String),
}

impl ShapeEntry {
    /// Whether `inputs` have exactly this entry's input shapes (no allocation).
    fn fits(&self, inputs: &[Tensor]) -> bool {
        self.inputs.len() == inputs.len()
            && self
                .inputs
                .iter()
                .zip(inputs)
                .all(|(s, t)| s.as_slice() == t.shape())
    }
}

/// Per-input-shapes results of shape inference, with the most recent entry first in line (a
/// repeated call compares its shapes with it and skips hashing).
#[derive(Default)]
pub(super) struct ShapeCache {
    pub(super) map: HashMap<Vec<Shape>, Arc<ShapeEntry>>,
    last: Option<Arc<ShapeEntry>>,
}

/// Most distinct input-shape sets whose value shapes a graph keeps.
const SHAPE_CACHE_LIMIT: usize = 256;

impl CompiledGraph {
    /// Shapes of every value for these input shapes (computed once per distinct input shapes by
    /// replaying the captured program's meta rules on fake tensors, checking the size guards on
    /// the way). An error is an op's own error, met before any guard failed: eager fails the
    /// same way on these inputs.
    fn shapes_for(&self, inputs: &[Tensor]) -> Result<Arc<ShapeEntry>> {
        let key = {
            let mut c = self.shape_cache.lock();
            if let Some(e) = &c.last
                && e.fits(inputs)
            {
                return Ok(e.clone());
            }
            let key: Vec<Shape> = inputs.iter().map(|t| Shape::from(t.shape())).collect();
            if let Some(e) = c.map.get(&key).cloned() {
                c.last = Some(e.clone());
                return Ok(e);
            }
            key
        };
        // The replay runs the captured ops as recorded (autocast's casts are in the graph).
        let entry = {
            let _ac = tensorplay_runtime::autocast::suspend();
            Arc::new(self.infer_shapes(inputs, key.clone())?)
        };
        let mut c = self.shape_cache.lock();
        if c.map.len() >= SHAPE_CACHE_LIMIT {
            // A graph fed ever-new shapes must not grow without bound; recomputing is cheap
            // (meta rules only), so the simplest eviction — start over — is enough.
            c.map.clear();
        }
        c.map.insert(key, entry.clone());
        c.last = Some(entry.clone());
        Ok(entry)
    }

    fn infer_shapes(&self, inputs: &[Tensor], key: Vec<Shape>) -> Result<ShapeEntry> {
        let syms = self.bind_syms(inputs);
        let miss = |why: String| ShapeEntry {
            inputs: key.clone(),
            shapes: Vec::new(),
            guard_failure: Some(why),
            syms: Vec::new(),
        };
        for &(i, d, e) in &self.dim_checks {
            let got = inputs.get(i).and_then(|t| t.shape().get(d)).copied();
            let want = e.eval(&|k| syms.get(k as usize).copied());
            if got.map(|n| n as i64) != want {
                let mut why = format!(
                    "input {i} dim {d}: expected {e} (= {} for these inputs), got {}",
                    want.map_or("?".into(), |n| n.to_string()),
                    got.map_or("?".into(), |n| n.to_string()),
                );
                // The captured code assumed the sizes agree; the op that needs them to says
                // why (`add: … [5] and [7] cannot be broadcast`).
                if let Some(op_error) = self.first_op_error(inputs, &syms) {
                    why.push_str(&format!(" — {op_error}"));
                }
                return Ok(miss(why));
            }
        }
        for g in &self.sym_guards {
            if g.holds(&|k| syms.get(k as usize).copied()) != Some(true) {
                return Ok(miss(format!(
                    "expected {g}, got {} (the captured code branched on these sizes)",
                    self.describe_syms(&syms)
                )));
            }
        }
        let env = match self.replay(inputs, &syms, true)? {
            Ok(env) => env,
            Err(why) => return Ok(miss(why)),
        };
        let shapes: Vec<Shape> = env
            .iter()
            .map(|t| {
                t.as_ref()
                    .map_or_else(Shape::new, |t| Shape::from(t.shape()))
            })
            .collect();
        Ok(ShapeEntry {
            inputs: key,
            shapes,
            guard_failure: None,
            syms,
        })
    }

    /// Replays the captured program on fake tensors of the inputs' shapes: every value, or (with
    /// `check_guards`) the first size guard that failed. `Err` is an op's own error.
    fn replay(
        &self,
        inputs: &[Tensor],
        syms: &[i64],
        check_guards: bool,
    ) -> Result<std::result::Result<Vec<Option<Tensor>>, String>> {
        let mut env: Vec<Option<Tensor>> = vec![None; self.num_values];
        for (&i, t) in self.input_ids.iter().zip(inputs) {
            env[i] = Some(Tensor::empty_fake(t.shape(), t.dtype(), t.device()));
        }
        if check_guards {
            for (v, g) in &self.input_size_guards {
                let shape = env[*v].as_ref().map_or(&[][..], Tensor::shape);
                if !g.holds(shape) {
                    let input = self.input_ids.iter().position(|i| i == v);
                    let what = input.map_or_else(|| format!("value {v}"), |i| format!("input {i}"));
                    return Ok(Err(size_guard_failure(&what, g, shape)));
                }
            }
        }
        for (i, t) in &self.check_constants {
            env[*i] = Some(t.clone());
        }
        let _g = tensorplay_runtime::autograd::no_grad();
        for rc in &self.check_calls {
            Self::call_node(&rc.call, &mut env, syms)?;
            if !check_guards {
                continue;
            }
            let what = || format!("the output of `{}`", rc.call.op.qualname());
            for (v, g) in &rc.guards {
                let shape = env[*v].as_ref().map_or(&[][..], Tensor::shape);
                if !g.holds(shape) {
                    return Ok(Err(size_guard_failure(&what(), g, shape)));
                }
            }
            for (v, dims) in &rc.bound_outputs {
                let shape = env[*v].as_ref().map_or(&[][..], Tensor::shape);
                if let Some(why) = bound_shape_failure(dims, shape, syms) {
                    return Ok(Err(format!("{}: {why}", what())));
                }
            }
        }
        Ok(Ok(env))
    }

    /// The error the first op of the captured program meets on these inputs' shapes (guards not
    /// checked), if one does: which op's inputs disagree, and how.
    fn first_op_error(&self, inputs: &[Tensor], syms: &[i64]) -> Option<String> {
        self.replay(inputs, syms, false)
            .err()
            .map(|e| e.to_string())
    }

    /// The symbols' values and where they come from: `s0 = 5 (input 0 dim 0), s1 = 7 (…)`.
    fn describe_syms(&self, syms: &[i64]) -> String {
        self.sym_src
            .iter()
            .zip(syms)
            .enumerate()
            .map(|(k, (&(i, d), n))| format!("s{k} = {n} (input {i} dim {d})"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether the graph applies to `inputs` (which passed the static guards): the size guards,
    /// checked by shape inference. `Err` is the error eager meets on these inputs.
    pub(crate) fn admit(&self, inputs: &[Tensor]) -> Result<Admission> {
        let entry = self.shapes_for(inputs)?;
        Ok(match &entry.guard_failure {
            Some(why) => Admission::Miss(why.clone()),
            None => Admission::Run(entry),
        })
    }

    /// The value of every symbol for these inputs (symbol `k` is one input dim).
    pub(super) fn bind_syms(&self, inputs: &[Tensor]) -> Vec<i64> {
        self.sym_src
            .iter()
            .map(|&(i, d)| {
                inputs
                    .get(i)
                    .and_then(|t| t.shape().get(d))
                    .map_or(0, |&n| n as i64)
            })
            .collect()
    }
}

/// Where a custom op's replayed output `shape` differs from the dims capture bound it to, in
/// words (`None` when they agree).
fn bound_shape_failure(dims: &[Dim], shape: &[usize], syms: &[i64]) -> Option<String> {
    let fmt = tensorplay_ir::shape::fmt_shape;
    if dims.len() != shape.len() {
        return Some(format!(
            "its fake kernel gave rank {} here, {} at capture",
            shape.len(),
            dims.len()
        ));
    }
    for (d, (dim, &got)) in dims.iter().zip(shape).enumerate() {
        let want = dim.to_expr().eval(&|k| syms.get(k as usize).copied());
        if want != Some(got as i64) {
            return Some(format!(
                "dim {d}: expected {dim} (= {} for these inputs), got {got} (shape {}; capture \
                 bound the size its fake kernel gave to an input size)",
                want.map_or("?".into(), |n| n.to_string()),
                fmt(shape)
            ));
        }
    }
    None
}

/// A failed size guard in words: which value and dim, what the captured code read, what came.
fn size_guard_failure(what: &str, g: &SizeGuard, got: &[usize]) -> String {
    let shape = tensorplay_ir::shape::fmt_shape;
    match g.dim {
        Some(d) => format!(
            "{what} dim {d}: expected {}, got {} (shape {}; the captured code read this size as \
             a plain integer)",
            g.expected.first().copied().unwrap_or(0),
            got.get(d).map_or("no such dim".into(), |n| n.to_string()),
            shape(got)
        ),
        None => format!(
            "{what}: expected shape {}, got {} (the captured code read the whole shape as plain \
             integers)",
            shape(&g.expected),
            shape(got)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use crate::executor::test_util::{bits, f};
    use tensorplay_ir::TensorMeta;
    use tensorplay_ir::{DType, Device};

    #[test]
    fn the_shape_cache_stays_bounded() -> Result<()> {
        let m = TensorMeta::new(&[6], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        for n in 2..(SHAPE_CACHE_LIMIT + 40) {
            let x = Tensor::randn_seeded(&[n], DType::F32, n as u64)?;
            let got = c.run(&[x.clone(), x.clone()])?;
            assert_eq!(bits(&got[0]), bits(&f(&[x.clone(), x])?[0]), "n = {n}");
            assert!(c.shape_cache.lock().map.len() <= SHAPE_CACHE_LIMIT);
        }
        Ok(())
    }
}
