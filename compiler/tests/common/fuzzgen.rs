//! The differential fuzzer's random programs, shared by `fuzz.rs` (compiled vs eager) and
//! `ir_roundtrip.rs` (print → parse → print of the captured graphs): what a program is, its input
//! data, how it runs eagerly, and the proptest strategies that generate it. Each test file
//! includes it with `#[path = "common/fuzzgen.rs"] mod fuzzgen;`.

#![allow(dead_code)]

use std::fmt;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use tensorplay_runtime::library::{self, CustomOpDef};
use tensorplay_runtime::{DType, Result, Scalar, Tensor, Value};

pub const INF: f64 = f64::INFINITY;
pub const DEFAULT_SEED: u64 = 0x7E45_0F1A_C0DE_2026;

// ---- programs ----------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Un {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    GeluNone,
    GeluTanh,
    Silu,
    Erf,
    Floor,
    Ceil,
    Round,
    Sign,
    Square,
    LogicalNot,
    Clone,
    Log1p,
    Expm1,
    /// `leaky_relu(x, LEAKY_SLOPE)`.
    LeakyRelu,
    /// `softplus(x, SOFTPLUS_BETA, SOFTPLUS_THRESHOLD)` (a non-default beta and threshold).
    Softplus,
    Log2,
    Exp2,
    Atan,
    Sinh,
    Trunc,
    Frac,
    Hardsigmoid,
    Hardswish,
    /// `elu(x)` with PyTorch's defaults.
    Elu,
    Mish,
    Isnan,
}

/// The slope of the fuzzer's `leaky_relu`.
pub const LEAKY_SLOPE: f64 = 0.2;
/// The beta of the fuzzer's `softplus`.
pub const SOFTPLUS_BETA: f64 = 2.0;
/// The threshold of the fuzzer's `softplus`.
pub const SOFTPLUS_THRESHOLD: f64 = 5.0;

pub const UNARY: [Un; 38] = [
    Un::Neg,
    Un::Abs,
    Un::Exp,
    Un::Log,
    Un::Sqrt,
    Un::Rsqrt,
    Un::Reciprocal,
    Un::Sin,
    Un::Cos,
    Un::Tanh,
    Un::Sigmoid,
    Un::Relu,
    Un::GeluNone,
    Un::GeluTanh,
    Un::Silu,
    Un::Erf,
    Un::Floor,
    Un::Ceil,
    Un::Round,
    Un::Sign,
    Un::Square,
    Un::LogicalNot,
    Un::Clone,
    Un::Log1p,
    Un::Expm1,
    Un::LeakyRelu,
    Un::Softplus,
    Un::Log2,
    Un::Exp2,
    Un::Atan,
    Un::Sinh,
    Un::Trunc,
    Un::Frac,
    Un::Hardsigmoid,
    Un::Hardswish,
    Un::Elu,
    Un::Mish,
    Un::Isnan,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
    Remainder,
    Atan2,
    Hypot,
    Fmax,
    Fmin,
    Copysign,
    Fmod,
    BitAnd,
    BitXor,
    Shl,
}

pub const BINARY: [Bin; 26] = [
    Bin::Add,
    Bin::Sub,
    Bin::Mul,
    Bin::Div,
    Bin::Pow,
    Bin::Maximum,
    Bin::Minimum,
    Bin::Eq,
    Bin::Ne,
    Bin::Lt,
    Bin::Le,
    Bin::Gt,
    Bin::Ge,
    Bin::And,
    Bin::Or,
    Bin::Xor,
    Bin::Remainder,
    Bin::Atan2,
    Bin::Hypot,
    Bin::Fmax,
    Bin::Fmin,
    Bin::Copysign,
    Bin::Fmod,
    Bin::BitAnd,
    Bin::BitXor,
    Bin::Shl,
];

impl Bin {
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            Bin::Eq | Bin::Ne | Bin::Lt | Bin::Le | Bin::Gt | Bin::Ge
        )
    }
    pub fn is_logical(self) -> bool {
        matches!(self, Bin::And | Bin::Or | Bin::Xor)
    }
}

