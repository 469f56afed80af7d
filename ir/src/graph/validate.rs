//! Structural validation of a graph.

use crate::error::CompileKind;
use std::collections::BTreeMap;

use super::Graph;
use super::naming::{Naming, slot_name};
use super::node::{Arg, Edge, Node, NodeId, NodeKind};
use crate::error::{Error, Result};

/// True for `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks an op name of the form `namespace::name` or `namespace::name.overload`.
pub(crate) fn check_op_name(name: &str) -> Result<()> {
    let ok = name.split_once("::").is_some_and(|(ns, rest)| {
        let (base, overload) = match rest.split_once('.') {
            Some((b, o)) => (b, Some(o)),
            None => (rest, None),
        };
        is_ident(ns) && is_ident(base) && overload.is_none_or(is_ident)
    });
    if ok {
        Ok(())
    } else {
        Err(Error::compile(
            CompileKind::Graph,
            format!(
                "op name `{name}` is not a qualified name: expected `namespace::name` or \
             `namespace::name.overload` (identifiers of letters, digits and `_`)"
            ),
        ))
    }
}

fn err(msg: String) -> Error {
    Error::compile(CompileKind::Graph, msg)
}

impl Graph {
    /// Checks the graph's structure and returns the first problem found, as an
    /// [`Error::Compile`] naming the node (`%3 = tp::add`) and what is wrong:
    ///
    /// - the outputs are not set (no output sink), or there are several sinks;
    /// - inputs are not numbered `0..n` (a gap or a duplicate), or an input name is not an
    ///   identifier or is used twice;
    /// - an op name is not qualified (`namespace::name[.overload]`);
    /// - a constant's dtype or data does not fit, or its node's metadata differs from the literal;
    /// - an input or constant has incoming edges, or the sink has outgoing ones;
    /// - a data edge names an output its source does not have, or a slot that does not exist or is
    ///   not a tensor slot (an attribute, an absent optional tensor, a list item out of range);
    /// - a tensor slot (or result) has no data edge (dangling) or more than one;
    /// - a cycle, through data or order edges.
    ///
    /// Never panics, whatever was done to the graph through the public API.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Edge, GraphBuilder};
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::add", OpClass::Elementwise, vec![x.into(), x.into()], vec![m])?;
    /// b.output(&y)?;
    /// let mut g = b.finish()?;
    /// assert!(g.validate().is_ok());
    /// g.remove_edge(x.node, y[0].node, Edge::Data { arg: 1, item: 0, src_output: 0 });
    /// let e = g.validate().unwrap_err();
    /// assert_eq!(e.to_string(), "compile error: %0 = tp::add: tensor argument 1 has no data edge (dangling argument)");
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn validate(&self) -> Result<()> {
        let naming = Naming::new(self);
        let describe = |id: NodeId| naming.describe(self, id);

        // The output sink.
        let sinks: Vec<NodeId> = naming
            .order
            .iter()
            .copied()
            .filter(|&id| self.node(id).is_some_and(Node::is_output))
            .collect();
        match sinks.len() {
            0 => {
                return Err(err(
                    "graph has no outputs: the output sink is missing (call GraphBuilder::output)"
                        .into(),
                ));
            }
            1 => {}
            n => {
                return Err(err(format!(
                    "graph has {n} output sinks (nodes {}); exactly one is allowed",
                    sinks
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }

        // Inputs: numbered 0..n, named uniquely.
        let mut by_index: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
        let mut by_name: BTreeMap<&str, Vec<NodeId>> = BTreeMap::new();
        for id in self.node_ids() {
            if let Some(NodeKind::Input { index, name }) = self.node(id).map(|n| &n.kind) {
                by_index.entry(*index).or_default().push(id);
                by_name.entry(name.as_str()).or_default().push(id);
            }
        }
        let n_inputs: usize = by_index.values().map(Vec::len).sum();
        for (expected, (&index, ids)) in by_index.iter().enumerate() {
            if ids.len() > 1 {
                let names: Vec<String> = ids.iter().map(|&i| naming.label(i)).collect();
                return Err(err(format!(
                    "inputs {} all have index {index}; input indices must be distinct",
                    names.join(" and ")
                )));
            }
            if index != expected {
                return Err(err(format!(
                    "input indices have a gap: there is no input {expected} but {} has index \
                     {index} (the {n_inputs} inputs must be numbered 0..{n_inputs})",
                    describe(ids[0])
                )));
            }
        }
        for (name, ids) in &by_name {
            if !is_ident(name) {
                return Err(err(format!(
                    "input {} has the name `{name}`, which is not an identifier \
                     ([A-Za-z_][A-Za-z0-9_]*)",
                    ids[0]
                )));
            }
            if ids.len() > 1 {
                return Err(err(format!(
                    "{} inputs are named `{name}`; input names must be distinct",
                    ids.len()
                )));
            }
        }

        // Nodes and their edges, in printed order.
        for &id in &naming.order {
            let Some(node) = self.node(id) else { continue };
            self.validate_node(&naming, id, node)?;
        }

        // Cycles last: the messages above are more precise when both apply.
        if !self.kahn().1 {
            return Err(self.cycle_error());
        }
        Ok(())
    }

    fn validate_node(&self, naming: &Naming, id: NodeId, node: &Node) -> Result<()> {
        let who = naming.describe(self, id);
        let ins = self.in_edges(id);
        match &node.kind {
            NodeKind::Input { .. } => {
                if node.outputs.len() != 1 {
                    return Err(err(format!(
                        "{who} must have exactly one output, it has {}",
                        node.outputs.len()
                    )));
                }
            }
            NodeKind::Constant(c) => {
                c.check().map_err(|e| match e {
                    Error::Compile { msg: m, .. } => err(format!("{who}: {m}")),
                    other => other,
                })?;
                let ok = match node.outputs.as_slice() {
                    [m] => {
                        m.dtype == c.dtype()
                            && m.static_shape()
                                .is_some_and(|s| s.as_slice() == c.shape().as_slice())
                    }
                    _ => false,
                };
                if !ok {
                    let expected = c.meta(crate::device::Device::Cpu);
                    return Err(err(format!(
                        "{who}: a constant must have one output of its own dtype and shape \
                         ({}{}), got ({})",
                        expected.dtype,
                        crate::shape::fmt_shape(&expected.shape),
                        node.outputs
                            .iter()
                            .map(|m| m.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            NodeKind::Op(call) => check_op_name(&call.name).map_err(|e| match e {
                Error::Compile { msg: m, .. } => err(format!("{who}: {m}")),
                other => other,
            })?,
            NodeKind::Output { .. } => {
                if !node.outputs.is_empty() {
                    return Err(err(format!(
                        "the output sink must have no outputs of its own, it has {}",
                        node.outputs.len()
                    )));
                }
                if let Some((t, _)) = self.out_edges(id).first() {
                    return Err(err(format!(
                        "the output sink has an outgoing edge to {}",
                        naming.describe(self, *t)
                    )));
                }
            }
        }
        if matches!(node.kind, NodeKind::Input { .. } | NodeKind::Constant(_))
            && let Some((src, e)) = ins.first()
        {
            let what = if e.is_data() { "data" } else { "order" };
            return Err(err(format!(
                "{who} has an incoming {what} edge from {}; inputs and constants take no edges",
                naming.describe(self, *src)
            )));
        }

        // Every data edge: a real output of its source, a real tensor slot of this node.
        let mut filled: BTreeMap<(usize, usize), Vec<NodeId>> = BTreeMap::new();
        for &(src, e) in &ins {
            let Edge::Data {
                arg,
                item,
                src_output,
            } = e
            else {
                continue;
            };
            let src_desc = naming.describe(self, src);
            let n_src = self.node(src).map_or(0, |n| n.outputs.len());
            if src_output >= n_src {
                return Err(err(format!(
                    "{who}: the data edge from {src_desc} refers to its output {src_output}, but it \
                     has {n_src} output(s)"
                )));
            }
            self.check_slot(&who, &src_desc, node, arg, item)?;
            filled.entry((arg, item)).or_default().push(src);
        }
        for (arg, item) in node.tensor_slots() {
            match filled.get(&(arg, item)).map(Vec::as_slice) {
                None | Some([]) => {
                    return Err(err(format!(
                        "{who}: {} has no data edge (dangling argument)",
                        slot_name(node, arg, item)
                    )));
                }
                Some([_]) => {}
                Some(srcs) => {
                    let names: Vec<String> = srcs.iter().map(|&s| naming.label(s)).collect();
                    return Err(err(format!(
                        "{who}: {} has {} data edges (from {}); expected exactly one",
                        slot_name(node, arg, item),
                        srcs.len(),
                        names.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    fn check_slot(&self, who: &str, src: &str, node: &Node, arg: usize, item: usize) -> Result<()> {
        let bad = |why: String| err(format!("{who}: the data edge from {src} {why}"));
        match &node.kind {
            NodeKind::Output { arity } if arg >= *arity || item != 0 => {
                return Err(bad(format!(
                    "targets result {arg} (item {item}), but the graph returns {arity} value(s)"
                )));
            }
            NodeKind::Op(call) => match call.args.get(arg) {
                None => {
                    return Err(bad(format!(
                        "targets argument {arg}, but the op has {} argument(s)",
                        call.args.len()
                    )));
                }
                Some(Arg::Attr { name, value }) => {
                    let shown = match name {
                        Some(n) => format!("{n}={value}"),
                        None => value.to_string(),
                    };
                    return Err(bad(format!(
                        "targets argument {arg} (`{shown}`), which is not a tensor argument"
                    )));
                }
                Some(Arg::OptionalTensor { present: false }) => {
                    return Err(bad(format!(
                        "targets optional tensor argument {arg}, which is marked absent (None)"
                    )));
                }
                Some(Arg::TensorList { len }) if item >= *len => {
                    return Err(bad(format!(
                        "targets item {item} of tensor-list argument {arg}, which has {len} item(s)"
                    )));
                }
                Some(Arg::Tensor | Arg::OptionalTensor { .. }) if item != 0 => {
                    return Err(bad(format!(
                        "targets item {item} of argument {arg}, which is a single tensor"
                    )));
                }
                Some(_) => {}
            },
            _ => {}
        }
        Ok(())
    }
}
