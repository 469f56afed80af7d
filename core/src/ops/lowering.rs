//! How the compiler sees a builtin op, declared in its `OpDef` (`tensorplay-kernel`'s lowering
//! types and expression builders, re-exported here for the op families): the scalar expression
//! and dtype rule of an elementwise op, the combine rule of a reduction, or softmax.

pub use tensorplay_kernel::lowering::*;