/// A Rust scalar operand (captured as a constant).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lit {
    F(f64),
    I(i64),
    B(bool),
}

impl Lit {
    pub fn scalar(self) -> Scalar {
        match self {
            Lit::F(v) => Scalar::Float(v),
            Lit::I(v) => Scalar::Int(v),
            Lit::B(v) => Scalar::Bool(v),
        }
    }
    pub fn value(self) -> f64 {
        match self {
            Lit::F(v) => v,
            Lit::I(v) => v as f64,
            Lit::B(v) => v as u8 as f64,
        }
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::F(v) => write!(f, "{v:?}"),
            Lit::I(v) => write!(f, "{v}"),
            Lit::B(v) => write!(f, "{v}"),
        }
    }
}

/// One op of a program; operands are value numbers (inputs first, then one value per op).
#[derive(Debug, Clone)]
pub enum Op {
    Unary(Un, usize),
    Binary(Bin, usize, usize),
    /// `a op s` (or `s op a` when `rev`), `s` a Rust scalar.
    Scalar(Bin, usize, Lit, bool),
    /// `where(c, a, b)`; a non-bool `c` is first turned into `c > 0`.
    Where(usize, usize, usize),
    Clamp(usize, Option<Lit>, Option<Lit>),
    Cast(usize, DType),
    /// `y = clone(a); y.copy_(b)`: a mutation barrier (`b` broadcast to `a` and cast to its
    /// dtype), read afterwards.
    Copy(usize, usize),
    /// A custom op: traced through (its body, `neg`, fuses) or opaque (a CPU-only `abs` with a
    /// fake kernel: a barrier run through the dispatcher).
    Custom(Custom, usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Custom {
    TracedNeg,
    OpaqueAbs,
}

/// The fuzzer's custom ops, registered once per process.
pub fn custom_ops() -> &'static (CustomOpDef, CustomOpDef) {
    static OPS: OnceLock<(CustomOpDef, CustomOpDef)> = OnceLock::new();
    OPS.get_or_init(|| {
        let traced = library::custom_op("fuzz::neg_traced")
            .arg_names(&["x"])
            .build(|x: Tensor| -> Result<Tensor> { x.neg() })
            .expect("registering fuzz::neg_traced");
        let opaque = library::custom_op("fuzz::abs_opaque")
            .arg_names(&["x"])
            .device_types(&["cpu"])
            .build(|x: Tensor| -> Result<Tensor> { x.abs() })
            .expect("registering fuzz::abs_opaque");
        opaque
            .register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })
            .expect("its fake kernel");
        (traced.into(), opaque.into())
    })
}

