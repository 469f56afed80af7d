//! Fusion regions: the unit the fusion pass produces and the code generators consume.

use std::fmt;
use tensorplay_ir::CompileKind;

use tensorplay_ir::graph::Graph;
use tensorplay_ir::{Error, NodeId, ReduceOp, Result, SymShape, ValueRef};

/// What kind of loop nest a region becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum RegionKind {
    /// Elementwise ops over one iteration shape (broadcasts and views folded into loads).
    Pointwise,
    /// Elementwise prologue feeding one reduction (`reduction` is its node), optionally followed
    /// by nothing else: the reduction's result is the region's output.
    Reduction {
        reduction: NodeId,
        op: ReduceOp,
        /// Reduced dims of the reduction's input (non-negative, sorted).
        dims: Vec<usize>,
        keepdim: bool,
    },
    /// A row-wise softmax or log-softmax over the last dim, with an elementwise prologue.
    Softmax { node: NodeId, log: bool },
}

impl fmt::Display for RegionKind {
    /// `pointwise`, `reduction sum over dims [1] (keepdim=False)`, `softmax` or `log_softmax`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionKind::Pointwise => f.write_str("pointwise"),
            RegionKind::Reduction {
                op, dims, keepdim, ..
            } => {
                let op = format!("{op:?}").to_lowercase();
                let keep = if *keepdim { "True" } else { "False" };
                write!(f, "reduction {op} over dims {dims:?} (keepdim={keep})")
            }
            RegionKind::Softmax { log: false, .. } => f.write_str("softmax"),
            RegionKind::Softmax { log: true, .. } => f.write_str("log_softmax"),
        }
    }
}

/// One fused region of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Region {
    /// Dense index in the plan.
    pub id: usize,
    /// The loop nest the region becomes.
    pub kind: RegionKind,
    /// The region's op nodes in topological order.
    pub nodes: Vec<NodeId>,
    /// Values produced outside the region and read inside (graph inputs, constants, other
    /// regions' or barriers' outputs), in first-use order.
    pub inputs: Vec<ValueRef>,
    /// Values produced inside and used outside the region (or graph outputs), in topological
    /// order.
    pub outputs: Vec<ValueRef>,
}

impl Region {
    /// True when `node` is one of the region's op nodes.
    ///
    /// ```
    /// use tensorplay_kernel::region::{Region, RegionKind};
    /// use tensorplay_ir::NodeId;
    /// let r = Region { id: 0, kind: RegionKind::Pointwise, nodes: vec![NodeId::new(2)],
    ///                  inputs: vec![], outputs: vec![] };
    /// assert!(r.contains(NodeId::new(2)));
    /// assert!(!r.contains(NodeId::new(3)));
    /// ```
    pub fn contains(&self, node: NodeId) -> bool {
        self.nodes.contains(&node)
    }

    /// The shape the region's loop nest iterates over: the outputs' shape for a pointwise
    /// region, the reduction's input shape for a reduction, the rows' shape for a softmax. Every
    /// node of the region has a shape that broadcasts to it, so code generators index loads
    /// with it. Errors if the region does not match `g`.
    ///
    /// ```
    /// use tensorplay_kernel::region::{Region, RegionKind};
    /// use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
    /// use tensorplay_ir::{DType, Device, OpClass, ReduceOp, TensorMeta};
    /// let m = TensorMeta::new(&[4, 8], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let s = b.op("tp::sum", OpClass::Reduction,
    ///     vec![x.into(), BuilderArg::named("dim", vec![1i64]), BuilderArg::named("keepdim", false)],
    ///     vec![TensorMeta::new(&[4], DType::F32, Device::Cpu)])?;
    /// b.output(&s)?;
    /// let g = b.finish()?;
    /// let region = Region {
    ///     id: 0,
    ///     kind: RegionKind::Reduction { reduction: s[0].node, op: ReduceOp::Sum, dims: vec![1], keepdim: false },
    ///     nodes: vec![s[0].node],
    ///     inputs: vec![x],
    ///     outputs: vec![s[0]],
    /// };
    /// assert_eq!(region.iteration_shape(&g)?, m.shape);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn iteration_shape(&self, g: &Graph) -> Result<SymShape> {
        let value = match &self.kind {
            RegionKind::Pointwise => match self.outputs.first() {
                Some(v) => *v,
                None => ValueRef::from(*self.nodes.last().ok_or_else(|| {
                    Error::compile(
                        CompileKind::Lowering,
                        format!("region {} has no nodes", self.id),
                    )
                })?),
            },
            RegionKind::Reduction { reduction, .. } => {
                *g.args_of(*reduction)?.first().ok_or_else(|| {
                    Error::compile(
                        CompileKind::Lowering,
                        format!(
                            "region {}: {} has no tensor input",
                            self.id,
                            g.describe(*reduction)
                        ),
                    )
                })?
            }
            RegionKind::Softmax { node, .. } => ValueRef::from(*node),
        };
        g.meta(value).map(|m| m.shape.clone()).ok_or_else(|| {
            Error::compile(
                CompileKind::Lowering,
                format!(
                    "region {}: value {}.{} is not in the graph",
                    self.id, value.node, value.output
                ),
            )
        })
    }
}
