//! Nodes, edges and the handles that name them.

use crate::error::CompileKind;
use std::fmt;
use std::hash::{Hash, Hasher};

use petgraph::stable_graph::NodeIndex;
use smallvec::SmallVec;

use super::attr::{Attr, fmt_float};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::meta::TensorMeta;
use crate::op_class::OpClass;
use crate::shape::{fmt_shape, numel};

/// A node of a [`Graph`](super::Graph): a thin, copyable wrapper over petgraph's node index.
///
/// Ids are stable: removing other nodes never changes them. They are not the `%N` numbers of the
/// printed form (those follow the topological order).
///
/// ```
/// use tensorplay_ir::graph::GraphBuilder;
/// use tensorplay_ir::{DType, Device, TensorMeta};
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
/// assert_eq!(x.node.index(), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub NodeIndex);

impl NodeId {
    /// The raw index (stable while the node lives).
    ///
    /// ```
    /// use tensorplay_ir::graph::NodeId;
    /// assert_eq!(NodeId::new(3).index(), 3);
    /// ```
    pub fn index(self) -> usize {
        self.0.index()
    }

    /// An id from a raw index (it may name no node; graph queries then return `None` or an error).
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, NodeId};
    /// assert!(Graph::new().node(NodeId::new(7)).is_none());
    /// ```
    pub fn new(index: usize) -> Self {
        NodeId(NodeIndex::new(index))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.index())
    }
}

/// One value of the graph: output `output` of node `node`.
///
/// ```
/// use tensorplay_ir::graph::{NodeId, ValueRef};
/// let v = ValueRef::new(NodeId::new(2), 1);
/// assert_eq!((v.node.index(), v.output), (2, 1));
/// assert_eq!(ValueRef::from(NodeId::new(2)).output, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub output: usize,
}

impl ValueRef {
    /// Output `output` of `node`.
    ///
    /// ```
    /// use tensorplay_ir::graph::{NodeId, ValueRef};
    /// assert_eq!(ValueRef::new(NodeId::new(0), 0), ValueRef::from(NodeId::new(0)));
    /// ```
    pub fn new(node: NodeId, output: usize) -> Self {
        ValueRef { node, output }
    }
}

impl From<NodeId> for ValueRef {
    /// The first output of a node.
    fn from(node: NodeId) -> Self {
        ValueRef { node, output: 0 }
    }
}

/// A literal: a scalar with a dtype, or a small dense tensor given row-major.
///
/// Equality and hashing compare floats by bit pattern.
///
/// ```
/// use tensorplay_ir::graph::Constant;
/// use tensorplay_ir::{DType, Device};
/// let c = Constant::Float { value: 2.0, dtype: DType::F32 };
/// assert_eq!(c.to_string(), "2.0");
/// assert_eq!(c.meta(Device::Cpu).to_string(), "f32[]");
/// let t = Constant::IntTensor { data: vec![1, 2, 3, 4], shape: vec![2, 2], dtype: DType::I64 };
/// assert_eq!(t.to_string(), "[1, 2, 3, 4]");
/// assert!(t.check().is_ok());
/// ```
#[derive(Debug, Clone)]
pub enum Constant {
    /// A floating scalar; `dtype` must be a floating dtype.
    Float { value: f64, dtype: DType },
    /// An integer scalar; `dtype` must be an integer dtype or bool.
    Int { value: i64, dtype: DType },
    /// A boolean scalar (dtype bool).
    Bool(bool),
    /// A floating tensor literal, row-major; `data.len()` must equal the product of `shape`.
    FloatTensor {
        data: Vec<f64>,
        shape: Vec<usize>,
        dtype: DType,
    },
    /// An integer (or bool) tensor literal, row-major.
    IntTensor {
        data: Vec<i64>,
        shape: Vec<usize>,
        dtype: DType,
    },
}

/// At most this many elements of a tensor literal are printed.
const MAX_PRINTED_ELEMS: usize = 8;

impl Constant {
    /// The literal's dtype.
    ///
    /// ```
    /// use tensorplay_ir::graph::Constant;
    /// use tensorplay_ir::DType;
    /// assert_eq!(Constant::Bool(true).dtype(), DType::Bool);
    /// ```
    pub fn dtype(&self) -> DType {
        match self {
            Constant::Float { dtype, .. }
            | Constant::Int { dtype, .. }
            | Constant::FloatTensor { dtype, .. }
            | Constant::IntTensor { dtype, .. } => *dtype,
            Constant::Bool(_) => DType::Bool,
        }
    }

