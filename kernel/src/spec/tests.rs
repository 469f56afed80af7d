//! The text form round trip: hand-written specs for every instruction and loop kind, every scalar
//! op's name, parse errors with their columns, layouts, and a property test over generated valid
//! specs (print → parse → equal, and the reprint is identical).

use proptest::prelude::*;
use tensorplay_ir::{DType, LibmFn, LibmFn2, MathFn, ReduceOp, ScalarOp};

use super::parse::PLAIN_OPS;
use super::rules::op_accepts;
use super::*;

/// print → parse → equal (bits of floats included) → same text.
fn round_trip(k: &KernelSpec) {
    let text = k.to_string();
    let parsed = KernelSpec::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&parsed, k, "{text}");
    assert_eq!(parsed.to_string(), text);
    assert_eq!(text.parse::<KernelSpec>().unwrap(), parsed);
}

fn pointwise(inputs: Vec<DType>, outputs: Vec<DType>, insts: Vec<Inst>) -> KernelSpec {
    KernelSpec {
        rank: 1,
        inputs,
        outputs,
        insts,
        kind: LoopKind::Pointwise,
    }
}

fn op(op: ScalarOp, args: Vec<ValueId>, compute: DType, out: DType) -> Inst {
    Inst::Op {
        op,
        args,
        compute,
        out,
    }
}

const F32: DType = DType::F32;

#[test]
fn every_instruction_kind_round_trips() {
    use Inst::*;
    let k = pointwise(
        vec![F32, DType::I32],
        vec![F32, DType::Bool, DType::F16],
        vec![
            Load { input: 0 },
            Load { input: 1 },
            Param {
                index: 0,
                dtype: F32,
            },
            Const {
                value: Lit::Float(-0.0),
                dtype: F32,
            },
            Const {
                value: Lit::Int(-7),
                dtype: DType::I32,
            },
            Const {
                value: Lit::Bool(true),
                dtype: DType::Bool,
            },
            Cast { arg: 1, to: F32 },
            op(ScalarOp::Add, vec![0, 6], F32, F32),
            op(ScalarOp::Lt, vec![1, 4], DType::I32, DType::Bool),
            op(ScalarOp::LogicalAnd, vec![8, 5], DType::Bool, DType::Bool),
            op(ScalarOp::Where, vec![9, 7, 2], F32, F32),
            Store {
                output: 0,
                value: 10,
            },
            Store {
                output: 1,
                value: 9,
            },
            Cast {
                arg: 10,
                to: DType::F16,
            },
            Store {
                output: 2,
                value: 13,
            },
        ],
    );
    k.validate().unwrap();
    round_trip(&k);
    assert!(k.to_string().contains("%8 = lt(%1, %4) in i32 : bool\n"));
}

#[test]
fn float_literals_keep_their_bits() {
    let values = [
        0.0,
        -0.0,
        1.0,
        0.1,
        -2.5e-7,
        1e16,
        1.5e300,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::from_bits(0xfff4_0000_dead_beef),
        f32::NAN as f64,
        (f32::MAX as f64) * 2.0,
    ];
    for v in values {
        let k = pointwise(
            vec![],
            vec![DType::F64],
            vec![
                Inst::Const {
                    value: Lit::Float(v),
                    dtype: DType::F64,
                },
                Inst::Store {
                    output: 0,
                    value: 0,
                },
            ],
        );
        round_trip(&k);
    }
    for v in [i64::MIN, -1, 0, i64::MAX] {
        let k = pointwise(
            vec![],
            vec![DType::I64],
            vec![
                Inst::Const {
                    value: Lit::Int(v),
                    dtype: DType::I64,
                },
                Inst::Store {
                    output: 0,
                    value: 0,
                },
            ],
        );
        round_trip(&k);
    }
}

