//! CPU code generation for fused regions, compared with the eager runtime.
//!
//! Graphs are built by hand with `GraphBuilder` (ops named like the runtime's schemas), each
//! test hand-builds the `Region` it compiles, lowers it, launches it on real tensors and compares
//! with eager: bit-exact for + - * / sqrt, comparisons, min/max, abs/neg, casts and where; within
//! tolerance for transcendentals and reductions.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use tensorplay_compiler::codegen::cache;
use tensorplay_compiler::codegen::cpu::{self, live_kernels};
use tensorplay_compiler::codegen::kernel::{Lit, LoopKind, StrideClass, lower};
use tensorplay_compiler::passes::region::{Region, RegionKind};
use tensorplay_ir::graph::{BuilderArg, Constant, Graph, GraphBuilder};
use tensorplay_ir::{DType, Device, NodeId, OpClass, ReduceOp, TensorMeta, ValueRef};
use tensorplay_runtime::Tensor;

type R<T> = tensorplay_ir::Result<T>;

/// An eager unary op.
type Unary = fn(&Tensor) -> R<Tensor>;

/// Tests share the kernel cache and the live-kernel counter; the memory test runs alone.
static LOCK: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    LOCK.read().unwrap_or_else(|p| p.into_inner())
}

fn meta(shape: &[usize], dtype: DType) -> TensorMeta {
    TensorMeta::new(shape, dtype, Device::Cpu)
}

/// A graph under construction plus the region it will become.
struct G {
    b: GraphBuilder,
    nodes: Vec<NodeId>,
    inputs: Vec<ValueRef>,
}

impl G {
    fn new() -> G {
        G {
            b: GraphBuilder::new(),
            nodes: Vec::new(),
            inputs: Vec::new(),
        }
    }

    fn input(&mut self, name: &str, shape: &[usize], dtype: DType) -> ValueRef {
        let v = self.b.input(name, meta(shape, dtype));
        self.inputs.push(v);
        v
    }

    fn scalar(&mut self, c: Constant) -> ValueRef {
        let v = self.b.constant(c, Device::Cpu).unwrap();
        self.inputs.push(v);
        v
    }

    fn float(&mut self, v: f64) -> ValueRef {
        self.scalar(Constant::Float {
            value: v,
            dtype: DType::F64,
        })
    }

    fn op(&mut self, name: &str, args: Vec<BuilderArg>, shape: &[usize], dtype: DType) -> ValueRef {
        let class = match name {
            "tp::sum" | "tp::mean" | "tp::amax" | "tp::amin" | "tp::prod" | "tp::softmax"
            | "tp::log_softmax" => OpClass::Reduction,
            _ => OpClass::Elementwise,
        };
        let v = self
            .b
            .op(name, class, args, vec![meta(shape, dtype)])
            .unwrap()[0];
        self.nodes.push(v.node);
        v
    }

    fn finish(mut self, outputs: &[ValueRef], kind: RegionKind) -> (Graph, Region) {
        self.b.output(outputs).unwrap();
        let g = self.b.finish().unwrap();
        let region = Region {
            id: 0,
            kind,
            nodes: self.nodes,
            inputs: self.inputs,
            outputs: outputs.to_vec(),
        };
        (g, region)
    }
}

fn t(v: ValueRef) -> BuilderArg {
    BuilderArg::Tensor(v)
}

/// Lowers and launches `region`, feeding region input `v` from `feed[v]`; returns the outputs.
fn run(g: &Graph, region: &Region, feed: &HashMap<ValueRef, Tensor>) -> R<Vec<Tensor>> {
    let lowered = lower(g, region)?;
    let inputs: Vec<&Tensor> = lowered.inputs.iter().map(|v| &feed[v]).collect();
    let outs: Vec<Tensor> = lowered
        .outputs
        .iter()
        .map(|v| {
            let m = g.meta(*v).unwrap();
            Tensor::zeros(&m.static_shape().unwrap(), m.dtype)
        })
        .collect();
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    cache::launch_lowered(&lowered, &inputs, &out_refs)?;
    Ok(outs)
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::F16 | DType::BF16 => {
            // Compare through f32 (exact) so NaN payload differences do not matter.
            let f = t.to_dtype(DType::F32).unwrap();
            f.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| {
                    if v.is_nan() {
                        u64::MAX
                    } else {
                        v.to_bits() as u64
                    }
                })
                .collect()
        }
    }
}

/// Bit-exact equality (all NaNs equal).
fn assert_same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (bits(got), bits(want));
    let f = got.to_vec_f64().unwrap();
    let fw = want.to_vec_f64().unwrap();
    for i in 0..g.len() {
        let both_nan = f[i].is_nan() && fw[i].is_nan();
        assert!(
            g[i] == w[i] || both_nan,
            "{what}: element {i}: got {} ({:#x}), want {} ({:#x})",
            f[i],
            g[i],
            fw[i],
            w[i]
        );
    }
}

/// Closeness within `rtol`/`atol` (NaN must match NaN, infinities must match exactly).
fn assert_close(got: &Tensor, want: &Tensor, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= atol + rtol * b.abs()
        };
        assert!(ok, "{what}: element {i}: got {a}, want {b}");
    }
}

fn randn(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let x = Tensor::randn_seeded(shape, DType::F64, seed).unwrap();
    x.to_dtype(dtype).unwrap()
}

/// The interesting f64 values: NaN, infinities, signed zeros, subnormals, extremes, halves.
const SPECIALS: [f64; 18] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -2.5,
    2.5,
    1.5,
    1e-40,
    -1e-310,
    3.0e38,
    -3.4e38,
    65504.0,
    70000.0,
    1e-8,
];

/// `n` values of `dtype`: the specials first, then random normals scaled by 10.
fn specials(n: usize, dtype: DType, seed: u64) -> Tensor {
    let r = Tensor::randn_seeded(&[n], DType::F64, seed)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            if i < SPECIALS.len() {
                SPECIALS[i]
            } else {
                r[i] * 10.0
            }
        })
        .collect();
    Tensor::from_vec(v, &[n]).unwrap().to_dtype(dtype).unwrap()
}

/// Random integers in `[-range, range)` of `dtype` (bool: 0/1).
fn ints(shape: &[usize], dtype: DType, range: i64, seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let r = Tensor::rand_seeded(&[n], DType::F64, seed)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let v: Vec<i64> = r
        .iter()
        .map(|&u| (u * 2.0 * range as f64).floor() as i64 - range)
        .collect();
    let t = Tensor::from_vec(v, shape).unwrap();
    if dtype == DType::Bool {
        t.gt_scalar(0).unwrap()
    } else {
        t.to_dtype(dtype).unwrap()
    }
}

const SIZES: [usize; 6] = [0, 1, 3, 17, 1000, 1 << 17];

/// Builds `out = op(x, y)` over `[n]` and checks it bitwise against `eager(x, y)`.
fn check_binary(
    name: &str,
    dtype: DType,
    out_dtype: DType,
    x: &Tensor,
    y: &Tensor,
    eager: impl Fn(&Tensor, &Tensor) -> R<Tensor>,
) -> R<()> {
    let mut g = G::new();
    let xv = g.input("x", x.shape(), x.dtype());
    let yv = g.input("y", y.shape(), y.dtype());
    let shape = tensorplay_ir::shape::broadcast_shapes("test", x.shape(), y.shape())?;
    let o = g.op(name, vec![t(xv), t(yv)], &shape, out_dtype);
    let (graph, region) = g.finish(&[o], RegionKind::Pointwise);
    let feed = HashMap::from([(xv, x.clone()), (yv, y.clone())]);
    let out = run(&graph, &region, &feed)?;
    let want = eager(x, y)?;
    assert_same(&out[0], &want, &format!("{name} {dtype} {:?}", x.shape()));
    Ok(())
}

fn check_unary(
    name: &str,
    args: Vec<BuilderArg>,
    x: &Tensor,
    out_dtype: DType,
    eager: impl Fn(&Tensor) -> R<Tensor>,
    tol: Option<(f64, f64)>,
) -> R<()> {
    let mut g = G::new();
    let xv = g.input("x", x.shape(), x.dtype());
    let mut a = vec![t(xv)];
    a.extend(args);
    let o = g.op(name, a, x.shape(), out_dtype);
    let (graph, region) = g.finish(&[o], RegionKind::Pointwise);
    let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
    let want = eager(x)?;
    let what = format!("{name} on {} {:?}", x.dtype(), x.shape());
    match tol {
        None => assert_same(&out[0], &want, &what),
        Some((rtol, atol)) => assert_close(&out[0], &want, rtol, atol, &what),
    }
    Ok(())
}

// ---- pointwise arithmetic -----------------------------------------------------------------------

#[test]
fn add_mul_relu_chain_is_bit_exact_at_every_size() -> R<()> {
    let _l = shared();
    for n in SIZES {
        let mut g = G::new();
        let x = g.input("x", &[n], DType::F32);
        let y = g.input("y", &[n], DType::F32);
        let s = g.op("tp::add", vec![t(x), t(y)], &[n], DType::F32);
        let m = g.op("tp::mul", vec![t(s), t(x)], &[n], DType::F32);
        let r = g.op("tp::relu", vec![t(m)], &[n], DType::F32);
        let (graph, region) = g.finish(&[r], RegionKind::Pointwise);
        let xt = specials(n, DType::F32, 1);
        let yt = randn(&[n], DType::F32, 2);
        let feed = HashMap::from([(x, xt.clone()), (y, yt.clone())]);
        let out = run(&graph, &region, &feed)?;
        let want = xt.add(&yt)?.mul(&xt)?.relu()?;
        assert_same(&out[0], &want, &format!("n={n}"));
    }
    Ok(())
}

