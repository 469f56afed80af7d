//! Buffer planning: intermediates live in a reusable arena of slots instead of fresh
//! allocations per call.
//!
//! An intermediate is a value a step produces (a region output or a node's result) that only
//! other steps read: not a graph output, not an alias. Its live range runs from the step that
//! produces it to the last step that reads it (directly or through a view of it). Values whose
//! ranges do not overlap share a slot, assigned greedily in order of definition, each value taking
//! the free slot that was freed last (its memory is the likeliest to be still in cache: a
//! product writing into cold memory was measured ~25 % slower); a slot is as
//! large as the largest value it ever holds, which the executor finds at run time because
//! shapes may be symbolic. Slots never mix devices.
//!
//! Views (and the results of mutating ops, which return the tensor they wrote) alias their
//! source: they get no slot and keep the source alive as long as they are read. A graph output
//! that aliases an intermediate makes that intermediate escape (it gets no slot either).

use std::collections::BTreeMap;
use std::fmt;
use tensorplay_ir::CompileKind;

use tensorplay_ir::graph::{Graph, NodeId, NodeKind, ValueRef};
use tensorplay_ir::{Device, Error, OpClass, Result};

use super::fusion::{FusionPlan, Step};
use super::names::Names;

/// One intermediate and the slot that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedValue {
    /// The value.
    pub value: ValueRef,
    /// Its printed name (`%3`), for messages and `Display`.
    pub name: String,
    /// The arena slot it lives in.
    pub slot: usize,
    /// Index in `FusionPlan::steps` of the step that produces it.
    pub first_step: usize,
    /// Index of the last step that reads it (itself or through an alias); equal to
    /// `first_step` when nothing reads it.
    pub last_step: usize,
    /// Where it lives.
    pub device: Device,
}

/// The arena layout of a fusion plan's intermediates (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BufferPlan {
    values: Vec<PlannedValue>,
    slot_of: BTreeMap<ValueRef, usize>,
    /// Alias value -> (the non-alias value it aliases, printed names of both).
    aliases: BTreeMap<ValueRef, (ValueRef, String, String)>,
    slot_devices: Vec<Device>,
}

impl BufferPlan {
    /// The slot holding `v`, or `None` when `v` is not an arena intermediate (a graph input or
    /// output, a constant, a value internal to a region, an alias).
    ///
    /// ```
    /// # use tensorplay_compiler::passes::{buffer_plan, fusion};
    /// # use tensorplay_ir::graph::GraphBuilder;
    /// # use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[4, 4], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let a = b.op("tp::matmul", OpClass::Opaque, vec![x.into(), x.into()], vec![m.clone()])?;
    /// let c = b.op("tp::matmul", OpClass::Opaque, vec![a[0].into(), x.into()], vec![m])?;
    /// b.output(&c)?;
    /// let g = b.finish()?;
    /// let plan = buffer_plan::plan(&g, &fusion::partition(&g)?)?;
    /// assert_eq!(plan.slot_of(a[0]), Some(0));
    /// assert_eq!(plan.slot_of(c[0]), None); // a graph output is returned, not pooled
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn slot_of(&self, v: ValueRef) -> Option<usize> {
        self.slot_of.get(&v).copied()
    }

    /// Number of arena slots.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// assert_eq!(BufferPlan::default().num_slots(), 0);
    /// ```
    pub fn num_slots(&self) -> usize {
        self.slot_devices.len()
    }

    /// The device of slot `slot`.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// assert_eq!(BufferPlan::default().slot_device(0), None);
    /// ```
    pub fn slot_device(&self, slot: usize) -> Option<Device> {
        self.slot_devices.get(slot).copied()
    }

    /// Every planned intermediate, in order of definition.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// assert!(BufferPlan::default().values().is_empty());
    /// ```
    pub fn values(&self) -> &[PlannedValue] {
        &self.values
    }

    /// The values slot `slot` holds over time, in order of definition.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// assert!(BufferPlan::default().slot_values(3).is_empty());
    /// ```
    pub fn slot_values(&self, slot: usize) -> Vec<ValueRef> {
        self.values
            .iter()
            .filter(|p| p.slot == slot)
            .map(|p| p.value)
            .collect()
    }

    /// For a value produced by a view (or a mutating op), the non-alias value whose memory it
    /// shares; `None` for other values.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// use tensorplay_ir::{NodeId, ValueRef};
    /// assert_eq!(BufferPlan::default().alias_of(ValueRef::from(NodeId::new(0))), None);
    /// ```
    pub fn alias_of(&self, v: ValueRef) -> Option<ValueRef> {
        self.aliases.get(&v).map(|(root, _, _)| *root)
    }

    /// The live range `(first_step, last_step)` of a planned intermediate.
    ///
    /// ```
    /// use tensorplay_compiler::passes::BufferPlan;
    /// use tensorplay_ir::{NodeId, ValueRef};
    /// assert_eq!(BufferPlan::default().live_range(ValueRef::from(NodeId::new(0))), None);
    /// ```
    pub fn live_range(&self, v: ValueRef) -> Option<(usize, usize)> {
        self.values
            .iter()
            .find(|p| p.value == v)
            .map(|p| (p.first_step, p.last_step))
    }
}

