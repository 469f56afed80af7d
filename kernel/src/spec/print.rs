//! The text form of specs (`Display` of [`KernelSpec`], [`Lit`] and [`LoopLayout`]), and the
//! names it gives scalar ops, reductions and stride classes — the names
//! [`parse`](crate::spec::parse) reads back.

use std::fmt;

use tensorplay_ir::graph::attr::fmt_float;
use tensorplay_ir::{DType, ReduceOp, ScalarOp};

use crate::spec::inst::Inst;
use crate::spec::kernel::{KernelSpec, LoopKind};
use crate::spec::layout::{LoopLayout, StrideClass};
use crate::spec::lit::Lit;

/// The text of a float: the IR's shortest round-trip form (`0.5`, `1e-05`, `-inf`), and for a
/// NaN `nan` (the quiet NaN `f64::NAN`), `-nan` (the same with the sign bit set) or
/// `nan:0x<16 hex digits>` (any other NaN, by its bits), so that every value parses back to the
/// same bits.
///
/// ```
/// use tensorplay_kernel::spec::Lit;
/// assert_eq!(Lit::Float(0.1).to_string(), "0.1");
/// assert_eq!(Lit::Float(f64::NAN).to_string(), "nan");
/// assert_eq!(Lit::Float(-f64::NAN).to_string(), "-nan");
/// assert_eq!(Lit::Float(f64::from_bits(0x7ff0_0000_0000_0001)).to_string(), "nan:0x7ff0000000000001");
/// ```
pub(crate) fn float_text(v: f64) -> String {
    if v.is_nan() {
        let bits = v.to_bits();
        return if bits == f64::NAN.to_bits() {
            "nan".to_string()
        } else if bits == (-f64::NAN).to_bits() {
            "-nan".to_string()
        } else {
            format!("nan:{bits:#018x}")
        };
    }
    fmt_float(v)
}

/// An optional float (a `clamp` bound, a `nan_to_num` replacement): the float, or `none`.
fn opt_float_text(v: &Option<f64>) -> String {
    v.map_or("none".to_string(), float_text)
}

/// The name of a scalar op in the text form: the lowercase variant (`add`, `geluerf`), the C
/// name of a libm function (`tan`, `atan2`), and the payload of `clamp` and `nan_to_num` in
/// brackets (`clamp[0.0, none]`, `nan_to_num[0.0, none, none]`).
pub(crate) fn op_name(op: &ScalarOp) -> String {
    match op {
        ScalarOp::Clamp { min, max } => {
            format!("clamp[{}, {}]", opt_float_text(min), opt_float_text(max))
        }
        ScalarOp::Math(f) => format!("{f:?}").to_lowercase(),
        ScalarOp::Libm(f) => f.name().to_string(),
        ScalarOp::Libm2(f) => f.name().to_string(),
        ScalarOp::NanToNum {
            nan,
            posinf,
            neginf,
        } => format!(
            "nan_to_num[{}, {}, {}]",
            float_text(*nan),
            opt_float_text(posinf),
            opt_float_text(neginf)
        ),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The name of a reduction in the text form.
pub(crate) fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Prod => "prod",
        ReduceOp::Amax => "amax",
        ReduceOp::Amin => "amin",
    }
}

/// The name of a stride class in [`LoopLayout`]'s text form.
pub(crate) fn class_name(c: StrideClass) -> &'static str {
    match c {
        StrideClass::Unit => "unit",
        StrideClass::Zero => "zero",
        StrideClass::Strided => "strided",
    }
}

fn dtype_list(ds: &[DType]) -> String {
    ds.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Float(v) => f.write_str(&float_text(*v)),
            Lit::Int(v) => write!(f, "{v}"),
            Lit::Bool(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for LoopLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let classes: Vec<&str> = self.classes.iter().map(|c| class_name(*c)).collect();
        write!(
            f,
            "dims={} reduced={}{}{} classes=[{}]",
            self.dims,
            self.reduced,
            if self.kept_inner { " kept_inner" } else { "" },
            if self.in_place { " in_place" } else { "" },
            classes.join(", ")
        )
    }
}

/// The loop kind as the header prints it (`pointwise`, `reduce sum(%2) dims=[1] keepdim=false`,
/// `softmax(%3)`).
fn kind_text(kind: &LoopKind) -> String {
    match kind {
        LoopKind::Pointwise => "pointwise".to_string(),
        LoopKind::Reduce {
            op,
            value,
            dims,
            keepdim,
        } => format!(
            "reduce {}(%{value}) dims={dims:?} keepdim={keepdim}",
            reduce_name(*op)
        ),
        LoopKind::Softmax { value, log } => {
            format!("{}(%{value})", if *log { "log_softmax" } else { "softmax" })
        }
    }
}

/// One body line (without its indent and newline) for instruction `i`.
fn inst_text(spec: &KernelSpec, i: usize, inst: &Inst) -> String {
    match inst {
        Inst::Load { input } => format!(
            "%{i} = load in{input} : {}",
            spec.inputs.get(*input).map_or("?", |d| d.name())
        ),
        Inst::Const { value, dtype } => format!("%{i} = const {value} : {dtype}"),
        Inst::Param { index, dtype } => format!("%{i} = param {index} : {dtype}"),
        Inst::Op {
            op,
            args,
            compute,
            out,
        } => {
            let args: Vec<String> = args.iter().map(|a| format!("%{a}")).collect();
            let within = if compute != out {
                format!(" in {compute}")
            } else {
                String::new()
            };
            format!(
                "%{i} = {}({}){within} : {out}",
                op_name(op),
                args.join(", ")
            )
        }
        Inst::Cast { arg, to } => format!("%{i} = cast %{arg} : {to}"),
        Inst::Store { output, value } => format!("store out{output}, %{value}"),
    }
}

impl fmt::Display for KernelSpec {
    /// One header line (kind, rank, operand dtypes) and one line per instruction; see
    /// [`KernelSpec::parse`] for the grammar.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {} rank={} inputs=[{}] outputs=[{}]",
            kind_text(&self.kind),
            self.rank,
            dtype_list(&self.inputs),
            dtype_list(&self.outputs)
        )?;
        for (i, inst) in self.insts.iter().enumerate() {
            writeln!(f, "  {}", inst_text(self, i, inst))?;
        }
        Ok(())
    }
}