#[test]
fn binary_arithmetic_matches_eager_for_every_dtype() -> R<()> {
    let _l = shared();
    for &n in &SIZES[1..] {
        for dtype in [DType::F32, DType::F64] {
            let x = specials(n, dtype, 3);
            let y = randn(&[n], dtype, 4);
            check_binary("tp::add", dtype, dtype, &x, &y, |a, b| a.add(b))?;
            check_binary("tp::sub", dtype, dtype, &x, &y, |a, b| a.sub(b))?;
            check_binary("tp::mul", dtype, dtype, &x, &y, |a, b| a.mul(b))?;
            check_binary("tp::div", dtype, dtype, &x, &y, |a, b| a.div(b))?;
            check_binary("tp::div", dtype, dtype, &y, &x, |a, b| a.div(b))?;
            check_binary("tp::maximum", dtype, dtype, &x, &y, |a, b| a.maximum(b))?;
            check_binary("tp::minimum", dtype, dtype, &y, &x, |a, b| a.minimum(b))?;
        }
        for dtype in [DType::I32, DType::I64] {
            let x = ints(&[n], dtype, 1 << 20, 5);
            let y = ints(&[n], dtype, 1 << 12, 6);
            check_binary("tp::add", dtype, dtype, &x, &y, |a, b| a.add(b))?;
            check_binary("tp::sub", dtype, dtype, &x, &y, |a, b| a.sub(b))?;
            // Products overflow i32: wrapping, like eager.
            check_binary("tp::mul", dtype, dtype, &x, &x, |a, b| a.mul(b))?;
            check_binary("tp::div", dtype, DType::F32, &x, &y, |a, b| a.div(b))?;
            check_binary("tp::maximum", dtype, dtype, &x, &y, |a, b| a.maximum(b))?;
            check_binary("tp::minimum", dtype, dtype, &x, &y, |a, b| a.minimum(b))?;
            let e = ints(&[n], dtype, 5, 7);
            check_binary("tp::pow", dtype, dtype, &y, &e, |a, b| a.pow(b))?;
        }
        let a = ints(&[n], DType::Bool, 1, 8);
        let b = ints(&[n], DType::Bool, 1, 9);
        check_binary("tp::add", DType::Bool, DType::Bool, &a, &b, |p, q| p.add(q))?;
        check_binary("tp::mul", DType::Bool, DType::Bool, &a, &b, |p, q| p.mul(q))?;
        check_binary("tp::maximum", DType::Bool, DType::Bool, &a, &b, |p, q| {
            p.maximum(q)
        })?;
        check_binary("tp::div", DType::Bool, DType::F32, &a, &b, |p, q| p.div(q))?;
        // Mixed dtypes promote like eager.
        let i = ints(&[n], DType::I32, 100, 10);
        let f = randn(&[n], DType::F32, 11);
        let d = randn(&[n], DType::F64, 12);
        check_binary("tp::add", DType::I32, DType::F32, &i, &f, |p, q| p.add(q))?;
        check_binary("tp::mul", DType::F32, DType::F64, &f, &d, |p, q| p.mul(q))?;
        check_binary(
            "tp::sub",
            DType::I32,
            DType::I64,
            &i,
            &ints(&[n], DType::I64, 9, 13),
            |p, q| p.sub(q),
        )?;
        check_binary("tp::add", DType::Bool, DType::I32, &a, &i, |p, q| p.add(q))?;
    }
    Ok(())
}

#[test]
fn comparisons_and_logical_ops_with_nan_and_signed_zeros() -> R<()> {
    let _l = shared();
    for &n in &[18usize, 1000, 1 << 17] {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = specials(n, dtype, 14);
            // y: a shifted copy, so NaN meets numbers, -0 meets 0 and equal values meet.
            let xv = x.to_vec_f64()?;
            let yv: Vec<f64> = (0..n).map(|i| xv[(i + 1) % n]).collect();
            let y = Tensor::from_vec(yv, &[n])?.to_dtype(dtype)?;
            for (name, f) in [
                ("tp::eq", Tensor::eq as fn(&Tensor, &Tensor) -> R<Tensor>),
                ("tp::ne", Tensor::ne),
                ("tp::lt", Tensor::lt),
                ("tp::le", Tensor::le),
                ("tp::gt", Tensor::gt),
                ("tp::ge", Tensor::ge),
                ("tp::logical_and", Tensor::logical_and),
                ("tp::logical_or", Tensor::logical_or),
                ("tp::logical_xor", Tensor::logical_xor),
            ] {
                check_binary(name, dtype, DType::Bool, &x, &y, f)?;
                check_binary(name, dtype, DType::Bool, &x, &x, f)?;
            }
            check_unary(
                "tp::logical_not",
                vec![],
                &x,
                DType::Bool,
                |a| a.logical_not(),
                None,
            )?;
        }
        let i = ints(&[n], DType::I64, 3, 15);
        let j = ints(&[n], DType::I64, 3, 16);
        check_binary("tp::lt", DType::I64, DType::Bool, &i, &j, |p, q| p.lt(q))?;
        check_binary("tp::ge", DType::I64, DType::Bool, &i, &j, |p, q| p.ge(q))?;
        let a = ints(&[n], DType::Bool, 1, 17);
        let b = ints(&[n], DType::Bool, 1, 18);
        for (name, f) in [
            ("tp::lt", Tensor::lt as fn(&Tensor, &Tensor) -> R<Tensor>),
            ("tp::le", Tensor::le),
            ("tp::gt", Tensor::gt),
            ("tp::ge", Tensor::ge),
            ("tp::eq", Tensor::eq),
            ("tp::ne", Tensor::ne),
        ] {
            check_binary(name, DType::Bool, DType::Bool, &a, &b, f)?;
        }
    }
    Ok(())
}

#[test]
fn exact_unary_ops_match_eager() -> R<()> {
    let _l = shared();
    for &n in &[18usize, 1000, 1 << 17] {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = specials(n, dtype, 19);
            let ops: [(&str, Unary); 12] = [
                ("tp::neg", Tensor::neg),
                ("tp::abs", Tensor::abs),
                ("tp::sqrt", Tensor::sqrt),
                ("tp::rsqrt", Tensor::rsqrt),
                ("tp::reciprocal", Tensor::reciprocal),
                ("tp::relu", Tensor::relu),
                ("tp::sign", Tensor::sign),
                ("tp::floor", Tensor::floor),
                ("tp::ceil", Tensor::ceil),
                ("tp::round", Tensor::round),
                ("tp::square", Tensor::square),
                ("tp::clone", Tensor::clone_tensor),
            ];
            for (name, f) in ops {
                check_unary(name, vec![], &x, dtype, f, None)?;
            }
        }
        for dtype in [DType::I32, DType::I64] {
            let mut v = ints(&[n], dtype, 1 << 30, 20).to_vec_f64()?;
            v[0] = if dtype == DType::I32 {
                i32::MIN as f64
            } else {
                -9.223372036854776e18
            };
            let x = Tensor::from_vec(v, &[n])?.to_dtype(dtype)?;
            let ops: [(&str, Unary); 8] = [
                ("tp::neg", Tensor::neg),
                ("tp::abs", Tensor::abs),
                ("tp::relu", Tensor::relu),
                ("tp::sign", Tensor::sign),
                ("tp::floor", Tensor::floor),
                ("tp::square", Tensor::square),
                ("tp::clone", Tensor::clone_tensor),
                ("tp::round", Tensor::round),
            ];
            for (name, f) in ops {
                check_unary(name, vec![], &x, dtype, f, None)?;
            }
            check_unary("tp::sqrt", vec![], &x, DType::F32, Tensor::sqrt, None)?;
        }
        let b = ints(&[n], DType::Bool, 1, 21);
        check_unary("tp::abs", vec![], &b, DType::Bool, Tensor::abs, None)?;
        check_unary("tp::square", vec![], &b, DType::I64, Tensor::square, None)?;
        check_unary("tp::sqrt", vec![], &b, DType::F32, Tensor::sqrt, None)?;
    }
    Ok(())
}

#[test]
fn casts_follow_the_runtime_rules() -> R<()> {
    let _l = shared();
    let n = 1000;
    let all = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    for from in all {
        let x = if from.is_float() {
            specials(n, from, 22)
        } else {
            ints(&[n], from, 1 << 40, 23)
        };
        for to in all {
            check_unary(
                "tp::to_dtype",
                vec![BuilderArg::named("dtype", to)],
                &x,
                to,
                |a| a.to_dtype(to),
                None,
            )?;
        }
    }
    Ok(())
}

#[test]
fn relu_maximum_minimum_clamp_where_keep_nan_and_zero_signs() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64] {
        for n in [18usize, 1001] {
            let x = specials(n, dtype, 24);
            let xv = x.to_vec_f64()?;
            // Pair every special with every other one.
            let yv: Vec<f64> = (0..n).map(|i| xv[(i * 7 + 3) % n]).collect();
            let y = Tensor::from_vec(yv, &[n])?.to_dtype(dtype)?;
            check_binary("tp::maximum", dtype, dtype, &x, &y, |a, b| a.maximum(b))?;
            check_binary("tp::minimum", dtype, dtype, &x, &y, |a, b| a.minimum(b))?;
            check_binary("tp::maximum", dtype, dtype, &y, &x, |a, b| a.maximum(b))?;
            let bounds: [(Option<f64>, Option<f64>); 6] = [
                (Some(0.0), Some(1.0)),
                (Some(-0.0), None),
                (None, Some(-1.5)),
                (Some(2.0), Some(1.0)),
                (Some(f64::NAN), Some(1.0)),
                (Some(0.1), Some(f64::NAN)),
            ];
            for (lo, hi) in bounds {
                let attr = |b: Option<f64>| match b {
                    Some(v) => tensorplay_ir::graph::Attr::Float(v),
                    None => tensorplay_ir::graph::Attr::None,
                };
                check_unary(
                    "tp::clamp",
                    vec![
                        BuilderArg::named("min", attr(lo)),
                        BuilderArg::named("max", attr(hi)),
                    ],
                    &x,
                    dtype,
                    |a| a.clamp(lo, hi),
                    None,
                )?;
            }
            // where(x > y, x, y) with the condition computed in the region.
            let mut g = G::new();
            let xv_ = g.input("x", &[n], dtype);
            let yv_ = g.input("y", &[n], dtype);
            let c = g.op("tp::gt", vec![t(xv_), t(yv_)], &[n], DType::Bool);
            let w = g.op("tp::where", vec![t(c), t(xv_), t(yv_)], &[n], dtype);
            let (graph, region) = g.finish(&[w, c], RegionKind::Pointwise);
            let out = run(
                &graph,
                &region,
                &HashMap::from([(xv_, x.clone()), (yv_, y.clone())]),
            )?;
            let cond = x.gt(&y)?;
            assert_same(&out[0], &Tensor::where_cond(&cond, &x, &y)?, "where");
            assert_same(&out[1], &cond, "gt mask");
        }
    }
    // Integer clamp (with integer bounds it stays integer; a float bound makes it f32).
    let i = ints(&[1000], DType::I32, 100, 25);
    check_unary(
        "tp::clamp",
        vec![
            BuilderArg::named("min", -10i64),
            BuilderArg::named("max", 20i64),
        ],
        &i,
        DType::I32,
        |a| a.clamp(Some(-10), Some(20)),
        None,
    )?;
    check_unary(
        "tp::clamp",
        vec![
            BuilderArg::named("min", 0.5),
            BuilderArg::named("max", tensorplay_ir::graph::Attr::None),
        ],
        &i,
        DType::F32,
        |a| a.clamp(Some(0.5), None::<f64>),
        None,
    )?;
    Ok(())
}