impl fmt::Display for BufferPlan {
    /// ```text
    /// buffer plan: 2 slots for 3 intermediates
    ///   slot 0 (cpu): %0 [steps 0..1], %2 [steps 2..3]
    ///   slot 1 (cpu): %1 [steps 1..2]
    ///   alias %3 -> %0
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.num_slots();
        let k = self.values.len();
        writeln!(
            f,
            "buffer plan: {n} slot{} for {k} intermediate{}",
            if n == 1 { "" } else { "s" },
            if k == 1 { "" } else { "s" }
        )?;
        for (slot, device) in self.slot_devices.iter().enumerate() {
            let held: Vec<String> = self
                .values
                .iter()
                .filter(|p| p.slot == slot)
                .map(|p| format!("{} [steps {}..{}]", p.name, p.first_step, p.last_step))
                .collect();
            writeln!(f, "  slot {slot} ({device}): {}", held.join(", "))?;
        }
        for (alias, root) in self.aliases.values().map(|(_, a, r)| (a, r)) {
            writeln!(f, "  alias {alias} -> {root}")?;
        }
        Ok(())
    }
}

fn mismatch(msg: String) -> Error {
    Error::compile(
        CompileKind::Lowering,
        format!("buffer plan: the fusion plan does not match the graph: {msg}"),
    )
}

/// Plans arena slots for the intermediates of `fusion` over `g` (see the [module docs](self)).
///
/// Errors (never panics) when the plan does not match the graph: an op node in no step or in
/// several, a step naming a missing region or node, a graph without outputs.
///
/// ```
/// use tensorplay_compiler::passes::{buffer_plan, fusion};
/// use tensorplay_ir::graph::GraphBuilder;
/// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
/// // A -> B -> C -> out through opaque steps: C reuses A's slot once B has read A.
/// let m = TensorMeta::new(&[16, 16], DType::F32, Device::Cpu);
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", m.clone());
/// let mut v = x;
/// let mut chain = Vec::new();
/// for _ in 0..4 {
///     v = b.op("tp::matmul", OpClass::Opaque, vec![v.into(), x.into()], vec![m.clone()])?[0];
///     chain.push(v);
/// }
/// b.output(&[v])?;
/// let g = b.finish()?;
/// let plan = buffer_plan::plan(&g, &fusion::partition(&g)?)?;
/// assert_eq!(plan.num_slots(), 2);
/// assert_eq!(plan.slot_of(chain[0]), plan.slot_of(chain[2]));
/// assert_ne!(plan.slot_of(chain[0]), plan.slot_of(chain[1]));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn plan(g: &Graph, fusion: &FusionPlan) -> Result<BufferPlan> {
    let names = Names::new(g);
    let graph_outputs = g.outputs()?;
    check_each_op_in_one_step(g, fusion)?;
    let alias_parent = alias_parents(g, fusion)?;
    let root = |v: ValueRef| alias_root(&alias_parent, v);
    let produced = produced_values(g, fusion);
    let last_use = last_uses(g, fusion, &root)?;
    let escaped: Vec<ValueRef> = graph_outputs.iter().map(|&v| root(v)).collect();
    let slots = assign_slots(g, &names, produced, &last_use, |v| {
        alias_parent.contains_key(&v) || escaped.contains(&v)
    })?;
    let aliases = alias_parent
        .keys()
        .map(|&a| {
            let r = root(a);
            (a, (r, names.value(g, a), names.value(g, r)))
        })
        .collect();
    Ok(BufferPlan {
        values: slots.values,
        slot_of: slots.slot_of,
        aliases,
        slot_devices: slots.devices,
    })
}

/// Checks that the plan places every op node of `g` in exactly one step, and that its steps
/// name only op nodes and existing regions.
fn check_each_op_in_one_step(g: &Graph, fusion: &FusionPlan) -> Result<()> {
    let mut step_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut place = |n: NodeId, k: usize| -> Result<()> {
        if g.node(n).is_none_or(|node| node.as_op().is_none()) {
            return Err(mismatch(format!(
                "step {k} names {n}, which is not an op node"
            )));
        }
        if let Some(prev) = step_of.insert(n, k) {
            return Err(mismatch(format!(
                "{} is in steps {prev} and {k}",
                g.describe(n)
            )));
        }
        Ok(())
    };
    for (k, step) in fusion.steps.iter().enumerate() {
        match *step {
            Step::Region(r) => {
                let region = fusion
                    .regions
                    .get(r)
                    .ok_or_else(|| mismatch(format!("step {k} names missing region {r}")))?;
                for &n in &region.nodes {
                    place(n, k)?;
                }
            }
            Step::Node(n) => place(n, k)?,
        }
    }
    for id in g.node_ids() {
        if g.node(id).is_some_and(|n| n.as_op().is_some()) && !step_of.contains_key(&id) {
            return Err(mismatch(format!("{} is in no step", g.describe(id))));
        }
    }
    Ok(())
}