pub fn custom(c: Custom, x: &Tensor) -> Result<Tensor> {
    let (traced, opaque) = custom_ops();
    let op = match c {
        Custom::TracedNeg => traced,
        Custom::OpaqueAbs => opaque,
    };
    op.call1(&[Value::Tensor(x.clone())])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Red {
    Sum,
    Mean,
    Amax,
    Amin,
    Prod,
}

/// What happens to the last value.
#[derive(Debug, Clone)]
pub enum Tail {
    None,
    /// A reduction over `dims` (raw numbers mapped into the value's rank; empty: every dim),
    /// `bad` asking for an out-of-range dim (eager's error path).
    Reduce {
        red: Red,
        dims: Vec<u8>,
        keepdim: bool,
        bad: bool,
    },
    Softmax {
        log: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Contiguous,
    /// The last two dims swapped in memory.
    Transposed,
    /// Every second element of a longer last dim (offset 1).
    Sliced,
    /// Some dims expanded from size 1 (zero strides).
    Expanded,
}

#[derive(Debug, Clone)]
pub struct InputSpec {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub view: View,
    pub seed: u64,
}

#[derive(Debug, Clone)]
pub struct Program {
    /// Run as generated, errors included; otherwise every op eager rejects is first replaced
    /// by a cast of its first operand to f32 (and a rejected tail dropped), so most programs
    /// exercise the compiler rather than the error path.
    pub strict: bool,
    pub inputs: Vec<InputSpec>,
    pub ops: Vec<Op>,
    pub tail: Tail,
    /// Extra values returned besides the last one.
    pub extra_outputs: Vec<usize>,
}

pub fn un_name(u: Un) -> String {
    format!("{u:?}").to_lowercase()
}

pub fn bin_name(b: Bin) -> String {
    format!("{b:?}").to_lowercase()
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.inputs.len();
        let name = |v: usize| {
            if v < n {
                format!("x{v}")
            } else {
                format!("v{}", v - n)
            }
        };
        writeln!(
            f,
            "program{} {{",
            if self.strict { " (strict)" } else { "" }
        )?;
        for (i, s) in self.inputs.iter().enumerate() {
            writeln!(
                f,
                "  x{i}: {}{:?} ({:?} view, data seed {:#x})",
                s.dtype.name(),
                s.shape,
                s.view,
                s.seed
            )?;
        }
        for (k, op) in self.ops.iter().enumerate() {
            let rhs = match op {
                Op::Unary(u, a) => format!("{}({})", un_name(*u), name(*a)),
                Op::Binary(b, a, c) => format!("{}({}, {})", bin_name(*b), name(*a), name(*c)),
                Op::Scalar(b, a, s, false) => format!("{}({}, scalar {s})", bin_name(*b), name(*a)),
                Op::Scalar(b, a, s, true) => format!("{}(scalar {s}, {})", bin_name(*b), name(*a)),
                Op::Where(c, a, b) => format!(
                    "where({} (> 0 unless bool), {}, {})",
                    name(*c),
                    name(*a),
                    name(*b)
                ),
                Op::Clamp(a, lo, hi) => format!(
                    "clamp({}, min={}, max={})",
                    name(*a),
                    lo.map_or("None".into(), |l| l.to_string()),
                    hi.map_or("None".into(), |l| l.to_string())
                ),
                Op::Cast(a, d) => format!("to_dtype({}, {})", name(*a), d.name()),
                Op::Copy(a, b) => format!("clone({}).copy_({})", name(*a), name(*b)),
                Op::Custom(c, a) => format!("{c:?}({})", name(*a)),
            };
            writeln!(f, "  v{k} = {rhs}")?;
        }
        let last = name(n + self.ops.len() - 1);
        match &self.tail {
            Tail::None => {}
            Tail::Reduce {
                red,
                dims,
                keepdim,
                bad,
            } => writeln!(
                f,
                "  tail = {}({last}, raw dims {dims:?}{}, keepdim={keepdim})",
                format!("{red:?}").to_lowercase(),
                if *bad { " + an out-of-range dim" } else { "" }
            )?,
            Tail::Softmax { log } => writeln!(
                f,
                "  tail = {}({last}, dim=-1)",
                if *log { "log_softmax" } else { "softmax" }
            )?,
        }
        let mut outs = vec![if matches!(self.tail, Tail::None) {
            last
        } else {
            "tail".into()
        }];
        outs.extend(self.extra_outputs.iter().map(|&v| name(v)));
        writeln!(f, "  return ({})", outs.join(", "))?;
        write!(f, "}}")
    }
}

// ---- input data --------------------------------------------------------------------------------

/// SplitMix64: the input data of a program is a pure function of its seeds.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn float_special(dtype: DType, k: u64) -> f64 {
    let common = [f64::NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5];
    let typed: [f64; 4] = match dtype {
        DType::F16 => [6e-8, -3e-5, 60000.0, -65504.0],
        DType::BF16 => [1e-39, -1e-39, 1e38, -3e38],
        DType::F64 => [1e-310, -5e-324, 1e300, -1e300],
        _ => [1e-40, -1.4e-45, 1e30, -3e38],
    };
    let k = k as usize % (common.len() + typed.len());
    if k < common.len() {
        common[k]
    } else {
        typed[k - common.len()]
    }
}