#[test]
fn where_with_a_bool_tensor_condition_and_broadcast_operands() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::I64, DType::F16] {
        let (r, c) = (37usize, 29usize);
        let cond = ints(&[r, c], DType::Bool, 1, 26);
        let a = randn(&[r, c], DType::F64, 27).to_dtype(dtype)?;
        let b = randn(&[c], DType::F64, 28).to_dtype(dtype)?;
        let mut g = G::new();
        let cv = g.input("c", &[r, c], DType::Bool);
        let av = g.input("a", &[r, c], dtype);
        let bv = g.input("b", &[c], dtype);
        let w = g.op("tp::where", vec![t(cv), t(av), t(bv)], &[r, c], dtype);
        let (graph, region) = g.finish(&[w], RegionKind::Pointwise);
        let feed = HashMap::from([(cv, cond.clone()), (av, a.clone()), (bv, b.clone())]);
        let out = run(&graph, &region, &feed)?;
        assert_same(&out[0], &Tensor::where_cond(&cond, &a, &b)?, "where");
        // A transposed bool condition (per-lane gathers of bools).
        let ct = ints(&[c, r], DType::Bool, 1, 29).t()?;
        let feed = HashMap::from([(cv, ct.clone()), (av, a.clone()), (bv, b.clone())]);
        let out = run(&graph, &region, &feed)?;
        assert_same(
            &out[0],
            &Tensor::where_cond(&ct, &a, &b)?,
            "where, transposed cond",
        );
    }
    Ok(())
}

#[test]
fn scalar_constants_only_raise_the_category() -> R<()> {
    let _l = shared();
    let n = 1000;
    // i32 * 2.5 -> f32; f16 + 0.1 -> f16 (0.1 rounded to f16 first, as eager does); i32 + 3 ->
    // i32; bool * 2 -> i64; f64 * 0.1 keeps the f64 constant.
    let cases: Vec<(Tensor, Constant, DType, &str)> = vec![
        (
            ints(&[n], DType::I32, 1000, 30),
            Constant::Float {
                value: 2.5,
                dtype: DType::F64,
            },
            DType::F32,
            "tp::mul",
        ),
        (
            randn(&[n], DType::F16, 31),
            Constant::Float {
                value: 0.1,
                dtype: DType::F64,
            },
            DType::F16,
            "tp::add",
        ),
        (
            randn(&[n], DType::BF16, 32),
            Constant::Float {
                value: 0.1,
                dtype: DType::F64,
            },
            DType::BF16,
            "tp::mul",
        ),
        (
            ints(&[n], DType::I32, 1000, 33),
            Constant::Int {
                value: 3,
                dtype: DType::I64,
            },
            DType::I32,
            "tp::add",
        ),
        (
            ints(&[n], DType::Bool, 1, 34),
            Constant::Int {
                value: 2,
                dtype: DType::I64,
            },
            DType::I64,
            "tp::mul",
        ),
        (
            randn(&[n], DType::F64, 35),
            Constant::Float {
                value: 0.1,
                dtype: DType::F64,
            },
            DType::F64,
            "tp::mul",
        ),
        (
            randn(&[n], DType::F32, 36),
            Constant::Int {
                value: 3,
                dtype: DType::I64,
            },
            DType::F32,
            "tp::div",
        ),
        (
            ints(&[n], DType::I64, 50, 37),
            Constant::Float {
                value: 0.0,
                dtype: DType::F64,
            },
            DType::Bool,
            "tp::gt",
        ),
    ];
    for (x, c, out_dtype, name) in cases {
        let mut g = G::new();
        let xv = g.input("x", &[n], x.dtype());
        let cv = g.scalar(c.clone());
        let o = g.op(name, vec![t(xv), t(cv)], &[n], out_dtype);
        let (graph, region) = g.finish(&[o], RegionKind::Pointwise);
        let lowered = lower(&graph, &region)?;
        assert_eq!(lowered.inputs, vec![xv], "the constant is inlined");
        let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
        let s: tensorplay_runtime::Scalar = match c {
            Constant::Float { value, .. } => value.into(),
            Constant::Int { value, .. } => value.into(),
            _ => unreachable!(),
        };
        let w = Tensor::wrapped_scalar(s);
        let want = match name {
            "tp::mul" => x.mul(&w)?,
            "tp::add" => x.add(&w)?,
            "tp::div" => x.div(&w)?,
            _ => x.gt(&w)?,
        };
        assert_same(&out[0], &want, &format!("{name} {} with {c}", x.dtype()));
    }
    Ok(())
}

// ---- layouts: broadcast, transposed, strided outputs ------------------------------------------

/// `relu(x + bias) + r` (the W3 pattern) over `[rows, cols]`.
fn w3_graph(rows: usize, cols: usize, dtype: DType) -> (Graph, Region, [ValueRef; 3]) {
    let mut g = G::new();
    let x = g.input("x", &[rows, cols], dtype);
    let bias = g.input("bias", &[cols], dtype);
    let r = g.input("r", &[rows, cols], dtype);
    let s = g.op("tp::add", vec![t(x), t(bias)], &[rows, cols], dtype);
    let a = g.op("tp::relu", vec![t(s)], &[rows, cols], dtype);
    let o = g.op("tp::add", vec![t(a), t(r)], &[rows, cols], dtype);
    let (graph, region) = g.finish(&[o], RegionKind::Pointwise);
    (graph, region, [x, bias, r])
}

#[test]
fn broadcast_transposed_and_strided_operands() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32] {
        for (rows, cols) in [(1usize, 1usize), (3, 5), (17, 33), (128, 1024)] {
            let (graph, region, [x, bias, r]) = w3_graph(rows, cols, dtype);
            let mk = |shape: &[usize], seed| {
                if dtype.is_float() {
                    randn(shape, dtype, seed)
                } else {
                    ints(shape, dtype, 100, seed)
                }
            };
            let bt = mk(&[cols], 41);
            let layouts: Vec<(Tensor, Tensor)> = vec![
                // contiguous
                (mk(&[rows, cols], 42), mk(&[rows, cols], 43)),
                // transposed x (non-unit inner stride)
                (mk(&[cols, rows], 44).t()?, mk(&[rows, cols], 45)),
                // r broadcast along rows with a zero inner stride: [rows, 1] expanded
                (
                    mk(&[rows, cols], 46),
                    mk(&[rows, 1], 47).expand(&[rows, cols])?,
                ),
                // every other column of a wider tensor (stride 2)
                (
                    mk(&[rows, 2 * cols], 48).slice(1, Some(0), None, 2)?,
                    mk(&[rows, cols], 49),
                ),
            ];
            for (k, (xt, rt)) in layouts.into_iter().enumerate() {
                let feed = HashMap::from([(x, xt.clone()), (bias, bt.clone()), (r, rt.clone())]);
                let out = run(&graph, &region, &feed)?;
                let want = xt.add(&bt)?.relu()?.add(&rt)?;
                let what = format!("w3 {dtype} [{rows}, {cols}] layout {k}");
                if dtype.is_half() {
                    // Eager rounds after every op, the fused kernel once at the store.
                    let tol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
                    assert_close(&out[0], &want, tol, tol, &what);
                } else {
                    assert_same(&out[0], &want, &what);
                }
            }
        }
    }
    Ok(())
}

#[test]
fn writes_through_a_transposed_output_view() -> R<()> {
    let _l = shared();
    let (rows, cols) = (33usize, 65usize);
    let (graph, region, [x, bias, r]) = w3_graph(rows, cols, DType::F32);
    let lowered = lower(&graph, &region)?;
    let xt = randn(&[rows, cols], DType::F32, 50);
    let bt = randn(&[cols], DType::F32, 51);
    let rt = randn(&[rows, cols], DType::F32, 52);
    let feed = HashMap::from([(x, xt.clone()), (bias, bt.clone()), (r, rt.clone())]);
    let inputs: Vec<&Tensor> = lowered.inputs.iter().map(|v| &feed[v]).collect();
    let backing = Tensor::zeros(&[cols, rows], DType::F32);
    let out = backing.t()?;
    let k = cache::launch_lowered(&lowered, &inputs, &[&out])?;
    assert_eq!(k.layout().classes.last(), Some(&StrideClass::Strided));
    assert_same(
        &out.contiguous()?,
        &xt.add(&bt)?.relu()?.add(&rt)?,
        "strided output",
    );
    Ok(())
}

