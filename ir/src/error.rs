//! The one error type of TensorPlay.
//!
//! Every fallible public call returns [`Result`]. Messages name the operation, the argument, what was
//! expected and what was got, so a user can fix the call without reading our source.

use std::collections::BTreeMap;

/// Shorthand for `std::result::Result<T, tensorplay::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in TensorPlay.
///
/// `Debug` prints the same text as `Display` (as `anyhow` does), so `fn main() ->
/// tensorplay::Result<()>` reports a failure readably; `{:#?}` shows the variant and its fields.
///
/// ```
/// use tensorplay_ir::Error;
/// let e = Error::shape("add", "shapes [2, 3] and [4] cannot be broadcast");
/// assert_eq!(e.to_string(), "add: shape error: shapes [2, 3] and [4] cannot be broadcast");
/// assert_eq!(format!("{e:?}"), e.to_string());
/// assert!(format!("{e:#?}").starts_with("Shape {"));
/// ```
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
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
    /// `opcheck` (with `raise_exception`) found failures: `failures` maps each failed check's
    /// name (`test_faketensor`, …) to what went wrong, as the non-raising form returns them.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use tensorplay_ir::Error;
    /// let failures = BTreeMap::from([("test_faketensor".to_string(), "shape [3] vs [1]".to_string())]);
    /// let e = Error::Opcheck { op: "ns::op".into(), failures };
    /// assert_eq!(e.to_string(), "opcheck of `ns::op` failed:\n  test_faketensor: shape [3] vs [1]");
    /// ```
    #[error("opcheck of `{op}` failed:{}", render_failures(.failures))]
    Opcheck {
        op: String,
        failures: BTreeMap<String, String>,
    },
}

fn render_failures(failures: &BTreeMap<String, String>) -> String {
    failures
        .iter()
        .map(|(check, msg)| format!("\n  {check}: {msg}"))
        .collect()
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !f.alternate() {
            return std::fmt::Display::fmt(self, f);
        }
        match self {
            Error::Shape { op, msg } => debug_op_msg(f, "Shape", op, msg),
            Error::DType { op, msg } => debug_op_msg(f, "DType", op, msg),
            Error::Device { op, msg } => debug_op_msg(f, "Device", op, msg),
            Error::Unsupported { op, msg } => debug_op_msg(f, "Unsupported", op, msg),
            Error::Argument {
                op,
                arg,
                expected,
                got,
            } => f
                .debug_struct("Argument")
                .field("op", op)
                .field("arg", arg)
                .field("expected", expected)
                .field("got", got)
                .finish(),
            Error::Lookup(m) => f.debug_tuple("Lookup").field(m).finish(),
            Error::Autograd(m) => f.debug_tuple("Autograd").field(m).finish(),
            Error::Registration(m) => f.debug_tuple("Registration").field(m).finish(),
            Error::Schema {
                schema,
                column,
                msg,
            } => f
                .debug_struct("Schema")
                .field("schema", schema)
                .field("column", column)
                .field("msg", msg)
                .finish(),
            Error::Compile { kind, msg } => f
                .debug_struct("Compile")
                .field("kind", kind)
                .field("msg", msg)
                .finish(),
            Error::Opcheck { op, failures } => f
                .debug_struct("Opcheck")
                .field("op", op)
                .field("failures", failures)
                .finish(),
        }
    }
}

fn debug_op_msg(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    op: &str,
    msg: &str,
) -> std::fmt::Result {
    f.debug_struct(name)
        .field("op", &op)
        .field("msg", &msg)
        .finish()
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