pub fn data(n: usize, dtype: DType, seed: u64) -> Result<Tensor> {
    let mut rng = Rng(seed);
    match dtype {
        DType::Bool => {
            Tensor::from_vec((0..n).map(|_| rng.below(2) == 1).collect::<Vec<_>>(), &[n])
        }
        DType::I32 | DType::I64 => {
            let (min, max) = if dtype == DType::I32 {
                (i32::MIN as i64, i32::MAX as i64)
            } else {
                (i64::MIN, i64::MAX)
            };
            let v: Vec<i64> = (0..n)
                .map(|_| match rng.below(25) {
                    0 => min,
                    1 => max,
                    2 | 3 => 0,
                    _ => rng.below(17) as i64 - 8,
                })
                .collect();
            if dtype == DType::I32 {
                Tensor::from_vec(v.into_iter().map(|x| x as i32).collect::<Vec<_>>(), &[n])
            } else {
                Tensor::from_vec(v, &[n])
            }
        }
        _ => {
            let v: Vec<f64> = (0..n)
                .map(|_| match rng.below(25) {
                    0..=2 => float_special(dtype, rng.next()),
                    3..=7 => (rng.below(17) as f64 - 8.0) / 2.0,
                    _ => rng.unit() * 6.0 - 3.0,
                })
                .collect();
            Tensor::from_vec(v, &[n])?.to_dtype(dtype)
        }
    }
}

impl InputSpec {
    /// The input tensor: a view of a fresh tensor with this spec's shape.
    pub fn build(&self) -> Result<Tensor> {
        self.build_with(data)
    }

    /// [`InputSpec::build`] with the elements from `data(n, dtype, seed)`.
    pub fn build_with(&self, data: impl Fn(usize, DType, u64) -> Result<Tensor>) -> Result<Tensor> {
        let shape = &self.shape;
        let rank = shape.len();
        let numel: usize = shape.iter().product();
        match self.view {
            View::Transposed if rank >= 2 => {
                let mut base = shape.clone();
                base.swap(rank - 1, rank - 2);
                data(numel, self.dtype, self.seed)?
                    .reshape(&base)?
                    .transpose(-1, -2)
            }
            View::Sliced if rank >= 1 => {
                let mut base = shape.clone();
                let last = base[rank - 1];
                base[rank - 1] = 2 * last + 1;
                let n: usize = base.iter().product();
                data(n, self.dtype, self.seed)?.reshape(&base)?.slice(
                    -1,
                    Some(1),
                    Some(1 + 2 * last as i64),
                    2,
                )
            }
            View::Expanded if rank >= 1 => {
                let mut rng = Rng(self.seed ^ 0xE);
                let mut base: Vec<usize> = shape
                    .iter()
                    .map(|&d| if rng.below(2) == 0 { 1 } else { d })
                    .collect();
                if base == *shape
                    && let Some(i) = shape.iter().position(|&d| d > 1)
                {
                    base[i] = 1;
                }
                let n: usize = base.iter().product();
                data(n, self.dtype, self.seed)?
                    .reshape(&base)?
                    .expand(shape)
            }
            _ => data(numel, self.dtype, self.seed)?.reshape(shape),
        }
    }
}

// ---- running programs --------------------------------------------------------------------------

pub fn unary(u: Un, x: &Tensor) -> Result<Tensor> {
    match u {
        Un::Neg => x.neg(),
        Un::Abs => x.abs(),
        Un::Exp => x.exp(),
        Un::Log => x.log(),
        Un::Sqrt => x.sqrt(),
        Un::Rsqrt => x.rsqrt(),
        Un::Reciprocal => x.reciprocal(),
        Un::Sin => x.sin(),
        Un::Cos => x.cos(),
        Un::Tanh => x.tanh(),
        Un::Sigmoid => x.sigmoid(),
        Un::Relu => x.relu(),
        Un::GeluNone => x.gelu("none"),
        Un::GeluTanh => x.gelu("tanh"),
        Un::Silu => x.silu(),
        Un::Erf => x.erf(),
        Un::Floor => x.floor(),
        Un::Ceil => x.ceil(),
        Un::Round => x.round(),
        Un::Sign => x.sign(),
        Un::Square => x.square(),
        Un::LogicalNot => x.logical_not(),
        Un::Clone => x.clone_tensor(),
        Un::Log1p => x.log1p(),
        Un::Expm1 => x.expm1(),
        Un::LeakyRelu => x.leaky_relu(LEAKY_SLOPE),
        Un::Softplus => x.softplus(SOFTPLUS_BETA, SOFTPLUS_THRESHOLD),
        Un::Log2 => x.log2(),
        Un::Exp2 => x.exp2(),
        Un::Atan => x.atan(),
        Un::Sinh => x.sinh(),
        Un::Trunc => x.trunc(),
        Un::Frac => x.frac(),
        Un::Hardsigmoid => x.hardsigmoid(),
        Un::Hardswish => x.hardswish(),
        Un::Elu => x.elu(1.0, 1.0, 1.0),
        Un::Mish => x.mish(),
        Un::Isnan => x.isnan(),
    }
}