#[test]
fn half_precision_chains_round_once_at_the_store() -> R<()> {
    let _l = shared();
    for dtype in [DType::F16, DType::BF16] {
        for n in [3usize, 1000, 1 << 17] {
            let mut g = G::new();
            let x = g.input("x", &[n], dtype);
            let y = g.input("y", &[n], dtype);
            let a = g.op("tp::mul", vec![t(x), t(y)], &[n], dtype);
            let b = g.op("tp::sub", vec![t(a), t(x)], &[n], dtype);
            let c = g.op("tp::div", vec![t(b), t(y)], &[n], dtype);
            let (graph, region) = g.finish(&[c, a], RegionKind::Pointwise);
            let xt = specials(n, dtype, 53);
            let yt = randn(&[n], dtype, 54);
            let out = run(
                &graph,
                &region,
                &HashMap::from([(x, xt.clone()), (y, yt.clone())]),
            )?;
            // A single op rounds once in both: bit-exact.
            assert_same(&out[1], &xt.mul(&yt)?, "half mul");
            // The chain: compare with the same math in f32, rounded once.
            let want32 = xt
                .to_dtype(DType::F32)?
                .mul(&yt.to_dtype(DType::F32)?)?
                .sub(&xt.to_dtype(DType::F32)?)?
                .div(&yt.to_dtype(DType::F32)?)?
                .to_dtype(dtype)?;
            if dtype == DType::F16 {
                assert_same(&out[0], &want32, "f16 chain rounded once");
            } else {
                // Eager's f32 -> bf16 cast is not always round-to-nearest (see the cast test).
                assert_close(
                    &out[0],
                    &want32,
                    1.0 / 128.0,
                    0.0,
                    "bf16 chain rounded once",
                );
            }
            // Against eager (which rounds every intermediate) on ordinary values; the specials
            // would overflow eager's f16 intermediates where the fused f32 ones do not.
            let xn = randn(&[n], dtype, 55);
            let out = run(
                &graph,
                &region,
                &HashMap::from([(x, xn.clone()), (y, yt.clone())]),
            )?;
            let eager = xn.mul(&yt)?.sub(&xn)?.div(&yt)?;
            let tol = if dtype == DType::F16 { 4e-3 } else { 3e-2 };
            assert_close(&out[0], &eager, tol, 1e-2, "half chain vs eager");
        }
    }
    Ok(())
}

// ---- transcendentals ----------------------------------------------------------------------------

#[test]
fn transcendentals_match_eager_within_tolerance() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64] {
        for n in [18usize, 1001] {
            let x = specials(n, dtype, 60);
            let tol = Some((2e-6, 1e-30));
            let ops: [(&str, Vec<BuilderArg>, Unary); 11] = [
                ("tp::exp", vec![], Tensor::exp),
                ("tp::log", vec![], Tensor::log),
                ("tp::tanh", vec![], Tensor::tanh),
                ("tp::sigmoid", vec![], Tensor::sigmoid),
                ("tp::silu", vec![], Tensor::silu),
                ("tp::erf", vec![], Tensor::erf),
                ("tp::sin", vec![], Tensor::sin),
                ("tp::cos", vec![], Tensor::cos),
                (
                    "tp::gelu",
                    vec![BuilderArg::named("approximate", "none")],
                    |a| a.gelu("none"),
                ),
                (
                    "tp::gelu",
                    vec![BuilderArg::named("approximate", "tanh")],
                    |a| a.gelu("tanh"),
                ),
                ("tp::abs", vec![], Tensor::abs),
            ];
            for (name, args, f) in ops {
                check_unary(name, args, &x, dtype, f, tol)?;
            }
            let y = randn(&[n], dtype, 61);
            let ax = x.abs()?;
            let mut g = G::new();
            let xv = g.input("x", &[n], dtype);
            let yv = g.input("y", &[n], dtype);
            let p = g.op("tp::pow", vec![t(xv), t(yv)], &[n], dtype);
            let (graph, region) = g.finish(&[p], RegionKind::Pointwise);
            for base in [&x, &ax] {
                let out = run(
                    &graph,
                    &region,
                    &HashMap::from([(xv, base.clone()), (yv, y.clone())]),
                )?;
                assert_close(&out[0], &base.pow(&y)?, 4e-6, 1e-30, "pow");
            }
        }
    }
    // Integer inputs compute in f32.
    let i = ints(&[1000], DType::I32, 20, 62);
    check_unary(
        "tp::exp",
        vec![],
        &i,
        DType::F32,
        Tensor::exp,
        Some((2e-6, 0.0)),
    )?;
    // W1: gelu_tanh written out, W2: silu(a) * b, at the parallel size.
    let n = 1 << 17;
    let a = randn(&[n], DType::F32, 63);
    let b = randn(&[n], DType::F32, 64);
    let mut g = G::new();
    let av = g.input("a", &[n], DType::F32);
    let bv = g.input("b", &[n], DType::F32);
    let s = g.op("tp::sigmoid", vec![t(av)], &[n], DType::F32);
    let m = g.op("tp::mul", vec![t(av), t(s)], &[n], DType::F32);
    let o = g.op("tp::mul", vec![t(m), t(bv)], &[n], DType::F32);
    let (graph, region) = g.finish(&[o], RegionKind::Pointwise);
    let out = run(
        &graph,
        &region,
        &HashMap::from([(av, a.clone()), (bv, b.clone())]),
    )?;
    assert_close(
        &out[0],
        &a.mul(&a.sigmoid()?)?.mul(&b)?,
        4e-6,
        1e-30,
        "silu_mul",
    );
    Ok(())
}

// ---- reductions ---------------------------------------------------------------------------------

fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "tp::sum",
        ReduceOp::Mean => "tp::mean",
        ReduceOp::Prod => "tp::prod",
        ReduceOp::Amax => "tp::amax",
        ReduceOp::Amin => "tp::amin",
    }
}

fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &s)| match (dims.contains(&d), keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Reduces `x` (optionally `x * w` fused in) with `op` over `dims`; returns compiled and eager.
fn reduce_case(
    op: ReduceOp,
    x: &Tensor,
    w: Option<&Tensor>,
    dims: &[usize],
    keepdim: bool,
) -> R<(Tensor, Tensor)> {
    let shape = x.shape().to_vec();
    let dtype = x.dtype();
    let mut g = G::new();
    let xv = g.input("x", &shape, dtype);
    let mut feed = HashMap::from([(xv, x.clone())]);
    let (value, eager_in) = match w {
        Some(w) => {
            let wv = g.input("w", w.shape(), w.dtype());
            feed.insert(wv, w.clone());
            let pd = DType::promote(dtype, w.dtype());
            (g.op("tp::mul", vec![t(xv), t(wv)], &shape, pd), x.mul(w)?)
        }
        None => (xv, x.clone()),
    };
    let vd = eager_in.dtype();
    let out_dtype = match op {
        ReduceOp::Sum | ReduceOp::Prod if !vd.is_float() => DType::I64,
        _ => vd,
    };
    let dims_i: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let red = g.op(
        reduce_name(op),
        vec![
            t(value),
            BuilderArg::named("dim", dims_i.clone()),
            BuilderArg::named("keepdim", keepdim),
        ],
        &reduced_shape(&shape, dims, keepdim),
        out_dtype,
    );
    let kind = RegionKind::Reduction {
        reduction: red.node,
        op,
        dims: dims.to_vec(),
        keepdim,
    };
    let (graph, region) = g.finish(&[red], kind);
    let out = run(&graph, &region, &feed)?.remove(0);
    let want = match op {
        ReduceOp::Sum => eager_in.sum(&dims_i, keepdim)?,
        ReduceOp::Mean => eager_in.mean(&dims_i, keepdim)?,
        ReduceOp::Prod => eager_in.prod(&dims_i, keepdim)?,
        ReduceOp::Amax => eager_in.amax(&dims_i, keepdim)?,
        ReduceOp::Amin => eager_in.amin(&dims_i, keepdim)?,
    };
    Ok((out, want))
}

/// Relative tolerance of a float sum of `n` terms of magnitude ~1 (accumulated in f32 blocks).
fn sum_tol(dtype: DType, n: usize) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 1e-6 * (n as f64).sqrt().max(4.0),
    }
}

#[test]
fn weighted_sum_reduces_to_one_value_at_every_size() -> R<()> {
    let _l = shared();
    for n in [0usize, 1, 3, 17, 1000, 1 << 17, (1 << 20) + 37] {
        for dtype in [DType::F32, DType::F64] {
            let x = randn(&[n], dtype, 70);
            let w = randn(&[n], dtype, 71);
            let (got, want) = reduce_case(ReduceOp::Sum, &x, Some(&w), &[0], false)?;
            // Absolute error scale: sqrt(n) terms of size ~1.
            let atol = sum_tol(dtype, n) * (n as f64).sqrt().max(1.0);
            assert_close(
                &got,
                &want,
                sum_tol(dtype, n),
                atol,
                &format!("(x*w).sum() {dtype} n={n}"),
            );
        }
    }
    Ok(())
}

#[test]
fn sums_over_rows_and_columns_of_a_matrix() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (r, c) in [(1usize, 1usize), (3, 5), (17, 1000), (300, 7), (1024, 256)] {
            let x = randn(&[r, c], dtype, 72);
            for dims in [vec![1usize], vec![0], vec![0, 1]] {
                for keepdim in [false, true] {
                    let n = dims.iter().map(|&d| [r, c][d]).product::<usize>();
                    let (got, want) = reduce_case(ReduceOp::Sum, &x, None, &dims, keepdim)?;
                    let tol = sum_tol(dtype, n);
                    let what = format!("sum {dtype} [{r}, {c}] dims {dims:?} keepdim={keepdim}");
                    assert_close(&got, &want, tol, tol * (n as f64).sqrt(), &what);
                    let (got, want) = reduce_case(ReduceOp::Mean, &x, None, &dims, keepdim)?;
                    assert_close(&got, &want, tol, tol, &format!("mean: {what}"));
                }
            }
            // A weight broadcast along the reduced dim (stride 0 there: loaded once per run).
            let w = randn(&[r, 1], dtype, 74);
            let (got, want) = reduce_case(ReduceOp::Sum, &x, Some(&w), &[1], false)?;
            let tol = sum_tol(dtype, c);
            assert_close(
                &got,
                &want,
                tol * 2.0,
                tol * (c as f64).sqrt() * 2.0,
                "(x * w[:, None]).sum(1)",
            );
            // Transposed input: the reduced dim is strided.
            let xt = randn(&[c, r], dtype, 73).t()?;
            let (got, want) = reduce_case(ReduceOp::Sum, &xt, None, &[1], false)?;
            let tol = sum_tol(dtype, c);
            assert_close(
                &got,
                &want,
                tol,
                tol * (c as f64).sqrt(),
                "sum of a transposed input",
            );
        }
    }
    Ok(())
}

