//! Bulk math kernels (`codegen::cpu::math::bulk`) against the inline CLIF
//! math: for every op and every level the host supports, the bulk result must
//! have the same bits as the JIT-compiled inline code (`f32x4` body, scalar
//! tail, FMA form) for ≥ 1M inputs per op (specials, runs of consecutive bit
//! patterns at the edges, every k-th bit pattern, a dense sweep of the
//! interesting region), for every length 0..70, unaligned pointers and in
//! place use; and be within 4 ulp of the f64 reference (0.5 ulp for sqrt and
//! div). A NaN must stay a NaN; its payload and sign are free.
//!
//! On a host without AVX2+FMA every test passes after printing a note.
//! `TP_ULP_SAMPLES` sets the number of inputs per op (default 1_200_000).

mod common;

use common::math::{
    Kernel, MAX_ULP, Rng, activation64, all_pairs, base_specials, isa, pow_pair, same, samples,
    sweep_inputs, ulp_err,
};
use cranelift_codegen::ir::InstBuilder;
use cranelift_codegen::ir::types::{F32, F32X4};
use tensorplay_compiler::codegen::cpu::math::bulk::{
    self, BinaryFn, BulkOp, Level, UnaryFn, env_enables,
};
use tensorplay_compiler::codegen::cpu::math::{MathFn, emit_pow, emit_unary, isa_has_fma};

/// The ops with bit-identical bulk kernels.
const UNARY_OPS: [BulkOp; 11] = [
    BulkOp::Math(MathFn::Exp),
    BulkOp::Math(MathFn::Log),
    BulkOp::Math(MathFn::Tanh),
    BulkOp::Math(MathFn::Sigmoid),
    BulkOp::Math(MathFn::Erf),
    BulkOp::Math(MathFn::GeluErf),
    BulkOp::Math(MathFn::GeluTanh),
    BulkOp::Math(MathFn::Silu),
    BulkOp::Math(MathFn::Log1p),
    BulkOp::Math(MathFn::Expm1),
    BulkOp::Sqrt,
];
const BINARY_OPS: [BulkOp; 2] = [BulkOp::Div, BulkOp::Pow];

/// The levels to test; prints a note when there are none.
fn levels() -> Vec<Level> {
    let v: Vec<Level> = Level::ALL
        .into_iter()
        .filter(|l| l.is_supported())
        .collect();
    if v.is_empty() {
        eprintln!("note: host has neither AVX-512 nor AVX2+FMA; bulk kernels not tested");
    }
    v
}

// ---------------------------------------------------------------------------
// The inline reference: the test's own JIT'd loop (`common::math::Kernel`,
// an f32x4 body and a scalar tail, FMA form), independent of the library's
// `InlineLoop` so that `check_op` can check that one too.

/// The inline CLIF form of `op`.
fn inline_kernel(op: BulkOp) -> Kernel {
    assert!(isa_has_fma(&*isa()), "bulk levels imply FMA");
    let fma = Some(true);
    match op {
        BulkOp::Math(f) => {
            Kernel::build(F32, F32X4, 1, fma, &|fb, m, x| emit_unary(fb, m, f, x[0]))
        }
        BulkOp::Sqrt => Kernel::build(F32, F32X4, 1, fma, &|fb, _, x| fb.ins().sqrt(x[0])),
        BulkOp::Div => Kernel::build(F32, F32X4, 2, fma, &|fb, _, x| fb.ins().fdiv(x[0], x[1])),
        BulkOp::Pow => Kernel::build(F32, F32X4, 2, fma, &|fb, m, x| emit_pow(fb, m, x[0], x[1])),
    }
}

/// A bulk kernel of either arity.
#[derive(Clone, Copy)]
enum Bulk {
    U(UnaryFn),
    B(BinaryFn),
}

impl Bulk {
    fn get(op: BulkOp, level: Level) -> Bulk {
        match op.arity() {
            1 => Bulk::U(bulk::unary_at(op, level).expect("unary kernel")),
            _ => Bulk::B(bulk::binary_at(op, level).expect("binary kernel")),
        }
    }