pub fn binary(b: Bin, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    match b {
        Bin::Add => x.add(y),
        Bin::Sub => x.sub(y),
        Bin::Mul => x.mul(y),
        Bin::Div => x.div(y),
        Bin::Pow => x.pow(y),
        Bin::Maximum => x.maximum(y),
        Bin::Minimum => x.minimum(y),
        Bin::Eq => x.eq(y),
        Bin::Ne => x.ne(y),
        Bin::Lt => x.lt(y),
        Bin::Le => x.le(y),
        Bin::Gt => x.gt(y),
        Bin::Ge => x.ge(y),
        Bin::And => x.logical_and(y),
        Bin::Or => x.logical_or(y),
        Bin::Xor => x.logical_xor(y),
        Bin::Remainder => x.remainder(y),
        Bin::Atan2 => x.atan2(y),
        Bin::Hypot => x.hypot(y),
        Bin::Fmax => x.fmax(y),
        Bin::Fmin => x.fmin(y),
        Bin::Copysign => x.copysign(y),
        Bin::Fmod => x.fmod(y),
        Bin::BitAnd => x.bitwise_and(y),
        Bin::BitXor => x.bitwise_xor(y),
        Bin::Shl => x.bitwise_left_shift(y),
    }
}

/// The condition `where` uses for value `c`.
pub fn condition(c: &Tensor) -> Result<Tensor> {
    if c.dtype() == DType::Bool {
        Ok(c.clone())
    } else {
        c.gt_scalar(0.0)
    }
}

/// Maps raw dim numbers into `rank` (distinct, in `-rank..rank`), plus `rank` itself if `bad`.
pub fn resolve_dims(raw: &[u8], rank: usize, bad: bool) -> Vec<i64> {
    let mut dims: Vec<i64> = Vec::new();
    if rank > 0 {
        for &r in raw {
            let d = (r as i64 % (2 * rank as i64)) - rank as i64;
            let norm = (d + rank as i64) % rank as i64;
            if !dims
                .iter()
                .any(|&x| (x + rank as i64) % rank as i64 == norm)
            {
                dims.push(d);
            }
        }
    }
    if bad {
        dims.push(rank as i64);
    }
    dims
}

pub fn reduce(x: &Tensor, red: Red, dims: &[i64], keepdim: bool) -> Result<Tensor> {
    let all = dims.is_empty();
    match red {
        Red::Sum if all => x.sum_all(),
        Red::Sum => x.sum(dims, keepdim),
        Red::Mean if all => x.mean_all(),
        Red::Mean => x.mean(dims, keepdim),
        Red::Amax => x.amax(dims, keepdim),
        Red::Amin => x.amin(dims, keepdim),
        Red::Prod if all => x.prod_all(),
        Red::Prod => x.prod(dims, keepdim),
    }
}

impl Op {
    /// The first operand.
    pub fn first(&self) -> usize {
        match *self {
            Op::Unary(_, a)
            | Op::Binary(_, a, _)
            | Op::Scalar(_, a, _, _)
            | Op::Clamp(a, _, _)
            | Op::Cast(a, _)
            | Op::Copy(a, _)
            | Op::Custom(_, a) => a,
            Op::Where(_, a, _) => a,
        }
    }
}

