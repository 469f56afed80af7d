//! Reading the text form back: [`KernelSpec::parse`] (what `Display` prints, so print → parse
//! gives an equal spec) and [`LoopLayout::parse`].

use std::str::FromStr;

use tensorplay_ir::{
    CompileKind, DType, Error, LibmFn, LibmFn2, MathFn, ReduceOp, Result, ScalarOp,
};

use crate::spec::cursor::Cursor;
use crate::spec::inst::{Inst, ValueId};
use crate::spec::kernel::{KernelSpec, LoopKind};
use crate::spec::layout::{LoopLayout, StrideClass};
use crate::spec::lit::Lit;
use crate::spec::print::{class_name, op_name, reduce_name};

const SPEC: &str = "kernel spec text";
const LAYOUT: &str = "loop layout text";

/// The scalar ops without a payload, named by [`op_name`] (`clamp`, `nan_to_num` and the
/// math and libm functions are read separately).
pub(crate) const PLAIN_OPS: [ScalarOp; 36] = {
    use ScalarOp::*;
    [
        Neg, Abs, Sqrt, Rsqrt, Reciprocal, Relu, Floor, Ceil, Round, Sign, Square, LogicalNot,
        Cast, Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd,
        LogicalOr, LogicalXor, Where, BitAnd, BitOr, BitXor, BitNot, Shl, Shr,
    ]
};

const REDUCE_OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Prod,
    ReduceOp::Amax,
    ReduceOp::Amin,
];

const CLASSES: [StrideClass; 3] = [StrideClass::Unit, StrideClass::Zero, StrideClass::Strided];

impl KernelSpec {
    /// Reads the text form `Display` prints: for every spec, `KernelSpec::parse(&spec.to_string())`
    /// is an equal spec. The grammar, one item per line (blank lines are skipped, spaces between
    /// tokens are free):
    ///
    /// ```text
    /// kernel KIND rank=N inputs=[DTYPE, ..] outputs=[DTYPE, ..]
    ///   KIND  = pointwise | reduce (sum|mean|prod|amax|amin)(%V) dims=[N, ..] keepdim=BOOL
    ///         | softmax(%V) | log_softmax(%V)
    ///   %I = load inK : DTYPE            (the dtype of input K, `?` when there is none)
    ///   %I = const LIT : DTYPE           (LIT: 3, -2, 1.0, 1e-05, inf, nan, -nan,
    ///                                     nan:0x<bits>, true, false)
    ///   %I = param K : DTYPE
    ///   %I = OP(%A, ..) [in DTYPE] : DTYPE   (`in`: the compute dtype, when it is not the result's)
    ///   %I = cast %A : DTYPE
    ///   store outK, %V
    /// ```
    ///
    /// where `%I` numbers the line among the body lines (stores count too) and `OP` is a scalar
    /// op's lowercase name (`add`, `geluerf`, `tan`, `atan2`) or `clamp[MIN, MAX]` /
    /// `nan_to_num[NAN, POSINF, NEGINF]` with floats or `none`. Errors name the line and column
    /// and what was expected there. Parsing checks the syntax, the numbering and each load's
    /// dtype; [`KernelSpec::validate`] checks the rest.
    ///
    /// ```
    /// use tensorplay_kernel::spec::KernelSpec;
    /// let text = "\
    /// kernel reduce sum(%1) dims=[1] keepdim=false rank=2 inputs=[f16] outputs=[f32]
    ///   %0 = load in0 : f16
    ///   %1 = cast %0 : f32
    /// ";
    /// let k = KernelSpec::parse(text)?;
    /// assert_eq!(k.to_string(), text);
    /// let e = KernelSpec::parse("kernel pointwise rank=1 inputs=[f32] outputs=[f32]\n  %0 = lod in0 : f32\n")
    ///     .unwrap_err();
    /// assert!(e.to_string().contains("line 2, column 8: expected an instruction"), "{e}");
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<KernelSpec> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| Cursor::new(l, SPEC, Some(i + 1)));
        let Some(mut head) = lines.next() else {
            return Err(Error::compile(
                CompileKind::Lowering,
                format!("{SPEC} is empty (expected a `kernel` header line)"),
            ));
        };
        let mut spec = header(&mut head)?;
        for mut line in lines {
            let inst = inst(&mut line, spec.insts.len(), &spec.inputs)?;
            spec.insts.push(inst);
        }
        Ok(spec)
    }
}