#[test]
fn amax_amin_propagate_nan_and_prod_and_integer_sums_match() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16] {
        for n in [1usize, 18, 1000, 1 << 17, 1 << 19] {
            let x = specials(n, dtype, 74);
            let x2 = randn(&[4, n], dtype, 75);
            for op in [ReduceOp::Amax, ReduceOp::Amin] {
                let (got, want) = reduce_case(op, &x, None, &[0], false)?;
                assert_same(&got, &want, &format!("{op:?} with NaN, n={n}"));
                let (got, want) = reduce_case(op, &x2, None, &[1], true)?;
                assert_same(&got, &want, &format!("{op:?} rows, n={n}"));
                // Without NaN: the real extremum (signed zeros aside).
                let y = x.slice(0, Some(1.min(n as i64)), None, 1)?;
                if y.numel() > 0 {
                    let (got, want) = reduce_case(op, &y, None, &[0], false)?;
                    assert_close(&got, &want, 0.0, 0.0, &format!("{op:?} without NaN"));
                }
            }
        }
        let p = randn(&[64, 33], DType::F64, 76)
            .mul_scalar(0.1)?
            .add_scalar(1.0)?
            .to_dtype(dtype)?;
        let (got, want) = reduce_case(ReduceOp::Prod, &p, None, &[1], false)?;
        assert_close(&got, &want, sum_tol(dtype, 33) * 4.0, 0.0, "prod");
    }
    for dtype in [DType::I32, DType::I64, DType::Bool] {
        let x = ints(&[37, 1000], dtype, 1 << 20, 77);
        for op in [
            ReduceOp::Sum,
            ReduceOp::Amax,
            ReduceOp::Amin,
            ReduceOp::Prod,
        ] {
            for dims in [vec![0usize], vec![1], vec![0, 1]] {
                let (got, want) = reduce_case(op, &x, None, &dims, false)?;
                assert_same(&got, &want, &format!("{op:?} {dtype} dims {dims:?}"));
            }
        }
        // Long integer sums split across threads: still exact.
        let big = ints(&[1 << 19], dtype, 1000, 78);
        let (got, want) = reduce_case(ReduceOp::Sum, &big, None, &[0], false)?;
        assert_same(&got, &want, &format!("long {dtype} sum"));
    }
    Ok(())
}

#[test]
fn empty_reductions_follow_eager() -> R<()> {
    let _l = shared();
    let x = Tensor::zeros(&[0, 4], DType::F32);
    let (got, want) = reduce_case(ReduceOp::Sum, &x, None, &[0], false)?;
    assert_same(&got, &want, "sum over an empty dim");
    let (got, _) = reduce_case(ReduceOp::Mean, &x, None, &[0], false)?;
    assert!(
        got.to_vec::<f32>()?.iter().all(|v| v.is_nan()),
        "mean of nothing is NaN"
    );
    let (got, want) = reduce_case(ReduceOp::Prod, &x, None, &[0], false)?;
    assert_same(&got, &want, "prod over an empty dim");
    let (got, want) = reduce_case(ReduceOp::Sum, &x, None, &[1], false)?;
    assert_same(&got, &want, "sum into an empty output");
    // amax over nothing has no identity: an error, not garbage.
    let mut g = G::new();
    let xv = g.input("x", &[0, 4], DType::F32);
    let red = g.op(
        "tp::amax",
        vec![
            t(xv),
            BuilderArg::named("dim", vec![0i64]),
            BuilderArg::named("keepdim", false),
        ],
        &[4],
        DType::F32,
    );
    let kind = RegionKind::Reduction {
        reduction: red.node,
        op: ReduceOp::Amax,
        dims: vec![0],
        keepdim: false,
    };
    let (graph, region) = g.finish(&[red], kind);
    assert!(run(&graph, &region, &HashMap::from([(xv, x.clone())])).is_err());
    Ok(())
}

// ---- softmax ------------------------------------------------------------------------------------

fn softmax_case(x: &Tensor, log: bool) -> R<(Tensor, Tensor)> {
    let shape = x.shape().to_vec();
    let dtype = x.dtype();
    let mut g = G::new();
    let xv = g.input("x", &shape, dtype);
    let name = if log {
        "tp::log_softmax"
    } else {
        "tp::softmax"
    };
    let s = g.op(
        name,
        vec![t(xv), BuilderArg::named("dim", -1i64)],
        &shape,
        dtype,
    );
    let (graph, region) = g.finish(&[s], RegionKind::Softmax { node: s.node, log });
    let got = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?.remove(0);
    let want = if log {
        x.log_softmax(-1)?
    } else {
        x.softmax(-1)?
    };
    Ok((got, want))
}

#[test]
fn softmax_rows_with_infinities_and_nan() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (r, c) in [(1usize, 1usize), (3, 5), (7, 17), (64, 1000), (130, 1024)] {
            let mut v = Tensor::randn_seeded(&[r, c], DType::F64, 80)?
                .mul_scalar(3.0)?
                .to_vec::<f64>()?;
            // Row 0: some -inf entries; row 1 (if any): all -inf; row 2: a NaN; row 3: +inf.
            for (j, x) in v.iter_mut().enumerate().take(c) {
                if j % 3 == 1 {
                    *x = f64::NEG_INFINITY;
                }
            }
            if r > 1 {
                v[c..2 * c].iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
            }
            if r > 2 {
                v[2 * c + c / 2] = f64::NAN;
            }
            if r > 3 {
                v[3 * c] = f64::INFINITY;
            }
            let x = Tensor::from_vec(v, &[r, c])?.to_dtype(dtype)?;
            let tol = match dtype {
                DType::F64 => 1e-13,
                DType::F32 => 2e-6,
                DType::F16 => 2e-3,
                _ => 1.6e-2,
            };
            for log in [false, true] {
                let (got, want) = softmax_case(&x, log)?;
                // log-softmax subtracts the row's shift (~10 here): absolute error ~ its ulp.
                let atol = if log { tol * 16.0 } else { tol * 1e-3 };
                assert_close(
                    &got,
                    &want,
                    tol,
                    atol,
                    &format!("softmax log={log} {dtype} [{r}, {c}]"),
                );
            }
            // A transposed input (strided rows) gives the same result.
            let xt = x.t()?.contiguous()?.t()?;
            let (got, want) = softmax_case(&xt, false)?;
            assert_close(
                &got,
                &want,
                tol,
                tol * 1e-3,
                "softmax of a transposed input",
            );
        }
    }
    Ok(())
}

// ---- caching, reuse, memory, errors -------------------------------------------------------------

#[test]
fn one_artifact_serves_every_size_with_the_same_layout() -> R<()> {
    let _l = shared();
    let mut arts = Vec::new();
    for (rows, cols) in [(4usize, 1024usize), (1000, 1024), (7, 333)] {
        let (graph, region, [x, bias, r]) = w3_graph(rows, cols, DType::F32);
        let lowered = lower(&graph, &region)?;
        let xt = randn(&[rows, cols], DType::F32, 90);
        let bt = randn(&[cols], DType::F32, 91);
        let rt = randn(&[rows, cols], DType::F32, 92);
        let feed = HashMap::from([(x, xt.clone()), (bias, bt.clone()), (r, rt.clone())]);
        let inputs: Vec<&Tensor> = lowered.inputs.iter().map(|v| &feed[v]).collect();
        let out = Tensor::zeros(&[rows, cols], DType::F32);
        let k = cache::launch_lowered(&lowered, &inputs, &[&out])?;
        assert_same(&out, &xt.add(&bt)?.relu()?.add(&rt)?, "w3");
        assert!(cache::contains(&lowered.spec, k.layout()));
        arts.push((lowered.spec, k));
    }
    // The specs of the three sizes are equal (sizes are not part of a spec) ...
    assert_eq!(arts[0].0, arts[1].0);
    assert_eq!(arts[0].0, arts[2].0);
    // ... and so is the compiled artifact.
    assert!(Arc::ptr_eq(&arts[0].1, &arts[1].1));
    assert!(Arc::ptr_eq(&arts[0].1, &arts[2].1));
    assert!(arts[0].1.compile_time().as_secs_f64() > 0.0);
    // W3 is f32 arithmetic: assembled at the host's full width (unless `TP_WIDE_ASM=0`), or
    // Cranelift's 4 lanes.
    let assembled =
        tensorplay_math::bulk::env_enables(std::env::var("TP_WIDE_ASM").ok().as_deref());
    let full_width = tensorplay_compiler::codegen::cpu::math::bulk::level()
        .filter(|_| assembled)
        .map_or(4, |l| l.lanes());
    assert_eq!(arts[0].1.vector_lanes(), full_width);
    // A broadcast changes the layout (a new artifact), a contiguous 1-D input does too.
    let k = &arts[0].1;
    let lowered = &arts[0].0;
    let x = randn(&[5, 8], DType::F32, 93);
    let b = randn(&[8], DType::F32, 94);
    let out = Tensor::zeros(&[5, 8], DType::F32);
    let e = k.launch(&[&x.t()?.contiguous()?.t()?, &b, &x], &[&out]);
    assert!(
        e.is_err(),
        "a transposed operand does not fit a unit-stride kernel"
    );
    let k2 = cache::launch(lowered, &[&x.t()?.contiguous()?.t()?, &b, &x], &[&out])?;
    assert!(!Arc::ptr_eq(k, &k2));
    assert_same(&out, &x.add(&b)?.relu()?.add(&x)?, "w3 transposed");
    Ok(())
}