impl Program {
    /// The program with every op eager rejects on `xs` replaced by a cast of its first operand
    /// to f32, and a rejected tail dropped (strict programs are returned unchanged).
    pub fn repaired(&self, xs: &[Tensor]) -> Program {
        if self.strict {
            return self.clone();
        }
        let mut p = self.clone();
        p.tail = Tail::None;
        for k in 0..p.ops.len() {
            let prefix = Program {
                ops: p.ops[..=k].to_vec(),
                extra_outputs: vec![],
                ..p.clone()
            };
            if prefix.trace(xs).is_err() {
                p.ops[k] = Op::Cast(p.ops[k].first(), DType::F32);
            }
        }
        let with_tail = Program {
            tail: self.tail.clone(),
            ..p.clone()
        };
        if with_tail.trace(xs).is_ok() {
            with_tail
        } else {
            p
        }
    }
}

/// Every value the program computes (inputs first) and its returned tensors.
pub struct Trace {
    pub values: Vec<Tensor>,
    /// The condition tensor of each `where` op (by op index).
    pub conditions: Vec<Option<Tensor>>,
    pub tail: Option<Tensor>,
    pub outputs: Vec<Tensor>,
}

impl Program {
    pub fn trace(&self, xs: &[Tensor]) -> Result<Trace> {
        let mut values: Vec<Tensor> = xs.to_vec();
        let mut conditions = Vec::new();
        for op in &self.ops {
            let mut cond = None;
            let v = match op {
                Op::Unary(u, a) => unary(*u, &values[*a])?,
                Op::Binary(b, a, c) => binary(*b, &values[*a], &values[*c])?,
                Op::Scalar(b, a, s, rev) => {
                    let s = Tensor::wrapped_scalar(s.scalar());
                    if *rev {
                        binary(*b, &s, &values[*a])?
                    } else {
                        binary(*b, &values[*a], &s)?
                    }
                }
                Op::Where(c, a, b) => {
                    let c = condition(&values[*c])?;
                    let r = Tensor::where_cond(&c, &values[*a], &values[*b])?;
                    cond = Some(c);
                    r
                }
                Op::Clamp(a, lo, hi) => {
                    values[*a].clamp(lo.map(Lit::scalar), hi.map(Lit::scalar))?
                }
                Op::Cast(a, d) => values[*a].to_dtype(*d)?,
                Op::Copy(a, b) => {
                    let y = values[*a].clone_tensor()?;
                    y.copy_(&values[*b])?;
                    y
                }
                Op::Custom(c, a) => custom(*c, &values[*a])?,
            };
            conditions.push(cond);
            values.push(v);
        }
        let last = values
            .last()
            .cloned()
            .expect("programs have at least one op");
        let tail = match &self.tail {
            Tail::None => None,
            Tail::Reduce {
                red,
                dims,
                keepdim,
                bad,
            } => Some(reduce(
                &last,
                *red,
                &resolve_dims(dims, last.rank(), *bad),
                *keepdim,
            )?),
            Tail::Softmax { log: false } => Some(last.softmax(-1)?),
            Tail::Softmax { log: true } => Some(last.log_softmax(-1)?),
        };
        let mut outputs = vec![tail.clone().unwrap_or(last)];
        outputs.extend(self.extra_outputs.iter().map(|&v| values[v].clone()));
        Ok(Trace {
            values,
            conditions,
            tail,
            outputs,
        })
    }
}

// ---- strategies --------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub enum OpGen {
    Unary(Un, Index),
    Binary(Bin, Index, Index),
    Scalar(Bin, Index, Lit, bool),
    Where(Index, Index, Index),
    Clamp(Index, Option<Lit>, Option<Lit>),
    Cast(Index, DType),
    Copy(Index, Index),
    Custom(Custom, Index),
}

#[derive(Debug, Clone)]
pub struct InputGen {
    pub dtype: DType,
    /// Bit d set: dim d of the program shape is 1 in this input.
    pub ones: u8,
    /// Leading dims dropped (broadcast from a lower rank).
    pub drop: usize,
    /// An incompatible last dim (eager's broadcast error).
    pub bad: bool,
    pub view: View,
    pub seed: u64,
}

