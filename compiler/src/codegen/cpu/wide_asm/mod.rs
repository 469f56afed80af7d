//! f32 pointwise kernels and row sums assembled directly at the host's full vector width: 8
//! lanes with AVX2, 16 with AVX-512.
//!
//! Cranelift's x86-64 back end has only 128-bit vector types, so its kernels run f32 work 4
//! lanes at a time; a chain of cheap IEEE operations (`x * 1.1 + 0.3`, `relu(x + b) + r`) is
//! then bound by instruction count where a hand loop moves 8 or 16 elements per instruction.
//! For pointwise kernels whose operands are all f32, over one or two loop dims, with inputs
//! contiguous or broadcast along the inner dim, this module writes the machine code itself
//! with `iced-x86`'s assembler: the loop nest, one full-width vector per operation, masked
//! tails. Each inline operation ([`lowerable`]) is the same instruction the eager kernel and
//! the Cranelift kernel execute per lane (`vaddps` for `addss`, `vsqrtps` for `sqrtss`,
//! sign-mask `and`/`xor` for `abs`/`neg`, compares and blends for the NaN rules of `maximum`;
//! comparisons give all-ones lane masks, which `where` blends on), so results are
//! bit-identical to both; nothing is contracted into FMAs.
//!
//! Transcendentals and the general `pow` are handed to the bulk kernels (the same algorithm,
//! the same bits, see [`super::math::bulk`]), as Cranelift's staged kernels do: the row is
//! walked in tiles of at most 512 elements; per tile, stage 0 computes what the first bulk
//! calls read and spills it to scratch slots on the stack (a unit-stride input is read by the
//! call straight from the tensor), the calls run over the tile, stage 1 reloads their results,
//! and so on. Each store happens in the stage where its value exists; values a later stage
//! reads again are spilled once, loads are repeated (from L1). The last stage prefetches the
//! next tile's operands (the bulk calls touch no tensor memory, so the hardware prefetcher
//! alone falls behind at DRAM sizes).
//!
//! f32 sums and means of rows whose value is computed inline are assembled too, in the
//! accumulation order of Cranelift's reduction kernels (32 lanes per block of 4096 elements:
//! two zmm or four ymm accumulators, the block tail and the combination in the same order), so
//! a compiled sum is the same bits whichever generator and ISA produced it.
//!
//! Assembling takes tens of microseconds against Cranelift's half millisecond. Everything
//! else (other dtypes, casts, bool tensors, strided operands, deeper loop nests, other
//! reductions, column reductions, reductions of outlined values, softmax, in-place kernels
//! with outlined operations) is compiled by Cranelift as before; [`assemble`] answers `None`
//! for it.
//!
//! The kernel has the common entry `extern "C" fn(*const KernelArgs)` (System V, the only ABI
//! it is built for) and honours every field a pointwise kernel reads: any `[start, end)` of the
//! flattened iteration, rows of any length, outer strides of any value.

use tensorplay_ir::{DType, ReduceOp, ScalarOp};

use crate::codegen::cpu::code::WideCode;
use crate::codegen::cpu::math::bulk::Level;
use crate::codegen::cpu::wide_asm::lowering::{lowerable, outlined};
use crate::codegen::kernel::{Inst, KernelSpec, Lit, LoopKind, LoopLayout, StrideClass};

#[cfg(all(target_arch = "x86_64", unix))]
mod imp;
mod lowering;

