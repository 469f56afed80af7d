//! CLIF emission of a kernel body: operand access, scalar ops, casts and 16-bit float
//! conversions, at scalar width or at the kernel's vector width.
//!
//! Values live in registers in a *representation* per dtype: f16, bf16 and f32 as `f32` (f16/bf16
//! round only when stored or explicitly cast), f64 as `f64`, i32/i64 as themselves, bool as an
//! `i8` 0/1 at scalar width and as an all-ones/all-zeros lane mask (`i32x4` next to `f32x4`,
//! `i64x2` next to `f64x2`) at vector width. A kernel is vectorized when every value it computes is
//! in one float class (f16/bf16/f32, or f64) or bool; integer kernels and kernels mixing f32 with
//! f64 run at scalar width.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I8, I16X8, I32, I32X4, I64, I64X2};
use cranelift_codegen::ir::{
    ConstantData, Endianness, FuncRef, InstBuilder, MemFlagsData, Type, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;
use tensorplay_ir::CompileKind;
use tensorplay_ir::{DType, Error, Result, ScalarOp};

use super::args::offsets;

use super::math::{MathCtx, MathFn, emit_libm, emit_libm2, emit_pow, emit_unary};
use super::staging::Buf;
use crate::codegen::kernel::{
    Inst, KernelSpec, Lit, LoopKind, LoopLayout, StrideClass, ValueId, largest_finite,
};

/// The vector shape of a kernel's main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lanes {
    /// No vector loop (integer kernels, mixed f32/f64 kernels, bool-only kernels).
    Scalar,
    /// f32x4 values, i32x4 masks.
    F32x4,
    /// f64x2 values, i64x2 masks.
    F64x2,
}

impl Lanes {
    /// Elements per vector.
    pub(super) fn count(self) -> i64 {
        match self {
            Lanes::Scalar => 1,
            Lanes::F32x4 => 4,
            Lanes::F64x2 => 2,
        }
    }
}

/// Which values the kernel needs (backwards from its stores or its loop value).
pub(super) fn liveness(spec: &KernelSpec) -> Vec<bool> {
    let mut live = vec![false; spec.insts.len()];
    match &spec.kind {
        LoopKind::Pointwise => {}
        LoopKind::Reduce { value, .. } | LoopKind::Softmax { value, .. } => live[*value] = true,
    }
    for i in (0..spec.insts.len()).rev() {
        if let Inst::Store { .. } = spec.insts[i] {
            live[i] = true;
        }
        if !live[i] {
            continue;
        }
        match &spec.insts[i] {
            Inst::Op { args, .. } => args.iter().for_each(|&a| live[a] = true),
            Inst::Cast { arg, .. } => live[*arg] = true,
            Inst::Store { value, .. } => live[*value] = true,
            Inst::Load { .. } | Inst::Const { .. } | Inst::Param { .. } => {}
        }
    }
    live
}

/// Lanes of the vector loop `spec` compiles to (1: scalar only).
pub(super) fn kernel_lanes(spec: &KernelSpec) -> i64 {
    choose_lanes(spec, &liveness(spec)).count()
}

/// The float class of a dtype: `Some(false)` for f16/bf16/f32, `Some(true)` for f64.
fn float_class(d: DType) -> Option<bool> {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => Some(false),
        DType::F64 => Some(true),
        _ => None,
    }
}

/// The vector shape for `spec`: one float class (plus bool masks) vectorizes, anything else
/// (integers, f32 mixed with f64, bool only) runs at scalar width.
pub(super) fn choose_lanes(spec: &KernelSpec, live: &[bool]) -> Lanes {
    let mut dtypes: Vec<DType> = Vec::new();
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        match inst {
            Inst::Op { compute, out, .. } => dtypes.extend([*compute, *out]),
            Inst::Store { output, .. } => dtypes.push(spec.outputs[*output]),
            _ => dtypes.extend(spec.value_dtype(i)),
        }
    }
    dtypes.extend(spec.outputs.iter().copied());
    if let LoopKind::Reduce { value, .. } = &spec.kind
        && spec.value_dtype(*value).is_some_and(|d| !d.is_float())
    {
        return Lanes::Scalar;
    }
    let mut classes = dtypes.iter().filter_map(|&d| float_class(d));
    let any_int = dtypes.iter().any(|d| d.is_int());
    match classes.next() {
        None => Lanes::Scalar,
        Some(_) if any_int => Lanes::Scalar,
        Some(first) => {
            if classes.any(|c| c != first) {
                Lanes::Scalar
            } else if first {
                Lanes::F64x2
            } else {
                Lanes::F32x4
            }
        }
    }
}

fn internal(msg: impl Into<String>) -> Error {
    Error::compile(CompileKind::Codegen, format!("cpu codegen: {}", msg.into()))
}

/// Memory flags of tensor data accesses: never trapping, alignment not assumed.
fn data_flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// An input (or scalar argument) loaded once per row: its scalar value and, in vector kernels,
/// its splat.
pub(super) type Hoisted = Option<(Value, Option<Value>)>;

/// Per-row view of the operands: the address of the row's first element for each operand, and
/// the values of inputs that are constant along the inner dim (stride 0) and of the scalar
/// arguments, loaded once per row.
pub(super) struct Row {
    pub base: Vec<Value>,
    /// For each input, then each scalar argument: `(scalar, vector)` when hoisted (a shorter
    /// list hoists nothing past its end: those values are loaded where they are used).
    pub hoisted: Vec<Hoisted>,
}

