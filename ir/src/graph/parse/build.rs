//! Assembling the graph from its lines: the header's inputs, node, constant and return lines, and
//! the table of defined `%` labels that wires each use to its producer.

use std::collections::HashMap;

use super::args::ParsedArg;
use super::comment::Comment;
use super::line::Line;
use crate::error::Result;
use crate::graph::Graph;
use crate::graph::node::{Arg, Edge, Node, NodeId, NodeKind, OpCall};
use crate::op_class::OpClass;

/// A defined name: its node and number of outputs.
#[derive(Clone, Copy)]
struct Def {
    node: NodeId,
    outputs: usize,
}

/// The graph being built and the labels defined so far.
pub(super) struct Parser<'r> {
    pub(super) graph: Graph,
    defs: HashMap<String, Def>,
    class_of: &'r dyn Fn(&str) -> Option<OpClass>,
}

/// A data edge still to add: the producer and its output, the argument slot and the item within it.
type DataEdge = ((NodeId, usize), usize, usize);

impl<'r> Parser<'r> {
    /// An empty graph; `class_of` resolves the class of each op name.
    pub(super) fn new(class_of: &'r dyn Fn(&str) -> Option<OpClass>) -> Self {
        Parser {
            graph: Graph::new(),
            defs: HashMap::new(),
            class_of,
        }
    }

    fn define(&mut self, line: &Line<'_>, at: usize, label: &str, def: Def) -> Result<()> {
        if self.defs.insert(label.to_string(), def).is_some() {
            return Err(line.error_at(at, format!("`{label}` is defined twice")));
        }
        Ok(())
    }

    fn lookup(&self, line: &Line<'_>, at: usize, label: &str) -> Result<Def> {
        self.defs.get(label).copied().ok_or_else(|| {
            line.error_at(
                at,
                format!("`{label}` is not defined before this line (values are used after their definition)"),
            )
        })
    }

    /// The producer of `%label[.output]` (`usize::MAX`: no output number was written).
    fn source(
        &self,
        line: &Line<'_>,
        at: usize,
        label: &str,
        output: usize,
    ) -> Result<(NodeId, usize)> {
        let def = self.lookup(line, at, label)?;
        let output = match output {
            usize::MAX if def.outputs == 1 => 0,
            usize::MAX => {
                return Err(line.error_at(
                    at,
                    format!(
                        "`{label}` has {} outputs; name one as `{label}.0`",
                        def.outputs
                    ),
                ));
            }
            i if i < def.outputs => i,
            i => {
                return Err(line.error_at(
                    at,
                    format!(
                        "`{label}` has {} output(s), so `.{i}` does not exist",
                        def.outputs
                    ),
                ));
            }
        };
        Ok((def.node, output))
    }

    fn order_edges(
        &mut self,
        line: &Line<'_>,
        node: NodeId,
        after: &[(String, usize)],
    ) -> Result<()> {
        for (label, at) in after {
            let def = self.lookup(line, *at, label)?;
            self.graph.add_edge(def.node, node, Edge::Order)?;
        }
        Ok(())
    }

    pub(super) fn header(&mut self, line: &mut Line<'_>) -> Result<()> {
        line.expect("graph")?;
        line.expect("(")?;
        if line.eat(")") {
            return line.expect("{").and_then(|_| line.expect_end());
        }
        let mut index = 0;
        loop {
            line.skip_ws();
            let at = line.pos;
            let label = line.label()?;
            if label[1..].starts_with(|c: char| c.is_ascii_digit()) {
                return Err(line.error_at(
                    at,
                    format!("input `{label}`: an input name must not start with a digit (numbers name nodes)"),
                ));
            }
            line.expect(":")?;
            let meta = line.meta()?;
            let node = self.graph.add_node(Node::new(
                NodeKind::Input {
                    index,
                    name: label[1..].to_string(),
                },
                vec![meta],
            ));
            self.define(line, at, &label, Def { node, outputs: 1 })?;
            index += 1;
            if line.eat(")") {
                break;
            }
            line.expect(",")?;
        }
        line.expect("{")?;
        line.expect_end()
    }

    /// `%3 = ...`, `%4.0, %4.1 = ...`: the label and the number of outputs written.
    fn lhs(&mut self, line: &mut Line<'_>) -> Result<(String, Option<usize>, usize)> {
        line.skip_ws();
        let at = line.pos;
        let (label, output, _) = line.value()?;
        if !label[1..].chars().all(|c| c.is_ascii_digit()) {
            return Err(line.error_at(at, format!("a node is numbered like `%3`, found `{label}`")));
        }
        let Some(first) = output else {
            return Ok((label, None, at));
        };
        if first != 0 {
            return Err(line.error_at(at, format!("outputs are listed from `{label}.0`")));
        }
        let mut n = 1;
        while line.eat(",") {
            let pos = line.pos;
            let (l, o, _) = line.value()?;
            if l != label || o != Some(n) {
                return Err(line.error_at(pos, format!("expected `{label}.{n}`")));
            }
            n += 1;
        }
        Ok((label, Some(n), at))
    }