pub fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop_oneof![
        6 => Just(DType::F32),
        3 => Just(DType::F64),
        2 => Just(DType::F16),
        2 => Just(DType::BF16),
        2 => Just(DType::I32),
        2 => Just(DType::I64),
        2 => Just(DType::Bool),
    ]
}

pub fn lit_strategy() -> impl Strategy<Value = Lit> {
    prop_oneof![
        6 => prop::sample::select(vec![0.5, -1.5, 2.0, 0.1, 3.0, -0.0, 1e-3, 7.25, -2.0, 1e30]).prop_map(Lit::F),
        1 => prop::sample::select(vec![f64::NAN, INF, -INF]).prop_map(Lit::F),
        4 => prop::sample::select(vec![-3i64, 0, 1, 2, 7, -1, 100_000]).prop_map(Lit::I),
        1 => any::<bool>().prop_map(Lit::B),
    ]
}

/// A float or integer Rust scalar.
pub fn number_strategy() -> impl Strategy<Value = Lit> {
    lit_strategy().prop_map(|l| match l {
        Lit::B(b) => Lit::I(b as i64),
        other => other,
    })
}

pub fn op_strategy() -> impl Strategy<Value = OpGen> {
    let un = prop::sample::select(UNARY.to_vec());
    let bin = prop::sample::select(BINARY.to_vec());
    prop_oneof![
        8 => (un, any::<Index>()).prop_map(|(u, a)| OpGen::Unary(u, a)),
        8 => (bin.clone(), any::<Index>(), any::<Index>()).prop_map(|(b, x, y)| OpGen::Binary(b, x, y)),
        4 => (bin, any::<Index>(), lit_strategy(), prop::bool::weighted(0.2)).prop_map(|(b, x, s, r)| OpGen::Scalar(b, x, s, r)),
        2 => (any::<Index>(), any::<Index>(), any::<Index>()).prop_map(|(c, a, b)| OpGen::Where(c, a, b)),
        // Bool clamp bounds are left out: eager accepts them but the lowering rejects them
        // (`tp::clamp: expected a number or None attribute, got True`), a reported bug.
        2 => (any::<Index>(), prop::option::weighted(0.8, number_strategy()), prop::option::weighted(0.8, number_strategy()))
            .prop_map(|(a, lo, hi)| OpGen::Clamp(a, lo, hi)),
        2 => (any::<Index>(), dtype_strategy()).prop_map(|(a, d)| OpGen::Cast(a, d)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| OpGen::Copy(a, b)),
        1 => (prop::sample::select(vec![Custom::TracedNeg, Custom::OpaqueAbs]), any::<Index>())
            .prop_map(|(c, a)| OpGen::Custom(c, a)),
    ]
}

pub fn input_strategy() -> impl Strategy<Value = InputGen> {
    let view = prop_oneof![4 => Just(View::Contiguous), 2 => Just(View::Transposed), 2 => Just(View::Sliced), 2 => Just(View::Expanded)];
    (
        dtype_strategy(),
        any::<u8>(),
        0usize..3,
        prop::bool::weighted(0.03),
        view,
        any::<u64>(),
    )
        .prop_map(|(dtype, ones, drop, bad, view, seed)| InputGen {
            dtype,
            ones,
            drop,
            bad,
            view,
            seed,
        })
}

pub fn tail_strategy() -> impl Strategy<Value = Tail> {
    let red = prop::sample::select(vec![Red::Sum, Red::Mean, Red::Amax, Red::Amin, Red::Prod]);
    prop_oneof![
        10 => Just(Tail::None),
        6 => (red, prop::collection::vec(any::<u8>(), 0..3), any::<bool>(), prop::bool::weighted(0.03))
            .prop_map(|(red, dims, keepdim, bad)| Tail::Reduce { red, dims, keepdim, bad }),
        2 => any::<bool>().prop_map(|log| Tail::Softmax { log }),
    ]
}