    /// The literal's shape (`[]` for a scalar).
    ///
    /// ```
    /// use tensorplay_ir::graph::Constant;
    /// use tensorplay_ir::DType;
    /// assert!(Constant::Int { value: 1, dtype: DType::I64 }.shape().is_empty());
    /// ```
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Constant::FloatTensor { shape, .. } | Constant::IntTensor { shape, .. } => {
                shape.clone()
            }
            _ => Vec::new(),
        }
    }

    /// The metadata of the tensor this literal stands for, on `device`.
    ///
    /// ```
    /// use tensorplay_ir::graph::Constant;
    /// use tensorplay_ir::{DType, Device};
    /// let c = Constant::FloatTensor { data: vec![0.0; 3], shape: vec![3], dtype: DType::F16 };
    /// assert_eq!(c.meta(Device::Cuda(0)).to_string(), "f16[3]@cuda:0");
    /// ```
    pub fn meta(&self, device: Device) -> TensorMeta {
        TensorMeta::new(&self.shape(), self.dtype(), device)
    }

    /// Checks that the dtype fits the value kind and that the data fills the shape.
    ///
    /// ```
    /// use tensorplay_ir::graph::Constant;
    /// use tensorplay_ir::DType;
    /// assert!(Constant::Float { value: 1.0, dtype: DType::I32 }.check().is_err());
    /// let short = Constant::FloatTensor { data: vec![1.0], shape: vec![2], dtype: DType::F32 };
    /// assert!(short.check().is_err());
    /// ```
    pub fn check(&self) -> Result<()> {
        let dtype = self.dtype();
        let (float_kind, len) = match self {
            Constant::Float { .. } => (true, None),
            Constant::Int { .. } => (false, None),
            Constant::Bool(_) => return Ok(()),
            Constant::FloatTensor { data, .. } => (true, Some(data.len())),
            Constant::IntTensor { data, .. } => (false, Some(data.len())),
        };
        if float_kind && !dtype.is_float() {
            return Err(Error::compile(
                CompileKind::Graph,
                format!("constant {self}: a float literal needs a floating dtype, got {dtype}"),
            ));
        }
        if !float_kind && dtype.is_float() {
            return Err(Error::compile(
                CompileKind::Graph,
                format!(
                    "constant {self}: an integer literal needs an integer or bool dtype, got {dtype}"
                ),
            ));
        }
        if let Some(len) = len {
            let shape = self.shape();
            if numel(&shape) != len {
                return Err(Error::compile(
                    CompileKind::Graph,
                    format!(
                        "constant {self}: shape {} holds {} elements but {len} were given",
                        fmt_shape(&shape),
                        numel(&shape)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn tag(&self) -> u8 {
        match self {
            Constant::Float { .. } => 0,
            Constant::Int { .. } => 1,
            Constant::Bool(_) => 2,
            Constant::FloatTensor { .. } => 3,
            Constant::IntTensor { .. } => 4,
        }
    }
}

impl PartialEq for Constant {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Constant::Float {
                    value: a,
                    dtype: da,
                },
                Constant::Float {
                    value: b,
                    dtype: db,
                },
            ) => a.to_bits() == b.to_bits() && da == db,
            (
                Constant::Int {
                    value: a,
                    dtype: da,
                },
                Constant::Int {
                    value: b,
                    dtype: db,
                },
            ) => a == b && da == db,
            (Constant::Bool(a), Constant::Bool(b)) => a == b,
            (
                Constant::FloatTensor {
                    data: a,
                    shape: sa,
                    dtype: da,
                },
                Constant::FloatTensor {
                    data: b,
                    shape: sb,
                    dtype: db,
                },
            ) => {
                sa == sb
                    && da == db
                    && a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (
                Constant::IntTensor {
                    data: a,
                    shape: sa,
                    dtype: da,
                },
                Constant::IntTensor {
                    data: b,
                    shape: sb,
                    dtype: db,
                },
            ) => a == b && sa == sb && da == db,
            _ => false,
        }
    }
}

impl Eq for Constant {}

impl Hash for Constant {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tag().hash(state);
        match self {
            Constant::Float { value, dtype } => {
                value.to_bits().hash(state);
                dtype.hash(state);
            }
            Constant::Int { value, dtype } => {
                value.hash(state);
                dtype.hash(state);
            }
            Constant::Bool(v) => v.hash(state),
            Constant::FloatTensor { data, shape, dtype } => {
                data.len().hash(state);
                for x in data {
                    x.to_bits().hash(state);
                }
                shape.hash(state);
                dtype.hash(state);
            }
            Constant::IntTensor { data, shape, dtype } => {
                data.hash(state);
                shape.hash(state);
                dtype.hash(state);
            }
        }
    }
}

fn write_elems<T>(
    f: &mut fmt::Formatter<'_>,
    data: &[T],
    each: impl Fn(&T) -> String,
) -> fmt::Result {
    f.write_str("[")?;
    for (i, x) in data.iter().take(MAX_PRINTED_ELEMS).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(&each(x))?;
    }
    if data.len() > MAX_PRINTED_ELEMS {
        f.write_str(", ...")?;
    }
    f.write_str("]")
}

impl fmt::Display for Constant {
    /// Scalars print like attributes (`2.0`, `3`, `True`); tensors print their flat data, at most
    /// eight elements followed by `...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Constant::Float { value, .. } => f.write_str(&fmt_float(*value)),
            Constant::Int { value, .. } => write!(f, "{value}"),
            Constant::Bool(v) => write!(f, "{}", Attr::Bool(*v)),
            Constant::FloatTensor { data, .. } => write_elems(f, data, |x| fmt_float(*x)),
            Constant::IntTensor { data, .. } => write_elems(f, data, |x| x.to_string()),
        }
    }
}