#[test]
fn payload_ops_round_trip() {
    let bounds = [
        None,
        Some(0.0),
        Some(-0.0),
        Some(-1.5),
        Some(f64::NAN),
        Some(f64::INFINITY),
    ];
    let mut ops = Vec::new();
    for min in bounds {
        for max in bounds {
            ops.push(ScalarOp::Clamp { min, max });
        }
    }
    for nan in [0.0, -f64::NAN, 3.25] {
        for posinf in bounds {
            ops.push(ScalarOp::NanToNum {
                nan,
                posinf,
                neginf: posinf.map(|v| -v),
            });
        }
    }
    for o in ops {
        let k = pointwise(
            vec![F32],
            vec![F32],
            vec![
                Inst::Load { input: 0 },
                op(o, vec![0], F32, F32),
                Inst::Store {
                    output: 0,
                    value: 1,
                },
            ],
        );
        k.validate().unwrap();
        round_trip(&k);
    }
}

/// Every scalar op's name reads back as that op (validity aside: `cast(%0)` is the scalar op,
/// which no valid spec holds).
#[test]
fn every_scalar_op_name_round_trips() {
    let all = PLAIN_OPS
        .into_iter()
        .chain(LibmFn::ALL.map(ScalarOp::Libm))
        .chain(LibmFn2::ALL.map(ScalarOp::Libm2));
    for o in all {
        let args = (0..o.arity()).collect();
        let k = pointwise(
            vec![F32; 3],
            vec![],
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                Inst::Load { input: 2 },
                op(o, args, F32, F32),
            ],
        );
        round_trip(&k);
    }
}

/// `PLAIN_OPS` lists every scalar op without a payload: a new variant fails this match until it
/// is sorted in (and then the assertion checks the list).
#[test]
fn plain_ops_are_complete() {
    use ScalarOp::*;
    let mut seen = 0;
    for o in PLAIN_OPS {
        match o {
            Neg | Abs | Sqrt | Rsqrt | Reciprocal | Relu | Floor | Ceil | Round | Sign | Square
            | LogicalNot | Cast | Add | Sub | Mul | Div | Pow | Maximum | Minimum | Eq | Ne
            | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr | LogicalXor | Where | BitAnd | BitOr
            | BitXor | BitNot | Shl | Shr => seen += 1,
            Math(_) | Clamp { .. } | Libm(_) | Libm2(_) | NanToNum { .. } => {
                panic!("{o:?} has a payload")
            }
        }
    }
    assert_eq!(seen, 36);
    let names: std::collections::HashSet<String> = PLAIN_OPS
        .iter()
        .map(print::op_name)
        .chain(MathFn::ALL.map(|f| print::op_name(&Math(f))))
        .chain(LibmFn::ALL.map(|f| f.name().to_string()))
        .chain(LibmFn2::ALL.map(|f| f.name().to_string()))
        .collect();
    let total = 36 + MathFn::ALL.len() + LibmFn::ALL.len() + LibmFn2::ALL.len();
    assert_eq!(names.len(), total, "every op has its own name");
}

#[test]
fn every_loop_kind_round_trips() {
    let body = |d: DType| vec![Inst::Load { input: 0 }, Inst::Cast { arg: 0, to: d }];
    let mut kinds = vec![];
    for op in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Prod,
        ReduceOp::Amax,
        ReduceOp::Amin,
    ] {
        for (dims, keepdim) in [(vec![], false), (vec![1], true), (vec![0, 2], false)] {
            kinds.push((
                LoopKind::Reduce {
                    op,
                    value: 1,
                    dims,
                    keepdim,
                },
                DType::F64,
            ));
        }
    }
    kinds.push((
        LoopKind::Reduce {
            op: ReduceOp::Sum,
            value: 1,
            dims: vec![2],
            keepdim: false,
        },
        DType::I64,
    ));
    for log in [false, true] {
        kinds.push((LoopKind::Softmax { value: 1, log }, DType::F64));
    }
    for (kind, out) in kinds {
        let k = KernelSpec {
            rank: 3,
            inputs: vec![DType::I32],
            outputs: vec![out],
            insts: body(if out == DType::I64 {
                DType::I32
            } else {
                DType::F64
            }),
            kind,
        };
        k.validate().unwrap();
        round_trip(&k);
    }
    // Rank 0, no inputs, no outputs.
    round_trip(&KernelSpec {
        rank: 0,
        inputs: vec![],
        outputs: vec![],
        insts: vec![],
        kind: LoopKind::Pointwise,
    });
}