#[test]
fn launch_errors_instead_of_undefined_behaviour() -> R<()> {
    let _l = shared();
    let (graph, region, _) = w3_graph(4, 8, DType::F32);
    let spec = lower(&graph, &region)?.spec;
    let x = randn(&[4, 8], DType::F32, 95);
    let b = randn(&[8], DType::F32, 96);
    let out = Tensor::zeros(&[4, 8], DType::F32);
    // Wrong counts, dtypes, shapes, fake tensors, self-overlapping outputs.
    assert!(cache::launch(&spec, &[&x, &b], &[&out]).is_err());
    assert!(cache::launch(&spec, &[&x, &b, &x], &[]).is_err());
    let xd = x.to_dtype(DType::F64)?;
    assert!(cache::launch(&spec, &[&xd, &b, &x], &[&out]).is_err());
    let b5 = randn(&[5], DType::F32, 97);
    assert!(cache::launch(&spec, &[&x, &b5, &x], &[&out]).is_err());
    let small = Tensor::zeros(&[4, 7], DType::F32);
    assert!(cache::launch(&spec, &[&x, &b, &x], &[&small]).is_err());
    let fake = Tensor::empty_fake(&[4, 8], DType::F32, Device::Cpu);
    assert!(cache::launch(&spec, &[&fake, &b, &x], &[&out]).is_err());
    assert!(cache::launch(&spec, &[&x, &b, &x], &[&fake]).is_err());
    let overlapping = Tensor::zeros(&[1, 8], DType::F32).expand(&[4, 8])?;
    assert!(cache::launch(&spec, &[&x, &b, &x], &[&overlapping]).is_err());
    // Malformed specs are rejected before any code is emitted.
    let mut bad = spec.clone();
    bad.inputs.pop();
    assert!(
        cpu::compile(
            &bad,
            &tensorplay_compiler::codegen::kernel::LoopLayout {
                dims: 1,
                reduced: 0,
                kept_inner: false,
                in_place: false,
                classes: vec![StrideClass::Unit; 3],
            }
        )
        .is_err()
    );
    let good_layout = cpu::plan(&spec, &[&x, &b, &x], &[&out], None)?
        .layout()
        .clone();
    let mut wrong = good_layout.clone();
    wrong.classes.pop();
    assert!(cpu::compile(&spec, &wrong).is_err());
    // Ops that are not elementwise builtins do not lower.
    let mut g = G::new();
    let xv = g.input("x", &[4, 8], DType::F32);
    let m = g.op("tp::matmul", vec![t(xv), t(xv)], &[4, 8], DType::F32);
    let (graph, region) = g.finish(&[m], RegionKind::Pointwise);
    assert!(lower(&graph, &region).is_err());
    // Metadata that contradicts eager's dtype rules is an error, not a silent cast.
    let mut g = G::new();
    let xv = g.input("x", &[4], DType::I32);
    let e = g.op("tp::exp", vec![t(xv)], &[4], DType::I32);
    let (graph, region) = g.finish(&[e], RegionKind::Pointwise);
    assert!(lower(&graph, &region).is_err());
    Ok(())
}

#[test]
fn dropping_compiled_kernels_frees_their_code() -> R<()> {
    let _l = LOCK.write().unwrap_or_else(|p| p.into_inner());
    let (graph, region, _) = w3_graph(4, 8, DType::F32);
    let spec = lower(&graph, &region)?.spec;
    let x = randn(&[4, 8], DType::F32, 98);
    let b = randn(&[8], DType::F32, 99);
    let out = Tensor::zeros(&[4, 8], DType::F32);
    let layout = cpu::plan(&spec, &[&x, &b, &x], &[&out], None)?
        .layout()
        .clone();
    let base = live_kernels();
    let held: Vec<_> = (0..50)
        .map(|_| cpu::compile(&spec, &layout))
        .collect::<R<_>>()?;
    assert_eq!(live_kernels(), base + 50);
    held[7].launch(&[&x, &b, &x], &[&out])?;
    drop(held);
    assert_eq!(live_kernels(), base);
    // Many compile/drop cycles do not grow the resident set without bound.
    let rss = || -> usize {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        s.split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
            * 4096
    };
    for _ in 0..200 {
        drop(cpu::compile(&spec, &layout)?);
    }
    let before = rss();
    for _ in 0..1000 {
        drop(cpu::compile(&spec, &layout)?);
    }
    let grown = rss().saturating_sub(before);
    // Leaking each kernel's code would grow it by at least a page per kernel (4 MB here).
    assert!(
        grown < 2 << 20,
        "1000 compile/drop cycles grew the RSS by {grown} bytes"
    );
    assert_eq!(live_kernels(), base);
    Ok(())
}

#[test]
fn specs_print_stably_and_reduction_prologues_fuse() -> R<()> {
    let _l = shared();
    let (graph, region, _) = w3_graph(8, 16, DType::F16);
    let spec = lower(&graph, &region)?.spec;
    assert_eq!(
        spec.to_string(),
        "kernel pointwise rank=2 inputs=[f16, f16, f16] outputs=[f16]
  %0 = load in0 : f16
  %1 = load in1 : f16
  %2 = add(%0, %1) : f16
  %3 = relu(%2) : f16
  %4 = load in2 : f16
  %5 = add(%3, %4) : f16
  store out0, %5
"
    );
    // sum((x * w) > 0, dim=1) on i32 inputs: a bool prologue summed into i64.
    let mut g = G::new();
    let x = g.input("x", &[6, 9], DType::I32);
    let w = g.input("w", &[9], DType::F32);
    let m = g.op("tp::mul", vec![t(x), t(w)], &[6, 9], DType::F32);
    let z = g.scalar(Constant::Int {
        value: 0,
        dtype: DType::I64,
    });
    let c = g.op("tp::gt", vec![t(m), t(z)], &[6, 9], DType::Bool);
    let s = g.op(
        "tp::sum",
        vec![
            t(c),
            BuilderArg::named("dim", vec![1i64]),
            BuilderArg::named("keepdim", false),
        ],
        &[6],
        DType::I64,
    );
    let kind = RegionKind::Reduction {
        reduction: s.node,
        op: ReduceOp::Sum,
        dims: vec![1],
        keepdim: false,
    };
    let (graph, region) = g.finish(&[s], kind);
    let lowered = lower(&graph, &region)?;
    assert!(matches!(lowered.spec.kind, LoopKind::Reduce { .. }));
    assert_eq!(
        lowered.spec.to_string(),
        "kernel reduce sum(%5) dims=[1] keepdim=false rank=2 inputs=[i32, f32] outputs=[i64]
  %0 = load in0 : i32
  %1 = cast %0 : f32
  %2 = load in1 : f32
  %3 = mul(%1, %2) : f32
  %4 = param 0 : f32
  %5 = gt(%3, %4) in f32 : bool
"
    );
    assert_eq!(lowered.params, vec![Lit::Float(0.0)]);
    let xt = ints(&[6, 9], DType::I32, 10, 100);
    let wt = randn(&[9], DType::F32, 101);
    let out = run(
        &graph,
        &region,
        &HashMap::from([(x, xt.clone()), (w, wt.clone())]),
    )?;
    assert_same(
        &out[0],
        &xt.mul(&wt)?.gt_scalar(0)?.sum(&[1], false)?,
        "fused prologue sum",
    );
    Ok(())
}

#[test]
fn an_explicit_iteration_shape_reduces_a_broadcast_value() -> R<()> {
    let _l = shared();
    // sum over dim 0 of x ([1, 5], broadcast to [4, 5] inside the region): 4 * x.
    let mut g = G::new();
    let x = g.input("x", &[1, 5], DType::F32);
    let s = g.op(
        "tp::sum",
        vec![
            t(x),
            BuilderArg::named("dim", vec![0i64]),
            BuilderArg::named("keepdim", false),
        ],
        &[5],
        DType::F32,
    );
    let kind = RegionKind::Reduction {
        reduction: s.node,
        op: ReduceOp::Sum,
        dims: vec![0],
        keepdim: false,
    };
    let (graph, region) = g.finish(&[s], kind);
    let spec = lower(&graph, &region)?.spec;
    let xt = randn(&[1, 5], DType::F32, 102);
    let out = Tensor::zeros(&[5], DType::F32);
    cache::launch_with_shape(&spec, &[4, 5], &[&xt], &[&out])?;
    assert_same(
        &out,
        &xt.expand(&[4, 5])?.sum(&[0], false)?,
        "sum of a broadcast",
    );
    Ok(())
}

#[test]
fn ten_op_chain_with_scalar_constants_is_bit_exact() -> R<()> {
    let _l = shared();
    // W6: sqrt(abs((((x * 1.1 + 0.3) * x - 0.7) / (x * x + 1)) + x)), no FMA contraction.
    for dtype in [DType::F32, DType::F64] {
        for n in [17usize, 1 << 17] {
            let mut g = G::new();
            let x = g.input("x", &[n], dtype);
            let (c11, c03, c07, c1) = (g.float(1.1), g.float(0.3), g.float(0.7), g.float(1.0));
            let t1 = g.op("tp::mul", vec![t(x), t(c11)], &[n], dtype);
            let t2 = g.op("tp::add", vec![t(t1), t(c03)], &[n], dtype);
            let t3 = g.op("tp::mul", vec![t(t2), t(x)], &[n], dtype);
            let t4 = g.op("tp::sub", vec![t(t3), t(c07)], &[n], dtype);
            let t5 = g.op("tp::mul", vec![t(x), t(x)], &[n], dtype);
            let t6 = g.op("tp::add", vec![t(t5), t(c1)], &[n], dtype);
            let t7 = g.op("tp::div", vec![t(t4), t(t6)], &[n], dtype);
            let t8 = g.op("tp::add", vec![t(t7), t(x)], &[n], dtype);
            let t9 = g.op("tp::abs", vec![t(t8)], &[n], dtype);
            let t10 = g.op("tp::sqrt", vec![t(t9)], &[n], dtype);
            let (graph, region) = g.finish(&[t10], RegionKind::Pointwise);
            let xt = specials(n, dtype, 110);
            let out = run(&graph, &region, &HashMap::from([(x, xt.clone())]))?;
            let want = xt
                .mul_scalar(1.1)?
                .add_scalar(0.3)?
                .mul(&xt)?
                .sub_scalar(0.7)?
                .div(&xt.mul(&xt)?.add_scalar(1.0)?)?
                .add(&xt)?
                .abs()?
                .sqrt()?;
            assert_same(&out[0], &want, &format!("W6 {dtype} n={n}"));
        }
    }
    Ok(())
}