/// One argument position of an [`OpCall`].
///
/// Tensor positions hold no value themselves: each tensor they take arrives on a data edge
/// ([`Edge::Data`]) whose `arg` is this position (and `item` the index within a list).
///
/// ```
/// use tensorplay_ir::graph::{Arg, Attr};
/// assert_eq!(Arg::TensorList { len: 3 }.tensor_slots(), 3);
/// assert_eq!(Arg::OptionalTensor { present: false }.tensor_slots(), 0);
/// assert_eq!(Arg::attr(Attr::Int(1)).tensor_slots(), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Arg {
    /// One tensor (one data edge with `item == 0`).
    Tensor,
    /// An optional tensor: one data edge when `present`, none otherwise (printed `None`).
    OptionalTensor { present: bool },
    /// A list of `len` tensors (data edges with `item` in `0..len`).
    TensorList { len: usize },
    /// A non-tensor value, printed `name=value` when it has a name.
    Attr { name: Option<String>, value: Attr },
}

impl Arg {
    /// A positional (unnamed) attribute.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Arg, Attr};
    /// assert_eq!(Arg::attr(2.0), Arg::Attr { name: None, value: Attr::Float(2.0) });
    /// ```
    pub fn attr(value: impl Into<Attr>) -> Self {
        Arg::Attr {
            name: None,
            value: value.into(),
        }
    }

    /// A named attribute (printed `name=value`).
    ///
    /// ```
    /// use tensorplay_ir::graph::Arg;
    /// assert!(matches!(Arg::named("keepdim", false), Arg::Attr { name: Some(_), .. }));
    /// ```
    pub fn named(name: impl Into<String>, value: impl Into<Attr>) -> Self {
        Arg::Attr {
            name: Some(name.into()),
            value: value.into(),
        }
    }

    /// How many data edges this position takes.
    ///
    /// ```
    /// use tensorplay_ir::graph::Arg;
    /// assert_eq!(Arg::Tensor.tensor_slots(), 1);
    /// ```
    pub fn tensor_slots(&self) -> usize {
        match self {
            Arg::Tensor => 1,
            Arg::OptionalTensor { present } => usize::from(*present),
            Arg::TensorList { len } => *len,
            Arg::Attr { .. } => 0,
        }
    }
}