    pub(super) fn node_line(&mut self, line: &mut Line<'_>, comment: Comment) -> Result<()> {
        let (label, written, at) = self.lhs(line)?;
        line.expect("=")?;
        line.skip_ws();
        let rhs_at = line.pos;
        if line.rest().starts_with("constant(") {
            line.pos += "constant(".len();
            return self.constant_line(line, &label, at, rhs_at, comment);
        }
        let name = line.qualname()?;
        line.expect("(")?;
        let args = line.args()?;
        line.expect(":")?;
        let outputs = line.metas()?;
        line.expect_end()?;
        check_output_names(line, &label, at, written, outputs.len())?;
        let class = match comment.class.or_else(|| (self.class_of)(name)) {
            Some(c) => c,
            None => {
                return Err(line.error_at(
                    rhs_at,
                    format!(
                        "unknown op `{name}`: the resolver knows no class for it; state it in the \
                         line's comment, e.g. `# class: opaque`"
                    ),
                ));
            }
        };
        let (call_args, edges) = self.wire_args(line, args)?;
        let mut call = OpCall::new(name, class, call_args);
        call.barrier_reason = comment.barrier;
        let n_out = outputs.len();
        let node = self.graph.add_node(Node::new(NodeKind::Op(call), outputs));
        for ((src, src_output), arg, item) in edges {
            self.graph.add_edge(
                src,
                node,
                Edge::Data {
                    arg,
                    item,
                    src_output,
                },
            )?;
        }
        self.order_edges(line, node, &comment.after)?;
        self.define(
            line,
            at,
            &label,
            Def {
                node,
                outputs: n_out,
            },
        )
    }

    /// The call's arguments with their tensor slots looked up: the `Arg`s in order and the data
    /// edges that fill them.
    fn wire_args(
        &self,
        line: &Line<'_>,
        args: Vec<(ParsedArg, usize)>,
    ) -> Result<(Vec<Arg>, Vec<DataEdge>)> {
        let mut call_args = Vec::with_capacity(args.len());
        let mut edges = Vec::new();
        for (i, (a, at)) in args.into_iter().enumerate() {
            call_args.push(match a {
                ParsedArg::Tensor(l, o) => {
                    edges.push((self.source(line, at, &l, o)?, i, 0));
                    Arg::Tensor
                }
                ParsedArg::OptionalTensor(l, o) => {
                    edges.push((self.source(line, at, &l, o)?, i, 0));
                    Arg::OptionalTensor { present: true }
                }
                ParsedArg::AbsentTensor => Arg::OptionalTensor { present: false },
                ParsedArg::TensorList(items) => {
                    let len = items.len();
                    for (j, (l, o)) in items.into_iter().enumerate() {
                        edges.push((self.source(line, at, &l, o)?, i, j));
                    }
                    Arg::TensorList { len }
                }
                ParsedArg::Attr(name, value) => Arg::Attr { name, value },
            });
        }
        Ok((call_args, edges))
    }

    fn constant_line(
        &mut self,
        line: &mut Line<'_>,
        label: &str,
        at: usize,
        lit_at: usize,
        comment: Comment,
    ) -> Result<()> {
        if comment.class.is_some() || comment.barrier.is_some() {
            return Err(line.error_at(at, "a constant has no class or barrier reason"));
        }
        let (constant, meta) = line.constant(lit_at)?;
        let node = self
            .graph
            .add_node(Node::new(NodeKind::Constant(constant), vec![meta]));
        self.order_edges(line, node, &comment.after)?;
        self.define(line, at, label, Def { node, outputs: 1 })
    }

    pub(super) fn return_line(&mut self, line: &mut Line<'_>, comment: Comment) -> Result<()> {
        if comment.class.is_some() || comment.barrier.is_some() {
            return Err(line.error("`return` has no class or barrier reason"));
        }
        if line.eat("<unset>") {
            return Err(line.error(
                "`return <unset>`: a graph without outputs does not validate, so it cannot be parsed",
            ));
        }
        line.expect("(")?;
        let mut results = Vec::new();
        if !line.eat(")") {
            loop {
                let (label, output, at) = line.value()?;
                results.push(self.source(line, at, &label, output.unwrap_or(usize::MAX))?);
                if line.eat(")") {
                    break;
                }
                line.expect(",")?;
            }
        }
        line.expect_end()?;
        let sink = self.graph.add_node(Node::new(
            NodeKind::Output {
                arity: results.len(),
            },
            vec![],
        ));
        for (arg, (src, src_output)) in results.into_iter().enumerate() {
            self.graph.add_edge(
                src,
                sink,
                Edge::Data {
                    arg,
                    item: 0,
                    src_output,
                },
            )?;
        }
        self.order_edges(line, sink, &comment.after)
    }
}

/// Checks the names written on the left (`written`: `None` for `%3`, `Some(n)` for
/// `%3.0, ..., %3.{n-1}`) against the number of output types.
fn check_output_names(
    line: &Line<'_>,
    label: &str,
    at: usize,
    written: Option<usize>,
    outputs: usize,
) -> Result<()> {
    match written {
        None if outputs > 1 => Err(line.error_at(
            at,
            format!(
                "{outputs} output types but one name; write `{label}.0, ..., {label}.{}`",
                outputs - 1
            ),
        )),
        Some(n) if n != outputs => {
            Err(line.error_at(at, format!("{n} output names but {outputs} output types")))
        }
        _ => Ok(()),
    }
}