/// Whether `spec` under `layout` can be assembled: a pointwise kernel over one or two loop dims,
/// or an f32 sum or mean over the inner dim of rows, whose live instructions are all f32 loads,
/// constants, parameters, [`lowerable`] operations (pointwise kernels also outlined ones) and
/// stores, with every input unit-stride or broadcast along the inner dim and every pointwise
/// output unit-stride. `spec` is a validated one ([`KernelSpec::validate`]).
pub(super) fn eligible(spec: &KernelSpec, layout: &LoopLayout) -> bool {
    let f32_only = spec
        .inputs
        .iter()
        .chain(&spec.outputs)
        .all(|&d| d == DType::F32);
    let nin = spec.inputs.len();
    let reduction = matches!(spec.kind, LoopKind::Reduce { .. });
    let classes_ok = layout.classes.iter().enumerate().all(|(k, c)| match c {
        StrideClass::Unit => true,
        // A reduction's output is written once per row (class Zero).
        StrideClass::Zero => k < nin || reduction,
        StrideClass::Strided => false,
    });
    let live = spec.liveness();
    let insts_ok = spec.insts.iter().zip(&live).all(|(inst, &l)| {
        !l || match inst {
            Inst::Load { .. } | Inst::Store { .. } => true,
            Inst::Const { value, dtype } => matches!(
                (dtype, value),
                (DType::F32, Lit::Float(_)) | (DType::Bool, Lit::Bool(_))
            ),
            Inst::Param { dtype, .. } => *dtype == DType::F32,
            // f32 arithmetic, f32 comparisons (to bool) and logic on those bools; the
            // validated spec fixes the result and operand dtypes from `compute`.
            Inst::Op { op, compute, .. } => {
                use ScalarOp::{LogicalAnd, LogicalNot, LogicalOr, LogicalXor};
                let logical = matches!(op, LogicalNot | LogicalAnd | LogicalOr | LogicalXor);
                match compute {
                    DType::F32 => !logical && (lowerable(op) || outlined(op).is_some()),
                    DType::Bool => logical,
                    _ => false,
                }
            }
            Inst::Cast { .. } => false,
        }
    });
    let kind_ok =
        match &spec.kind {
            LoopKind::Pointwise => (1..=2).contains(&layout.dims) && !spec.outputs.is_empty(),
            // f32 sums and means of rows: one kept and one reduced loop dim, the value computed
            // inline (no bulk calls).
            LoopKind::Reduce { op, value, .. } => {
                matches!(op, ReduceOp::Sum | ReduceOp::Mean)
                    && layout.dims == 2
                    && layout.reduced == 1
                    && !layout.kept_inner
                    && spec.value_dtype(*value) == Some(DType::F32)
                    && spec.insts.iter().zip(&live).all(|(inst, &l)| {
                        !l || !matches!(inst, Inst::Op { op, .. } if !lowerable(op))
                    })
            }
            LoopKind::Softmax { .. } => false,
        };
    kind_ok && f32_only && classes_ok && insts_ok
}

/// Assembles `spec` for `layout` at `level`'s width, or `None` when it is not [`eligible`], the
/// host lacks the level, or its values do not fit the vector registers (then Cranelift
/// compiles it). An `Err` is an internal assembler failure.
pub(super) fn assemble(
    spec: &KernelSpec,
    layout: &LoopLayout,
    level: Level,
) -> Result<Option<WideCode>, String> {
    if !enabled() || !host_ready(level) || !eligible(spec, layout) {
        return Ok(None);
    }
    imp::assemble(spec, layout, level)
}

/// Whether assembled kernels are on: `TP_WIDE_ASM=0` (`false`, `off`, `no`) leaves every kernel
/// to Cranelift (for comparisons; the results are the same bits).
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        tensorplay_math::bulk::env_enables(std::env::var("TP_WIDE_ASM").ok().as_deref())
    })
}

#[cfg(all(target_arch = "x86_64", unix))]
fn host_ready(level: Level) -> bool {
    level.is_supported()
}

#[cfg(not(all(target_arch = "x86_64", unix)))]
fn host_ready(_level: Level) -> bool {
    false
}

/// No full-width kernels off x86-64 System V hosts.
#[cfg(not(all(target_arch = "x86_64", unix)))]
mod imp {
    use super::*;
    pub(super) fn assemble(
        _spec: &KernelSpec,
        _layout: &LoopLayout,
        _level: Level,
    ) -> Result<Option<WideCode>, String> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    //! Every lowerable operation, every supported layout, rows of every tail length and calls
    //! over arbitrary `[start, end)`: the assembled kernel writes the same bits as Cranelift's
    //! inline kernel, and nothing outside its range.

    use super::*;
    use crate::codegen::cpu::{CodegenOptions, KernelArgs, compile_with};
    use crate::codegen::kernel::ValueId;

    fn op(op: ScalarOp, args: Vec<ValueId>) -> Inst {
        Inst::Op {
            op,
            args,
            compute: DType::F32,
            out: DType::F32,
        }
    }

    fn store(output: usize, value: ValueId) -> Inst {
        Inst::Store { output, value }
    }

    fn konst(v: f64) -> Inst {
        Inst::Const {
            value: Lit::Float(v),
            dtype: DType::F32,
        }
    }