#[test]
fn column_reductions_vectorize_across_kept_points() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        // [reduced, kept] row-major: sum over dim 0 walks rows, 4 vectors of outputs at a time;
        // odd kept sizes exercise the single-vector and scalar tails.
        for (r, c) in [(2usize, 2usize), (5, 3), (33, 17), (1000, 37), (600, 300)] {
            let x = specials(r * c, dtype, 120).reshape(&[r, c])?;
            let xr = randn(&[r, c], dtype, 121);
            for op in [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Amax,
                ReduceOp::Amin,
                ReduceOp::Prod,
            ] {
                let near_one = xr.mul_scalar(0.02)?.add_scalar(1.0)?;
                let input = match op {
                    ReduceOp::Amax | ReduceOp::Amin => &x,
                    ReduceOp::Prod => &near_one,
                    _ => &xr,
                };
                let (got, want) = reduce_case(op, input, None, &[0], false)?;
                let what = format!("{op:?} over dim 0 of {dtype} [{r}, {c}]");
                match op {
                    ReduceOp::Amax | ReduceOp::Amin => assert_same(&got, &want, &what),
                    ReduceOp::Prod => {
                        assert_close(&got, &want, sum_tol(dtype, r) * 8.0, 0.0, &what)
                    }
                    _ => {
                        let tol = sum_tol(dtype, r);
                        assert_close(&got, &want, tol, tol * (r as f64).sqrt(), &what);
                    }
                }
            }
            // The plan really is column mode.
            let mut g = G::new();
            let xv = g.input("x", &[r, c], dtype);
            let red = g.op(
                "tp::sum",
                vec![
                    t(xv),
                    BuilderArg::named("dim", vec![0i64]),
                    BuilderArg::named("keepdim", true),
                ],
                &[1, c],
                dtype,
            );
            let kind = RegionKind::Reduction {
                reduction: red.node,
                op: ReduceOp::Sum,
                dims: vec![0],
                keepdim: true,
            };
            let (graph, region) = g.finish(&[red], kind);
            let spec = lower(&graph, &region)?.spec;
            let out = Tensor::zeros(&[1, c], dtype);
            let k = cache::launch(&spec, &[&xr], &[&out])?;
            assert!(k.layout().kept_inner, "{}", k.layout());
            let tol = sum_tol(dtype, r);
            assert_close(
                &out,
                &xr.sum(&[0], true)?,
                tol,
                tol * (r as f64).sqrt(),
                "keepdim column sum",
            );
        }
    }
    // A middle dim of a 3-D tensor, a weighted prologue with a broadcast weight, a transposed
    // output, and the parallel path.
    let x = randn(&[8, 300, 130], DType::F32, 122);
    let w = randn(&[300, 1], DType::F32, 123);
    let (got, want) = reduce_case(ReduceOp::Sum, &x, Some(&w), &[1], false)?;
    assert_close(&got, &want, 2e-5, 2e-4, "sum over the middle dim");
    let (got, want) = reduce_case(ReduceOp::Amax, &x, None, &[0, 1], false)?;
    assert_same(&got, &want, "amax over the two outer dims");
    let big = randn(&[256, 2304], DType::F32, 124);
    let (got, want) = reduce_case(ReduceOp::Sum, &big, None, &[0], false)?;
    assert_close(&got, &want, 1e-5, 1e-4, "parallel column sum");
    Ok(())
}

/// Layer norm's weight gradient, `sum(g * xhat * rstd, dims=[0, 1])` with `rstd` of shape
/// `[B, T, 1]`: the broadcast input is one value per reduced point (unit stride over the reduced
/// rows, zero across the kept columns), which must not keep the reduction out of column mode.
#[test]
fn column_reductions_take_inputs_broadcast_across_the_columns() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64] {
        let (b, tt, c) = (16usize, 32usize, 64usize);
        let x = randn(&[b, tt, c], dtype, 130);
        let w = randn(&[b, tt, 1], dtype, 131);
        let (got, want) = reduce_case(ReduceOp::Sum, &x, Some(&w), &[0, 1], false)?;
        let tol = sum_tol(dtype, b * tt);
        let what = format!("{dtype} sum over [0, 1] of [16, 32, 64] * [16, 32, 1]");
        assert_close(&got, &want, tol, tol * ((b * tt) as f64).sqrt(), &what);
        // The plan is column mode.
        let mut g = G::new();
        let xv = g.input("x", &[b, tt, c], dtype);
        let wv = g.input("w", &[b, tt, 1], dtype);
        let prod = g.op("tp::mul", vec![t(xv), t(wv)], &[b, tt, c], dtype);
        let red = g.op(
            "tp::sum",
            vec![
                t(prod),
                BuilderArg::named("dim", vec![0i64, 1]),
                BuilderArg::named("keepdim", false),
            ],
            &[c],
            dtype,
        );
        let kind = RegionKind::Reduction {
            reduction: red.node,
            op: ReduceOp::Sum,
            dims: vec![0, 1],
            keepdim: false,
        };
        let (graph, region) = g.finish(&[red], kind);
        let spec = lower(&graph, &region)?.spec;
        let out = Tensor::zeros(&[c], dtype);
        let k = cache::launch(&spec, &[&x, &w], &[&out])?;
        assert!(k.layout().kept_inner, "{what}: {}", k.layout());
        assert_close(&out, &want, tol, tol * ((b * tt) as f64).sqrt(), &what);
    }
    Ok(())
}

#[test]
fn zero_dimensional_tensors() -> R<()> {
    let _l = shared();
    let x = Tensor::from_vec(vec![-2.5f32], &[])?;
    let y = Tensor::from_vec(vec![4.0f32], &[])?;
    check_binary("tp::mul", DType::F32, DType::F32, &x, &y, |a, b| a.mul(b))?;
    // A 0-d tensor broadcast against a vector.
    let v = randn(&[7], DType::F32, 130);
    check_binary("tp::add", DType::F32, DType::F32, &v, &x, |a, b| a.add(b))?;
    let (got, want) = reduce_case(ReduceOp::Sum, &x, None, &[], false)?;
    assert_same(&got, &want, "sum of a 0-d tensor");
    let (got, want) = softmax_case(&x, false)?;
    assert_same(&got, &want, "softmax of a 0-d tensor");
    Ok(())
}