/// An operator call: the qualified op name, its class, its arguments and, for barriers, why.
///
/// ```
/// use tensorplay_ir::graph::{Arg, OpCall};
/// use tensorplay_ir::OpClass;
/// let call = OpCall::new("mylib::scale_", OpClass::Mutating, vec![Arg::Tensor, Arg::attr(2.0)])
///     .with_barrier_reason("mutates self");
/// assert!(call.is_barrier());
/// assert_eq!(call.tensor_slots(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpCall {
    /// Qualified name, `namespace::name` with an optional `.overload` (`tp::add`, `mylib::f.out`).
    pub name: String,
    /// How the compiler may treat the op.
    pub class: OpClass,
    /// Arguments in schema order.
    pub args: Vec<Arg>,
    /// Why capture made the op opaque (`mutates x`, `triton op`, `custom autograd`), for `explain()`.
    pub barrier_reason: Option<String>,
}

impl OpCall {
    /// A call without a barrier reason.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Arg, OpCall};
    /// use tensorplay_ir::OpClass;
    /// let c = OpCall::new("tp::relu", OpClass::Elementwise, vec![Arg::Tensor]);
    /// assert!(!c.is_barrier());
    /// ```
    pub fn new(name: impl Into<String>, class: OpClass, args: Vec<Arg>) -> Self {
        OpCall {
            name: name.into(),
            class,
            args,
            barrier_reason: None,
        }
    }

    /// Sets why the op is a barrier.
    ///
    /// ```
    /// use tensorplay_ir::graph::OpCall;
    /// use tensorplay_ir::OpClass;
    /// let c = OpCall::new("mylib::k", OpClass::Opaque, vec![]).with_barrier_reason("triton op");
    /// assert_eq!(c.barrier_reason.as_deref(), Some("triton op"));
    /// ```
    pub fn with_barrier_reason(mut self, reason: impl Into<String>) -> Self {
        self.barrier_reason = Some(reason.into());
        self
    }

    /// True when fusion must not cross the op: opaque or mutating class, or a recorded reason.
    ///
    /// ```
    /// use tensorplay_ir::graph::OpCall;
    /// use tensorplay_ir::OpClass;
    /// assert!(OpCall::new("tp::mm", OpClass::Opaque, vec![]).is_barrier());
    /// ```
    pub fn is_barrier(&self) -> bool {
        matches!(self.class, OpClass::Opaque | OpClass::Mutating) || self.barrier_reason.is_some()
    }

    /// Total number of data edges the call takes.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Arg, OpCall};
    /// use tensorplay_ir::OpClass;
    /// let c = OpCall::new("tp::cat", OpClass::Opaque, vec![Arg::TensorList { len: 2 }, Arg::attr(0i64)]);
    /// assert_eq!(c.tensor_slots(), 2);
    /// ```
    pub fn tensor_slots(&self) -> usize {
        self.args.iter().map(Arg::tensor_slots).sum()
    }
}

/// What a node is.
///
/// ```
/// use tensorplay_ir::graph::NodeKind;
/// let k = NodeKind::Input { index: 0, name: "x".into() };
/// assert!(matches!(k, NodeKind::Input { index: 0, .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// Graph input number `index` (inputs are numbered `0..n` without gaps), printed `%name`.
    Input { index: usize, name: String },
    /// A literal.
    Constant(Constant),
    /// An operator call.
    Op(OpCall),
    /// The single sink: result `i` arrives on the data edge with `arg == i`, for `i < arity`.
    Output { arity: usize },
}

/// A node: its kind and the metadata of each of its outputs (none for the output sink; an op may
/// have several; shapes may be symbolic).
///
/// ```
/// use tensorplay_ir::graph::{Node, NodeKind};
/// use tensorplay_ir::{DType, Device, TensorMeta};
/// let n = Node::new(
///     NodeKind::Input { index: 0, name: "x".into() },
///     vec![TensorMeta::new(&[4], DType::F32, Device::Cpu)],
/// );
/// assert!(n.is_input());
/// assert_eq!(n.outputs.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// What the node is.
    pub kind: NodeKind,
    /// Metadata of each output, in output order.
    pub outputs: SmallVec<[TensorMeta; 1]>,
}

