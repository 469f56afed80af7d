//! The CLIF emitter of one kernel function ([`Emitter`]): the per-row view of its operands, its
//! arguments and the small value helpers every part of the emission uses; operand access
//! (`access`), evaluation (`eval`), float ops (`float`), integer and bool ops (`int`) and casts
//! (`cast`) are its other parts, at scalar width or at the kernel's vector width.
//!
//! Values live in registers in a *representation* per dtype: f16, bf16 and f32 as `f32` (f16/bf16
//! round only when stored or explicitly cast), f64 as `f64`, i32/i64 as themselves, bool as an
//! `i8` 0/1 at scalar width and as an all-ones/all-zeros lane mask (`i32x4` next to `f32x4`,
//! `i64x2` next to `f64x2`) at vector width. A kernel is vectorized when every value it computes is
//! in one float class (f16/bf16/f32, or f64) or bool; integer kernels and kernels mixing f32 with
//! f64 run at scalar width.

use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I8, I32, I32X4, I64, I64X2};
use cranelift_codegen::ir::{Endianness, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::FunctionBuilder;
use tensorplay_ir::{CompileKind, DType, Error, Result};

use crate::codegen::cpu::args::offsets;
use crate::codegen::cpu::math::MathCtx;
use crate::codegen::cpu::types::{Buf, Lanes};
use crate::codegen::kernel::{KernelSpec, LoopLayout};

mod access;
mod cast;
mod eval;
mod float;
mod int;

/// Lanes of the vector loop a spec compiles to (read here by the launcher).
pub(super) use crate::codegen::cpu::types::kernel_lanes;

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
}
