//! CUDA C text of a [`KernelSpec`]: the body as one device function per kernel (each `Inst` one
//! statement, each [`ScalarOp`] one prelude call chosen by an exhaustive `match`), wrapped in the
//! loop of its [`LoopKind`]: a grid-stride loop for pointwise kernels (with a 16-byte vector path
//! when every operand is contiguous and aligned), one block per row with a block-level tree for
//! reductions and softmax rows.

use std::fmt::Write;

use tensorplay_ir::{CompileKind, DType, Error, ReduceOp, Result, ScalarOp};

use super::CudaLayout;
use tensorplay_kernel::spec::{Inst, KernelSpec, Lit, LoopKind, ValueId, reduce_out_dtype};

fn internal(msg: impl Into<String>) -> Error {
    Error::compile(
        CompileKind::Lowering,
        format!("cuda emitter: {}", msg.into()),
    )
}

/// The C type a value of `d` is held in (16-bit floats compute in f32).
pub(super) fn reg(d: DType) -> &'static str {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::Bool => "bool",
    }
}

/// The C type an element of `d` is stored as.
pub(super) fn mem(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 => "tp_half",
        DType::BF16 => "tp_bhalf",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::Bool => "tp_bool8",
    }
}

fn f32_lit(v: f32) -> String {
    if v.is_finite() {
        format!("{v:?}f")
    } else {
        format!("tp_f32(0x{:08x}u)", v.to_bits())
    }
}

fn f64_lit(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else {
        format!("tp_f64(0x{:016x}ull)", v.to_bits())
    }
}

fn i64_lit(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807LL - 1)".into()
    } else {
        format!("{v}LL")
    }
}

fn i32_lit(v: i32) -> String {
    if v == i32::MIN {
        "(-2147483647 - 1)".into()
    } else {
        format!("{v}")
    }
}

/// A C expression for `value` held as dtype `d` (`value` is already exact in `d`).
fn lit(value: Lit, d: DType) -> Result<String> {
    Ok(match (value, d) {
        (Lit::Float(v), DType::F64) => f64_lit(v),
        (Lit::Float(v), DType::F32 | DType::F16 | DType::BF16) => f32_lit(v as f32),
        (Lit::Int(v), DType::I64) => i64_lit(v),
        (Lit::Int(v), DType::I32) => i32_lit(v as i32),
        (Lit::Bool(b), DType::Bool) => b.to_string(),
        (v, d) => return Err(internal(format!("constant {v} cannot be a {d}"))),
    })
}

/// Scalar argument slot `k` decoded as `d` (see `ScalarArgs`: f32 bits or the integer in the low
/// bytes, f64 bits, 0/1).
fn param(k: usize, d: DType) -> String {
    match d {
        DType::F64 => format!("tp_f64(a.param[{k}])"),
        DType::F32 | DType::F16 | DType::BF16 => format!("tp_f32((unsigned)a.param[{k}])"),
        DType::I64 => format!("(long long)a.param[{k}]"),
        DType::I32 => format!("(int)(unsigned)a.param[{k}]"),
        DType::Bool => format!("(a.param[{k}] != 0)"),
    }
}

/// `x` (held as `from`) converted to `to` with the runtime's cast rules, as the CPU backend does
/// it (f64 and integers reach 16-bit floats through f32).
fn cast(x: &str, from: DType, to: DType) -> String {
    if from == to {
        return x.to_string();
    }
    let to_half = |f32_expr: String| match to {
        DType::F16 => format!("tp_round_f16({f32_expr})"),
        DType::BF16 => format!("tp_round_bf16({f32_expr})"),
        _ => f32_expr,
    };
    match (from.is_float(), to.is_float()) {
        (true, true) => match (from, to) {
            (_, DType::F64) => format!("(double){x}"),
            (DType::F64, _) => to_half(format!("(float){x}")),
            _ => to_half(x.to_string()),
        },
        (true, false) => match to {
            DType::Bool => format!("({x} != 0)"),
            DType::I32 => format!("tp_f2i32((double){x})"),
            _ => format!("tp_f2i64((double){x})"),
        },
        (false, true) => {
            if from == DType::Bool {
                match to {
                    DType::F64 => format!("({x} ? 1.0 : 0.0)"),
                    _ => format!("({x} ? 1.0f : 0.0f)"),
                }
            } else {
                match to {
                    DType::F64 => format!("(double){x}"),
                    _ => to_half(format!("(float){x}")),
                }
            }
        }
        (false, false) => match (from, to) {
            (_, DType::Bool) => format!("({x} != 0)"),
            (DType::Bool | DType::I32, DType::I64) => format!("(long long){x}"),
            (DType::Bool, _) => format!("(int){x}"),
            _ => format!("(int)(unsigned)(unsigned long long){x}"),
        },
    }
}