#[test]
fn half_conversions_round_to_nearest_even_everywhere() -> R<()> {
    let _l = shared();
    // Every f16 value, the midpoints between neighbours (ties) and one f32 ulp either side.
    let mut vals: Vec<f32> = Vec::new();
    // Decode every f16 pattern with f32 arithmetic (exact).
    let all16: Vec<f32> = (0..=u16::MAX as u32)
        .map(|b| {
            let sign = if b & 0x8000 != 0 { -1.0f32 } else { 1.0 };
            let e = (b >> 10) & 0x1f;
            let m = (b & 0x3ff) as f32;
            sign * match e {
                0 => m * 2f32.powi(-24),
                31 if m == 0.0 => f32::INFINITY,
                31 => f32::NAN,
                _ => (1.0 + m / 1024.0) * 2f32.powi(e as i32 - 15),
            }
        })
        .collect();
    for w in all16.windows(2) {
        let (a, b) = (w[0], w[1]);
        vals.push(a);
        if a.is_finite() && b.is_finite() && a.signum() == b.signum() {
            let mid = ((a as f64 + b as f64) / 2.0) as f32;
            vals.push(mid);
            vals.push(f32::from_bits(mid.to_bits() + 1));
            vals.push(f32::from_bits(mid.to_bits() - 1));
        }
    }
    vals.extend([
        65519.0,
        65520.0,
        65536.0,
        1e9,
        -1e9,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    let n = vals.len();
    let x = Tensor::from_vec(vals, &[n])?;
    // f32 -> f16 (stored), against eager's conversion (F16C / correctly rounded).
    check_unary(
        "tp::to_dtype",
        vec![BuilderArg::named("dtype", DType::F16)],
        &x,
        DType::F16,
        |a| a.to_dtype(DType::F16),
        None,
    )?;
    // f16 -> f32 for every pattern (through the vector and the scalar load paths).
    let h = x.to_dtype(DType::F16)?;
    check_unary(
        "tp::to_dtype",
        vec![BuilderArg::named("dtype", DType::F32)],
        &h,
        DType::F32,
        |a| a.to_dtype(DType::F32),
        None,
    )?;
    // bf16: every value round-trips, and ties go to even (checked against the bit formula).
    let xb = x.to_vec::<f32>()?;
    let mut g = G::new();
    let xv = g.input("x", &[n], DType::F32);
    let c = g.op(
        "tp::to_dtype",
        vec![t(xv), BuilderArg::named("dtype", DType::BF16)],
        &[n],
        DType::BF16,
    );
    let (graph, region) = g.finish(&[c], RegionKind::Pointwise);
    let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
    let got = out[0].to_dtype(DType::F32)?.to_vec::<f32>()?;
    for (i, (&v, &gv)) in xb.iter().zip(&got).enumerate() {
        let b = v.to_bits();
        let want = if v.is_nan() {
            f32::NAN
        } else {
            f32::from_bits(((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16)
        };
        assert!(
            gv.to_bits() == want.to_bits() || (gv.is_nan() && want.is_nan()),
            "bf16 of {v:e} (element {i}): got {gv:e}, want {want:e}"
        );
    }
    Ok(())
}

// ---- pow by small constant exponents (strength reduction) ---------------------------------------

/// `pow(x, c)` over `[n]` with `x` of `dtype` and the scalar constant `c`; the output dtype is
/// eager's (`pow_scalar`'s result type).
fn pow_const_graph(n: usize, dtype: DType, c: Constant) -> (Graph, Region, ValueRef) {
    let out = match (&c, dtype) {
        (Constant::Float { .. }, d) if !d.is_float() => DType::F32,
        (Constant::Int { .. }, DType::Bool) => DType::I64,
        (_, d) => d,
    };
    let mut g = G::new();
    let xv = g.input("x", &[n], dtype);
    let cv = g.scalar(c);
    let p = g.op("tp::pow", vec![t(xv), t(cv)], &[n], out);
    let (graph, region) = g.finish(&[p], RegionKind::Pointwise);
    (graph, region, xv)
}

fn float_c(v: f64) -> Constant {
    Constant::Float {
        value: v,
        dtype: DType::F64,
    }
}

fn int_c(v: i64) -> Constant {
    Constant::Int {
        value: v,
        dtype: DType::I64,
    }
}

/// Distance from `got` to `want` in units of `dtype`'s ulp at `want` (subnormal ulps below the
/// smallest normal).
fn ulps_apart(got: f64, want: f64, dtype: DType) -> f64 {
    let (digits, emin) = match dtype {
        DType::F64 => (53, -1022),
        DType::F32 => (24, -126),
        DType::F16 => (11, -14),
        DType::BF16 => (8, -126),
        other => panic!("{other} is not a float dtype"),
    };
    let e = (want.abs().log2().floor() as i32).max(emin);
    // In two steps: `powi` of a subnormal power of two alone underflows to 0.
    let k = e - (digits - 1);
    (got - want).abs() / (2f64.powi(k / 2) * 2f64.powi(k - k / 2))
}

/// Pow's contract: NaN, infinities and zeros (with their signs) exactly, finite values within
/// `max_ulps` of eager.
fn assert_pow_close(got: &Tensor, want: &Tensor, x: &Tensor, max_ulps: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let dtype = got.dtype();
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let xs = x.to_vec_f64().unwrap();
    for i in 0..g.len() {
        let (a, b) = (g[i], w[i]);
        let ok = if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() || b == 0.0 {
            a == b && a.is_sign_negative() == b.is_sign_negative()
        } else {
            ulps_apart(a, b, dtype) <= max_ulps
        };
        assert!(ok, "{what}: x = {:e}: got {a:e}, want {b:e}", xs[i]);
    }
}

/// Inputs for pow: the specials, values whose small powers overflow or land among the
/// subnormals, and random normals.
fn pow_inputs(dtype: DType) -> Tensor {
    let extra = [
        2f64.powi(-50),
        -2f64.powi(-50),
        1e-12,
        -1.3e-13,
        1.1e-10,
        2.7e-20,
        1e19,
        -2e19,
        1.9e12,
        3e-3,
        255.5,
        -300.0,
        f64::MIN_POSITIVE,
        -5e-324,
    ];
    let s = specials(1001, DType::F64, 70).to_vec::<f64>().unwrap();
    let v: Vec<f64> = extra.iter().copied().chain(s).collect();
    let n = v.len();
    Tensor::from_vec(v, &[n]).unwrap().to_dtype(dtype).unwrap()
}

#[test]
fn pow_by_small_integer_constants_lowers_to_products() -> R<()> {
    let _l = shared();
    let text = |dtype: DType, c: Constant| -> R<String> {
        let (graph, region, _) = pow_const_graph(8, dtype, c);
        Ok(lower(&graph, &region)?.spec.to_string())
    };
    let head = "kernel pointwise rank=1 inputs=[f32] outputs=[f32]\n";
    assert_eq!(
        text(DType::F32, float_c(2.0))?,
        format!("{head}  %0 = load in0 : f32\n  %1 = mul(%0, %0) : f32\n  store out0, %1\n")
    );
    assert_eq!(
        text(DType::F32, float_c(3.0))?,
        format!(
            "{head}  %0 = load in0 : f32\n  %1 = mul(%0, %0) : f32\n  %2 = mul(%1, %0) : f32\n  \
             store out0, %2\n"
        )
    );
    // An integer exponent on a float tensor computes in f32 too.
    assert_eq!(text(DType::F32, int_c(3))?, text(DType::F32, float_c(3.0))?);
    assert_eq!(
        text(DType::F32, float_c(4.0))?,
        format!(
            "{head}  %0 = load in0 : f32\n  %1 = mul(%0, %0) : f32\n  %2 = mul(%1, %1) : f32\n  \
             store out0, %2\n"
        )
    );
    // x^0 = 1 (also for NaN): the input is not even loaded.
    assert_eq!(
        text(DType::F32, float_c(0.0))?,
        format!("{head}  %0 = const 1.0 : f32\n  store out0, %0\n")
    );
    assert_eq!(
        text(DType::F32, float_c(-0.0))?,
        text(DType::F32, float_c(0.0))?
    );
    assert_eq!(
        text(DType::F32, float_c(1.0))?,
        format!("{head}  %0 = load in0 : f32\n  store out0, %0\n")
    );
    assert_eq!(
        text(DType::F32, float_c(-1.0))?,
        format!(
            "{head}  %0 = load in0 : f32\n  %1 = const 1.0 : f32\n  %2 = div(%1, %0) : f32\n  \
             store out0, %2\n"
        )
    );
    assert_eq!(
        text(DType::F32, float_c(0.5))?,
        format!(
            "{head}  %0 = load in0 : f32\n  %1 = sqrt(%0) : f32\n  %2 = const 0.0 : f32\n  \
             %3 = maximum(%1, %2) : f32\n  %4 = const -inf : f32\n  %5 = eq(%0, %4) in f32 : bool\n  \
             %6 = const inf : f32\n  %7 = where(%5, %6, %3) : f32\n  store out0, %7\n"
        )
    );
    // Other exponents keep the general pow, the exponent a kernel argument.
    for c in [2.5, 5.0, -2.0, 1.0 + 2f64.powi(-20), f64::NAN] {
        assert_eq!(
            text(DType::F32, float_c(c))?,
            format!(
                "{head}  %0 = load in0 : f32\n  %1 = param 0 : f32\n  %2 = pow(%0, %1) : f32\n  \
                 store out0, %2\n"
            ),
            "exponent {c}"
        );
    }
    // Integers multiply in their own dtype (wrapping); f16 in f16 (held in f32, rounded once).
    assert_eq!(
        text(DType::I32, int_c(3))?,
        "kernel pointwise rank=1 inputs=[i32] outputs=[i32]\n  %0 = load in0 : i32\n  \
         %1 = mul(%0, %0) : i32\n  %2 = mul(%1, %0) : i32\n  store out0, %2\n"
    );
    assert_eq!(
        text(DType::Bool, int_c(2))?,
        "kernel pointwise rank=1 inputs=[bool] outputs=[i64]\n  %0 = load in0 : bool\n  \
         %1 = cast %0 : i64\n  %2 = mul(%1, %1) : i64\n  store out0, %2\n"
    );
    assert_eq!(
        text(DType::F16, float_c(2.0))?,
        "kernel pointwise rank=1 inputs=[f16] outputs=[f16]\n  %0 = load in0 : f16\n  \
         %1 = mul(%0, %0) : f16\n  store out0, %1\n"
    );
    // A negative integer exponent on an integer tensor is not a product: general pow.
    let (graph, region, _) = pow_const_graph(8, DType::I64, int_c(-1));
    assert!(lower(&graph, &region)?.spec.to_string().contains("pow("));
    Ok(())
}

#[test]
fn pow_by_small_constants_matches_eager_on_special_values() -> R<()> {
    let _l = shared();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = pow_inputs(dtype);
        let n = x.numel();
        for c in [0.0, -0.0, 1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.5] {
            let (graph, region, xv) = pow_const_graph(n, dtype, float_c(c));
            let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
            let want = x.pow_scalar(c)?;
            // Products round at most three times against pow's once; 0.5, 1 and -1 are one
            // correctly rounded operation (eager's libm pow is within 1 ulp itself).
            assert_pow_close(&out[0], &want, &x, 4.0, &format!("{dtype} x^{c}"));
        }
    }
    // An integer tensor to a float power computes in f32.
    let i = ints(&[1000], DType::I32, 3000, 71);
    for c in [2.0, 3.0, -1.0, 0.5] {
        let (graph, region, xv) = pow_const_graph(1000, DType::I32, float_c(c));
        let out = run(&graph, &region, &HashMap::from([(xv, i.clone())]))?;
        assert_pow_close(&out[0], &i.pow_scalar(c)?, &i, 4.0, &format!("i32 x^{c}"));
    }
    Ok(())
}

#[test]
fn integer_pow_by_constants_is_exact_and_wraps() -> R<()> {
    let _l = shared();
    for (dtype, range) in [
        (DType::I32, 1i64 << 20),
        (DType::I32, 40),
        (DType::I64, 1 << 40),
        (DType::I64, 3_000_000),
        (DType::Bool, 1),
    ] {
        let mut x = ints(&[1003], dtype, range, 72);
        if dtype != DType::Bool {
            // The extremes, whose powers wrap in every way.
            let (lo, hi) = if dtype == DType::I32 {
                (i32::MIN as i64, i32::MAX as i64)
            } else {
                (i64::MIN, i64::MAX)
            };
            let mut v = x.to_dtype(DType::I64)?.to_vec::<i64>()?;
            v[..6].copy_from_slice(&[lo, hi, lo + 1, -1, 0, 1]);
            x = Tensor::from_vec(v, &[1003])?.to_dtype(dtype)?;
        }
        for e in [0i64, 1, 2, 3, 4, 5] {
            let (graph, region, xv) = pow_const_graph(1003, dtype, int_c(e));
            let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
            assert_same(
                &out[0],
                &x.pow_scalar(e)?,
                &format!("{dtype} (range {range}) x^{e}"),
            );
        }
        // A bool exponent is 0 or 1.
        for b in [false, true] {
            if dtype == DType::Bool {
                continue; // two bool operands are rejected, like eager
            }
            let (graph, region, xv) = pow_const_graph(1003, dtype, Constant::Bool(b));
            let out = run(&graph, &region, &HashMap::from([(xv, x.clone())]))?;
            assert_same(&out[0], &x.pow_scalar(b)?, &format!("{dtype} x^{b}"));
        }
    }
    Ok(())
}

#[test]
fn w1_gelu_tanh_with_pow_scalar_compiles_to_products_and_matches_eager() -> R<()> {
    let _l = shared();
    fn w1(xs: &[Tensor]) -> R<Vec<Tensor>> {
        let x = &xs[0];
        let inner = x
            .add(&x.pow_scalar(3.0)?.mul_scalar(0.044715)?)?
            .mul_scalar(0.7978845608)?;
        Ok(vec![
            x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?,
        ])
    }
    let n = (1 << 17) + 3;
    let m = meta(&[n], DType::F32);
    let graph = tensorplay_compiler::capture::capture(
        w1,
        &[m],
        tensorplay_compiler::capture::CaptureOptions::default(),
    )?;
    let compiled = tensorplay_compiler::tp_compile(&graph)?;
    assert_eq!(compiled.num_kernels(), 1);
    let spec = lower(compiled.graph(), &compiled.plan().regions[0])?.spec;
    let text = spec.to_string();
    assert!(
        !text.contains("pow(") && text.contains("mul(%0, %0)"),
        "W1 still calls pow:\n{text}"
    );
    let mut x = randn(&[n], DType::F32, 73)
        .mul_scalar(3.0)?
        .to_vec::<f32>()?;
    x[..6].copy_from_slice(&[0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30]);
    let x = Tensor::from_vec(x, &[n])?;
    let got = compiled.run(std::slice::from_ref(&x))?;
    let want = w1(std::slice::from_ref(&x))?;
    // tanh is approximated within a few ulps; 1 + tanh cancels for large negative x, hence the
    // absolute term.
    assert_close(&got[0], &want[0], 1e-5, 1e-6, "W1");
    Ok(())
}
