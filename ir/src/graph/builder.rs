//! Building graphs by hand (and from capture).

use super::Graph;
use super::attr::Attr;
use super::node::{Arg, Constant, Edge, Node, NodeId, NodeKind, OpCall, ValueRef};
use super::validate::check_op_name;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::CompileKind;
use crate::error::{Error, Result};
use crate::meta::TensorMeta;
use crate::op_class::OpClass;

/// One argument given to [`GraphBuilder::op`]: a tensor value, an optional tensor, a list of
/// tensors, or a (possibly named) attribute.
///
/// ```
/// use tensorplay_ir::graph::{Attr, BuilderArg, NodeId, ValueRef};
/// let v = ValueRef::from(NodeId::new(0));
/// assert_eq!(BuilderArg::from(v), BuilderArg::Tensor(v));
/// assert_eq!(BuilderArg::from(None::<ValueRef>), BuilderArg::OptionalTensor(None));
/// assert_eq!(BuilderArg::attr(2i64), BuilderArg::Attr { name: None, value: Attr::Int(2) });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BuilderArg {
    /// A tensor.
    Tensor(ValueRef),
    /// An optional tensor (`None` prints as `None`).
    OptionalTensor(Option<ValueRef>),
    /// A list of tensors.
    TensorList(Vec<ValueRef>),
    /// A non-tensor value, printed `name=value` when named.
    Attr { name: Option<String>, value: Attr },
}

impl BuilderArg {
    /// A positional attribute.
    ///
    /// ```
    /// use tensorplay_ir::graph::BuilderArg;
    /// assert!(matches!(BuilderArg::attr(1e-5), BuilderArg::Attr { name: None, .. }));
    /// ```
    pub fn attr(value: impl Into<Attr>) -> Self {
        BuilderArg::Attr {
            name: None,
            value: value.into(),
        }
    }

    /// A named attribute (printed `name=value`).
    ///
    /// ```
    /// use tensorplay_ir::graph::BuilderArg;
    /// assert!(matches!(BuilderArg::named("dims", vec![1i64]), BuilderArg::Attr { name: Some(_), .. }));
    /// ```
    pub fn named(name: impl Into<String>, value: impl Into<Attr>) -> Self {
        BuilderArg::Attr {
            name: Some(name.into()),
            value: value.into(),
        }
    }
}

impl From<ValueRef> for BuilderArg {
    fn from(v: ValueRef) -> Self {
        BuilderArg::Tensor(v)
    }
}

impl From<Option<ValueRef>> for BuilderArg {
    fn from(v: Option<ValueRef>) -> Self {
        BuilderArg::OptionalTensor(v)
    }
}

impl From<Vec<ValueRef>> for BuilderArg {
    fn from(v: Vec<ValueRef>) -> Self {
        BuilderArg::TensorList(v)
    }
}

impl From<&[ValueRef]> for BuilderArg {
    fn from(v: &[ValueRef]) -> Self {
        BuilderArg::TensorList(v.to_vec())
    }
}

impl From<Attr> for BuilderArg {
    fn from(value: Attr) -> Self {
        BuilderArg::Attr { name: None, value }
    }
}

/// Plain values become positional attributes: `2i64.into()`, `1e-5.into()`, `"mean".into()`.
macro_rules! attr_arg_from {
    ($($t:ty),*) => {$(
        impl From<$t> for BuilderArg {
            fn from(v: $t) -> Self {
                BuilderArg::attr(v)
            }
        }
    )*};
}

attr_arg_from!(
    i64,
    f64,
    bool,
    &str,
    String,
    Vec<i64>,
    Vec<f64>,
    Vec<bool>,
    DType,
    Device
);

/// Builds a [`Graph`] node by node. Purely structural: it knows no op semantics, so the caller
/// passes each op's class and output metadata (from the op table's meta rules or fake kernels).
///
/// Every method checks what it can at once (qualified op names, that referenced values exist);
/// [`GraphBuilder::finish`] runs the full [`Graph::validate`].
///
/// ```
/// use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
/// use tensorplay_ir::{DType, Device, Dim, OpClass, TensorMeta};
/// let row = |d: Dim| TensorMeta { shape: [d].into_iter().collect(), dtype: DType::F32, device: Device::Cpu };
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", row(Dim::Sym(0)));
/// let s = b.op("tp::sum", OpClass::Reduction,
///     vec![x.into(), BuilderArg::named("dims", vec![0i64]), BuilderArg::named("keepdim", false)],
///     vec![TensorMeta::new(&[], DType::F32, Device::Cpu)])?;
/// b.output(&s)?;
/// let g = b.finish()?;
/// assert!(g.to_string().contains("%0 = tp::sum(%x, dims=[0], keepdim=False) : f32[]"));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct GraphBuilder {
    graph: Graph,
    n_inputs: usize,
    output_set: bool,
}

impl GraphBuilder {
    /// An empty builder.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// assert_eq!(GraphBuilder::new().graph().node_count(), 0);
    /// ```
    pub fn new() -> Self {
        GraphBuilder::default()
    }