/// Invalid specs print and parse back too (a load of a missing input prints its dtype as `?`).
#[test]
fn invalid_specs_round_trip() {
    let k = pointwise(
        vec![F32],
        vec![F32],
        vec![
            Inst::Load { input: 3 },
            op(ScalarOp::Exp, vec![5], DType::I32, F32),
            Inst::Store {
                output: 2,
                value: 0,
            },
        ],
    );
    assert!(k.validate().is_err());
    assert!(k.to_string().contains("%0 = load in3 : ?"));
    round_trip(&k);
}

fn parse_err(text: &str) -> String {
    KernelSpec::parse(text)
        .expect_err("the text should not parse")
        .to_string()
}

#[test]
fn parse_errors_name_the_line_column_and_what_was_expected() {
    let head = "kernel pointwise rank=1 inputs=[f32] outputs=[f32]\n";
    let cases: &[(&str, &str)] = &[
        ("", "is empty"),
        (
            "kernel rowwise rank=1 inputs=[] outputs=[]",
            "line 1, column 8: expected a loop kind",
        ),
        (
            "kernel pointwise rank=1 inputs=[f31] outputs=[]",
            "line 1, column 33: expected a dtype",
        ),
        (
            "kernel pointwise rank=1 inputs=[f32 outputs=[]",
            "line 1, column 37: expected `,` or `]`",
        ),
        (
            "kernel pointwise rank=x inputs=[] outputs=[]",
            "line 1, column 23: expected a rank",
        ),
        (
            "kernel reduce total(%0) dims=[] keepdim=false rank=1 inputs=[] outputs=[]",
            "line 1, column 15: expected a reduction",
        ),
        (
            "kernel reduce sum(%0) dims=[] keepdim=maybe rank=1 inputs=[] outputs=[]",
            "column 39: expected `true` or `false`",
        ),
        (
            "kernel pointwise rank=1 inputs=[] outputs=[] extra",
            "column 46: expected the end of the line",
        ),
        (
            "\n\n  %0 = load in0 : f32",
            "line 3, column 3: expected `kernel`",
        ),
    ];
    for (text, want) in cases {
        let e = parse_err(text);
        assert!(e.contains(want), "{text:?}: {e}");
    }
    let body: &[(&str, &str)] = &[
        ("  %1 = load in0 : f32", "line 2, column 3: expected `%0`"),
        (
            "  %0 = lod in0 : f32",
            "line 2, column 8: expected an instruction",
        ),
        (
            "  %0 = load in0 : f64",
            "line 2, column 19: expected `f32` (the dtype of input 0)",
        ),
        ("  %0 = load in1 : f32", "line 2, column 19: expected `?`"),
        (
            "  %0 = const 1.0.0 : f32",
            "line 2, column 14: expected a float",
        ),
        (
            "  %0 = const yes : bool",
            "line 2, column 14: expected a literal",
        ),
        (
            "  %0 = const nan:0x3ff0000000000000 : f64",
            "expected a NaN's 16 hex digits",
        ),
        (
            "  %0 = frobnicate(%0) : f32",
            "line 2, column 8: expected an instruction",
        ),
        (
            "  %0 = clamp[1.0 none](%0) : f32",
            "line 2, column 18: expected `,`",
        ),
        (
            "  %0 = exp(%0 %0) : f32",
            "line 2, column 15: expected `,` or `)`",
        ),
        (
            "  %0 = exp(0) : f32",
            "line 2, column 12: expected a value `%N`",
        ),
        (
            "  %0 = exp(%0) in : f32",
            "line 2, column 19: expected a dtype",
        ),
        ("  store out0 %0", "line 2, column 14: expected `,`"),
        (
            "  store out0, % 0",
            "line 2, column 16: expected a value number right after `%`",
        ),
    ];
    for (line, want) in body {
        let e = parse_err(&format!("{head}{line}\n"));
        assert!(e.contains(want), "{line:?}: {e}");
    }
    // The caret sits under the column.
    let e = parse_err(&format!("{head}  %0 = lod in0 : f32\n"));
    assert!(
        e.ends_with("\n  |   %0 = lod in0 : f32\n  |        ^"),
        "{e}"
    );
}