impl FromStr for KernelSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<KernelSpec> {
        KernelSpec::parse(s)
    }
}

impl LoopLayout {
    /// Reads `Display`'s one-line form, `dims=N reduced=N [kept_inner] [in_place]
    /// classes=[unit|zero|strided, ..]`.
    ///
    /// ```
    /// use tensorplay_kernel::spec::{LoopLayout, StrideClass};
    /// let l = LoopLayout::parse("dims=2 reduced=1 kept_inner classes=[strided, zero]")?;
    /// assert_eq!(l, LoopLayout { dims: 2, reduced: 1, kept_inner: true, in_place: false,
    ///                            classes: vec![StrideClass::Strided, StrideClass::Zero] });
    /// assert_eq!(LoopLayout::parse(&l.to_string())?, l);
    /// assert!(LoopLayout::parse("dims=2 classes=[]").unwrap_err().to_string()
    ///     .contains("column 8: expected `reduced=`"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<LoopLayout> {
        let c = &mut Cursor::new(text.trim_end_matches(['\n', '\r']), LAYOUT, None);
        c.expect("dims=")?;
        let dims = c.unsigned("a number of loop dims")?;
        c.expect("reduced=")?;
        let reduced = c.unsigned("a number of reduced dims")?;
        let kept_inner = c.eat("kept_inner");
        let in_place = c.eat("in_place");
        c.expect("classes=")?;
        let classes = c.list(|c| {
            let (at, w) = c.token();
            CLASSES
                .into_iter()
                .find(|&k| class_name(k) == w)
                .ok_or_else(|| {
                    c.error_at(
                        at,
                        format!("expected a stride class (unit, zero, strided), found `{w}`"),
                    )
                })
        })?;
        c.expect_end()?;
        Ok(LoopLayout {
            dims,
            reduced,
            kept_inner,
            in_place,
            classes,
        })
    }
}

impl FromStr for LoopLayout {
    type Err = Error;

    fn from_str(s: &str) -> Result<LoopLayout> {
        LoopLayout::parse(s)
    }
}

/// `true` or `false`.
fn boolean(c: &mut Cursor) -> Result<bool> {
    let (at, w) = c.token();
    match w {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(c.error_at(at, format!("expected `true` or `false`, found `{w}`"))),
    }
}

/// The header line: the loop kind, rank and operand dtypes; the body is left empty.
fn header(c: &mut Cursor) -> Result<KernelSpec> {
    c.expect("kernel")?;
    let kind = loop_kind(c)?;
    c.expect("rank=")?;
    let rank = c.unsigned("a rank")?;
    c.expect("inputs=")?;
    let inputs = c.list(Cursor::dtype)?;
    c.expect("outputs=")?;
    let outputs = c.list(Cursor::dtype)?;
    c.expect_end()?;
    Ok(KernelSpec {
        rank,
        inputs,
        outputs,
        insts: Vec::new(),
        kind,
    })
}