    /// The graph built so far (not yet validated).
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// b.input("x", TensorMeta::new(&[1], DType::F32, Device::Cpu));
    /// assert_eq!(b.graph().inputs().len(), 1);
    /// ```
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Adds the next graph input (inputs are numbered in the order they are added). The name is
    /// printed as `%name`; [`GraphBuilder::finish`] rejects names that are not identifiers or are
    /// used twice.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2, 2], DType::F64, Device::Cpu));
    /// assert_eq!(b.graph().meta(x).unwrap().to_string(), "f64[2, 2]");
    /// ```
    pub fn input(&mut self, name: impl Into<String>, meta: TensorMeta) -> ValueRef {
        let index = self.n_inputs;
        self.n_inputs += 1;
        let id = self.graph.add_node(Node::new(
            NodeKind::Input {
                index,
                name: name.into(),
            },
            vec![meta],
        ));
        ValueRef::from(id)
    }

    /// Adds a literal on `device`. Errors if its dtype does not fit its value or its data does not
    /// fill its shape.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Constant, GraphBuilder};
    /// use tensorplay_ir::{DType, Device};
    /// let mut b = GraphBuilder::new();
    /// let c = b.constant(Constant::Float { value: 0.5, dtype: DType::F32 }, Device::Cpu)?;
    /// assert_eq!(b.graph().meta(c).unwrap().to_string(), "f32[]");
    /// assert!(b.constant(Constant::Int { value: 1, dtype: DType::F32 }, Device::Cpu).is_err());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn constant(&mut self, constant: Constant, device: Device) -> Result<ValueRef> {
        constant.check()?;
        let meta = constant.meta(device);
        let id = self
            .graph
            .add_node(Node::new(NodeKind::Constant(constant), vec![meta]));
        Ok(ValueRef::from(id))
    }

    fn check_value(&self, op: &str, what: &str, v: ValueRef) -> Result<()> {
        match self.graph.node(v.node) {
            None => Err(Error::compile(
                CompileKind::Graph,
                format!(
                    "{op}: {what} refers to node {}, which does not exist",
                    v.node
                ),
            )),
            Some(n) if v.output >= n.outputs.len() => Err(Error::compile(
                CompileKind::Graph,
                format!(
                    "{op}: {what} refers to output {} of {}, which has {} output(s)",
                    v.output,
                    self.graph.describe(v.node),
                    n.outputs.len()
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Adds an op call and returns its node. `outputs` is the metadata of each output (empty for
    /// an op that returns nothing, e.g. an in-place op). Errors if the name is not qualified or an
    /// argument refers to a value that does not exist.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// let n = b.op_node("mylib::fill_", OpClass::Mutating, vec![x.into(), 0.0.into()], vec![])?;
    /// assert!(b.graph().node(n).unwrap().outputs.is_empty());
    /// assert!(b.op_node("fill_", OpClass::Mutating, vec![], vec![]).is_err());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn op_node(
        &mut self,
        name: &str,
        class: OpClass,
        args: Vec<BuilderArg>,
        outputs: Vec<TensorMeta>,
    ) -> Result<NodeId> {
        check_op_name(name)?;
        for (i, a) in args.iter().enumerate() {
            match a {
                BuilderArg::Tensor(v) | BuilderArg::OptionalTensor(Some(v)) => {
                    self.check_value(name, &format!("argument {i}"), *v)?
                }
                BuilderArg::TensorList(vs) => {
                    for (j, v) in vs.iter().enumerate() {
                        self.check_value(name, &format!("item {j} of argument {i}"), *v)?;
                    }
                }
                BuilderArg::OptionalTensor(None) | BuilderArg::Attr { .. } => {}
            }
        }
        let mut edges = Vec::new();
        let call_args: Vec<Arg> = args
            .into_iter()
            .enumerate()
            .map(|(i, a)| match a {
                BuilderArg::Tensor(v) => {
                    edges.push((v, i, 0));
                    Arg::Tensor
                }
                BuilderArg::OptionalTensor(v) => {
                    if let Some(v) = v {
                        edges.push((v, i, 0));
                    }
                    Arg::OptionalTensor {
                        present: v.is_some(),
                    }
                }
                BuilderArg::TensorList(vs) => {
                    let len = vs.len();
                    edges.extend(vs.into_iter().enumerate().map(|(j, v)| (v, i, j)));
                    Arg::TensorList { len }
                }
                BuilderArg::Attr { name, value } => Arg::Attr { name, value },
            })
            .collect();
        let id = self.graph.add_node(Node::new(
            NodeKind::Op(OpCall::new(name, class, call_args)),
            outputs,
        ));
        for (v, arg, item) in edges {
            self.graph.add_edge(
                v.node,
                id,
                Edge::Data {
                    arg,
                    item,
                    src_output: v.output,
                },
            )?;
        }
        Ok(id)
    }

    /// Adds an op call and returns its outputs as values (see [`GraphBuilder::op_node`]).
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    /// let h = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m);
    /// let halves = b.op("tp::chunk", OpClass::View, vec![x.into(), 2i64.into()], vec![h.clone(), h])?;
    /// assert_eq!(halves.len(), 2);
    /// assert_eq!(halves[1].output, 1);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn op(
        &mut self,
        name: &str,
        class: OpClass,
        args: Vec<BuilderArg>,
        outputs: Vec<TensorMeta>,
    ) -> Result<Vec<ValueRef>> {
        let n = outputs.len();
        let id = self.op_node(name, class, args, outputs)?;
        Ok((0..n).map(|i| ValueRef::new(id, i)).collect())
    }

    /// Records why op `node` is a barrier (`mutates x`, `triton op`, `custom autograd`); printed
    /// as `# barrier: ...` and read by `explain()`.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// let n = b.op_node("mylib::zero_", OpClass::Mutating, vec![x.into()], vec![])?;
    /// b.set_barrier_reason(n, "mutates self")?;
    /// assert!(b.set_barrier_reason(x.node, "no").is_err()); // not an op
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn set_barrier_reason(&mut self, node: NodeId, reason: impl Into<String>) -> Result<()> {
        let desc = self.graph.describe(node);
        match self.graph.node_mut(node).and_then(Node::as_op_mut) {
            Some(call) => {
                call.barrier_reason = Some(reason.into());
                Ok(())
            }
            None => Err(Error::compile(
                CompileKind::Graph,
                format!("set_barrier_reason: {desc} is not an op node"),
            )),
        }
    }

    /// Adds an ordering edge: `after` must run after `before` (the edge goes `before -> after`).
    /// Errors if a node does not exist or both are the same node; a cycle is reported by
    /// [`GraphBuilder::finish`].
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let read = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// let write = b.op_node("mylib::zero_", OpClass::Mutating, vec![x.into()], vec![])?;
    /// b.order(write, read[0].node)?; // the write waits for the earlier read
    /// assert!(b.order(write, write).is_err());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn order(&mut self, after: NodeId, before: NodeId) -> Result<()> {
        if after == before {
            return Err(Error::compile(
                CompileKind::Graph,
                format!(
                    "order: {} cannot be ordered after itself",
                    self.graph.describe(after)
                ),
            ));
        }
        self.graph.add_edge(before, after, Edge::Order)
    }

    /// Orders `node` (typically a mutating op) after every node that currently reads `value`
    /// through a data edge, other than `node` itself and the output sink; returns how many order
    /// edges were added. Later readers are ordered with [`GraphBuilder::order`] as they are added.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
    /// b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// let w = b.op_node("mylib::zero_", OpClass::Mutating, vec![x.into()], vec![])?;
    /// assert_eq!(b.order_after_readers(w, x)?, 2);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn order_after_readers(&mut self, node: NodeId, value: ValueRef) -> Result<usize> {
        if !self.graph.contains(node) {
            return Err(Error::compile(
                CompileKind::Graph,
                format!("order_after_readers: node {node} does not exist"),
            ));
        }
        let readers: Vec<NodeId> = self
            .graph
            .value_users(value)
            .into_iter()
            .filter(|&r| r != node && self.graph.node(r).is_some_and(|n| !n.is_output()))
            .collect();
        for &r in &readers {
            self.graph.add_edge(r, node, Edge::Order)?;
        }
        Ok(readers.len())
    }

    /// Sets the graph results, in order. Errors if they were already set or a value does not exist.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// b.output(&[x])?;
    /// assert!(b.output(&[x]).is_err());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn output(&mut self, values: &[ValueRef]) -> Result<()> {
        if self.output_set {
            return Err(Error::compile(
                CompileKind::Graph,
                "output: the graph outputs are already set",
            ));
        }
        for (i, v) in values.iter().enumerate() {
            self.check_value("output", &format!("result {i}"), *v)?;
        }
        let sink = self.graph.add_node(Node::new(
            NodeKind::Output {
                arity: values.len(),
            },
            vec![],
        ));
        for (i, v) in values.iter().enumerate() {
            self.graph.add_edge(
                v.node,
                sink,
                Edge::Data {
                    arg: i,
                    item: 0,
                    src_output: v.output,
                },
            )?;
        }
        self.output_set = true;
        Ok(())
    }

    /// Records a size guard on the graph being built (see [`SizeGuard`](super::SizeGuard)).
    pub fn size_guard(&mut self, guard: super::SizeGuard) {
        self.graph.add_size_guard(guard);
    }

    /// Records a condition on the input dims (see [`SymGuard`](super::SymGuard)).
    pub fn sym_guard(&mut self, guard: super::SymGuard) {
        self.graph.add_sym_guard(guard);
    }

    /// Validates and returns the graph (see [`Graph::validate`] for what is checked).
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// let e = b.clone().finish().unwrap_err(); // no outputs yet
    /// assert!(e.to_string().contains("no outputs"));
    /// ```
    pub fn finish(self) -> Result<Graph> {
        self.graph.validate()?;
        Ok(self.graph)
    }
}