    fn run(self, args: &[&[f32]]) -> Vec<f32> {
        let n = args[0].len();
        let mut out = vec![0.0f32; n];
        // SAFETY: every slice holds n elements; out does not overlap them.
        unsafe {
            match self {
                Bulk::U(f) => f(args[0].as_ptr(), out.as_mut_ptr(), n),
                Bulk::B(f) => f(args[0].as_ptr(), args[1].as_ptr(), out.as_mut_ptr(), n),
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// References (f64).

fn reference(op: BulkOp, x: f64, y: f64) -> f64 {
    match op {
        BulkOp::Math(f) => match f {
            MathFn::GeluErf | MathFn::GeluTanh | MathFn::Sigmoid | MathFn::Silu => {
                activation64(f, x)
            }
            _ => f.eval_f64(x),
        },
        BulkOp::Sqrt => x.sqrt(),
        BulkOp::Div => x / y,
        BulkOp::Pow => x.powf(y),
    }
}

// ---------------------------------------------------------------------------
// Inputs.

fn specials() -> Vec<f32> {
    let mut v = base_specials();
    v.extend([8_388_608.0, 16_777_216.0, 3.0, -3.0, 2.5, -2.5]);
    v.extend([
        88.722_83,
        88.722_84,
        89.0,
        -87.336_55,
        -103.278_93,
        -103.972_08,
        -104.0,
        -120.0,
        0.75,
        3.95,
        11.0,
        -11.0,
        20.0,
        15.0,
        -18.0,
        9.01,
    ]);
    v
}

/// Dense region and edge points per unary op.
fn region(op: BulkOp) -> (f32, f32, Vec<f32>) {
    match op {
        BulkOp::Math(MathFn::Exp) => (-105.0, 90.0, vec![88.722_84, -87.336_55, -103.972_08]),
        BulkOp::Math(MathFn::Log) => (0.0, 4.0, vec![1.0, 0.707_106_77, f32::MIN_POSITIVE]),
        BulkOp::Math(MathFn::Tanh) => (-10.0, 10.0, vec![0.173_286_8, 0.549_306_1, 9.01]),
        BulkOp::Math(MathFn::Sigmoid) => (-110.0, 30.0, vec![-87.336_55, -103.278_93, 16.6]),
        BulkOp::Math(MathFn::Silu) => (-110.0, 30.0, vec![-87.336_55, -98.0, 20.0]),
        BulkOp::Math(MathFn::Erf) => (-5.0, 5.0, vec![1.0, 3.95, 3.919_206_4]),
        BulkOp::Math(MathFn::GeluErf) => (-16.0, 8.0, vec![0.75, -13.0, 15.0, 5.4]),
        BulkOp::Math(MathFn::GeluTanh) => (-12.0, 8.0, vec![-10.0, -9.4, -5.0, 11.0]),
        BulkOp::Math(MathFn::Log1p) => (-1.0, 4.0, vec![-1.0, -0.5, 5.960_464_5e-8]),
        BulkOp::Math(MathFn::Expm1) => (-20.0, 90.0, vec![-18.0, 0.346_573_6, 88.722_84]),
        _ => (0.0, 1e6, vec![1.0, f32::MIN_POSITIVE, f32::MAX]),
    }
}

/// Unary inputs: specials, runs of 2000 consecutive bit patterns around 0
/// and each edge (both signs), every k-th bit pattern, a dense sweep.
fn unary_inputs(op: BulkOp, total: usize) -> Vec<f32> {
    let (lo, hi, mut edges) = region(op);
    edges.push(0.0);
    let seed = 0x9E37_79B9_7F4A_7C15 ^ op.name().len() as u64;
    sweep_inputs(specials(), (lo, hi), &edges, seed, total)
}

/// Binary inputs: all pairs of specials, then a mix of random bit patterns,
/// moderate exponents, negative bases with integer exponents, bases near 1
/// with large exponents and results near overflow / underflow (for pow,
/// `pow_pair`); random bits and quotients near the range limits (for div).
fn binary_inputs(op: BulkOp, total: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let (mut xs, mut ys) = all_pairs(&specials());
    while xs.len() < total {
        let kind = rng.next() % 6;
        let bits = |r: &mut Rng| f32::from_bits(r.next() as u32);
        let (x, y) = match (op, kind) {
            (BulkOp::Div, 1..) => {
                let x = bits(&mut rng);
                let s = 2f64.powf((rng.unit() - 0.5) * 60.0) as f32;
                (x, if kind == 1 { x * s } else { bits(&mut rng) })
            }
            _ => pow_pair(&mut rng, kind),
        };
        xs.push(x);
        ys.push(y);
    }
    (xs, ys)
}

fn op_inputs(op: BulkOp) -> Vec<Vec<f32>> {
    let n = samples();
    if op.arity() == 1 {
        vec![unary_inputs(op, n)]
    } else {
        let (x, y) = binary_inputs(op, n);
        vec![x, y]
    }
}

// ---------------------------------------------------------------------------
// Checks.

/// Bulk vs inline over all inputs at one level, and the ulp bound.
fn check_sweep(op: BulkOp, level: Level, inline: &[f32], args: &[&[f32]]) {
    let got = Bulk::get(op, level).run(args);
    let bound = if matches!(op, BulkOp::Math(_) | BulkOp::Pow) {
        MAX_ULP
    } else {
        0.5
    };
    let mut worst = (0.0f64, 0usize);
    for i in 0..got.len() {
        let y = args.get(1).map_or(0.0, |a| a[i]);
        assert!(
            same(got[i], inline[i]),
            "{} [{level:?}]: bulk {:e} ({:#x}) vs inline {:e} ({:#x}) at x = {:e} ({:#x}), y = {y:e}",
            op.name(),
            got[i],
            got[i].to_bits(),
            inline[i],
            inline[i].to_bits(),
            args[0][i],
            args[0][i].to_bits()
        );
        let e = ulp_err(got[i], reference(op, args[0][i] as f64, y as f64));
        if e > worst.0 {
            worst = (e, i);
        }
    }
    let i = worst.1;
    eprintln!(
        "{:>9} [{level:?}]: {} inputs bit-identical to inline; worst {:.3} ulp at x = {:e}{}",
        op.name(),
        got.len(),
        worst.0,
        args[0][i],
        args.get(1)
            .map_or(String::new(), |a| format!(", y = {:e}", a[i]))
    );
    assert!(
        worst.0 <= bound,
        "{} [{level:?}]: {} ulp at x = {:e}",
        op.name(),
        worst.0,
        args[0][i]
    );
}

/// Every length 0..70, at offsets 0..3 floats from a 64-byte boundary, out
/// of place and in place (into each operand): the result must equal the
/// inline result of the same elements, and nothing past `n` may be written.
fn check_lengths(op: BulkOp, level: Level, inline: &[f32], args: &[&[f32]]) {
    const SENTINEL: u32 = 0x7FAB_CDEF;
    let k = Bulk::get(op, level);
    // Inputs taken from the middle of the sweep, where results vary.
    let start = args[0].len() / 2;
    #[repr(align(64))]
    struct Buf([f32; 96]);
    for n in 0..70usize {
        for off in 0..3usize {
            let mut ins: Vec<Buf> = args
                .iter()
                .map(|a| {
                    let mut b = Buf([f32::from_bits(SENTINEL); 96]);
                    b.0[off..off + n].copy_from_slice(&a[start..start + n]);
                    b
                })
                .collect();
            let want = &inline[start..start + n];
            let check = |out: &[f32; 96], what: &str| {
                for j in 0..96 {
                    if j >= off && j < off + n {
                        assert!(
                            same(out[j], want[j - off]),
                            "{} [{level:?}] {what}: n = {n}, offset {off}, element {}",
                            op.name(),
                            j - off
                        );
                    } else {
                        assert_eq!(
                            out[j].to_bits(),
                            SENTINEL,
                            "{} [{level:?}] {what}: n = {n}, offset {off}: wrote outside at {j}",
                            op.name()
                        );
                    }
                }
            };
            // out of place
            let mut out = Buf([f32::from_bits(SENTINEL); 96]);
            // SAFETY: every buffer holds off + n <= 96 elements.
            unsafe {
                let o = out.0.as_mut_ptr().add(off);
                match k {
                    Bulk::U(f) => f(ins[0].0.as_ptr().add(off), o, n),
                    Bulk::B(f) => f(ins[0].0.as_ptr().add(off), ins[1].0.as_ptr().add(off), o, n),
                }
            }
            check(&out.0, "out of place");
            // in place, into each operand in turn
            for which in 0..ins.len() {
                let saved: Vec<[f32; 96]> = ins.iter().map(|b| b.0).collect();
                // SAFETY: as above; `out` is one of the operands, as allowed.
                unsafe {
                    match k {
                        Bulk::U(f) => {
                            let p = ins[0].0.as_mut_ptr().add(off);
                            f(p, p, n)
                        }
                        Bulk::B(f) => {
                            let a = ins[0].0.as_mut_ptr().add(off);
                            let b = ins[1].0.as_mut_ptr().add(off);
                            let o = if which == 0 { a } else { b };
                            f(a, b, o, n)
                        }
                    }
                }
                check(&ins[which].0, "in place");
                for (b, s) in ins.iter_mut().zip(saved) {
                    b.0 = s;
                }
            }
        }
    }
}

fn check_op(op: BulkOp) {
    let levels = levels();
    if levels.is_empty() {
        return;
    }
    let inputs = op_inputs(op);
    let args: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
    let inline = inline_kernel(op).run(&args);
    // The library's InlineLoop (the benchmark baseline) is the same code.
    let lib_loop = bulk::InlineLoop::compile(op).unwrap();
    let lib = match op.arity() {
        1 => Bulk::U(lib_loop.unary().unwrap()),
        _ => Bulk::B(lib_loop.binary().unwrap()),
    };
    let got = lib.run(&args);
    assert!(
        got.iter().zip(&inline).all(|(&a, &b)| same(a, b)),
        "{}: InlineLoop differs from the test's inline kernel",
        op.name()
    );
    for level in levels {
        check_sweep(op, level, &inline, &args);
        check_lengths(op, level, &inline, &args);
    }
}

#[test]
fn bulk_exp() {
    check_op(BulkOp::Math(MathFn::Exp));
}
#[test]
fn bulk_log() {
    check_op(BulkOp::Math(MathFn::Log));
}
#[test]
fn bulk_tanh() {
    check_op(BulkOp::Math(MathFn::Tanh));
}
#[test]
fn bulk_sigmoid() {
    check_op(BulkOp::Math(MathFn::Sigmoid));
}
#[test]
fn bulk_erf() {
    check_op(BulkOp::Math(MathFn::Erf));
}
#[test]
fn bulk_gelu_erf() {
    check_op(BulkOp::Math(MathFn::GeluErf));
}
#[test]
fn bulk_gelu_tanh() {
    check_op(BulkOp::Math(MathFn::GeluTanh));
}
#[test]
fn bulk_silu() {
    check_op(BulkOp::Math(MathFn::Silu));
}
#[test]
fn bulk_log1p() {
    check_op(BulkOp::Math(MathFn::Log1p));
}
#[test]
fn bulk_expm1() {
    check_op(BulkOp::Math(MathFn::Expm1));
}
#[test]
fn bulk_sqrt() {
    check_op(BulkOp::Sqrt);
}
#[test]
fn bulk_div() {
    check_op(BulkOp::Div);
}
#[test]
fn bulk_pow() {
    check_op(BulkOp::Pow);
}

/// Kernels exist exactly for the ops and arities documented.
#[test]
fn kernel_table() {
    for level in levels() {
        for op in UNARY_OPS {
            assert_eq!(op.arity(), 1);
            assert!(bulk::unary_at(op, level).is_some(), "{}", op.name());
            assert!(bulk::binary_at(op, level).is_none(), "{}", op.name());
        }
        for op in BINARY_OPS {
            assert_eq!(op.arity(), 2);
            assert!(bulk::binary_at(op, level).is_some(), "{}", op.name());
            assert!(bulk::unary_at(op, level).is_none(), "{}", op.name());
        }
    }
    for level in Level::ALL {
        if !level.is_supported() {
            assert!(bulk::unary_at(BulkOp::Sqrt, level).is_none());
            assert!(bulk::binary_at(BulkOp::Div, level).is_none());
        }
    }
}

/// `level()` is the best supported level unless `TP_BULK_MATH` disables
/// bulk kernels (reads the variable, never sets it).
#[test]
fn level_detection() {
    let best = Level::ALL.into_iter().find(|l| l.is_supported());
    let var = std::env::var("TP_BULK_MATH").ok();
    if env_enables(var.as_deref()) {
        assert_eq!(bulk::level(), best);
    } else {
        assert_eq!(bulk::level(), None);
        assert!(bulk::unary(BulkOp::Sqrt).is_none());
        assert!(bulk::binary(BulkOp::Div).is_none());
    }
    assert_eq!(bulk::unary(BulkOp::Sqrt).is_some(), bulk::level().is_some());
}

#[test]
fn env_parsing() {
    for v in ["0", "false", "FALSE", "off", " Off ", "no", "No"] {
        assert!(!env_enables(Some(v)), "{v:?}");
    }
    for v in ["1", "true", "on", "yes", "", "avx2"] {
        assert!(env_enables(Some(v)), "{v:?}");
    }
    assert!(env_enables(None));
}

#[test]
fn op_names() {
    assert_eq!(BulkOp::Math(MathFn::Silu).name(), "silu");
    assert_eq!(BulkOp::Sqrt.name(), "sqrt");
    assert_eq!(BulkOp::Div.name(), "div");
    assert_eq!(BulkOp::Pow.name(), "pow");
}

// ---------------------------------------------------------------------------
// Row kernels (softmax passes).

/// Uniform in [-8, 8).
fn rand_value(rng: &mut Rng) -> f32 {
    (rng.unit() * 16.0 - 8.0) as f32
}

/// One of `of`, uniformly.
fn rand_pick(rng: &mut Rng, of: &[f32]) -> f32 {
    of[(rng.next() % of.len() as u64) as usize]
}

/// A model of the inline `f32x4` row max (`Emitter::accumulate` with `FloatMax` over `run`):
/// 4 accumulators of 4 lanes for the 16-element blocks, accumulator 0 for the 4-element
/// blocks, a scalar for the tail, each replaced only by a strictly greater value, folded
/// accumulators, then lanes, then the scalar. NaN when any element is NaN (as the bulk kernel).
fn model_row_max(x: &[f32]) -> f32 {
    if x.iter().any(|v| v.is_nan()) {
        return f32::NAN;
    }
    let better = |a: &mut f32, v: f32| {
        if v > *a {
            *a = v;
        }
    };
    let n = x.len();
    let mut acc = [[f32::NEG_INFINITY; 4]; 4];
    let mut tail = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if i < n / 16 * 16 {
            better(&mut acc[(i / 4) % 4][i % 4], v);
        } else if i < n / 4 * 4 {
            better(&mut acc[0][i % 4], v);
        } else {
            better(&mut tail, v);
        }
    }
    let mut lanes = acc[0];
    for a in &acc[1..] {
        for (l, &v) in lanes.iter_mut().zip(a) {
            better(l, v);
        }
    }
    let mut m = lanes[0];
    for &v in &lanes[1..] {
        better(&mut m, v);
    }
    better(&mut m, tail);
    m
}

/// Rows for the row-max tests: random values, mixes of ±0 with negatives (the maximum's sign
/// depends on the positions of the zeros), a NaN, infinities, and all -inf.
fn max_rows(n: usize, rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut rows = vec![
        (0..n).map(|_| rand_value(rng)).collect::<Vec<f32>>(),
        vec![f32::NEG_INFINITY; n],
    ];
    for _ in 0..12 {
        rows.push(
            (0..n)
                .map(|_| rand_pick(rng, &[0.0, -0.0, -1.0, -5.0]))
                .collect(),
        );
    }
    for _ in 0..4 {
        rows.push(
            (0..n)
                .map(|_| rand_pick(rng, &[0.0, -0.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]))
                .collect(),
        );
    }
    if n > 0 {
        let mut r: Vec<f32> = (0..n).map(|_| rand_value(rng)).collect();
        r[(rng.next() % n as u64) as usize] = f32::NAN;
        rows.push(r);
        let mut r: Vec<f32> = (0..n).map(|_| rand_value(rng)).collect();
        r[(rng.next() % n as u64) as usize] = f32::INFINITY;
        rows.push(r);
        let mut r = vec![-0.0f32; n];
        r[n - 1] = 0.0;
        rows.push(r);
    }
    rows
}

#[test]
fn bulk_row_max_matches_the_inline_fold() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for level in levels() {
        let f = bulk::row_max_at(level).unwrap();
        let lens = (0..=70).chain([100, 255, 256, 1000, 1024, 1031]);
        for n in lens {
            for row in max_rows(n, &mut rng) {
                // At offsets 0..3 from an aligned start.
                for off in 0..3 {
                    let mut buf = vec![f32::NAN; off];
                    buf.extend_from_slice(&row);
                    // SAFETY: `buf[off..]` holds `n` elements.
                    let got = unsafe { f(buf.as_ptr().add(off), n) };
                    let want = model_row_max(&row);
                    assert!(
                        same(got, want),
                        "row max [{level:?}] n = {n}, offset {off}: {got:?} ({:#x}) vs {want:?} \
                         ({:#x}) for {row:?}",
                        got.to_bits(),
                        want.to_bits()
                    );
                }
            }
        }
        // n = 0 reads nothing (a dangling pointer is fine).
        // SAFETY: no element is read.
        let empty = unsafe { f(std::ptr::NonNull::<f32>::dangling().as_ptr(), 0) };
        assert_eq!(empty, f32::NEG_INFINITY);
    }
}

/// The model above is the compiler's own row max: a compiled `amax` over rows (the same
/// accumulation) returns the same bits, signed zeros included.
#[test]
fn row_max_model_matches_compiled_amax() {
    use tensorplay_compiler::compile;
    use tensorplay_runtime::Tensor;
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].amax(&[1], false)?]));
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for n in [1usize, 3, 4, 7, 16, 17, 31, 33, 64, 70, 129] {
        let rows: Vec<Vec<f32>> = (0..16)
            .map(|_| {
                (0..n)
                    .map(|_| rand_pick(&mut rng, &[0.0, -0.0, -2.0, -3.0]))
                    .collect()
            })
            .collect();
        let flat: Vec<f32> = rows.concat();
        let x = Tensor::from_vec(flat, &[rows.len(), n]).unwrap();
        let got = f.call(&[x]).unwrap()[0].to_vec::<f32>().unwrap();
        for (r, row) in rows.iter().enumerate() {
            let want = model_row_max(row);
            assert_eq!(
                got[r].to_bits(),
                want.to_bits(),
                "compiled amax n = {n}, row {r}: {:?} vs model {want:?} for {row:?}",
                got[r]
            );
        }
    }
}