/// `pointwise`, `reduce OP(%V) dims=[..] keepdim=BOOL`, `softmax(%V)` or `log_softmax(%V)`.
fn loop_kind(c: &mut Cursor) -> Result<LoopKind> {
    let at = c.mark();
    let expected = "a loop kind (pointwise, reduce, softmax, log_softmax)";
    let Some(w) = c.word() else {
        return Err(c.expected(expected));
    };
    let in_parens = |c: &mut Cursor| -> Result<ValueId> {
        c.expect("(")?;
        let v = c.value()?;
        c.expect(")")?;
        Ok(v)
    };
    Ok(match w {
        "pointwise" => LoopKind::Pointwise,
        "softmax" | "log_softmax" => LoopKind::Softmax {
            value: in_parens(c)?,
            log: w == "log_softmax",
        },
        "reduce" => {
            let at = c.mark();
            let name = c.word().unwrap_or("");
            let Some(op) = REDUCE_OPS.into_iter().find(|&op| reduce_name(op) == name) else {
                c.pos_reset(at);
                return Err(c.expected("a reduction (sum, mean, prod, amax, amin)"));
            };
            let value = in_parens(c)?;
            c.expect("dims=")?;
            let dims = c.list(|c| c.unsigned("a dim"))?;
            c.expect("keepdim=")?;
            let keepdim = boolean(c)?;
            LoopKind::Reduce {
                op,
                value,
                dims,
                keepdim,
            }
        }
        _ => return Err(c.error_at(at, format!("expected {expected}, found `{w}`"))),
    })
}

/// One body line, the `index`-th: an instruction defining `%index`, or a store.
fn inst(c: &mut Cursor, index: usize, inputs: &[DType]) -> Result<Inst> {
    if c.eat("store") {
        c.expect("out")?;
        let output = c.unsigned("an output number")?;
        c.expect(",")?;
        let value = c.value()?;
        c.expect_end()?;
        return Ok(Inst::Store { output, value });
    }
    let at = c.mark();
    let id = c.value()?;
    if id != index {
        return Err(c.error_at(
            at,
            format!("expected `%{index}` (body lines are numbered in order, stores included), found `%{id}`"),
        ));
    }
    c.expect("=")?;
    let at = c.mark();
    let expected = "an instruction (load, const, param, cast or a scalar op)";
    let Some(w) = c.word() else {
        return Err(c.expected(expected));
    };
    let inst = match w {
        "load" => load(c, inputs)?,
        "const" => {
            let value = lit(c)?;
            c.expect(":")?;
            Inst::Const {
                value,
                dtype: c.dtype()?,
            }
        }
        "param" => {
            let index = c.unsigned("a param number")?;
            c.expect(":")?;
            Inst::Param {
                index,
                dtype: c.dtype()?,
            }
        }
        // `cast %A : DTYPE` is a conversion; `cast(%A)` the (never valid) scalar op.
        "cast" if c.peek() != Some('(') => {
            let arg = c.value()?;
            c.expect(":")?;
            Inst::Cast {
                arg,
                to: c.dtype()?,
            }
        }
        name => {
            let Some(op) = scalar_op(c, name)? else {
                return Err(c.error_at(at, format!("expected {expected}, found `{name}`")));
            };
            op_inst(c, op)?
        }
    };
    c.expect_end()?;
    Ok(inst)
}

/// `inK : DTYPE` after `load`: the dtype must be input K's (`?` when there is no input K).
fn load(c: &mut Cursor, inputs: &[DType]) -> Result<Inst> {
    c.expect("in")?;
    let input = c.unsigned("an input number")?;
    c.expect(":")?;
    match inputs.get(input) {
        None => c.expect("?")?,
        Some(&want) => {
            let at = c.mark();
            let d = c.dtype()?;
            if d != want {
                return Err(c.error_at(
                    at,
                    format!("expected `{want}` (the dtype of input {input}), found `{d}`"),
                ));
            }
        }
    }
    Ok(Inst::Load { input })
}

/// `(%A, ..) [in DTYPE] : DTYPE` after an op's name.
fn op_inst(c: &mut Cursor, op: ScalarOp) -> Result<Inst> {
    c.expect("(")?;
    let mut args = Vec::new();
    if !c.eat(")") {
        loop {
            args.push(c.value()?);
            if c.eat(")") {
                break;
            }
            if !c.eat(",") {
                return Err(c.expected("`,` or `)`"));
            }
        }
    }
    let compute = if c.eat("in") { Some(c.dtype()?) } else { None };
    c.expect(":")?;
    let out = c.dtype()?;
    Ok(Inst::Op {
        op,
        args,
        compute: compute.unwrap_or(out),
        out,
    })
}