/// The emitter of one kernel function.
pub(super) struct Emitter<'a, 'b> {
    pub fb: &'a mut FunctionBuilder<'b>,
    pub math: &'a MathCtx,
    pub spec: &'a KernelSpec,
    pub layout: &'a LoopLayout,
    pub lanes: Lanes,
    pub live: Vec<bool>,
    /// Integer `pow` helper (only when the kernel needs it).
    pub ipow: Option<FuncRef>,
    /// Entry-block values: base pointer per operand.
    pub ptrs: Vec<Value>,
    /// Loop dim sizes.
    pub shape: Vec<Value>,
    /// `strides[op][d]` in elements.
    pub strides: Vec<Vec<Value>>,
    /// Byte stride of each operand's innermost loop dim.
    pub inner_bytes: Vec<Value>,
    pub start: Value,
    pub end: Value,
    pub partials: Value,
    /// The address of the scalar arguments' slots (see [`param`](Self::param)).
    pub params: Value,
    /// The calling convention of calls into Rust (bulk math kernels).
    pub call_conv: CallConv,
    /// Whether expensive f32 math goes to the bulk kernels (see `staging`).
    pub bulk: bool,
    /// Staged kernels only: per instruction, the buffer an outlined value is read from.
    pub reads: Vec<Option<Buf>>,
    /// Staged kernels only: scratch address of the current segment's first element (slot 0).
    pub scratch_row: Option<Value>,
    /// Staged kernels only: bytes per scratch slot.
    pub slot_bytes: i64,
}

impl<'a, 'b> Emitter<'a, 'b> {
    /// Number of operands (inputs then outputs).
    pub(super) fn num_operands(&self) -> usize {
        self.spec.inputs.len() + self.spec.outputs.len()
    }

    /// The dtype of operand `op` (inputs then outputs).
    pub(super) fn operand_dtype(&self, op: usize) -> DType {
        let n = self.spec.inputs.len();
        if op < n {
            self.spec.inputs[op]
        } else {
            self.spec.outputs[op - n]
        }
    }

    /// Reads the kernel arguments in the entry block (the current block).
    pub(super) fn load_args(&mut self, args: Value) -> Result<()> {
        let flags = MemFlagsData::trusted().with_readonly();
        let ins = |fb: &mut FunctionBuilder, off: i32| fb.ins().load(I64, flags, args, off);
        let ptrs_p = ins(self.fb, offsets::PTRS);
        let shape_p = ins(self.fb, offsets::SHAPE);
        let strides_p = ins(self.fb, offsets::STRIDES);
        self.start = ins(self.fb, offsets::START);
        self.end = ins(self.fb, offsets::END);
        self.partials = ins(self.fb, offsets::PARTIALS);
        let params_p = ins(self.fb, offsets::PARAMS);
        let dims = self.layout.dims;
        let nops = self.num_operands();
        self.ptrs = (0..nops)
            .map(|op| self.fb.ins().load(I64, flags, ptrs_p, (op * 8) as i32))
            .collect();
        self.shape = (0..dims)
            .map(|d| self.fb.ins().load(I64, flags, shape_p, (d * 8) as i32))
            .collect();
        self.strides = (0..nops)
            .map(|op| {
                (0..dims)
                    .map(|d| {
                        self.fb
                            .ins()
                            .load(I64, flags, strides_p, ((op * dims + d) * 8) as i32)
                    })
                    .collect()
            })
            .collect();
        self.inner_bytes = (0..nops)
            .map(|op| {
                let size = self.operand_dtype(op).size() as i64;
                let s = self.strides[op][dims - 1];
                self.fb.ins().imul_imm_s(s, size)
            })
            .collect();
        self.params = params_p;
        Ok(())
    }

    // ---- small helpers ---------------------------------------------------------------------

    pub(super) fn ty_of(&self, v: Value) -> Type {
        self.fb.func.dfg.value_type(v)
    }

    /// The register type of a `dtype` value at scalar or vector width.
    pub(super) fn repr(&self, d: DType, vector: bool) -> Result<Type> {
        Ok(match (d, vector) {
            (DType::F16 | DType::BF16 | DType::F32, false) => F32,
            (DType::F64, false) => F64,
            (DType::I32, false) => I32,
            (DType::I64, false) => I64,
            (DType::Bool, false) => I8,
            (DType::F16 | DType::BF16 | DType::F32, true) if self.lanes == Lanes::F32x4 => F32X4,
            (DType::F64, true) if self.lanes == Lanes::F64x2 => F64X2,
            (DType::Bool, true) if self.lanes == Lanes::F32x4 => I32X4,
            (DType::Bool, true) if self.lanes == Lanes::F64x2 => I64X2,
            _ => {
                return Err(internal(format!(
                    "no vector form for {d} in a {:?} kernel",
                    self.lanes
                )));
            }
        })
    }

    /// A float constant of type `ty` (scalar or splat).
    pub(super) fn fconst(&mut self, ty: Type, v: f64) -> Value {
        match ty {
            F32 => self.fb.ins().f32const(v as f32),
            F64 => self.fb.ins().f64const(v),
            _ => {
                let s = self.fconst(ty.lane_type(), v);
                self.fb.ins().splat(ty, s)
            }
        }
    }

    /// A `vconst` of float vector type `ty` whose lanes hold only the sign bit, or (`abs`)
    /// everything but the sign bit.
    fn sign_mask(&mut self, ty: Type, abs: bool) -> Value {
        let lane = ty.lane_type();
        let mut bytes = Vec::with_capacity(16);
        for _ in 0..ty.lane_count() {
            if lane == F32 {
                let sign = 1u32 << 31;
                bytes.extend_from_slice(&(if abs { !sign } else { sign }).to_le_bytes());
            } else {
                let sign = 1u64 << 63;
                bytes.extend_from_slice(&(if abs { !sign } else { sign }).to_le_bytes());
            }
        }
        let c = self.fb.func.dfg.constants.insert(ConstantData::from(bytes));
        self.fb.ins().vconst(ty, c)
    }

    /// An integer constant of type `ty` (scalar or splat), `v` wrapped to the lane width.
    pub(super) fn iconst(&mut self, ty: Type, v: i64) -> Value {
        if ty.is_vector() {
            let s = self.iconst(ty.lane_type(), v);
            self.fb.ins().splat(ty, s)
        } else {
            let bits = ty.bits();
            let v = if bits < 64 {
                let m = (1i64 << bits) - 1;
                let u = v & m;
                // Sign-extend so the immediate is in range for the type.
                (u << (64 - bits)) >> (64 - bits)
            } else {
                v
            };
            self.fb.ins().iconst(ty, v)
        }
    }