impl Node {
    /// A node of `kind` with output metadata `outputs`.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Node, NodeKind};
    /// let sink = Node::new(NodeKind::Output { arity: 2 }, vec![]);
    /// assert!(sink.is_output());
    /// ```
    pub fn new(kind: NodeKind, outputs: Vec<TensorMeta>) -> Self {
        Node {
            kind,
            outputs: SmallVec::from_vec(outputs),
        }
    }

    /// The op call, if this is an op node.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Node, NodeKind, OpCall};
    /// use tensorplay_ir::OpClass;
    /// let n = Node::new(NodeKind::Op(OpCall::new("tp::f", OpClass::Opaque, vec![])), vec![]);
    /// assert_eq!(n.as_op().unwrap().name, "tp::f");
    /// ```
    pub fn as_op(&self) -> Option<&OpCall> {
        match &self.kind {
            NodeKind::Op(call) => Some(call),
            _ => None,
        }
    }

    /// Mutable access to the op call, if this is an op node.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Node, NodeKind, OpCall};
    /// use tensorplay_ir::OpClass;
    /// let mut n = Node::new(NodeKind::Op(OpCall::new("tp::f", OpClass::Opaque, vec![])), vec![]);
    /// n.as_op_mut().unwrap().barrier_reason = Some("custom autograd".into());
    /// assert!(n.as_op().unwrap().barrier_reason.is_some());
    /// ```
    pub fn as_op_mut(&mut self) -> Option<&mut OpCall> {
        match &mut self.kind {
            NodeKind::Op(call) => Some(call),
            _ => None,
        }
    }

    /// True for a graph input.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Node, NodeKind};
    /// assert!(!Node::new(NodeKind::Output { arity: 0 }, vec![]).is_input());
    /// ```
    pub fn is_input(&self) -> bool {
        matches!(self.kind, NodeKind::Input { .. })
    }

    /// True for the output sink.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Node, NodeKind};
    /// assert!(Node::new(NodeKind::Output { arity: 1 }, vec![]).is_output());
    /// ```
    pub fn is_output(&self) -> bool {
        matches!(self.kind, NodeKind::Output { .. })
    }

    /// True for a literal.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Constant, Node, NodeKind};
    /// assert!(Node::new(NodeKind::Constant(Constant::Bool(true)), vec![]).is_constant());
    /// ```
    pub fn is_constant(&self) -> bool {
        matches!(self.kind, NodeKind::Constant(_))
    }

    /// The data edges this node takes, in argument order: `(arg, item)` for every tensor slot.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Arg, Node, NodeKind, OpCall};
    /// use tensorplay_ir::OpClass;
    /// let call = OpCall::new("tp::f", OpClass::Opaque,
    ///     vec![Arg::Tensor, Arg::attr(1i64), Arg::TensorList { len: 2 }]);
    /// let n = Node::new(NodeKind::Op(call), vec![]);
    /// assert_eq!(n.tensor_slots(), vec![(0, 0), (2, 0), (2, 1)]);
    /// ```
    pub fn tensor_slots(&self) -> Vec<(usize, usize)> {
        match &self.kind {
            NodeKind::Op(call) => call
                .args
                .iter()
                .enumerate()
                .flat_map(|(i, a)| (0..a.tensor_slots()).map(move |j| (i, j)))
                .collect(),
            NodeKind::Output { arity } => (0..*arity).map(|i| (i, 0)).collect(),
            _ => Vec::new(),
        }
    }
}

/// An edge from a producer to a consumer.
///
/// ```
/// use tensorplay_ir::graph::Edge;
/// let e = Edge::Data { arg: 1, item: 0, src_output: 0 };
/// assert!(e.is_data());
/// assert!(!Edge::Order.is_data());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Edge {
    /// Output `src_output` of the source fills tensor slot (`arg`, `item`) of the target: `arg` is
    /// the position in `OpCall::args` (or the result position for the output sink), `item` the
    /// index within a tensor list (0 otherwise).
    Data {
        arg: usize,
        item: usize,
        src_output: usize,
    },
    /// Ordering only: the target runs after the source (used around mutation).
    Order,
}

impl Edge {
    /// True for a data edge.
    ///
    /// ```
    /// use tensorplay_ir::graph::Edge;
    /// assert!(Edge::Data { arg: 0, item: 0, src_output: 0 }.is_data());
    /// ```
    pub fn is_data(&self) -> bool {
        matches!(self, Edge::Data { .. })
    }
}
