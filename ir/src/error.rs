//! The one error type of TensorPlay.
//!
//! Every fallible public call returns [`Result`]. Messages name the operation, the argument, what was
//! expected and what was got, so a user can fix the call without reading our source.

/// Shorthand for `std::result::Result<T, tensorplay::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in TensorPlay.
///
/// ```
/// use tensorplay_ir::Error;
/// let e = Error::shape("add", "shapes [2, 3] and [4] cannot be broadcast");
/// assert_eq!(e.to_string(), "add: shape error: shapes [2, 3] and [4] cannot be broadcast");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shapes that do not fit together (broadcasting, reshape, matmul, dims out of range).
    #[error("{op}: shape error: {msg}")]
    Shape { op: String, msg: String },
    /// A dtype the operation does not accept, or two dtypes that do not combine.
    #[error("{op}: dtype error: {msg}")]
    DType { op: String, msg: String },
    /// Tensors on the wrong or on mixed devices, or a device that is not available.
    #[error("{op}: device error: {msg}")]
    Device { op: String, msg: String },
    /// A bad argument value: names the argument, what was expected and what was got.
    #[error("{op}: invalid argument `{arg}`: expected {expected}, got {got}")]
    Argument {
        op: String,
        arg: String,
        expected: String,
        got: String,
    },
    /// Something looked up by name (an operator, a kernel, a namespace) is not there.
    #[error("lookup error: {0}")]
    Lookup(String),
    /// A valid request that this build of TensorPlay does not support.
    #[error("{op}: unsupported: {msg}")]
    Unsupported { op: String, msg: String },
    /// Gradient computation failed (graph modified in place, wrong gradient count, ...).
    #[error("autograd: {0}")]
    Autograd(String),
    /// A schema string could not be parsed; `column` is 1-based.
    #[error("schema error at column {column}: {msg} in `{schema}`")]
    Schema {
        schema: String,
        column: usize,
        msg: String,
    },
    /// Operator registration or definition failed; nothing was registered.
    #[error("registration error: {0}")]
    Registration(String),
    /// Graph construction, capture or compilation failed; `kind` says which stage, so callers can
    /// match on it (the message is for people).
    #[error("compile error: {msg}")]
    Compile { kind: CompileKind, msg: String },
}

/// The stage of compilation an [`Error::Compile`] comes from.
///
/// ```
/// use tensorplay_ir::{CompileKind, Error};
/// let e = Error::compile(CompileKind::Guard, "input 0 has rank 3, the graph was compiled for 2");
/// assert_eq!(e.compile_kind(), Some(CompileKind::Guard));
/// assert!(matches!(e, Error::Compile { kind: CompileKind::Guard, .. }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompileKind {
    /// An IR graph is malformed (building, editing or validating it).
    Graph,
    /// Tracing a closure into a graph failed (data reads, missing fake kernels, constants).
    Capture,
    /// The inputs do not match what a compiled graph was built for (count, rank, dtype, device).
    Guard,
    /// A pass or the lowering to kernel specs rejected the graph.
    Lowering,
    /// Machine-code generation (Cranelift, the JIT, the host ISA) failed.
    Codegen,
    /// Running a compiled graph or launching one of its kernels failed.
    Launch,
}

impl std::fmt::Display for CompileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CompileKind::Graph => "graph",
            CompileKind::Capture => "capture",
            CompileKind::Guard => "guard",
            CompileKind::Lowering => "lowering",
            CompileKind::Codegen => "codegen",
            CompileKind::Launch => "launch",
        })
    }
}

impl Error {
    /// A shape error raised by `op`.
    pub fn shape(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Shape {
            op: op.into(),
            msg: msg.into(),
        }
    }

    /// A dtype error raised by `op`.
    pub fn dtype(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::DType {
            op: op.into(),
            msg: msg.into(),
        }
    }

    /// A device error raised by `op`.
    pub fn device(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Device {
            op: op.into(),
            msg: msg.into(),
        }
    }

    /// A bad value for argument `arg` of `op`.
    pub fn argument(
        op: impl Into<String>,
        arg: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Error::Argument {
            op: op.into(),
            arg: arg.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// A compile error of stage `kind`.
    pub fn compile(kind: CompileKind, msg: impl Into<String>) -> Self {
        Error::Compile {
            kind,
            msg: msg.into(),
        }
    }

    /// The stage of a compile error, or `None` for other errors.
    pub fn compile_kind(&self) -> Option<CompileKind> {
        match self {
            Error::Compile { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// An unsupported request to `op`.
    pub fn unsupported(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Unsupported {
            op: op.into(),
            msg: msg.into(),
        }
    }
}