/// `exp(x - s)`, `x * s`, `x - s` against the inline exp of the f32 difference and IEEE
/// arithmetic, for the exp sweep and several shifts, every length 0..70 at offsets 0..3, out of
/// place and in place; nothing past `n` is written.
#[test]
fn bulk_scalar_ops_match_inline() {
    const SENTINEL: u32 = 0x7FAB_CDEF;
    let levels = levels();
    if levels.is_empty() {
        return;
    }
    // The library's InlineLoop is the inline exp (`bulk_exp` checks it
    // against the test's own kernel).
    let exp_loop = bulk::InlineLoop::compile(BulkOp::Math(MathFn::Exp)).unwrap();
    let exp = Bulk::U(exp_loop.unary().unwrap());
    let xs = unary_inputs(BulkOp::Math(MathFn::Exp), samples() / 4);
    let ops = [
        bulk::RowScalarOp::SubExp,
        bulk::RowScalarOp::Mul,
        bulk::RowScalarOp::Sub,
    ];
    for s in [0.0f32, -0.0, 0.75, -20.5, 88.0, f32::INFINITY, f32::NAN] {
        let diff: Vec<f32> = xs.iter().map(|&x| x - s).collect();
        let wants = [
            exp.run(&[&diff]),
            xs.iter().map(|&x| x * s).collect::<Vec<f32>>(),
            diff.clone(),
        ];
        for level in levels.iter().copied() {
            for (op, want) in ops.iter().zip(&wants) {
                let f = bulk::scalar_op_at(*op, level).unwrap();
                let mut got = vec![0.0f32; xs.len()];
                // SAFETY: both buffers hold xs.len() elements.
                unsafe { f(xs.as_ptr(), s, got.as_mut_ptr(), xs.len()) };
                if let Some(i) = (0..xs.len()).find(|&i| !same(got[i], want[i])) {
                    panic!(
                        "{op:?} [{level:?}] s = {s}: x = {:e} gives {:e}, inline {:e}",
                        xs[i], got[i], want[i]
                    );
                }
                let start = xs.len() / 2;
                for n in 0..70usize {
                    for off in 0..3usize {
                        for in_place in [false, true] {
                            let mut x = [f32::from_bits(SENTINEL); 96];
                            x[off..off + n].copy_from_slice(&xs[start..start + n]);
                            let mut out = [f32::from_bits(SENTINEL); 96];
                            // SAFETY: every buffer holds off + n <= 96 elements; in place
                            // passes the same pointer twice, as allowed.
                            unsafe {
                                let p = x.as_mut_ptr().add(off);
                                let o = if in_place {
                                    p
                                } else {
                                    out.as_mut_ptr().add(off)
                                };
                                f(p, s, o, n);
                            }
                            let res = if in_place { &x } else { &out };
                            for (j, &r) in res.iter().enumerate() {
                                if j >= off && j < off + n {
                                    assert!(
                                        same(r, want[start + j - off]),
                                        "{op:?} [{level:?}] n = {n}, offset {off}"
                                    );
                                } else {
                                    assert_eq!(r.to_bits(), SENTINEL, "{op:?} wrote outside");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
