//! How the compiler may treat an operator.

use std::fmt;

/// The class of an operator, from the op table (builtins) or the registry (custom ops).
///
/// The fusion pass reads it: elementwise ops fuse with their neighbours, reductions take fused
/// elementwise producers as prologue, views become index arithmetic, opaque ops are barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Output element i depends only on input elements i (after broadcasting).
    Elementwise,
    /// Reduces one or more dims (sum, amax, softmax's row reductions...).
    Reduction,
    /// Returns an alias of its input with new shape/strides; touches no data.
    View,
    /// Anything the compiler must not look into: matmul, cat, custom kernels, triton ops.
    Opaque,
    /// Writes into one of its inputs; always a barrier with ordering edges.
    Mutating,
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpClass::Elementwise => "elementwise",
            OpClass::Reduction => "reduction",
            OpClass::View => "view",
            OpClass::Opaque => "opaque",
            OpClass::Mutating => "mutating",
        })
    }
}