/// The bound of a `clamp` as a C constant of the compute dtype (floats narrowed to f32 below f64;
/// integer bounds truncated and saturated to the dtype, as the CPU backend does).
fn clamp_bound(v: f64, compute: DType) -> String {
    match compute {
        DType::F64 => f64_lit(v),
        DType::I32 => i32_lit((v as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32),
        DType::I64 => i64_lit(v as i64),
        _ => f32_lit(v as f32),
    }
}

/// The C expression of `op` computing in `compute` on `a` (already of the compute dtype). Every
/// variant is named: a new scalar op is a compile error here until the emitter prints it.
pub(super) fn op_expr(op: ScalarOp, compute: DType, a: &[String]) -> Result<String> {
    use ScalarOp::*;
    let call = |f: &str| format!("{f}({})", a.join(", "));
    Ok(match op {
        Neg => call("tp_neg"),
        Abs => call("tp_abs"),
        Sqrt => call("tp_sqrt"),
        Rsqrt => call("tp_rsqrt"),
        Reciprocal => call("tp_reciprocal"),
        Relu => call("tp_relu"),
        Floor => call("tp_floor"),
        Ceil => call("tp_ceil"),
        Round => call("tp_round"),
        Sign => call("tp_sign"),
        Square => call("tp_square"),
        LogicalNot => call("tp_logical_not"),
        Cast => return Err(internal("cast is an instruction of its own, not an op")),
        Add => call("tp_add"),
        Sub => call("tp_sub"),
        Mul => call("tp_mul"),
        Div => call("tp_div"),
        Pow => call("tp_pow"),
        Maximum => call("tp_maximum"),
        Minimum => call("tp_minimum"),
        Eq => call("tp_eq"),
        Ne => call("tp_ne"),
        Lt => call("tp_lt"),
        Le => call("tp_le"),
        Gt => call("tp_gt"),
        Ge => call("tp_ge"),
        LogicalAnd => call("tp_logical_and"),
        LogicalOr => call("tp_logical_or"),
        LogicalXor => call("tp_logical_xor"),
        Where => call("tp_where"),
        Math(f) => call(&format!("tp_{}", f.name())),
        Libm(f) => call(&format!("tp_{}", f.name())),
        Libm2(f) => call(&format!("tp_{}", f.name())),
        NanToNum {
            nan,
            posinf,
            neginf,
        } => {
            if !compute.is_float() {
                return Ok(a[0].clone());
            }
            // The compute dtype's finite extremes replace absent infinity values.
            let hi = tensorplay_kernel::spec::largest_finite(compute);
            let lit = |v: f64| {
                if compute == DType::F64 {
                    f64_lit(v)
                } else {
                    f32_lit(v as f32)
                }
            };
            format!(
                "tp_nan_to_num({}, {}, {}, {})",
                a[0],
                lit(nan),
                lit(posinf.unwrap_or(hi)),
                lit(neginf.unwrap_or(-hi))
            )
        }
        BitAnd => call("tp_bit_and"),
        BitOr => call("tp_bit_or"),
        BitXor => call("tp_bit_xor"),
        BitNot => call("tp_bit_not"),
        Shl => call("tp_shl"),
        Shr => call("tp_shr"),
        Clamp { min, max } => {
            // min first, then max (so min > max gives max); a NaN bound gives NaN.
            let mut v = a[0].clone();
            for (bound, f) in [(min, "tp_clamp_lo"), (max, "tp_clamp_hi")] {
                if let Some(b) = bound {
                    let c = clamp_bound(b, compute);
                    v = if b.is_nan() && compute.is_float() {
                        c
                    } else {
                        format!("{f}({v}, {c})")
                    };
                }
            }
            v
        }
    })
}

/// The kernel's inputs that are read (in input order).
fn loaded_inputs(spec: &KernelSpec, live: &[bool]) -> Vec<usize> {
    let mut v: Vec<usize> = spec
        .insts
        .iter()
        .enumerate()
        .filter_map(|(i, inst)| match inst {
            Inst::Load { input } if live[i] => Some(*input),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn dtype_of(spec: &KernelSpec, v: ValueId) -> Result<DType> {
    spec.value_dtype(v)
        .ok_or_else(|| internal(format!("%{v} is not a value")))
}

/// The device function evaluating the body at one point: loaded input values in, stored values
/// out by reference (pointwise) or the loop value returned (reductions, softmax).
fn eval_fn(spec: &KernelSpec, name: &str, live: &[bool], inputs: &[usize]) -> Result<String> {
    let mut params: Vec<String> = vec![format!("const {name}_args& a")];
    for &k in inputs {
        params.push(format!("{} x{k}", reg(spec.inputs[k])));
    }
    let pointwise = matches!(spec.kind, LoopKind::Pointwise);
    if pointwise {
        for (k, &d) in spec.outputs.iter().enumerate() {
            params.push(format!("{}& y{k}", reg(d)));
        }
    }
    let ret = match &spec.kind {
        LoopKind::Pointwise => "void".to_string(),
        LoopKind::Reduce { value, .. } | LoopKind::Softmax { value, .. } => {
            reg(dtype_of(spec, *value)?).to_string()
        }
    };
    let mut s = String::new();
    writeln!(
        s,
        "TP_FN {ret} {name}_eval({}) {{\n  (void)a;",
        params.join(", ")
    )
    .ok();
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let line = match inst {
            Inst::Load { input } => format!("x{input}"),
            Inst::Const { value, dtype } => lit(*value, *dtype)?,
            Inst::Param { index, dtype } => param(*index, *dtype),
            Inst::Op {
                op, args, compute, ..
            } => {
                let a: Vec<String> = args.iter().map(|x| format!("v{x}")).collect();
                op_expr(*op, *compute, &a)?
            }
            Inst::Cast { arg, to } => cast(&format!("v{arg}"), dtype_of(spec, *arg)?, *to),
            Inst::Store { output, value } => {
                writeln!(s, "  y{output} = v{value};").ok();
                continue;
            }
        };
        let d = dtype_of(spec, i)?;
        writeln!(s, "  const {} v{i} = {line};", reg(d)).ok();
    }
    if let LoopKind::Reduce { value, .. } | LoopKind::Softmax { value, .. } = &spec.kind {
        writeln!(s, "  return v{value};").ok();
    }
    s.push_str("}\n");
    Ok(s)
}

/// The argument struct: every field 8 bytes, so the host packs it as a `u64` array (see
/// [`super::pack_args`]).
fn args_struct(spec: &KernelSpec, name: &str, dims: usize) -> String {
    let mut s = format!("struct {name}_args {{\n");
    for (k, &d) in spec.inputs.iter().enumerate() {
        writeln!(s, "  const {}* in{k};", mem(d)).ok();
    }
    for (k, &d) in spec.outputs.iter().enumerate() {
        writeln!(s, "  {}* out{k};", mem(d)).ok();
    }
    let nops = spec.inputs.len() + spec.outputs.len();
    writeln!(s, "  long long size[{dims}];").ok();
    writeln!(s, "  long long stride[{nops}][{dims}];").ok();
    let np = spec.param_dtypes().len();
    if np > 0 {
        writeln!(s, "  unsigned long long param[{np}];").ok();
    }
    s.push_str("};\n");
    s
}

/// Statements adding the coordinate of linear index `lin` over loop dims `dims` (outermost
/// first) to each operand offset `{prefix}{op}` for operands `ops`.
fn unravel(lin: &str, dims: &[usize], ops: &[usize], prefix: &str, indent: &str) -> String {
    let mut s = String::new();
    if dims.is_empty() {
        return s;
    }
    writeln!(s, "{indent}long long r_ = {lin};").ok();
    for (k, &d) in dims.iter().enumerate().rev() {
        let coord = if k == 0 {
            "r_".to_string()
        } else {
            writeln!(
                s,
                "{indent}const long long c{d} = r_ % a.size[{d}]; r_ /= a.size[{d}];"
            )
            .ok();
            format!("c{d}")
        };
        for &op in ops {
            writeln!(s, "{indent}{prefix}{op} += {coord} * a.stride[{op}][{d}];").ok();
        }
    }
    s
}

fn operand_ptr(spec: &KernelSpec, op: usize) -> String {
    let nin = spec.inputs.len();
    if op < nin {
        format!("a.in{op}")
    } else {
        format!("a.out{}", op - nin)
    }
}

/// Elements per vector access: 16 bytes of the widest operand.
fn vector_lanes(spec: &KernelSpec) -> usize {
    let widest = spec
        .inputs
        .iter()
        .chain(&spec.outputs)
        .map(|d| d.size())
        .max()
        .unwrap_or(4);
    (16 / widest).max(1)
}

fn pointwise(spec: &KernelSpec, name: &str, dims: usize, inputs: &[usize]) -> String {
    let nin = spec.inputs.len();
    let nops = nin + spec.outputs.len();
    let all: Vec<usize> = (0..nops).collect();
    let size_prod: Vec<String> = (0..dims).map(|d| format!("a.size[{d}]")).collect();
    let mut s = format!("extern \"C\" __global__ void {name}(const {name}_args a) {{\n");
    writeln!(s, "  const long long n = {};", size_prod.join(" * ")).ok();
    s.push_str("  const long long step = (long long)gridDim.x * blockDim.x;\n");
    s.push_str("  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
    let outs_decl: String = spec
        .outputs
        .iter()
        .enumerate()
        .map(|(k, &d)| format!("{} y{k}; ", reg(d)))
        .collect();
    let call_args = |load: &dyn Fn(usize) -> String| -> String {
        let mut v = vec!["a".to_string()];
        v.extend(inputs.iter().map(|&k| load(k)));
        v.extend((0..spec.outputs.len()).map(|k| format!("y{k}")));
        v.join(", ")
    };
    let scalar_body = |indent: &str, off: &dyn Fn(usize) -> String| -> String {
        let mut b = String::new();
        writeln!(b, "{indent}{outs_decl}").ok();
        writeln!(
            b,
            "{indent}{name}_eval({});",
            call_args(&|k| format!("tp_ld(a.in{k}[{}])", off(k)))
        )
        .ok();
        for k in 0..spec.outputs.len() {
            writeln!(b, "{indent}tp_st(a.out{k} + {}, y{k});", off(nin + k)).ok();
        }
        b
    };
    if dims == 1 {
        // Contiguous and aligned: 16-byte vector loads and stores, then a scalar tail.
        let v = vector_lanes(spec);
        let mut conds = Vec::new();
        for op in 0..nops {
            let d = if op < nin {
                spec.inputs[op]
            } else {
                spec.outputs[op - nin]
            };
            conds.push(format!("a.stride[{op}][0] == 1"));
            conds.push(format!(
                "tp_aligned({}, {})",
                operand_ptr(spec, op),
                v * d.size()
            ));
        }
        writeln!(s, "  if ({}) {{", conds.join(" && ")).ok();
        writeln!(s, "    const long long nv = n / {v};").ok();
        s.push_str("    for (long long i = first; i < nv; i += step) {\n");
        for &k in inputs {
            let m = mem(spec.inputs[k]);
            writeln!(
                s,
                "      const tp_vec<{m}, {v}> l{k} = ((const tp_vec<{m}, {v}>*)a.in{k})[i];"
            )
            .ok();
        }
        for (k, &d) in spec.outputs.iter().enumerate() {
            writeln!(s, "      tp_vec<{}, {v}> s{k};", mem(d)).ok();
        }
        writeln!(s, "#pragma unroll\n      for (int j = 0; j < {v}; ++j) {{").ok();
        writeln!(s, "        {outs_decl}").ok();
        writeln!(
            s,
            "        {name}_eval({});",
            call_args(&|k| format!("tp_ld(l{k}.v[j])"))
        )
        .ok();
        for k in 0..spec.outputs.len() {
            writeln!(s, "        tp_st(&s{k}.v[j], y{k});").ok();
        }
        s.push_str("      }\n");
        for (k, &d) in spec.outputs.iter().enumerate() {
            writeln!(s, "      ((tp_vec<{}, {v}>*)a.out{k})[i] = s{k};", mem(d)).ok();
        }
        s.push_str("    }\n");
        writeln!(
            s,
            "    for (long long i = nv * {v} + first; i < n; i += step) {{"
        )
        .ok();
        s.push_str(&scalar_body("      ", &|_| "i".to_string()));
        s.push_str("    }\n    return;\n  }\n");
    }
    s.push_str("  for (long long i = first; i < n; i += step) {\n");
    let zeros: Vec<String> = all.iter().map(|op| format!("o{op} = 0")).collect();
    writeln!(s, "    long long {};", zeros.join(", ")).ok();
    let dim_list: Vec<usize> = (0..dims).collect();
    s.push_str("    {\n");
    s.push_str(&unravel("i", &dim_list, &all, "o", "      "));
    s.push_str("    }\n");
    s.push_str(&scalar_body("    ", &|op| format!("o{op}")));
    s.push_str("  }\n}\n");
    s
}

/// Accumulator type, identity, combine and finalizer of a reduction over values of `d`.
struct Acc {
    ty: &'static str,
    identity: String,
    combine: &'static str,
    /// Converts the loop value `v` to the accumulator.
    widen: String,
}

fn acc_of(op: ReduceOp, d: DType) -> Result<Acc> {
    let float = d.is_float();
    let fty = reg(d);
    let (ty, identity, combine) = match op {
        ReduceOp::Sum | ReduceOp::Mean if float => (fty, lit(Lit::Float(0.0), d)?, "tp_add"),
        ReduceOp::Prod if float => (fty, lit(Lit::Float(1.0), d)?, "tp_mul"),
        ReduceOp::Sum => ("long long", "0LL".into(), "tp_add"),
        ReduceOp::Prod => ("long long", "1LL".into(), "tp_mul"),
        ReduceOp::Mean => return Err(internal(format!("mean of {d}"))),
        ReduceOp::Amax | ReduceOp::Amin => {
            let max = op == ReduceOp::Amax;
            let comb = if max { "tp_maximum" } else { "tp_minimum" };
            let inf = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            match d {
                DType::Bool => ("int", if max { "0" } else { "1" }.into(), comb),
                DType::I32 => ("int", i32_lit(if max { i32::MIN } else { i32::MAX }), comb),
                DType::I64 => (
                    "long long",
                    i64_lit(if max { i64::MIN } else { i64::MAX }),
                    comb,
                ),
                _ => (fty, lit(Lit::Float(inf), d)?, comb),
            }
        }
    };
    let widen = if ty == reg(d) {
        "v".to_string()
    } else {
        format!("({ty})v")
    };
    Ok(Acc {
        ty,
        identity,
        combine,
        widen,
    })
}

/// Roles of the loop dims: (kept dims, reduced dims), outermost first. Rows mode: the reduced
/// dims trail; column mode (`kept_inner`): `[kept outer.., reduced.., kept inner]`.
fn roles(layout: &CudaLayout) -> (Vec<usize>, Vec<usize>) {
    let d = layout.dims;
    let r = layout.reduced;
    let reduced: Vec<usize> = if layout.kept_inner {
        (d - 1 - r..d - 1).collect()
    } else {
        (d - r..d).collect()
    };
    let kept = (0..d).filter(|i| !reduced.contains(i)).collect();
    (kept, reduced)
}

fn row_prelude(kept: &[usize], nops: usize) -> String {
    let mut s = String::new();
    let prod: Vec<String> = kept.iter().map(|d| format!("a.size[{d}]")).collect();
    writeln!(
        s,
        "  const long long rows = {};",
        if prod.is_empty() {
            "1".to_string()
        } else {
            prod.join(" * ")
        }
    )
    .ok();
    s.push_str("  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n");
    let zeros: Vec<String> = (0..nops).map(|op| format!("b{op} = 0")).collect();
    writeln!(s, "    long long {};", zeros.join(", ")).ok();
    let all: Vec<usize> = (0..nops).collect();
    s.push_str("    {\n");
    s.push_str(&unravel("row", kept, &all, "b", "      "));
    s.push_str("    }\n");
    s
}

fn reduce(
    spec: &KernelSpec,
    name: &str,
    layout: &CudaLayout,
    inputs: &[usize],
    op: ReduceOp,
    value: ValueId,
) -> Result<String> {
    let nin = spec.inputs.len();
    let d = dtype_of(spec, value)?;
    let out = reduce_out_dtype(op, d)?;
    let acc = acc_of(op, d)?;
    let (kept, red) = roles(layout);
    let mut s = format!("extern \"C\" __global__ void {name}(const {name}_args a) {{\n");
    writeln!(s, "  __shared__ {} smem[32];", acc.ty).ok();
    let prod: Vec<String> = red.iter().map(|d| format!("a.size[{d}]")).collect();
    writeln!(s, "  const long long n = {};", prod.join(" * ")).ok();
    s.push_str(&row_prelude(&kept, nin + 1));
    writeln!(s, "    {} acc = {};", acc.ty, acc.identity).ok();
    s.push_str("    for (long long j = threadIdx.x; j < n; j += blockDim.x) {\n");
    let ins: Vec<usize> = (0..nin).collect();
    let offs: Vec<String> = ins.iter().map(|op| format!("o{op} = b{op}")).collect();
    if !offs.is_empty() {
        writeln!(s, "      long long {};", offs.join(", ")).ok();
        s.push_str("      {\n");
        s.push_str(&unravel("j", &red, &ins, "o", "        "));
        s.push_str("      }\n");
    }
    let mut call = vec!["a".to_string()];
    call.extend(inputs.iter().map(|&k| format!("tp_ld(a.in{k}[o{k}])")));
    writeln!(
        s,
        "      const {} v = {name}_eval({});",
        reg(d),
        call.join(", ")
    )
    .ok();
    writeln!(s, "      acc = {}(acc, {});", acc.combine, acc.widen).ok();
    s.push_str("    }\n");
    writeln!(
        s,
        "    acc = tp_block_all(acc, ({}){}, smem, []({t} x, {t} y) {{ return {}(x, y); }});",
        acc.ty,
        acc.identity,
        acc.combine,
        t = acc.ty
    )
    .ok();
    let result = match (op, out) {
        (ReduceOp::Mean, _) => format!("acc / ({})n", acc.ty),
        (_, DType::Bool) => "(acc != 0)".to_string(),
        _ => "acc".to_string(),
    };
    writeln!(
        s,
        "    if (threadIdx.x == 0) tp_st(a.out0 + b{nin}, ({}){result});",
        reg(out)
    )
    .ok();
    s.push_str("  }\n}\n");
    Ok(s)
}

fn softmax(
    spec: &KernelSpec,
    name: &str,
    layout: &CudaLayout,
    inputs: &[usize],
    value: ValueId,
    log: bool,
) -> Result<String> {
    let nin = spec.inputs.len();
    let d = dtype_of(spec, value)?;
    let t = reg(d);
    let (kept, red) = roles(layout);
    let last = red[0];
    let mut s = format!("extern \"C\" __global__ void {name}(const {name}_args a) {{\n");
    writeln!(s, "  __shared__ {t} sm_m[32];\n  __shared__ {t} sm_s[32];").ok();
    writeln!(s, "  const long long n = a.size[{last}];").ok();
    s.push_str(&row_prelude(&kept, nin + 1));
    let mut call = vec!["a".to_string()];
    call.extend(
        inputs
            .iter()
            .map(|&k| format!("tp_ld(a.in{k}[b{k} + j * a.stride[{k}][{last}]])")),
    );
    let eval = format!("{name}_eval({})", call.join(", "));
    writeln!(
        s,
        "    {t} m = {}, s = ({t})0;",
        lit(Lit::Float(f64::NEG_INFINITY), d)?
    )
    .ok();
    writeln!(
        s,
        "    for (long long j = threadIdx.x; j < n; j += blockDim.x) tp_softmax_push(m, s, {eval});"
    )
    .ok();
    s.push_str("    tp_softmax_block(m, s, sm_m, sm_s);\n");
    let res = if log {
        format!("(v - m) - ({t})tp_log((double)s)")
    } else {
        format!("({t})tp_exp((double)(v - m)) / s")
    };
    writeln!(
        s,
        "    for (long long j = threadIdx.x; j < n; j += blockDim.x) {{\n      const {t} v = {eval};\n      tp_st(a.out0 + b{nin} + j * a.stride[{nin}][{last}], {res});\n    }}"
    )
    .ok();
    s.push_str("  }\n}\n");
    Ok(s)
}

/// The kernel's CUDA C (without the prelude): argument struct, body function and entry point
/// `name`. `layout` must fit the spec's loop kind (checked by the caller).
pub(super) fn kernel_source(spec: &KernelSpec, layout: &CudaLayout, name: &str) -> Result<String> {
    let live = spec.liveness();
    let inputs = loaded_inputs(spec, &live);
    let mut s = String::new();
    writeln!(
        s,
        "// {}",
        spec.to_string().trim_end().replace('\n', "\n// ")
    )
    .ok();
    writeln!(s, "// layout: {layout}").ok();
    s.push_str(&args_struct(spec, name, layout.dims));
    s.push_str(&eval_fn(spec, name, &live, &inputs)?);
    s.push_str(&match &spec.kind {
        LoopKind::Pointwise => pointwise(spec, name, layout.dims, &inputs),
        LoopKind::Reduce { op, value, .. } => reduce(spec, name, layout, &inputs, *op, *value)?,
        LoopKind::Softmax { value, log } => softmax(spec, name, layout, &inputs, *value, *log)?,
    });
    Ok(s)
}