/// The scalar op named `name` (already read), with its `[..]` payload for `clamp` and
/// `nan_to_num`; `None` for an unknown name.
fn scalar_op(c: &mut Cursor, name: &str) -> Result<Option<ScalarOp>> {
    Ok(Some(match name {
        "clamp" => {
            c.expect("[")?;
            let min = opt_float(c)?;
            c.expect(",")?;
            let max = opt_float(c)?;
            c.expect("]")?;
            ScalarOp::Clamp { min, max }
        }
        "nan_to_num" => {
            c.expect("[")?;
            let nan = float(c)?;
            c.expect(",")?;
            let posinf = opt_float(c)?;
            c.expect(",")?;
            let neginf = opt_float(c)?;
            c.expect("]")?;
            ScalarOp::NanToNum {
                nan,
                posinf,
                neginf,
            }
        }
        _ => {
            let named = |op: &ScalarOp| op_name(op) == name;
            let found = PLAIN_OPS.into_iter().find(named);
            let found = found.or_else(|| MathFn::ALL.map(ScalarOp::Math).into_iter().find(named));
            let found = found.or_else(|| LibmFn::ALL.map(ScalarOp::Libm).into_iter().find(named));
            let found = found.or_else(|| LibmFn2::ALL.map(ScalarOp::Libm2).into_iter().find(named));
            match found {
                Some(op) => op,
                None => return Ok(None),
            }
        }
    }))
}

/// The value of a float token (see [`float_text`](crate::spec::print::float_text)), or why not.
fn float_value(token: &str) -> std::result::Result<f64, &'static str> {
    match token {
        "nan" => return Ok(f64::NAN),
        "-nan" => return Ok(-f64::NAN),
        "inf" => return Ok(f64::INFINITY),
        "-inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    if let Some(hex) = token.strip_prefix("nan:0x") {
        return match u64::from_str_radix(hex, 16).map(f64::from_bits) {
            Ok(v) if v.is_nan() && hex.len() == 16 => Ok(v),
            _ => Err("a NaN's 16 hex digits after `nan:0x`"),
        };
    }
    let decimal = token.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        && token
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.e".contains(c));
    match token.parse::<f64>() {
        Ok(v) if decimal => Ok(v),
        _ => Err("a float (`1.0`, `-2.5e-07`, `inf`, `nan`)"),
    }
}

/// A float token.
fn float(c: &mut Cursor) -> Result<f64> {
    let (at, token) = c.token();
    float_value(token).map_err(|what| c.error_at(at, format!("expected {what}, found `{token}`")))
}

/// A float token or `none`.
fn opt_float(c: &mut Cursor) -> Result<Option<f64>> {
    let at = c.mark();
    if c.word() == Some("none") {
        return Ok(None);
    }
    c.pos_reset(at);
    float(c).map(Some)
}

/// A literal: `true`/`false`, a float (a number with a `.` or an exponent, `inf`, `nan`) or an
/// integer.
fn lit(c: &mut Cursor) -> Result<Lit> {
    let (at, token) = c.token();
    let expected = "a literal (an integer, a float like `1.0`, `true` or `false`)";
    match token {
        "true" => return Ok(Lit::Bool(true)),
        "false" => return Ok(Lit::Bool(false)),
        _ => {}
    }
    let numeric = token.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    let named = ["nan", "-nan", "inf", "-inf"].contains(&token) || token.starts_with("nan:");
    if named || (numeric && token.contains(['.', 'e'])) {
        return float_value(token)
            .map(Lit::Float)
            .map_err(|what| c.error_at(at, format!("expected {what}, found `{token}`")));
    }
    token
        .parse::<i64>()
        .map(Lit::Int)
        .map_err(|_| c.error_at(at, format!("expected {expected}, found `{token}`")))
}