#[test]
fn layouts_round_trip() {
    use StrideClass::*;
    for kept_inner in [false, true] {
        for in_place in [false, true] {
            for classes in [vec![], vec![Unit], vec![Zero, Strided, Unit]] {
                let l = LoopLayout {
                    dims: 3,
                    reduced: 1,
                    kept_inner,
                    in_place,
                    classes,
                };
                let text = l.to_string();
                assert_eq!(LoopLayout::parse(&text).unwrap(), l, "{text}");
                assert_eq!(text.parse::<LoopLayout>().unwrap(), l);
            }
        }
    }
    for (text, want) in [
        (
            "dims=1 reduced=0 classes=[unit, diagonal]",
            "column 33: expected a stride class",
        ),
        (
            "dims=1 reduced=0 in_place kept_inner classes=[]",
            "column 27: expected `classes=`",
        ),
        (
            "dims=1 reduced=0 classes=[unit] x",
            "column 33: expected the end of the line",
        ),
        (
            "dims= reduced=0 classes=[]",
            "column 7: expected a number of loop dims",
        ),
    ] {
        let e = LoopLayout::parse(text).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

// ---- property test over generated valid specs ---------------------------------------------

/// One generation step; the builder reads each field modulo what it needs.
#[derive(Debug, Clone)]
struct Step {
    what: u8,
    a: u16,
    b: u16,
    bits: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (any::<u8>(), any::<u16>(), any::<u16>(), any::<u64>()).prop_map(|(what, a, b, bits)| Step {
        what,
        a,
        b,
        bits,
    })
}

/// A float: one of the awkward values, or arbitrary bits.
fn float_of(bits: u64) -> f64 {
    const SPECIAL: [f64; 12] = [
        0.0,
        -0.0,
        1.0,
        0.1,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        1e16,
        1e-5,
    ];
    match bits % 4 {
        0 => SPECIAL[(bits >> 2) as usize % SPECIAL.len()],
        1 => -f64::NAN,
        _ => f64::from_bits(bits.rotate_left(17)),
    }
}

fn opt_float_of(bits: u64) -> Option<f64> {
    (!bits.is_multiple_of(3)).then(|| float_of(bits / 3))
}

/// Every scalar op, payloads from `bits`.
fn scalar_op_of(k: u16, bits: u64) -> ScalarOp {
    let n = PLAIN_OPS.len() + MathFn::ALL.len() + LibmFn::ALL.len() + LibmFn2::ALL.len() + 2;
    let k = k as usize % n;
    if let Some(&o) = PLAIN_OPS.get(k) {
        return o;
    }
    let k = k - PLAIN_OPS.len();
    if let Some(&f) = MathFn::ALL.get(k) {
        return ScalarOp::Math(f);
    }
    let k = k - MathFn::ALL.len();
    if let Some(&f) = LibmFn::ALL.get(k) {
        return ScalarOp::Libm(f);
    }
    let k = k - LibmFn::ALL.len();
    if let Some(&f) = LibmFn2::ALL.get(k) {
        return ScalarOp::Libm2(f);
    }
    if k == LibmFn2::ALL.len() {
        ScalarOp::Clamp {
            min: opt_float_of(bits),
            max: opt_float_of(bits.rotate_left(29)),
        }
    } else {
        ScalarOp::NanToNum {
            nan: float_of(bits),
            posinf: opt_float_of(bits.rotate_left(13)),
            neginf: opt_float_of(bits.rotate_left(41)),
        }
    }
}

/// Builds a valid spec from the steps.
struct Builder {
    spec: KernelSpec,
    params: usize,
}

impl Builder {
    fn push(&mut self, inst: Inst) -> ValueId {
        self.spec.insts.push(inst);
        self.spec.insts.len() - 1
    }

    /// A value of `dtype` (picked by `k` among the existing ones), made by a cast or a constant
    /// when there is none.
    fn value_of(&mut self, dtype: DType, k: u16) -> ValueId {
        let have: Vec<ValueId> = (0..self.spec.insts.len())
            .filter(|&v| self.spec.value_dtype(v) == Some(dtype))
            .collect();
        if !have.is_empty() {
            return have[k as usize % have.len()];
        }
        match self.any_value(k) {
            Some(v) => self.push(Inst::Cast { arg: v, to: dtype }),
            None => {
                let value = Lit::Int(k as i64).convert(dtype);
                self.push(Inst::Const { value, dtype })
            }
        }
    }

    fn any_value(&self, k: u16) -> Option<ValueId> {
        let have: Vec<ValueId> = (0..self.spec.insts.len())
            .filter(|&v| self.spec.value_dtype(v).is_some())
            .collect();
        (!have.is_empty()).then(|| have[k as usize % have.len()])
    }

    fn step(&mut self, s: &Step) {
        let dtype = DType::ALL[s.b as usize % DType::ALL.len()];
        match s.what % 6 {
            0 if !self.spec.inputs.is_empty() => {
                let input = s.a as usize % self.spec.inputs.len();
                self.push(Inst::Load { input });
            }
            1 => {
                let value = match dtype {
                    d if d.is_float() => Lit::Float(float_of(s.bits)),
                    DType::Bool => Lit::Bool(s.bits & 1 == 1),
                    _ => Lit::Int(s.bits as i64).convert(dtype),
                };
                self.push(Inst::Const { value, dtype });
            }
            2 => {
                self.push(Inst::Param {
                    index: self.params,
                    dtype,
                });
                self.params += 1;
            }
            3 => {
                if let Some(arg) = self.any_value(s.a) {
                    self.push(Inst::Cast { arg, to: dtype });
                }
            }
            _ => self.op(s, dtype),
        }
    }

    fn op(&mut self, s: &Step, dtype: DType) {
        let o = scalar_op_of(s.a, s.bits);
        // The first accepted dtype from `dtype` on.
        let start = DType::ALL.iter().position(|&d| d == dtype).unwrap();
        let Some(compute) = (0..DType::ALL.len())
            .map(|i| DType::ALL[(start + i) % DType::ALL.len()])
            .find(|&d| op_accepts(o, d))
        else {
            return;
        };
        let args = (0..o.arity())
            .map(|k| {
                let want = if o == ScalarOp::Where && k == 0 {
                    DType::Bool
                } else {
                    compute
                };
                self.value_of(want, s.b.wrapping_add(k as u16 * 7))
            })
            .collect();
        let out = if o.is_predicate() {
            DType::Bool
        } else {
            compute
        };
        self.push(op(o, args, compute, out));
    }

    /// Ends the spec with a loop kind chosen by `k` (stores for pointwise kernels).
    fn finish(mut self, k: u16, bits: u64) -> KernelSpec {
        let value = self.any_value(k).unwrap_or_else(|| self.value_of(F32, k));
        let rank = self.spec.rank;
        match k % 4 {
            0 | 1 => {
                for o in 0..=(bits % 3) as usize {
                    let v = self.any_value(k.wrapping_add(o as u16 * 11)).unwrap();
                    let d = self.spec.value_dtype(v).unwrap();
                    self.spec.outputs.push(d);
                    self.push(Inst::Store {
                        output: o,
                        value: v,
                    });
                }
            }
            2 => {
                let d = self.spec.value_dtype(value).unwrap();
                let op = [
                    ReduceOp::Sum,
                    ReduceOp::Mean,
                    ReduceOp::Prod,
                    ReduceOp::Amax,
                    ReduceOp::Amin,
                ][(bits % 5) as usize];
                let op = if reduce_out_dtype(op, d).is_ok() {
                    op
                } else {
                    ReduceOp::Sum
                };
                let dims = (0..rank).filter(|d| bits >> (8 + d) & 1 == 1).collect();
                self.spec.outputs = vec![reduce_out_dtype(op, d).unwrap()];
                self.spec.kind = LoopKind::Reduce {
                    op,
                    value,
                    dims,
                    keepdim: bits >> 20 & 1 == 1,
                };
            }
            _ => {
                let d = self.spec.value_dtype(value).unwrap();
                let d = if d.is_float() { d } else { F32 };
                let value = self.value_of(d, k);
                self.spec.outputs = vec![d];
                self.spec.kind = LoopKind::Softmax {
                    value,
                    log: bits & 1 == 1,
                };
            }
        }
        self.spec
    }
}

fn spec_strategy() -> impl Strategy<Value = KernelSpec> {
    (
        0..=4usize,
        prop::collection::vec(0..DType::ALL.len(), 0..4),
        prop::collection::vec(step(), 0..24),
        any::<u16>(),
        any::<u64>(),
    )
        .prop_map(|(rank, inputs, steps, k, bits)| {
            let mut b = Builder {
                spec: KernelSpec {
                    rank,
                    inputs: inputs.into_iter().map(|i| DType::ALL[i]).collect(),
                    outputs: vec![],
                    insts: vec![],
                    kind: LoopKind::Pointwise,
                },
                params: 0,
            };
            for s in &steps {
                b.step(s);
            }
            b.finish(k, bits)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn generated_specs_round_trip(k in spec_strategy()) {
        prop_assert!(k.validate().is_ok(), "the generator made an invalid spec: {:?}\n{k}", k.validate());
        let text = k.to_string();
        let parsed = KernelSpec::parse(&text);
        prop_assert!(parsed.is_ok(), "{:?}\n{text}", parsed.err());
        let parsed = parsed.unwrap();
        prop_assert_eq!(&parsed, &k, "{}", text);
        prop_assert_eq!(parsed.to_string(), text);
    }

    #[test]
    fn generated_layouts_round_trip(
        dims in 1..8usize,
        reduced in 0..3usize,
        kept_inner: bool,
        in_place: bool,
        classes in prop::collection::vec(0..3usize, 0..6),
    ) {
        let l = LoopLayout {
            dims,
            reduced,
            kept_inner,
            in_place,
            classes: classes
                .into_iter()
                .map(|c| [StrideClass::Unit, StrideClass::Zero, StrideClass::Strided][c])
                .collect(),
        };
        prop_assert_eq!(LoopLayout::parse(&l.to_string()).unwrap(), l);
    }
}

/// The generator reaches every loop kind, payload ops and float constants, in bodies of some
/// length.
#[test]
fn generator_covers_the_spec_space() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = spec_strategy();
    let (mut reduce, mut softmax, mut pointwise, mut payload, mut nan_consts, mut insts) =
        (0, 0, 0, 0, 0, 0);
    for _ in 0..500 {
        let k = strategy.new_tree(&mut runner).unwrap().current();
        match k.kind {
            LoopKind::Pointwise => pointwise += 1,
            LoopKind::Reduce { .. } => reduce += 1,
            LoopKind::Softmax { .. } => softmax += 1,
        }
        insts += k.insts.len();
        for i in &k.insts {
            match i {
                Inst::Op {
                    op: ScalarOp::Clamp { .. } | ScalarOp::NanToNum { .. },
                    ..
                } => payload += 1,
                Inst::Const {
                    value: Lit::Float(v),
                    ..
                } if v.is_nan() => nan_consts += 1,
                _ => {}
            }
        }
    }
    assert!(
        reduce > 50 && softmax > 50 && pointwise > 100,
        "{reduce} {softmax} {pointwise}"
    );
    assert!(payload > 20 && nan_consts > 20, "{payload} {nan_consts}");
    assert!(insts > 500 * 8, "{insts}");
}

/// A tiny deterministic generator (xorshift64*) for the mutation test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Pieces a mutation inserts: the grammar's punctuation and words, numbers that overflow,
/// non-ASCII and odd whitespace.
#[rustfmt::skip]
const PIECES: &[&str] = &[
    "%", "%0", "%99999999999999999999999", "(", ")", "[", "]", ",", ":", "=", " ", "\n", "\t",
    "in", "in0", "out0", "load", "store", "const", "param", "cast", "kernel", "pointwise",
    "reduce", "sum", "amax", "softmax", "log_softmax", "dims=", "keepdim=", "rank=", "inputs=",
    "outputs=", "nan", "-nan", "nan:0x", "nan:0xfff8000000000001", "inf", "-", ".", "e", "e+",
    "1.5e-07", "-0.0", "18446744073709551616", "?", "none", "clamp[", "nan_to_num[", "f16",
    "bool", "é", "∞", "\u{3000}", "\u{0}", "\r",
];

/// One random edit of `text` (at char boundaries): delete, insert, replace a span, duplicate,
/// drop or swap lines, or truncate.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let at = bounds[rng.below(bounds.len())];
    let to = bounds[rng.below(bounds.len())].max(at);
    let piece = PIECES[rng.below(PIECES.len())];
    let mut lines: Vec<&str> = text.lines().collect();
    match rng.below(7) {
        0 => format!("{}{}", &text[..at], &text[to..]),
        1 => format!("{}{piece}{}", &text[..at], &text[at..]),
        2 => format!("{}{piece}{}", &text[..at], &text[to..]),
        3 => format!("{}{}", &text[..to], &text[at..]),
        4 if !lines.is_empty() => {
            lines.remove(rng.below(lines.len()));
            lines.join("\n")
        }
        5 if lines.len() > 1 => {
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            lines.swap(a, b);
            lines.join("\n")
        }
        _ => text[..at].to_string(),
    }
}

/// Arbitrary text never panics the parsers: every mutation of valid spec and layout texts (a
/// few edits each) either parses — and then prints as text that parses back to the same spec,
/// and validates without panicking — or is an error naming a line and a column.
#[test]
fn mutated_text_never_panics() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = spec_strategy();
    let seeds: Vec<String> = (0..200)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .to_string()
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut parsed, mut rejected) = (0, 0);
    for round in 0..40_000 {
        let seed = &seeds[round % seeds.len()];
        let mut text = seed.clone();
        for _ in 0..1 + rng.below(4) {
            text = mutate(&mut rng, &text);
        }
        let result = std::panic::catch_unwind(|| KernelSpec::parse(&text));
        let Ok(result) = result else {
            panic!("KernelSpec::parse panicked on:\n{text:?}");
        };
        match result {
            Ok(k) => {
                parsed += 1;
                let _ = k.validate();
                let printed = k.to_string();
                let again = KernelSpec::parse(&printed)
                    .unwrap_or_else(|e| panic!("{e}\nfrom {text:?}\nprinted {printed:?}"));
                assert_eq!(again, k, "{text:?}");
                assert_eq!(again.to_string(), printed);
            }
            Err(e) => {
                rejected += 1;
                let msg = e.to_string();
                assert!(
                    msg.contains("line ") && msg.contains("column ") || msg.contains("is empty"),
                    "{msg}\nfor {text:?}"
                );
            }
        }
    }
    assert!(parsed > 1000 && rejected > 10_000, "{parsed} {rejected}");
    let layout = "dims=3 reduced=1 kept_inner in_place classes=[unit, zero, strided]";
    for _ in 0..5_000 {
        let mut text = layout.to_string();
        for _ in 0..1 + rng.below(3) {
            text = mutate(&mut rng, &text);
        }
        let result = std::panic::catch_unwind(|| LoopLayout::parse(&text));
        let Ok(result) = result else {
            panic!("LoopLayout::parse panicked on:\n{text:?}");
        };
        match result {
            Ok(l) => assert_eq!(LoopLayout::parse(&l.to_string()).unwrap(), l),
            Err(e) => assert!(e.to_string().contains("column "), "{e}"),
        }
    }
}

/// Different scalar ops are different instructions with different hashes (the kernel cache
/// keys on `Inst`), whatever payload tells them apart.
#[test]
fn distinct_ops_are_distinct_instructions() {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, RandomState};
    let ops: Vec<ScalarOp> = PLAIN_OPS
        .into_iter()
        .chain(MathFn::ALL.map(ScalarOp::Math))
        .chain(LibmFn::ALL.map(ScalarOp::Libm))
        .chain(LibmFn2::ALL.map(ScalarOp::Libm2))
        .collect();
    let inst = |op: ScalarOp| Inst::Op {
        op,
        args: vec![0],
        compute: DType::F32,
        out: DType::F32,
    };
    let state = RandomState::new();
    let hashes: HashSet<u64> = ops.iter().map(|&o| state.hash_one(inst(o))).collect();
    assert_eq!(hashes.len(), ops.len(), "hash collisions between ops");
    for (i, &a) in ops.iter().enumerate() {
        for (j, &b) in ops.iter().enumerate() {
            assert_eq!(inst(a) == inst(b), i == j, "{a} vs {b}");
        }
    }
}