/// A program shape: mostly rank 0–4 with dims 1–6 (rarely 0) and at most 64 elements; one
/// program in 25 gets a long last dim (up to 600 elements), so vector loop bodies run many
/// iterations and not only their tails.
pub fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        24 => small_shape_strategy().boxed(),
        1 => (prop::collection::vec(1usize..=3, 0..=1), 65usize..=600)
            .prop_map(|(mut lead, last)| {
                lead.push(last);
                lead
            })
            .boxed(),
    ]
}

pub fn small_shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    let rank =
        prop_oneof![1 => Just(0usize), 2 => Just(1), 3 => Just(2), 3 => Just(3), 2 => Just(4)];
    let dim = prop_oneof![30 => 1usize..=6, 1 => Just(0usize)];
    rank.prop_flat_map(move |r| prop::collection::vec(dim.clone(), r))
        .prop_map(|mut dims| {
            let mut total = 1usize;
            for d in dims.iter_mut() {
                if total * *d > 64 {
                    *d = (64 / total).max(1);
                }
                total *= (*d).max(1);
            }
            dims
        })
}

/// Picks an earlier value, favouring recent ones (so programs form long chains).
pub fn pick(i: &Index, n: usize) -> usize {
    let u = i.index(1 << 20) as f64 / (1 << 20) as f64;
    n - 1 - ((u * u * n as f64) as usize).min(n - 1)
}

pub fn build_program(
    strict: bool,
    shape: Vec<usize>,
    ins: Vec<InputGen>,
    gens: Vec<OpGen>,
    tail: Tail,
    extra: Vec<Index>,
) -> Program {
    let inputs: Vec<InputSpec> = ins
        .into_iter()
        .map(|g| {
            let drop = g.drop.min(shape.len());
            let mut s: Vec<usize> = shape[drop..]
                .iter()
                .enumerate()
                .map(|(d, &n)| {
                    if g.ones & (1 << (d + drop)) != 0 {
                        1
                    } else {
                        n
                    }
                })
                .collect();
            if g.bad
                && let Some(last) = s.last_mut()
            {
                *last = if *last >= 3 { *last - 1 } else { 4 };
            }
            InputSpec {
                dtype: g.dtype,
                shape: s,
                view: g.view,
                seed: g.seed,
            }
        })
        .collect();
    let n_in = inputs.len();
    let ops: Vec<Op> = gens
        .into_iter()
        .enumerate()
        .map(|(k, g)| {
            let n = n_in + k;
            match g {
                OpGen::Unary(u, a) => Op::Unary(u, pick(&a, n)),
                OpGen::Binary(b, x, y) => Op::Binary(b, pick(&x, n), pick(&y, n)),
                OpGen::Scalar(b, x, s, r) => Op::Scalar(b, pick(&x, n), s, r),
                OpGen::Where(c, a, b) => Op::Where(pick(&c, n), pick(&a, n), pick(&b, n)),
                OpGen::Clamp(a, lo, hi) => Op::Clamp(pick(&a, n), lo, hi),
                OpGen::Cast(a, d) => Op::Cast(pick(&a, n), d),
                OpGen::Copy(a, b) => Op::Copy(pick(&a, n), pick(&b, n)),
                OpGen::Custom(c, a) => Op::Custom(c, pick(&a, n)),
            }
        })
        .collect();
    let total = n_in + ops.len();
    let extra_outputs = extra
        .iter()
        .map(|i| n_in + i.index(ops.len()))
        .filter(|&v| v != total - 1)
        .collect();
    Program {
        strict,
        inputs,
        ops,
        tail,
        extra_outputs,
    }
}

pub fn program_strategy() -> impl Strategy<Value = Program> {
    (
        prop::bool::weighted(0.1),
        shape_strategy(),
        prop::collection::vec(input_strategy(), 1..=4),
        prop::collection::vec(op_strategy(), 1..=30),
        tail_strategy(),
        prop::collection::vec(any::<Index>(), 0..=2),
    )
        .prop_map(|(strict, shape, ins, ops, tail, extra)| {
            build_program(strict, shape, ins, ops, tail, extra)
        })
}

pub fn env_u64(name: &str) -> Option<u64> {
    let s = std::env::var(name).ok()?;
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

pub fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut rng = Rng(seed);
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    out
}