    fn spec(nin: usize, nout: usize, insts: Vec<Inst>) -> KernelSpec {
        KernelSpec {
            rank: 2,
            inputs: vec![DType::F32; nin],
            outputs: vec![DType::F32; nout],
            insts,
            kind: LoopKind::Pointwise,
        }
    }

    /// `out = f(x)` and `out = f(x, y)` for every lowerable op, plus chains with constants,
    /// parameters, two outputs and stores of fixed values.
    fn programs() -> Vec<KernelSpec> {
        use ScalarOp::*;
        let mut v = Vec::new();
        let unary = [
            Sqrt,
            Rsqrt,
            Reciprocal,
            Square,
            Neg,
            Abs,
            Relu,
            Floor,
            Ceil,
            Round,
            Clamp {
                min: Some(-0.5),
                max: None,
            },
            Clamp {
                min: None,
                max: Some(0.25),
            },
            Clamp {
                min: Some(-1.0),
                max: Some(1.0),
            },
            Clamp {
                min: Some(f64::NAN),
                max: Some(2.0),
            },
            Clamp {
                min: Some(0.1),
                max: Some(f64::NAN),
            },
        ];
        let unary_store = |u: ScalarOp| {
            spec(
                1,
                1,
                vec![Inst::Load { input: 0 }, op(u, vec![0]), store(0, 1)],
            )
        };
        v.extend(unary.into_iter().map(unary_store));
        for b in [Add, Sub, Mul, Div, Maximum, Minimum] {
            v.push(spec(
                2,
                1,
                vec![
                    Inst::Load { input: 0 },
                    Inst::Load { input: 1 },
                    op(b, vec![0, 1]),
                    store(0, 2),
                ],
            ));
        }
        // W6: sqrt(abs((((x*1.1+0.3)*x-0.7)/(x*x+1))+x)), with 0.3 a parameter.
        v.push(spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                konst(1.1),
                op(Mul, vec![0, 1]),
                Inst::Param {
                    index: 0,
                    dtype: DType::F32,
                },
                op(Add, vec![2, 3]),
                op(Mul, vec![4, 0]),
                konst(0.7),
                op(Sub, vec![5, 6]),
                op(Mul, vec![0, 0]),
                konst(1.0),
                op(Add, vec![8, 9]),
                op(Div, vec![7, 10]),
                op(Add, vec![11, 0]),
                op(Abs, vec![12]),
                op(Sqrt, vec![13]),
                store(0, 14),
            ],
        ));
        // Staged: one outlined op reading a tensor directly (W1), one feeding an inline op
        // (W2), two in one stage, a later stage reloading inputs and spilled values, `pow`
        // with a constant exponent (a slot written from a fixed register), and outlined ops
        // nested (a bulk result feeding a bulk call), each with an output per stage.
        v.push(unary_store(ScalarOp::GeluTanh));
        v.push(unary_store(ScalarOp::Exp));
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Silu, vec![0]),
                Inst::Load { input: 1 },
                op(Mul, vec![1, 2]),
                store(0, 3),
            ],
        ));
        v.push(spec(
            2,
            2,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                op(Mul, vec![0, 1]),
                konst(0.5),
                op(Add, vec![2, 3]),
                op(ScalarOp::Tanh, vec![4]),
                op(Neg, vec![0]),
                op(ScalarOp::Exp, vec![6]),
                op(Mul, vec![7, 1]),
                op(Add, vec![5, 8]),
                op(Sub, vec![9, 4]),
                store(0, 10),
                store(1, 4),
            ],
        ));
        v.push(spec(
            2,
            2,
            vec![
                Inst::Load { input: 0 },
                konst(2.5),
                op(Pow, vec![0, 1]),
                op(ScalarOp::Exp, vec![0]),
                Inst::Load { input: 1 },
                op(Pow, vec![3, 4]),
                op(ScalarOp::Sigmoid, vec![5]),
                op(Add, vec![6, 2]),
                store(0, 7),
                store(1, 3),
            ],
        ));
        // Comparisons feeding `where`, through the logical ops and a bool constant:
        // where(((x >= y) & !(x < 0)) | (x != y) ^ (x == 1) ^ (x <= y) ^ (x > 0) ^ true, x, 0.5 * y)
        let cmp = |o: ScalarOp, args: Vec<ValueId>| Inst::Op {
            op: o,
            args,
            compute: DType::F32,
            out: DType::Bool,
        };
        let logic = |o: ScalarOp, args: Vec<ValueId>| Inst::Op {
            op: o,
            args,
            compute: DType::Bool,
            out: DType::Bool,
        };
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                cmp(Ge, vec![0, 1]),
                konst(0.0),
                cmp(Lt, vec![0, 3]),
                logic(LogicalNot, vec![4]),
                logic(LogicalAnd, vec![2, 5]),
                cmp(Ne, vec![0, 1]),
                konst(1.0),
                cmp(Eq, vec![0, 8]),
                logic(LogicalXor, vec![7, 9]),
                cmp(Le, vec![0, 1]),
                logic(LogicalXor, vec![10, 11]),
                cmp(Gt, vec![0, 3]),
                logic(LogicalXor, vec![12, 13]),
                Inst::Const {
                    value: Lit::Bool(true),
                    dtype: DType::Bool,
                },
                logic(LogicalXor, vec![14, 15]),
                logic(LogicalOr, vec![6, 16]),
                konst(0.5),
                op(Mul, vec![18, 1]),
                op(Where, vec![17, 0, 19]),
                store(0, 20),
            ],
        ));
        // A comparison whose bool crosses a bulk call: where(exp(x) > y, x, y).
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                cmp(Gt, vec![0, 1]),
                op(ScalarOp::Exp, vec![0]),
                cmp(Gt, vec![3, 1]),
                logic(LogicalAnd, vec![2, 4]),
                op(Where, vec![5, 0, 1]),
                store(0, 6),
            ],
        ));
        // W3-like with two outputs, one of them a constant and one a maximum of loads.
        v.push(spec(
            3,
            3,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                op(Add, vec![0, 1]),
                op(Relu, vec![2]),
                Inst::Load { input: 2 },
                op(Add, vec![3, 4]),
                store(0, 5),
                konst(-2.5),
                store(1, 7),
                op(Maximum, vec![4, 1]),
                store(2, 9),
            ],
        ));
        v
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// Mostly ordinary values, some special ones (NaNs with payloads, zeros, infinities,
        /// subnormals, halfway cases for rounding).
        fn value(&mut self) -> f32 {
            const SPECIAL: [f32; 12] = [
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                1.0e-40,
                -1.0e-40,
                0.5,
                -2.5,
                1.0,
                -1.0,
                0.25,
            ];
            match self.below(8) {
                0 => SPECIAL[self.below(SPECIAL.len())],
                1 => f32::from_bits(0x7fc0_0000 | (self.next() as u32 & 0x3f_ffff)),
                _ => (self.below(2_000_001) as f32 - 1_000_000.0) / 250_000.0,
            }
        }
    }

    const GUARD: u32 = 0xdead_beef;

    /// Runs `entry` over `[start, end)` of a `rows x inner` iteration where input `k`'s rows
    /// step by `outer[k]` elements and its inner stride is `inner_stride[k]`; returns every
    /// output buffer (with its guard padding).
    #[allow(clippy::too_many_arguments)]
    fn run(
        entry: crate::codegen::cpu::KernelFn,
        spec: &KernelSpec,
        dims: usize,
        rows: usize,
        inner: usize,
        outer: &[usize],
        inner_stride: &[usize],
        inputs: &[Vec<f32>],
        start: usize,
        end: usize,
    ) -> Vec<Vec<u32>> {
        let nin = spec.inputs.len();
        let total = rows * inner;
        let mut outs: Vec<Vec<f32>> = (0..spec.outputs.len())
            .map(|_| vec![f32::from_bits(GUARD); total + 32])
            .collect();
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|v| v.as_ptr() as *mut u8).collect();
        ptrs.extend(outs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8));
        let shape: Vec<i64> = if dims == 2 {
            vec![rows as i64, inner as i64]
        } else {
            vec![total as i64]
        };
        let mut strides = Vec::new();
        for k in 0..nin + spec.outputs.len() {
            let (o, i) = if k < nin {
                (outer[k], inner_stride[k])
            } else {
                (inner, 1)
            };
            if dims == 2 {
                strides.extend([o as i64, i as i64]);
            } else {
                strides.push(i as i64);
            }
        }
        let params = [0.3f32.to_bits() as u64];
        let args = KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
            start: start as i64,
            end: end as i64,
            partials: std::ptr::null_mut(),
            params: params.as_ptr(),
        };
        // SAFETY: every input holds at least `(rows - 1) * outer + inner * stride` elements,
        // every output `rows * inner` (plus guard); `[start, end)` lies within the iteration.
        unsafe { entry(&args) };
        outs.iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    }

    #[test]
    fn assembled_kernels_match_cranelift_bit_for_bit() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let levels: Vec<Level> = Level::ALL.into_iter().filter(|l| host_ready(*l)).collect();
        if levels.is_empty() {
            eprintln!("skipped: this host has neither AVX2 nor AVX-512 (or is not x86-64 Unix)");
            return;
        }
        let inline = CodegenOptions { bulk_math: false };
        let mut checked = 0usize;
        for spec in programs() {
            let nin = spec.inputs.len();
            let nops = nin + spec.outputs.len();
            // (dims, class of each input): all unit; the last input broadcast along the inner
            // dim; in two dims also a row vector (unit inner, outer stride 0).
            let mut layouts: Vec<(usize, Vec<StrideClass>, bool)> = vec![
                (1, vec![StrideClass::Unit; nin], false),
                (2, vec![StrideClass::Unit; nin], false),
                (2, vec![StrideClass::Unit; nin], true),
            ];
            if nin > 1 {
                let mut c = vec![StrideClass::Unit; nin];
                c[nin - 1] = StrideClass::Zero;
                layouts.push((1, c.clone(), false));
                layouts.push((2, c, false));
            }
            for (dims, in_classes, row_vector) in layouts {
                let mut classes = in_classes.clone();
                classes.extend(vec![StrideClass::Unit; spec.outputs.len()]);
                assert_eq!(classes.len(), nops);
                let layout = LoopLayout {
                    dims,
                    reduced: 0,
                    kept_inner: false,
                    in_place: false,
                    classes,
                };
                let reference = compile_with(&spec, &layout, &inline).expect("cranelift");
                for &level in &levels {
                    let wide = imp::assemble(&spec, &layout, level)
                        .expect("assembles")
                        .unwrap_or_else(|| panic!("{spec} {layout} is eligible"));
                    assert_eq!(wide.lanes, level.lanes());
                    // SAFETY: see `finish_wide`.
                    let entry: crate::codegen::cpu::KernelFn =
                        unsafe { std::mem::transmute(wide.map.as_ptr()) };
                    let shapes: &[(usize, usize)] = if dims == 2 {
                        &[
                            (1, 1),
                            (3, 5),
                            (2, 16),
                            (4, 17),
                            (3, 31),
                            (2, 100),
                            (2, 700),
                        ]
                    } else {
                        &[(1, 1), (1, 7), (1, 8), (1, 15), (1, 16), (1, 33), (1, 1029)]
                    };
                    for &(rows, inner) in shapes {
                        let total = rows * inner;
                        let mut outer = Vec::new();
                        let mut stride = Vec::new();
                        let mut inputs = Vec::new();
                        for c in &in_classes {
                            let (o, s) = match c {
                                StrideClass::Zero => (1 + rng.below(3), 0),
                                _ if row_vector && dims == 2 => (0, 1),
                                _ => (inner + rng.below(3), 1),
                            };
                            let (o, s) = if dims == 1 { (0, s) } else { (o, s) };
                            let len = (rows.saturating_sub(1)) * o + inner.max(1) * s + 1;
                            outer.push(o);
                            stride.push(s);
                            inputs.push((0..len).map(|_| rng.value()).collect::<Vec<f32>>());
                        }
                        let mut ranges = vec![(0, total)];
                        for _ in 0..4 {
                            let a = rng.below(total + 1);
                            let b = rng.below(total + 1);
                            ranges.push((a.min(b), a.max(b)));
                        }
                        for (start, end) in ranges {
                            let args = (dims, rows, inner, &outer, &stride, &inputs, start, end);
                            let got = run(
                                entry, &spec, args.0, args.1, args.2, args.3, args.4, args.5,
                                args.6, args.7,
                            );
                            // SAFETY: `reference` was compiled for this spec and layout.
                            let want = run(
                                unsafe { reference.entry() },
                                &spec,
                                dims,
                                rows,
                                inner,
                                &outer,
                                &stride,
                                &inputs,
                                start,
                                end,
                            );
                            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                                for (j, (a, b)) in g.iter().zip(w).enumerate() {
                                    // With two NaN operands x86 returns the first one's
                                    // payload, and Cranelift may commute an add; any NaN is
                                    // the same result then (the numerics contract).
                                    let nan = |x: u32| f32::from_bits(x).is_nan();
                                    assert!(
                                        a == b || (nan(*a) && nan(*b) && *a != GUARD),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         [{start}, {end}) output {o} element {j}: \
                                         {a:#x} vs Cranelift {b:#x}"
                                    );
                                    if !(start..end).contains(&j) {
                                        assert_eq!(*a, GUARD, "wrote outside its range");
                                    }
                                }
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// Reduction kernels over `[kept, reduced]` loop dims: `sum`/`mean` of `value` (insts as
    /// in a pointwise spec, without stores).
    fn row_reduction(op: tensorplay_ir::ReduceOp, nin: usize, insts: Vec<Inst>) -> KernelSpec {
        let value = insts.len() - 1;
        KernelSpec {
            rank: 2,
            inputs: vec![DType::F32; nin],
            outputs: vec![DType::F32],
            insts,
            kind: LoopKind::Reduce {
                op,
                value,
                dims: vec![1],
                keepdim: false,
            },
        }
    }

    /// Runs a row reduction over rows `[start, end)` of `rows x inner` (input `k` with row
    /// stride `outer[k]`, inner stride `stride[k]`); returns the output buffer and the partials
    /// (when asked for), as bits.
    #[allow(clippy::too_many_arguments)]
    fn run_rows(
        entry: crate::codegen::cpu::KernelFn,
        rows: usize,
        inner: usize,
        outer: &[usize],
        stride: &[usize],
        inputs: &[Vec<f32>],
        (start, end): (usize, usize),
        partials: bool,
    ) -> (Vec<u32>, Vec<u64>) {
        let mut out = vec![f32::from_bits(GUARD); rows + 4];
        let mut parts = vec![u64::from(GUARD); rows + 4];
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|v| v.as_ptr() as *mut u8).collect();
        ptrs.push(out.as_mut_ptr() as *mut u8);
        let shape = [rows as i64, inner as i64];
        let mut strides: Vec<i64> = Vec::new();
        for (&o, &s) in outer.iter().zip(stride) {
            strides.extend([o as i64, s as i64]);
        }
        strides.extend([1, 0]);
        let params = [0.3f32.to_bits() as u64];
        let args = KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
            start: start as i64,
            end: end as i64,
            partials: if partials {
                parts.as_mut_ptr() as *mut u8
            } else {
                std::ptr::null_mut()
            },
            params: params.as_ptr(),
        };
        // SAFETY: every input holds `(rows - 1) * outer + (inner - 1) * stride + 1` elements,
        // the output and the partials `rows` (plus guard); `[start, end)` are rows.
        unsafe { entry(&args) };
        (out.iter().map(|x| x.to_bits()).collect(), parts)
    }

    #[test]
    fn assembled_row_sums_match_cranelift_bit_for_bit() {
        use ScalarOp::*;
        use tensorplay_ir::ReduceOp::{Mean, Sum};
        let levels: Vec<Level> = Level::ALL.into_iter().filter(|l| host_ready(*l)).collect();
        if levels.is_empty() {
            eprintln!("skipped: this host has neither AVX2 nor AVX-512 (or is not x86-64 Unix)");
            return;
        }
        let load = |input| Inst::Load { input };
        let param = Inst::Param {
            index: 0,
            dtype: DType::F32,
        };
        let mut programs = Vec::new();
        for op in [Sum, Mean] {
            programs.push(row_reduction(op, 1, vec![load(0)]));
            programs.push(row_reduction(
                op,
                2,
                vec![load(0), load(1), self::op(Mul, vec![0, 1])],
            ));
            programs.push(row_reduction(
                op,
                2,
                vec![
                    load(0),
                    param.clone(),
                    self::op(Add, vec![0, 1]),
                    self::op(Relu, vec![2]),
                    load(1),
                    self::op(Sub, vec![3, 4]),
                ],
            ));
            programs.push(row_reduction(
                op,
                1,
                vec![
                    load(0),
                    konst(0.0),
                    Inst::Op {
                        op: Gt,
                        args: vec![0, 1],
                        compute: DType::F32,
                        out: DType::Bool,
                    },
                    konst(-2.5),
                    self::op(Where, vec![2, 0, 3]),
                ],
            ));
        }
        let cranelift = CodegenOptions { bulk_math: false };
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut checked = 0usize;
        for spec in &programs {
            let nin = spec.inputs.len();
            let mut input_classes = vec![vec![StrideClass::Unit; nin]];
            if nin > 1 {
                let mut c = vec![StrideClass::Unit; nin];
                c[nin - 1] = StrideClass::Zero;
                input_classes.push(c);
            }
            for in_classes in input_classes {
                let mut classes = in_classes.clone();
                classes.push(StrideClass::Zero);
                let layout = LoopLayout {
                    dims: 2,
                    reduced: 1,
                    kept_inner: false,
                    in_place: false,
                    classes,
                };
                assert!(eligible(spec, &layout), "{spec} {layout}");
                let reference = compile_with(spec, &layout, &cranelift).expect("cranelift");
                for &level in &levels {
                    let wide = imp::assemble(spec, &layout, level)
                        .expect("assembles")
                        .unwrap_or_else(|| panic!("{spec} {layout} assembles"));
                    // SAFETY: see `finish_wide`.
                    let entry: crate::codegen::cpu::KernelFn =
                        unsafe { std::mem::transmute(wide.map.as_ptr()) };
                    for &(rows, inner) in &[
                        (1, 0),
                        (3, 1),
                        (2, 3),
                        (3, 4),
                        (2, 7),
                        (2, 31),
                        (3, 32),
                        (2, 33),
                        (2, 47),
                        (4, 100),
                        (1, 4095),
                        (2, 4096),
                        (1, 4097),
                        (2, 2 * 4096 + 37),
                    ] {
                        let mut outer = Vec::new();
                        let mut stride = Vec::new();
                        let mut inputs = Vec::new();
                        for c in &in_classes {
                            let (o, s) = match c {
                                StrideClass::Zero => (1 + rng.below(2), 0),
                                _ => (inner + rng.below(3), 1),
                            };
                            let len = rows * o + inner * s + 1;
                            outer.push(o);
                            stride.push(s);
                            let values = (0..len).map(|_| match rng.below(500) {
                                0 => rng.value(),
                                _ => (rng.below(2_000_001) as f32 - 1e6) / 250_000.0,
                            });
                            inputs.push(values.collect::<Vec<f32>>());
                        }
                        let a = rng.below(rows + 1);
                        let b = rng.below(rows + 1);
                        for range in [(0, rows), (a.min(b), a.max(b))] {
                            for partials in [false, true] {
                                let args = (rows, inner, &outer, &stride, &inputs, range);
                                let got = run_rows(
                                    entry, args.0, args.1, args.2, args.3, args.4, args.5, partials,
                                );
                                // SAFETY: `reference` was compiled for this spec and layout.
                                let want = run_rows(
                                    unsafe { reference.entry() },
                                    rows,
                                    inner,
                                    &outer,
                                    &stride,
                                    &inputs,
                                    range,
                                    partials,
                                );
                                let nan = |x: u32| f32::from_bits(x).is_nan();
                                let nan64 = |x: u64| f64::from_bits(x).is_nan();
                                for (j, (g, w)) in got.0.iter().zip(&want.0).enumerate() {
                                    assert!(
                                        g == w || (nan(*g) && nan(*w)),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         {range:?} partials {partials} row {j}: {g:#x} vs \
                                         Cranelift {w:#x}"
                                    );
                                }
                                for (j, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
                                    assert!(
                                        g == w || (nan64(*g) && nan64(*w)),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         {range:?} partial {j}: {g:#x} vs Cranelift {w:#x}"
                                    );
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }

    #[test]
    fn in_place_kernels_read_before_they_write() {
        // p = p - 0.5 * g, with p both input 0 and output 0.
        let spec = spec(
            2,
            1,
            vec![
                Inst::Load { input: 1 },
                konst(0.5),
                op(ScalarOp::Mul, vec![0, 1]),
                Inst::Load { input: 0 },
                op(ScalarOp::Sub, vec![3, 2]),
                store(0, 4),
            ],
        );
        let layout = LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: true,
            classes: vec![StrideClass::Unit; 3],
        };
        for level in Level::ALL.into_iter().filter(|l| host_ready(*l)) {
            let wide = imp::assemble(&spec, &layout, level).unwrap().unwrap();
            // SAFETY: see `finish_wide`.
            let entry: crate::codegen::cpu::KernelFn =
                unsafe { std::mem::transmute(wide.map.as_ptr()) };
            let n = 37;
            let mut p: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let g: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
            let ptrs = [
                p.as_mut_ptr() as *mut u8,
                g.as_ptr() as *mut u8,
                p.as_mut_ptr() as *mut u8,
            ];
            let shape = [n as i64];
            let strides = [1i64, 1, 1];
            let args = KernelArgs {
                ptrs: ptrs.as_ptr(),
                shape: shape.as_ptr(),
                strides: strides.as_ptr(),
                start: 0,
                end: n as i64,
                partials: std::ptr::null_mut(),
                params: std::ptr::null(),
            };
            // SAFETY: the three pointers cover 37 elements.
            unsafe { entry(&args) };
            assert!(p.iter().all(|&v| v == 0.0), "{level:?}: {p:?}");
        }
    }

    #[test]
    fn staged_in_place_kernels_stay_with_cranelift() {
        // p = exp(p): stores would have to wait for the last stage.
        let spec = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Exp, vec![0]),
                store(0, 1),
            ],
        );
        let mut layout = LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: true,
            classes: vec![StrideClass::Unit; 2],
        };
        for level in Level::ALL.into_iter().filter(|l| host_ready(*l)) {
            assert!(imp::assemble(&spec, &layout, level).unwrap().is_none());
            layout.in_place = false;
            assert!(imp::assemble(&spec, &layout, level).unwrap().is_some());
            layout.in_place = true;
        }
    }

    #[test]
    fn eligibility_names_what_stays_with_cranelift() {
        let layout = |classes: Vec<StrideClass>| LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: false,
            classes,
        };
        let unit2 = layout(vec![StrideClass::Unit; 2]);
        let p = programs();
        assert!(p.iter().all(|s| eligible(
            s,
            &layout(vec![StrideClass::Unit; s.inputs.len() + s.outputs.len()])
        )));
        // A libm function (no bulk kernel), a cast, a strided operand, f64 and three loop dims
        // are not.
        let libm = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Libm(tensorplay_ir::LibmFn::ALL[0]), vec![0]),
                store(0, 1),
            ],
        );
        assert!(!eligible(&libm, &unit2));
        let cast = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Cast {
                    arg: 0,
                    to: DType::F32,
                },
                store(0, 1),
            ],
        );
        assert!(!eligible(&cast, &unit2));
        assert!(!eligible(
            &p[0],
            &layout(vec![StrideClass::Strided, StrideClass::Unit])
        ));
        assert!(!eligible(
            &p[0],
            &layout(vec![StrideClass::Unit, StrideClass::Zero])
        ));
        let mut f64_spec = p[0].clone();
        f64_spec.inputs = vec![DType::F64];
        assert!(!eligible(&f64_spec, &unit2));
        let mut deep = unit2.clone();
        deep.dims = 3;
        assert!(!eligible(&p[0], &deep));
        // Reductions: f32 sums and means of rows computed inline; not other reductions, not
        // column mode, not a value needing a bulk kernel, not without a kept loop dim.
        let rows = LoopLayout {
            dims: 2,
            reduced: 1,
            kept_inner: false,
            in_place: false,
            classes: vec![StrideClass::Unit, StrideClass::Zero],
        };
        let sum = row_reduction(
            tensorplay_ir::ReduceOp::Sum,
            1,
            vec![Inst::Load { input: 0 }],
        );
        assert!(eligible(&sum, &rows));
        let mut amax = sum.clone();
        amax.kind = LoopKind::Reduce {
            op: tensorplay_ir::ReduceOp::Amax,
            value: 0,
            dims: vec![1],
            keepdim: false,
        };
        assert!(!eligible(&amax, &rows));
        let columns = LoopLayout {
            kept_inner: true,
            dims: 3,
            ..rows.clone()
        };
        assert!(!eligible(&sum, &columns));
        let exp = row_reduction(
            tensorplay_ir::ReduceOp::Sum,
            1,
            vec![Inst::Load { input: 0 }, op(ScalarOp::Exp, vec![0])],
        );
        assert!(!eligible(&exp, &rows));
        let one_dim = LoopLayout {
            dims: 1,
            ..rows.clone()
        };
        assert!(!eligible(&sum, &one_dim));
    }
}