    /// Reinterprets `v` as `ty` (same size), little-endian lane order.
    pub(super) fn bitcast(&mut self, ty: Type, v: Value) -> Value {
        if self.ty_of(v) == ty {
            return v;
        }
        let flags = MemFlagsData::new().with_endianness(Endianness::Little);
        self.fb.ins().bitcast(ty, flags, v)
    }

    /// `c ? a : b`, where `c` is a bool at the width of `a` (i8 0/1 or a lane mask).
    pub(super) fn select(&mut self, c: Value, a: Value, b: Value) -> Value {
        let ty = self.ty_of(a);
        if ty.is_vector() {
            let m = self.bitcast(ty, c);
            self.fb.ins().bitselect(m, a, b)
        } else {
            self.fb.ins().select(c, a, b)
        }
    }

    /// The integer type with the lanes of float type `ty`.
    fn int_of(ty: Type) -> Type {
        match ty {
            F32 => I32,
            F64 => I64,
            F32X4 => I32X4,
            F64X2 => I64X2,
            other => other,
        }
    }

    // ---- 16-bit float conversions ----------------------------------------------------------

    /// f16 bits (in the low 16 bits of `i32` lanes) of `x` (`f32` or `f32x4`), rounded to
    /// nearest even; NaN becomes the quiet NaN `0x7e00` with the sign kept.
    pub(super) fn f32_to_f16_bits(&mut self, x: Value) -> Value {
        let fty = self.ty_of(x);
        let ity = Self::int_of(fty);
        let b = self.bitcast(ity, x);
        let sign_mask = self.iconst(ity, 0x8000_0000);
        let sign = self.fb.ins().band(b, sign_mask);
        let a = self.fb.ins().bxor(b, sign);
        // Below 2^-14: add 0.5 so the f32 rounding aligns the f16 subnormal bits at the bottom.
        let fa = self.bitcast(fty, a);
        let half = self.fconst(fty, 0.5);
        let shifted = self.fb.ins().fadd(fa, half);
        let shifted = self.bitcast(ity, shifted);
        let magic = self.iconst(ity, 0x3f00_0000);
        let sub = self.fb.ins().isub(shifted, magic);
        // Normal: rebias the exponent and round to nearest even on the 13 dropped bits.
        let s13 = self.iconst(I32, 13);
        let m = self.fb.ins().ushr(a, s13);
        let one = self.iconst(ity, 1);
        let odd = self.fb.ins().band(m, one);
        let bias = self.iconst(ity, 0xC800_0FFF);
        let t = self.fb.ins().iadd(a, bias);
        let t = self.fb.ins().iadd(t, odd);
        let norm = self.fb.ins().ushr(t, s13);
        let small_lim = self.iconst(ity, 0x3880_0000);
        let small = self.fb.ins().icmp(IntCC::SignedLessThan, a, small_lim);
        let r = self.select(small, sub, norm);
        let big_lim = self.iconst(ity, 0x4780_0000);
        let big = self
            .fb
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, a, big_lim);
        let inf = self.iconst(ity, 0x7f80_0000);
        let nan = self.fb.ins().icmp(IntCC::SignedGreaterThan, a, inf);
        let qnan = self.iconst(ity, 0x7e00);
        let hinf = self.iconst(ity, 0x7c00);
        let special = self.select(nan, qnan, hinf);
        let r = self.select(big, special, r);
        let s16 = self.iconst(I32, 16);
        let sign16 = self.fb.ins().ushr(sign, s16);
        self.fb.ins().bor(r, sign16)
    }

    /// The f32 value (exact) of f16 bits held in the low 16 bits of `i32` lanes.
    pub(super) fn f16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.ty_of(h);
        let fty = if ity.is_vector() { F32X4 } else { F32 };
        let sm = self.iconst(ity, 0x8000);
        let sign = self.fb.ins().band(h, sm);
        let s16 = self.iconst(I32, 16);
        let sign = self.fb.ins().ishl(sign, s16);
        let em = self.iconst(ity, 0x7fff);
        let o = self.fb.ins().band(h, em);
        let s13 = self.iconst(I32, 13);
        let o = self.fb.ins().ishl(o, s13);
        let of = self.bitcast(fty, o);
        let scale = self.fconst(fty, 2f64.powi(112));
        let f = self.fb.ins().fmul(of, scale);
        let fbits = self.bitcast(ity, f);
        let expm = self.iconst(ity, 0x7c00);
        let e = self.fb.ins().band(h, expm);
        let special = self.fb.ins().icmp(IntCC::Equal, e, expm);
        let infbits = self.iconst(ity, 0x7f80_0000);
        let spec_bits = self.fb.ins().bor(o, infbits);
        let bits = self.select(special, spec_bits, fbits);
        let bits = self.fb.ins().bor(bits, sign);
        self.bitcast(fty, bits)
    }

    /// bf16 bits (low 16 bits of `i32` lanes) of `x`, rounded to nearest even (NaN stays NaN).
    pub(super) fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let ity = Self::int_of(self.ty_of(x));
        let b = self.bitcast(ity, x);
        let absm = self.iconst(ity, 0x7fff_ffff);
        let a = self.fb.ins().band(b, absm);
        let inf = self.iconst(ity, 0x7f80_0000);
        let nan = self.fb.ins().icmp(IntCC::SignedGreaterThan, a, inf);
        let s16 = self.iconst(I32, 16);
        let hi = self.fb.ins().ushr(b, s16);
        let one = self.iconst(ity, 1);
        let lsb = self.fb.ins().band(hi, one);
        let bias = self.iconst(ity, 0x7fff);
        let t = self.fb.ins().iadd(b, bias);
        let t = self.fb.ins().iadd(t, lsb);
        let rounded = self.fb.ins().ushr(t, s16);
        let quiet = self.iconst(ity, 0x40);
        let qn = self.fb.ins().bor(hi, quiet);
        self.select(nan, qn, rounded)
    }

    /// The f32 value of bf16 bits held in the low 16 bits of `i32` lanes.
    pub(super) fn bf16_bits_to_f32(&mut self, h: Value) -> Value {
        let ity = self.ty_of(h);
        let fty = if ity.is_vector() { F32X4 } else { F32 };
        let s16 = self.iconst(I32, 16);
        let b = self.fb.ins().ishl(h, s16);
        self.bitcast(fty, b)
    }

    /// Rounds an f32-represented value to the nearest f16 (or bf16) value, staying in f32.
    fn round_half(&mut self, x: Value, to: DType) -> Value {
        if to == DType::F16 {
            let h = self.f32_to_f16_bits(x);
            self.f16_bits_to_f32(h)
        } else {
            let h = self.f32_to_bf16_bits(x);
            self.bf16_bits_to_f32(h)
        }
    }

    // ---- memory ----------------------------------------------------------------------------

    /// Address and immediate offset of element `i + k` of operand `op` in `row`.
    fn elem_addr(&mut self, row: &Row, op: usize, i: Value, k: i64) -> (Value, i32) {
        let size = self.operand_dtype(op).size() as i64;
        let base = row.base[op];
        match self.layout.classes[op] {
            StrideClass::Unit => {
                let off = self.fb.ins().ishl_imm_s(i, size.trailing_zeros() as i64);
                (self.fb.ins().iadd(base, off), (k * size) as i32)
            }
            StrideClass::Strided => {
                let ii = if k == 0 {
                    i
                } else {
                    self.fb.ins().iadd_imm_s(i, k)
                };
                let off = self.fb.ins().imul(ii, self.inner_bytes[op]);
                (self.fb.ins().iadd(base, off), 0)
            }
            StrideClass::Zero => (base, 0),
        }
    }

    /// Loads one element of `dtype` at `addr + off`, in its scalar representation.
    pub(super) fn load_scalar(&mut self, dtype: DType, addr: Value, off: i32) -> Value {
        let fl = data_flags();
        match dtype {
            DType::F32 => self.fb.ins().load(F32, fl, addr, off),
            DType::F64 => self.fb.ins().load(F64, fl, addr, off),
            DType::I32 => self.fb.ins().load(I32, fl, addr, off),
            DType::I64 => self.fb.ins().load(I64, fl, addr, off),
            DType::Bool => self.fb.ins().load(I8, fl, addr, off),
            DType::F16 => {
                let h = self.fb.ins().uload16(I32, fl, addr, off);
                self.f16_bits_to_f32(h)
            }
            DType::BF16 => {
                let h = self.fb.ins().uload16(I32, fl, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// Stores one element of `dtype` (given in its scalar representation) at `addr + off`.
    pub(super) fn store_scalar(&mut self, dtype: DType, v: Value, addr: Value, off: i32) {
        let fl = data_flags();
        match dtype {
            DType::F16 => {
                let h = self.f32_to_f16_bits(v);
                self.fb.ins().istore16(fl, h, addr, off);
            }
            DType::BF16 => {
                let h = self.f32_to_bf16_bits(v);
                self.fb.ins().istore16(fl, h, addr, off);
            }
            _ => {
                self.fb.ins().store(fl, v, addr, off);
            }
        }
    }

    /// A vector from per-lane scalar values (floats, or bools turned into a lane mask).
    fn build_vector(&mut self, dtype: DType, lanes: Vec<Value>) -> Result<Value> {
        let vty = self.repr(dtype, true)?;
        if dtype == DType::Bool {
            let lane_ty = vty.lane_type();
            let ext: Vec<Value> = lanes
                .into_iter()
                .map(|l| self.fb.ins().uextend(lane_ty, l))
                .collect();
            let mut v = self.fb.ins().splat(vty, ext[0]);
            for (j, &x) in ext.iter().enumerate().skip(1) {
                v = self.fb.ins().insertlane(v, x, j as u8);
            }
            let zero = self.iconst(vty, 0);
            return Ok(self.fb.ins().icmp(IntCC::NotEqual, v, zero));
        }
        let mut v = self.fb.ins().splat(vty, lanes[0]);
        for (j, &x) in lanes.iter().enumerate().skip(1) {
            v = self.fb.ins().insertlane(v, x, j as u8);
        }
        Ok(v)
    }

    /// The scalar lanes of a vector value of `dtype` (bool masks become i8 0/1).
    fn split_vector(&mut self, dtype: DType, v: Value) -> Vec<Value> {
        let n = self.lanes.count() as u8;
        (0..n)
            .map(|j| {
                let x = self.fb.ins().extractlane(v, j);
                if dtype == DType::Bool {
                    let one = self.iconst(self.ty_of(x), 1);
                    let b = self.fb.ins().band(x, one);
                    self.fb.ins().ireduce(I8, b)
                } else {
                    x
                }
            })
            .collect()
    }

    /// Loads input `input` at element `i + k` of the row (a vector of lanes `i + k ..` when
    /// `vector`), in its register representation; inputs hoisted for the row come from the
    /// hoist.
    pub(super) fn load_input(
        &mut self,
        row: &Row,
        input: usize,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        if let Some((s, v)) = row.hoisted[input] {
            return if vector {
                v.ok_or_else(|| internal("hoisted input has no vector form"))
            } else {
                Ok(s)
            };
        }
        let dtype = self.spec.inputs[input];
        self.load_operand(row, input, dtype, i, k, vector)
    }

    /// Loads operand `op` (of `dtype`) at element `i + k` of the row, by its stride class.
    pub(super) fn load_operand(
        &mut self,
        row: &Row,
        op: usize,
        dtype: DType,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        if !vector {
            let (addr, off) = self.elem_addr(row, op, i, k);
            return Ok(self.load_scalar(dtype, addr, off));
        }
        let class = self.layout.classes[op];
        let fl = data_flags();
        if class == StrideClass::Unit && dtype != DType::Bool {
            let (addr, off) = self.elem_addr(row, op, i, k);
            return Ok(match dtype {
                DType::F32 => self.fb.ins().load(F32X4, fl, addr, off),
                DType::F64 => self.fb.ins().load(F64X2, fl, addr, off),
                DType::F16 => {
                    let h = self.fb.ins().uload16x4(fl, addr, off);
                    self.f16_bits_to_f32(h)
                }
                DType::BF16 => {
                    let h = self.fb.ins().uload16x4(fl, addr, off);
                    self.bf16_bits_to_f32(h)
                }
                other => return Err(internal(format!("vector load of {other}"))),
            });
        }
        if class == StrideClass::Zero {
            let s = self.load_scalar(dtype, row.base[op], 0);
            return self.build_vector(dtype, vec![s; self.lanes.count() as usize]);
        }
        let mut lanes = Vec::new();
        for j in 0..self.lanes.count() {
            let (addr, off) = self.elem_addr(row, op, i, k + j);
            lanes.push(self.load_scalar(dtype, addr, off));
        }
        self.build_vector(dtype, lanes)
    }

    /// Stores `v` to output `output` at element `i + k` of the row (lanes `i + k ..` when
    /// `vector`).
    pub(super) fn store_output(
        &mut self,
        row: &Row,
        output: usize,
        i: Value,
        k: i64,
        vector: bool,
        v: Value,
    ) -> Result<()> {
        let op = self.spec.inputs.len() + output;
        let dtype = self.spec.outputs[output];
        if !vector {
            let (addr, off) = self.elem_addr(row, op, i, k);
            self.store_scalar(dtype, v, addr, off);
            return Ok(());
        }
        let fl = data_flags();
        if self.layout.classes[op] == StrideClass::Unit && dtype != DType::Bool {
            let (addr, off) = self.elem_addr(row, op, i, k);
            match dtype {
                DType::F32 | DType::F64 => {
                    self.fb.ins().store(fl, v, addr, off);
                }
                DType::F16 | DType::BF16 => {
                    let h = if dtype == DType::F16 {
                        self.f32_to_f16_bits(v)
                    } else {
                        self.f32_to_bf16_bits(v)
                    };
                    let packed = self.fb.ins().unarrow(h, h);
                    debug_assert_eq!(self.ty_of(packed), I16X8);
                    let q = self.bitcast(I64X2, packed);
                    let low = self.fb.ins().extractlane(q, 0);
                    self.fb.ins().store(fl, low, addr, off);
                }
                other => return Err(internal(format!("vector store of {other}"))),
            }
            return Ok(());
        }
        let parts = self.split_vector(dtype, v);
        for (j, x) in parts.into_iter().enumerate() {
            let (addr, off) = self.elem_addr(row, op, i, k + j as i64);
            self.store_scalar(dtype, x, addr, off);
        }
        Ok(())
    }

    /// Loads the inputs that are constant along the inner dim (class `Zero`) at the row's base,
    /// then the live scalar arguments. Rows hold no calls (a staged kernel's bulk calls come
    /// between its stages' rows), so these registers are never spilled around one.
    pub(super) fn hoist(&mut self, base: &[Value]) -> Result<Vec<Hoisted>> {
        let mut out = Vec::with_capacity(self.spec.inputs.len());
        let loaded: Vec<bool> = (0..self.spec.inputs.len())
            .map(|k| {
                self.spec.insts.iter().enumerate().any(|(i, inst)| {
                    self.live[i] && matches!(inst, Inst::Load { input } if *input == k)
                })
            })
            .collect();
        for (input, &used) in loaded.iter().enumerate() {
            if !used || self.layout.classes[input] != StrideClass::Zero {
                out.push(None);
                continue;
            }
            let dtype = self.spec.inputs[input];
            let s = self.load_scalar(dtype, base[input], 0);
            let v = if self.lanes == Lanes::Scalar {
                None
            } else if dtype == DType::Bool {
                let vty = self.repr(DType::Bool, true)?;
                let lane = self.fb.ins().uextend(vty.lane_type(), s);
                let spl = self.fb.ins().splat(vty, lane);
                let zero = self.iconst(vty, 0);
                Some(self.fb.ins().icmp(IntCC::NotEqual, spl, zero))
            } else {
                let vty = self.repr(dtype, true)?;
                Some(self.fb.ins().splat(vty, s))
            };
            out.push(Some((s, v)));
        }
        let vector = self.lanes != Lanes::Scalar;
        for (k, inst) in self.spec.insts.iter().enumerate() {
            if let Inst::Param { index, dtype } = *inst {
                let h = if self.live[k] {
                    let s = self.param(index, dtype, false)?;
                    let v = if vector && (dtype.is_float() || dtype == DType::Bool) {
                        Some(self.vector_param(s, dtype)?)
                    } else {
                        None
                    };
                    Some((s, v))
                } else {
                    None
                };
                out.push(h);
            }
        }
        Ok(out)
    }

    // ---- evaluation ------------------------------------------------------------------------

    /// Evaluates the live body at element `i + k` of `row` (a vector when `vector`), performing
    /// its stores when `stores`; returns every evaluated value. In an
    /// [in-place](crate::codegen::kernel::LoopLayout::in_place) layout the stores come after
    /// the whole body, so no load of the element sees an output already written over it.
    pub(super) fn eval(
        &mut self,
        row: &Row,
        i: Value,
        k: i64,
        vector: bool,
        stores: bool,
    ) -> Result<Vec<Option<Value>>> {
        let spec = self.spec;
        let mut env: Vec<Option<Value>> = vec![None; spec.insts.len()];
        let get = |env: &[Option<Value>], a: ValueId| {
            env[a].ok_or_else(|| internal(format!("%{a} used before it was evaluated")))
        };
        let defer = self.layout.in_place;
        let mut deferred: Vec<(usize, ValueId)> = Vec::new();
        for (id, inst) in spec.insts.iter().enumerate() {
            if !self.live[id] {
                continue;
            }
            if let Some(buf) = self.reads.get(id).copied().flatten() {
                env[id] = Some(self.load_staged(row, buf, i, k, vector)?);
                continue;
            }
            let v = match inst {
                Inst::Load { input } => Some(self.load_input(row, *input, i, k, vector)?),
                Inst::Const { value, dtype } => Some(self.constant(*value, *dtype, vector)?),
                Inst::Param { index, dtype } => {
                    let hoisted = row
                        .hoisted
                        .get(spec.inputs.len() + index)
                        .copied()
                        .flatten();
                    Some(match (hoisted, vector) {
                        (Some((s, _)), false) => s,
                        (Some((_, Some(v))), true) => v,
                        _ => self.param(*index, *dtype, vector)?,
                    })
                }
                Inst::Op {
                    op, args, compute, ..
                } => {
                    let a: Vec<Value> =
                        args.iter().map(|&x| get(&env, x)).collect::<Result<_>>()?;
                    Some(self.op(*op, *compute, &a)?)
                }
                Inst::Cast { arg, to } => {
                    let from = spec
                        .value_dtype(*arg)
                        .ok_or_else(|| internal("cast of a non-value"))?;
                    let x = get(&env, *arg)?;
                    Some(self.cast(x, from, *to)?)
                }
                Inst::Store { output, value } => {
                    if stores && defer {
                        deferred.push((*output, *value));
                    } else if stores {
                        let x = get(&env, *value)?;
                        self.store_output(row, *output, i, k, vector, x)?;
                    }
                    None
                }
            };
            env[id] = v;
        }
        for (output, value) in deferred {
            let x = get(&env, value)?;
            self.store_output(row, output, i, k, vector, x)?;
        }
        Ok(env)
    }

    /// A constant in its register representation.
    fn constant(&mut self, value: Lit, dtype: DType, vector: bool) -> Result<Value> {
        let ty = self.repr(dtype, vector)?;
        Ok(match value {
            Lit::Float(v) => self.fconst(ty, v),
            Lit::Int(v) => self.iconst(ty, v),
            Lit::Bool(b) => {
                let v = if vector { -(b as i64) } else { b as i64 };
                self.iconst(ty, v)
            }
        })
    }

    /// Scalar argument `index` in its register representation, read from its 8-byte slot (the
    /// value in the low bytes, see [`ScalarArgs`](super::ScalarArgs)) here. Rows read their
    /// arguments once ([`hoist`](Self::hoist)); the slot is deliberately not marked read-only,
    /// so Cranelift does not hoist the read further, out of every loop: a kernel-wide value
    /// occupies a vector register across the bulk calls of a staged kernel and is spilled and
    /// reloaded around each (measured: W1 15–25 % slower).
    fn param(&mut self, index: usize, dtype: DType, vector: bool) -> Result<Value> {
        let flags = MemFlagsData::trusted();
        let off = i32::try_from(index * 8)
            .map_err(|_| internal(format!("param {index} is out of range")))?;
        let s = match dtype {
            DType::Bool => {
                let b = self.fb.ins().load(I8, flags, self.params, off);
                // Any nonzero byte is true; normalise to 0/1.
                let zero = self.fb.ins().iconst(I8, 0);
                self.fb.ins().icmp(IntCC::NotEqual, b, zero)
            }
            d => {
                let ty = self.repr(d, false)?;
                self.fb.ins().load(ty, flags, self.params, off)
            }
        };
        if !vector {
            return Ok(s);
        }
        self.vector_param(s, dtype)
    }

    /// The vector form of a scalar argument's value `s`.
    fn vector_param(&mut self, s: Value, dtype: DType) -> Result<Value> {
        let vty = self.repr(dtype, true)?;
        Ok(if dtype == DType::Bool {
            let lane = self.fb.ins().uextend(vty.lane_type(), s);
            let spl = self.fb.ins().splat(vty, lane);
            let zero = self.iconst(vty, 0);
            self.fb.ins().icmp(IntCC::NotEqual, spl, zero)
        } else {
            self.fb.ins().splat(vty, s)
        })
    }

    /// A bool (i8 0/1 or lane mask) from a comparison result of the same width.
    fn not(&mut self, b: Value) -> Value {
        if self.ty_of(b).is_vector() {
            self.fb.ins().bnot(b)
        } else {
            self.fb.ins().bxor_imm_s(b, 1)
        }
    }

    /// Emits `op` computing in `compute` on operands already in that dtype's representation
    /// (bool for `where`'s condition and logical ops).
    pub(super) fn op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        if compute.is_float() {
            self.float_op(op, compute, a)
        } else if compute == DType::Bool {
            self.bool_op(op, a)
        } else {
            self.int_op(op, compute, a)
        }
    }

    fn float_op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let ty = self.ty_of(a[0]);
        let x = a[0];
        let unary = |e: &mut Self, f: MathFn| emit_unary(e.fb, e.math, f, x);
        let cmp = |e: &mut Self, cc: FloatCC| e.fb.ins().fcmp(cc, a[0], a[1]);
        Ok(match op {
            // On vectors, the sign bit is flipped or cleared with a pool constant (one
            // instruction with a memory operand; `fneg`/`fabs` rebuild the mask on every use).
            Neg if ty.is_vector() => {
                let m = self.sign_mask(ty, false);
                self.fb.ins().bxor(x, m)
            }
            Abs if ty.is_vector() => {
                let m = self.sign_mask(ty, true);
                self.fb.ins().band(x, m)
            }
            Neg => self.fb.ins().fneg(x),
            Abs => self.fb.ins().fabs(x),
            Sqrt => self.fb.ins().sqrt(x),
            Rsqrt => {
                let s = self.fb.ins().sqrt(x);
                let one = self.fconst(ty, 1.0);
                self.fb.ins().fdiv(one, s)
            }
            Reciprocal => {
                let one = self.fconst(ty, 1.0);
                self.fb.ins().fdiv(one, x)
            }
            Square => self.fb.ins().fmul(x, x),
            Add => self.fb.ins().fadd(a[0], a[1]),
            Sub => self.fb.ins().fsub(a[0], a[1]),
            Mul => self.fb.ins().fmul(a[0], a[1]),
            Div => self.fb.ins().fdiv(a[0], a[1]),
            Relu => {
                // x if x >= 0 (so -0.0 stays -0.0) or x is NaN, else +0 (PyTorch's relu).
                let zero = self.fconst(ty, 0.0);
                let keep = self
                    .fb
                    .ins()
                    .fcmp(FloatCC::UnorderedOrGreaterThanOrEqual, x, zero);
                if ty.is_vector() {
                    let m = self.bitcast(ty, keep);
                    self.fb.ins().band(x, m)
                } else {
                    self.fb.ins().select(keep, x, zero)
                }
            }
            Sign => {
                let zero = self.fconst(ty, 0.0);
                let one = self.fconst(ty, 1.0);
                let minus = self.fconst(ty, -1.0);
                let gt = self.fb.ins().fcmp(FloatCC::GreaterThan, x, zero);
                let lt = self.fb.ins().fcmp(FloatCC::LessThan, x, zero);
                // x + 0.0: -0.0 becomes 0.0 (PyTorch), NaN stays NaN (eager's rule).
                let z = self.fb.ins().fadd(x, zero);
                let s = self.select(gt, one, z);
                self.select(lt, minus, s)
            }
            Floor => self.fb.ins().floor(x),
            Ceil => self.fb.ins().ceil(x),
            Round => self.fb.ins().nearest(x),
            Maximum | Minimum => {
                // Eager: a if (a > b or a is NaN) else b (a NaN in either operand wins).
                let cc = if op == Maximum {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let wins = self.fb.ins().fcmp(cc, a[0], a[1]);
                let nan = self.fb.ins().fcmp(FloatCC::Unordered, a[0], a[0]);
                let m = self.fb.ins().bor(wins, nan);
                self.select(m, a[0], a[1])
            }
            Clamp { min, max } => {
                let narrow = |v: f64| {
                    if compute == DType::F64 {
                        v
                    } else {
                        v as f32 as f64
                    }
                };
                let mut v = x;
                if let Some(lo) = min {
                    let lo_v = self.fconst(ty, narrow(lo));
                    v = if lo.is_nan() {
                        lo_v
                    } else {
                        let below = self.fb.ins().fcmp(FloatCC::LessThan, v, lo_v);
                        self.select(below, lo_v, v)
                    };
                }
                if let Some(hi) = max {
                    let hi_v = self.fconst(ty, narrow(hi));
                    v = if hi.is_nan() {
                        hi_v
                    } else {
                        let above = self.fb.ins().fcmp(FloatCC::GreaterThan, v, hi_v);
                        self.select(above, hi_v, v)
                    };
                }
                v
            }
            Eq => cmp(self, FloatCC::Equal),
            Ne => cmp(self, FloatCC::NotEqual),
            Lt => cmp(self, FloatCC::LessThan),
            Le => cmp(self, FloatCC::LessThanOrEqual),
            Gt => cmp(self, FloatCC::GreaterThan),
            Ge => cmp(self, FloatCC::GreaterThanOrEqual),
            Where => self.select(a[0], a[1], a[2]),
            Exp => unary(self, MathFn::Exp),
            Log => unary(self, MathFn::Log),
            Log1p => unary(self, MathFn::Log1p),
            Expm1 => unary(self, MathFn::Expm1),
            Tanh => unary(self, MathFn::Tanh),
            Sigmoid => unary(self, MathFn::Sigmoid),
            Erf => unary(self, MathFn::Erf),
            GeluErf => unary(self, MathFn::GeluErf),
            GeluTanh => unary(self, MathFn::GeluTanh),
            Silu => unary(self, MathFn::Silu),
            Sin => unary(self, MathFn::Sin),
            Cos => unary(self, MathFn::Cos),
            Pow => emit_pow(self.fb, self.math, a[0], a[1]),
            Libm(f) => emit_libm(self.fb, self.math, f, x),
            Libm2(f) => emit_libm2(self.fb, self.math, f, a[0], a[1]),
            NanToNum {
                nan,
                posinf,
                neginf,
            } => {
                // The compute dtype's finite extremes replace absent infinity values.
                let hi = largest_finite(compute);
                let lo = -hi;
                let pinf = self.fconst(ty, f64::INFINITY);
                let ninf = self.fconst(ty, f64::NEG_INFINITY);
                let is_pos = self.fb.ins().fcmp(FloatCC::Equal, x, pinf);
                let is_neg = self.fb.ins().fcmp(FloatCC::Equal, x, ninf);
                let is_nan = self.fb.ins().fcmp(FloatCC::Unordered, x, x);
                let p = self.fconst(ty, posinf.unwrap_or(hi));
                let n = self.fconst(ty, neginf.unwrap_or(lo));
                let q = self.fconst(ty, nan);
                let v = self.select(is_pos, p, x);
                let v = self.select(is_neg, n, v);
                self.select(is_nan, q, v)
            }
            Cast | LogicalNot | LogicalAnd | LogicalOr | LogicalXor | BitAnd | BitOr | BitXor
            | BitNot | Shl | Shr => {
                return Err(internal(format!("{op} on {compute} operands")));
            }
        })
    }

    fn int_op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let ty = self.ty_of(a[0]);
        if ty.is_vector() {
            return Err(internal("integer ops run at scalar width"));
        }
        let x = a[0];
        let cmp = |e: &mut Self, cc: IntCC| e.fb.ins().icmp(cc, a[0], a[1]);
        Ok(match op {
            Neg => self.fb.ins().ineg(x),
            Abs => self.fb.ins().iabs(x),
            Add => self.fb.ins().iadd(a[0], a[1]),
            Sub => self.fb.ins().isub(a[0], a[1]),
            Mul => self.fb.ins().imul(a[0], a[1]),
            Square => self.fb.ins().imul(x, x),
            Relu => {
                let zero = self.iconst(ty, 0);
                self.fb.ins().smax(x, zero)
            }
            Sign => {
                let m1 = self.iconst(ty, -1);
                let p1 = self.iconst(ty, 1);
                let t = self.fb.ins().smax(x, m1);
                self.fb.ins().smin(t, p1)
            }
            Floor | Ceil | Round | NanToNum { .. } => x,
            BitAnd => self.fb.ins().band(a[0], a[1]),
            BitOr => self.fb.ins().bor(a[0], a[1]),
            BitXor => self.fb.ins().bxor(a[0], a[1]),
            BitNot => self.fb.ins().bnot(x),
            Shl | Shr => {
                // Cranelift masks the amount; PyTorch gives 0 (<<) or the sign fill (>>) for a
                // negative amount or one of the bit width or more.
                let width = i64::from(ty.bits());
                let bits = self.iconst(ty, width);
                let ok = self.fb.ins().icmp(IntCC::UnsignedLessThan, a[1], bits);
                if op == Shl {
                    let sh = self.fb.ins().ishl(a[0], a[1]);
                    let zero = self.iconst(ty, 0);
                    self.fb.ins().select(ok, sh, zero)
                } else {
                    let top = self.iconst(ty, width - 1);
                    let amt = self.fb.ins().select(ok, a[1], top);
                    self.fb.ins().sshr(a[0], amt)
                }
            }
            Maximum => self.fb.ins().smax(a[0], a[1]),
            Minimum => self.fb.ins().smin(a[0], a[1]),
            Clamp { min, max } => {
                let (tmin, tmax) = if compute == DType::I32 {
                    (i32::MIN as i64, i32::MAX as i64)
                } else {
                    (i64::MIN, i64::MAX)
                };
                let mut v = x;
                if let Some(lo) = min {
                    let lo = self.iconst(ty, (lo as i64).clamp(tmin, tmax));
                    v = self.fb.ins().smax(v, lo);
                }
                if let Some(hi) = max {
                    let hi = self.iconst(ty, (hi as i64).clamp(tmin, tmax));
                    v = self.fb.ins().smin(v, hi);
                }
                v
            }
            Eq => cmp(self, IntCC::Equal),
            Ne => cmp(self, IntCC::NotEqual),
            Lt => cmp(self, IntCC::SignedLessThan),
            Le => cmp(self, IntCC::SignedLessThanOrEqual),
            Gt => cmp(self, IntCC::SignedGreaterThan),
            Ge => cmp(self, IntCC::SignedGreaterThanOrEqual),
            Where => self.fb.ins().select(a[0], a[1], a[2]),
            Pow => {
                let f = self
                    .ipow
                    .ok_or_else(|| internal("integer pow without its helper"))?;
                let (b, e) = if ty == I32 {
                    (
                        self.fb.ins().sextend(I64, a[0]),
                        self.fb.ins().sextend(I64, a[1]),
                    )
                } else {
                    (a[0], a[1])
                };
                let call = self.fb.ins().call(f, &[b, e]);
                let r = self.fb.inst_results(call)[0];
                if ty == I32 {
                    self.fb.ins().ireduce(I32, r)
                } else {
                    r
                }
            }
            _ => return Err(internal(format!("{op} on {compute} operands"))),
        })
    }

    fn bool_op(&mut self, op: ScalarOp, a: &[Value]) -> Result<Value> {
        use ScalarOp::*;
        let vector = self.ty_of(a[0]).is_vector();
        let x = a[0];
        Ok(match op {
            Add | Maximum | LogicalOr => self.fb.ins().bor(a[0], a[1]),
            Mul | Minimum | LogicalAnd => self.fb.ins().band(a[0], a[1]),
            LogicalXor | Ne => self.fb.ins().bxor(a[0], a[1]),
            Eq => {
                let d = self.fb.ins().bxor(a[0], a[1]);
                self.not(d)
            }
            LogicalNot | BitNot => self.not(x),
            BitAnd => self.fb.ins().band(a[0], a[1]),
            BitOr => self.fb.ins().bor(a[0], a[1]),
            BitXor => self.fb.ins().bxor(a[0], a[1]),
            Abs | Sign | NanToNum { .. } => x,
            Where => self.select(a[0], a[1], a[2]),
            Lt | Le | Gt | Ge if !vector => {
                let cc = match op {
                    Lt => IntCC::UnsignedLessThan,
                    Le => IntCC::UnsignedLessThanOrEqual,
                    Gt => IntCC::UnsignedGreaterThan,
                    _ => IntCC::UnsignedGreaterThanOrEqual,
                };
                self.fb.ins().icmp(cc, a[0], a[1])
            }
            // false < true on lane masks.
            Lt => {
                let na = self.not(a[0]);
                self.fb.ins().band(na, a[1])
            }
            Gt => {
                let nb = self.not(a[1]);
                self.fb.ins().band(a[0], nb)
            }
            Le => {
                let na = self.not(a[0]);
                self.fb.ins().bor(na, a[1])
            }
            Ge => {
                let nb = self.not(a[1]);
                self.fb.ins().bor(a[0], nb)
            }
            _ => return Err(internal(format!("{op} on bool operands"))),
        })
    }

    /// Converts `v` from `from` to `to` with the runtime's cast rules.
    pub(super) fn cast(&mut self, v: Value, from: DType, to: DType) -> Result<Value> {
        if from == to {
            return Ok(v);
        }
        let ty = self.ty_of(v);
        let vector = ty.is_vector();
        let to_ty = self.repr(to, vector)?;
        Ok(match (from.is_float(), to.is_float()) {
            (true, true) => {
                let mut x = v;
                if from == DType::F64 && to != DType::F64 {
                    x = self.fb.ins().fdemote(F32, x);
                } else if from != DType::F64 && to == DType::F64 {
                    x = self.fb.ins().fpromote(F64, x);
                }
                if to.is_half() {
                    x = self.round_half(x, to);
                }
                x
            }
            (true, false) => match to {
                DType::Bool => {
                    let zero = self.fconst(ty, 0.0);
                    self.fb.ins().fcmp(FloatCC::NotEqual, v, zero)
                }
                _ => self.fb.ins().fcvt_to_sint_sat(to_ty, v),
            },
            (false, true) => {
                if from == DType::Bool {
                    let one = self.fconst(to_ty, 1.0);
                    if vector {
                        let m = self.bitcast(to_ty, v);
                        self.fb.ins().band(m, one)
                    } else {
                        let zero = self.fconst(to_ty, 0.0);
                        self.fb.ins().select(v, one, zero)
                    }
                } else {
                    let x = self.fb.ins().fcvt_from_sint(to_ty, v);
                    if to.is_half() {
                        self.round_half(x, to)
                    } else {
                        x
                    }
                }
            }
            (false, false) => match (from, to) {
                (_, DType::Bool) => {
                    let zero = self.iconst(ty, 0);
                    self.fb.ins().icmp(IntCC::NotEqual, v, zero)
                }
                (DType::Bool, _) => self.fb.ins().uextend(to_ty, v),
                (DType::I32, DType::I64) => self.fb.ins().sextend(I64, v),
                (DType::I64, DType::I32) => self.fb.ins().ireduce(I32, v),
                _ => return Err(internal(format!("cast {from} -> {to}"))),
            },
        })
    }
}
