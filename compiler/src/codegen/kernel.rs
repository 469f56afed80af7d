//! Target-independent kernel specs (`tensorplay-kernel`'s `spec`, re-exported), lowered with the
//! builtin op table's declarations.

use tensorplay_ir::Result;
use tensorplay_ir::graph::Graph;
use tensorplay_runtime::ops::table::OpTable;

use crate::passes::region::Region;
pub use tensorplay_kernel::spec::*;

/// Lowers `region` of `graph` to a [`KernelSpec`] with the builtin ops' declared lowerings (see
/// `tensorplay_kernel::spec::lower`, which takes the table as an argument).
///
/// ```
/// use tensorplay_compiler::codegen::kernel::{Lit, lower};
/// use tensorplay_compiler::passes::region::{Region, RegionKind};
/// use tensorplay_ir::graph::{Constant, GraphBuilder};
/// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
///
/// let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", m.clone());
/// let two = b.constant(Constant::Float { value: 2.0, dtype: DType::F64 }, Device::Cpu)?;
/// let y = b.op("tp::mul", OpClass::Elementwise, vec![x.into(), two.into()], vec![m.clone()])?;
/// let z = b.op("tp::gelu", OpClass::Elementwise, vec![y[0].into()], vec![m])?;
/// b.output(&z)?;
/// let g = b.finish()?;
/// let region = Region { id: 0, kind: RegionKind::Pointwise,
///     nodes: vec![y[0].node, z[0].node], inputs: vec![x, two], outputs: vec![z[0]] };
/// let k = lower(&g, &region)?;
/// assert_eq!(k.params, vec![Lit::Float(2.0)]);
/// assert!(k.spec.to_string().contains("gelu"));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn lower(graph: &Graph, region: &Region) -> Result<LoweredRegion> {
    tensorplay_kernel::spec::lower(graph, region, &OpTable)
}