/// Aliases: results of view steps and of mutating steps share their first tensor argument's
/// memory. Each alias value maps to that argument (resolved to the non-alias root by
/// [`alias_root`]).
fn alias_parents(g: &Graph, fusion: &FusionPlan) -> Result<BTreeMap<ValueRef, ValueRef>> {
    let mut alias_parent: BTreeMap<ValueRef, ValueRef> = BTreeMap::new();
    for step in &fusion.steps {
        let Step::Node(n) = *step else { continue };
        let Some(node) = g.node(n) else { continue };
        let aliasing = matches!(&node.kind, NodeKind::Op(c)
            if matches!(c.class, OpClass::View | OpClass::Mutating));
        if !aliasing {
            continue;
        }
        if let Some(&src) = g.args_of(n)?.first() {
            for i in 0..node.outputs.len() {
                alias_parent.insert(ValueRef::new(n, i), src);
            }
        }
    }
    Ok(alias_parent)
}

/// The non-alias value whose memory `v` shares (`v` itself when it is no alias).
fn alias_root(alias_parent: &BTreeMap<ValueRef, ValueRef>, mut v: ValueRef) -> ValueRef {
    // Alias chains follow the topological order, so this terminates; the bound guards
    // against a malformed plan anyway.
    for _ in 0..=alias_parent.len() {
        match alias_parent.get(&v) {
            Some(&p) => v = p,
            None => break,
        }
    }
    v
}

/// Values produced by steps, in definition order, each with the index of its step.
fn produced_values(g: &Graph, fusion: &FusionPlan) -> Vec<(ValueRef, usize)> {
    let mut produced: Vec<(ValueRef, usize)> = Vec::new();
    for (k, step) in fusion.steps.iter().enumerate() {
        match *step {
            Step::Region(r) => {
                if let Some(region) = fusion.regions.get(r) {
                    produced.extend(region.outputs.iter().map(|&v| (v, k)));
                }
            }
            Step::Node(n) => {
                let count = g.node(n).map_or(0, |node| node.outputs.len());
                produced.extend((0..count).map(|i| (ValueRef::new(n, i), k)));
            }
        }
    }
    produced
}

/// Last reading step of every root value (a read of an alias reads its `root`).
fn last_uses(
    g: &Graph,
    fusion: &FusionPlan,
    root: &dyn Fn(ValueRef) -> ValueRef,
) -> Result<BTreeMap<ValueRef, usize>> {
    let mut last_use: BTreeMap<ValueRef, usize> = BTreeMap::new();
    let mut read = |v: ValueRef, k: usize| {
        let r = root(v);
        let e = last_use.entry(r).or_insert(k);
        *e = (*e).max(k);
    };
    for (k, step) in fusion.steps.iter().enumerate() {
        match *step {
            Step::Region(r) => {
                if let Some(region) = fusion.regions.get(r) {
                    for &v in &region.inputs {
                        read(v, k);
                    }
                }
            }
            Step::Node(n) => {
                for v in g.args_of(n)? {
                    read(v, k);
                }
            }
        }
    }
    Ok(last_use)
}

/// The slots of a plan and the values they hold.
struct Slots {
    values: Vec<PlannedValue>,
    slot_of: BTreeMap<ValueRef, usize>,
    devices: Vec<Device>,
}

/// Gives every `produced` value that gets a slot (not `skipped`: an alias or a value that
/// escapes) the slot of its device that is free before the value is defined and was freed
/// last (the lowest such index on a tie), or a new slot: greedily, in order of definition.
fn assign_slots(
    g: &Graph,
    names: &Names,
    produced: Vec<(ValueRef, usize)>,
    last_use: &BTreeMap<ValueRef, usize>,
    skipped: impl Fn(ValueRef) -> bool,
) -> Result<Slots> {
    let mut values: Vec<PlannedValue> = Vec::new();
    let mut slot_end: Vec<usize> = Vec::new();
    let mut slot_devices: Vec<Device> = Vec::new();
    let mut slot_of = BTreeMap::new();
    for (v, first) in produced {
        if skipped(v) || slot_of.contains_key(&v) {
            continue;
        }
        let device = g
            .meta(v)
            .map(|m| m.device)
            .ok_or_else(|| mismatch(format!("value {}.{} does not exist", v.node, v.output)))?;
        let last = last_use.get(&v).copied().unwrap_or(first).max(first);
        // Of the free slots, the one freed last: its memory is the likeliest still in cache.
        let slot = match (0..slot_end.len())
            .filter(|&s| slot_end[s] < first && slot_devices[s] == device)
            .max_by_key(|&s| (slot_end[s], std::cmp::Reverse(s)))
        {
            Some(s) => {
                slot_end[s] = last;
                s
            }
            None => {
                slot_end.push(last);
                slot_devices.push(device);
                slot_end.len() - 1
            }
        };
        slot_of.insert(v, slot);
        values.push(PlannedValue {
            value: v,
            name: names.value(g, v),
            slot,
            first_step: first,
            last_step: last,
            device,
        });
    }
    Ok(Slots {
        values,
        slot_of,
        devices: slot_devices,
    })
}
