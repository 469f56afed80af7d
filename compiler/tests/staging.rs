//! Staged pointwise kernels (bulk math over tiles, `codegen::cpu::staging`) against the inline
//! form of the same kernel.
//!
//! The bulk kernels return the same bits as the inline code for every input (NaN payloads
//! aside), so a kernel compiled with `bulk_math: true` must write exactly what the one compiled
//! with `bulk_math: false` writes, for every layout, size, sub-range and input. Every case here
//! compiles one lowered spec and layout both ways, launches both on the same tensors and
//! compares the outputs bit for bit (all NaNs equal), then checks them loosely against eager.
//! On hosts without bulk kernels (or with `TP_BULK_MATH=0`) only the inline half runs.

use std::collections::HashMap;
use std::sync::Once;

use tensorplay_compiler::codegen::cpu::math::bulk;
use tensorplay_compiler::codegen::cpu::{
    self, CodegenOptions, CompiledKernel, KernelArgs, LaunchPlan, ScalarArgs,
};
use tensorplay_compiler::codegen::kernel::{KernelSpec, Lit, LoopLayout, StrideClass, lower};
use tensorplay_compiler::passes::region::{Region, RegionKind};
use tensorplay_ir::graph::{BuilderArg, Constant, Graph, GraphBuilder};
use tensorplay_ir::{DType, Device, NodeId, OpClass, TensorMeta, ValueRef};
use tensorplay_runtime::Tensor;

type R<T> = tensorplay_ir::Result<T>;

// ---- graphs ----------------------------------------------------------------------------------

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

    fn input(&mut self, shape: &[usize], dtype: DType) -> ValueRef {
        let name = format!("in{}", self.inputs.len());
        let v = self
            .b
            .input(&name, TensorMeta::new(shape, dtype, Device::Cpu));
        self.inputs.push(v);
        v
    }

    /// An inlined f64 scalar constant.
    fn float(&mut self, value: f64) -> ValueRef {
        let v = self
            .b
            .constant(
                Constant::Float {
                    value,
                    dtype: DType::F64,
                },
                Device::Cpu,
            )
            .unwrap();
        self.inputs.push(v);
        v
    }

    /// The shape and dtype of a value built so far.
    fn meta(&self, v: ValueRef) -> (Vec<usize>, DType) {
        let m = self.b.graph().meta(v).unwrap();
        (m.static_shape().unwrap().to_vec(), m.dtype)
    }

    fn op(&mut self, name: &str, args: Vec<BuilderArg>, shape: &[usize], dtype: DType) -> ValueRef {
        let class = match name {
            "tp::softmax" | "tp::log_softmax" => OpClass::Reduction,
            _ => OpClass::Elementwise,
        };
        let m = TensorMeta::new(shape, dtype, Device::Cpu);
        let v = self.b.op(name, class, args, vec![m]).unwrap()[0];
        self.nodes.push(v.node);
        v
    }

    /// `name(a)`, same shape and dtype as `a`.
    fn un(&mut self, name: &str, a: ValueRef) -> ValueRef {
        let (shape, dtype) = self.meta(a);
        self.op(name, vec![t(a)], &shape, dtype)
    }

    /// `name(a, b)` with broadcasting; the dtype of the first tensor operand (constants are
    /// f64 scalars and only raise the category).
    fn bin(&mut self, name: &str, a: ValueRef, b: ValueRef) -> ValueRef {
        let ((sa, da), (sb, db)) = (self.meta(a), self.meta(b));
        let shape = tensorplay_ir::shape::broadcast_shapes("test", &sa, &sb).unwrap();
        let dtype = if self.is_const(a) { db } else { da };
        self.op(name, vec![t(a), t(b)], &shape, dtype)
    }

    /// `name(a, c)` for an f64 constant `c`.
    fn bin_c(&mut self, name: &str, a: ValueRef, c: f64) -> ValueRef {
        let cv = self.float(c);
        self.bin(name, a, cv)
    }

    fn cast(&mut self, a: ValueRef, to: DType) -> ValueRef {
        let shape = self.meta(a).0;
        self.op(
            "tp::to_dtype",
            vec![t(a), BuilderArg::named("dtype", to)],
            &shape,
            to,
        )
    }

    fn gelu(&mut self, a: ValueRef, approximate: &str) -> ValueRef {
        let (shape, dtype) = self.meta(a);
        let args = vec![t(a), BuilderArg::named("approximate", approximate)];
        self.op("tp::gelu", args, &shape, dtype)
    }

    fn is_const(&self, v: ValueRef) -> bool {
        self.inputs.contains(&v) && self.meta(v).0.is_empty()
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

// ---- kernels ---------------------------------------------------------------------------------

/// Whether this host runs staged kernels (bulk kernels present and not disabled); prints a note
/// once when it does not.
fn bulk_on() -> bool {
    static NOTE: Once = Once::new();
    let on = bulk::level().is_some();
    if !on {
        NOTE.call_once(|| {
            eprintln!(
                "note: no bulk math on this host (or TP_BULK_MATH=0): staged halves skipped, \
                 only the inline kernels are checked"
            )
        });
    }
    on
}

/// The inline and (when the host has bulk kernels) staged compilations of one spec and layout.
struct Pair {
    inline: CompiledKernel,
    staged: Option<CompiledKernel>,
}

/// Compiled pairs, by spec and layout (one test's cases share many).
#[derive(Default)]
struct Kernels(HashMap<(KernelSpec, LoopLayout), Pair>);

impl Kernels {
    fn get(&mut self, spec: &KernelSpec, layout: &LoopLayout) -> R<&Pair> {
        let key = (spec.clone(), layout.clone());
        if !self.0.contains_key(&key) {
            let inline = cpu::compile_with(spec, layout, &CodegenOptions { bulk_math: false })?;
            let staged = if bulk_on() {
                Some(cpu::compile_with(
                    spec,
                    layout,
                    &CodegenOptions { bulk_math: true },
                )?)
            } else {
                None
            };
            self.0.insert(key.clone(), Pair { inline, staged });
        }
        Ok(&self.0[&key])
    }
}

// ---- comparisons -----------------------------------------------------------------------------

/// Every element as f32 bits (f16 and bf16 widen exactly; f64 is not used here), NaNs mapped to
/// one value.
fn bits(x: &Tensor) -> Vec<u32> {
    let f = x.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    f.iter()
        .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
        .collect()
}

/// Bit-exact equality (all NaNs equal, signed zeros distinct).
fn assert_same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (bits(got), bits(want));
    if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
        panic!(
            "{what}: element {i} of {}: staged {} ({:#x}), inline {} ({:#x})",
            g.len(),
            f32::from_bits(g[i]),
            g[i],
            f32::from_bits(w[i]),
            w[i]
        );
    }
}

/// Closeness within `rtol`/`atol`: NaN where eager has NaN, the same infinity where eager has
/// one.
fn assert_close(got: &Tensor, want: &Tensor, (rtol, atol): (f64, f64), what: &str) {
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
        assert!(ok, "{what}: element {i}: compiled {a}, eager {b}");
    }
}

// ---- inputs ----------------------------------------------------------------------------------

/// NaN, infinities, signed zeros, subnormals (f32 and f64-only), huge values, and values where
/// exp/tanh/sigmoid change regime.
const SPECIALS: [f64; 24] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    1e-45,
    -1e-310,
    3.0e38,
    -3.4e38,
    1e30,
    -1e30,
    88.8,
    -104.0,
    -87.5,
    9.0,
    -9.5,
    1.0,
    -1.0,
    0.5,
    65504.0,
    70000.0,
    1e-8,
];

/// `n` values of `dtype`: the specials first (when `special`), then normals times `scale`.
fn data(shape: &[usize], dtype: DType, seed: u64, scale: f64, special: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let r = Tensor::randn_seeded(&[n], DType::F64, seed)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            if special && i < SPECIALS.len() {
                SPECIALS[i]
            } else {
                r[i] * scale
            }
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Random normals (scaled by 2) with the specials at the front.
fn specials(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    data(shape, dtype, seed, 2.0, true)
}

// ---- formulas --------------------------------------------------------------------------------

/// A pointwise region: how to build it over the inputs' graph values, and the same in eager.
struct Formula {
    name: &'static str,
    /// Builds the region's outputs.
    build: fn(&mut G, &[ValueRef]) -> Vec<ValueRef>,
    /// The outputs computed by eager ops.
    eager: fn(&[Tensor]) -> R<Vec<Tensor>>,
    /// (rtol, atol) against eager.
    tol: (f64, f64),
}

fn tanh_only() -> Formula {
    Formula {
        name: "tanh(x)",
        build: |g, x| vec![g.un("tp::tanh", x[0])],
        eager: |x| Ok(vec![x[0].tanh()?]),
        tol: (4e-6, 1e-30),
    }
}

fn exp_mul() -> Formula {
    Formula {
        name: "exp(x) * y",
        build: |g, x| {
            let e = g.un("tp::exp", x[0]);
            vec![g.bin("tp::mul", e, x[1])]
        },
        eager: |x| Ok(vec![x[0].exp()?.mul(&x[1])?]),
        tol: (4e-6, 1e-30),
    }
}

fn w1() -> Formula {
    Formula {
        name: "W1 gelu_tanh formula",
        build: |g, x| {
            let x = x[0];
            let p = g.bin_c("tp::pow", x, 3.0);
            let a = g.bin_c("tp::mul", p, 0.044715);
            let b = g.bin("tp::add", x, a);
            let c = g.bin_c("tp::mul", b, 0.7978845608);
            let d = g.un("tp::tanh", c);
            let e = g.bin_c("tp::add", d, 1.0);
            let f = g.bin_c("tp::mul", x, 0.5);
            vec![g.bin("tp::mul", f, e)]
        },
        eager: |x| {
            let x = &x[0];
            let inner = x
                .add(&x.pow_scalar(3.0)?.mul_scalar(0.044715)?)?
                .mul_scalar(0.7978845608)?;
            Ok(vec![
                x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?,
            ])
        },
        // 1 + tanh cancels for large negative x.
        tol: (1e-5, 1e-6),
    }
}

fn w2() -> Formula {
    Formula {
        name: "W2 a * sigmoid(a) * b",
        build: |g, x| {
            let s = g.un("tp::sigmoid", x[0]);
            let m = g.bin("tp::mul", x[0], s);
            vec![g.bin("tp::mul", m, x[1])]
        },
        eager: |x| Ok(vec![x[0].mul(&x[0].sigmoid()?)?.mul(&x[1])?]),
        tol: (4e-6, 1e-30),
    }
}

fn w6() -> Formula {
    Formula {
        name: "W6 sqrt(abs((((x*1.1+0.3)*x-0.7)/(x*x+1))+x))",
        build: |g, x| {
            let x = x[0];
            let a = g.bin_c("tp::mul", x, 1.1);
            let a = g.bin_c("tp::add", a, 0.3);
            let a = g.bin("tp::mul", a, x);
            let a = g.bin_c("tp::sub", a, 0.7);
            let q = g.bin("tp::mul", x, x);
            let q = g.bin_c("tp::add", q, 1.0);
            let d = g.bin("tp::div", a, q);
            let s = g.bin("tp::add", d, x);
            let s = g.un("tp::abs", s);
            vec![g.un("tp::sqrt", s)]
        },
        eager: |x| {
            let x = &x[0];
            let a = x
                .mul_scalar(1.1)?
                .add_scalar(0.3)?
                .mul(x)?
                .sub_scalar(0.7)?;
            let q = x.mul(x)?.add_scalar(1.0)?;
            Ok(vec![a.div(&q)?.add(x)?.abs()?.sqrt()?])
        },
        tol: (1e-6, 1e-30),
    }
}

/// Every other outlined op, one level, several outputs.
fn one_level_zoo() -> Formula {
    Formula {
        name: "gelu/silu/erf/sin/cos/log/sigmoid",
        build: |g, x| {
            let (a, b) = (x[0], x[1]);
            let ge = g.gelu(a, "none");
            let gt = g.gelu(b, "tanh");
            let si = g.un("tp::silu", a);
            let er = g.un("tp::erf", b);
            let sn = g.un("tp::sin", a);
            let cs = g.un("tp::cos", b);
            let p = g.bin("tp::mul", sn, cs);
            let p = g.bin("tp::add", er, p);
            let lg = g.un("tp::log", a);
            let sg = g.un("tp::sigmoid", b);
            let q = g.bin("tp::sub", lg, sg);
            // A constant exponent goes through a scratch slot like any argument.
            let pc = g.bin_c("tp::pow", b, 2.5);
            vec![ge, gt, si, p, q, pc]
        },
        eager: |x| {
            let (a, b) = (&x[0], &x[1]);
            Ok(vec![
                a.gelu("none")?,
                b.gelu("tanh")?,
                a.silu()?,
                b.erf()?.add(&a.sin()?.mul(&b.cos()?)?)?,
                a.log()?.sub(&b.sigmoid()?)?,
                b.pow_scalar(2.5)?,
            ])
        },
        tol: (1e-5, 1e-6),
    }
}

/// Integer inputs compute transcendentals in f32 (the cast feeds the bulk call).
fn int_input() -> Formula {
    Formula {
        name: "exp(i32) * y, sigmoid(i32)",
        build: |g, x| {
            let shape = g.meta(x[0]).0;
            let e = g.op("tp::exp", vec![t(x[0])], &shape, DType::F32);
            let s = g.op("tp::sigmoid", vec![t(x[0])], &shape, DType::F32);
            vec![g.bin("tp::mul", e, x[1]), s]
        },
        eager: |x| Ok(vec![x[0].exp()?.mul(&x[1])?, x[0].sigmoid()?]),
        tol: (4e-6, 1e-30),
    }
}

fn nested_a() -> Formula {
    Formula {
        name: "exp(tanh(x) * sigmoid(x + 1)) + x",
        build: |g, x| {
            let x = x[0];
            let th = g.un("tp::tanh", x);
            let x1 = g.bin_c("tp::add", x, 1.0);
            let sg = g.un("tp::sigmoid", x1);
            let m = g.bin("tp::mul", th, sg);
            let e = g.un("tp::exp", m);
            vec![g.bin("tp::add", e, x)]
        },
        eager: |x| {
            let x = &x[0];
            let m = x.tanh()?.mul(&x.add_scalar(1.0)?.sigmoid()?)?;
            Ok(vec![m.exp()?.add(x)?])
        },
        tol: (1e-5, 1e-6),
    }
}

fn nested_b() -> Formula {
    Formula {
        name: "sqrt(abs(log(x))) / (1 + exp(-x))",
        build: |g, x| {
            let x = x[0];
            let l = g.un("tp::log", x);
            let l = g.un("tp::abs", l);
            let s = g.un("tp::sqrt", l);
            let n = g.un("tp::neg", x);
            let e = g.un("tp::exp", n);
            let d = g.bin_c("tp::add", e, 1.0);
            vec![g.bin("tp::div", s, d)]
        },
        eager: |x| {
            let x = &x[0];
            let s = x.log()?.abs()?.sqrt()?;
            Ok(vec![s.div(&x.neg()?.exp()?.add_scalar(1.0)?)?])
        },
        tol: (1e-5, 1e-30),
    }
}

/// One outlined value (`e = exp(x / 2)`) read by two later stages and stored to an f32 output
/// (straight from the bulk call on a 1-D layout) and, cast, to an f16 output.
fn shared_value() -> Formula {
    Formula {
        name: "e = exp(x/2): e, f16(e), sqrt(tanh(e) * e + 2) + e",
        build: |g, x| {
            let h = g.bin_c("tp::mul", x[0], 0.5);
            let e = g.un("tp::exp", h);
            let eh = g.cast(e, DType::F16);
            let th = g.un("tp::tanh", e);
            let m = g.bin("tp::mul", th, e);
            let m = g.bin_c("tp::add", m, 2.0);
            let s = g.un("tp::sqrt", m);
            let o = g.bin("tp::add", s, e);
            vec![e, eh, o]
        },
        eager: |x| {
            let e = x[0].mul_scalar(0.5)?.exp()?;
            let o = e.tanh()?.mul(&e)?.add_scalar(2.0)?.sqrt()?.add(&e)?;
            Ok(vec![e.clone(), e.to_dtype(DType::F16)?, o])
        },
        tol: (1e-5, 1e-30),
    }
}

fn pow_of_outlined() -> Formula {
    Formula {
        name: "pow(exp(x), sigmoid(y))",
        build: |g, x| {
            let e = g.un("tp::exp", x[0]);
            let s = g.un("tp::sigmoid", x[1]);
            vec![g.bin("tp::pow", e, s)]
        },
        eager: |x| Ok(vec![x[0].exp()?.pow(&x[1].sigmoid()?)?]),
        tol: (2e-5, 1e-30),
    }
}

fn pow_tensor() -> Formula {
    Formula {
        name: "pow(x, y), pow(abs(x), y)",
        build: |g, x| {
            let p = g.bin("tp::pow", x[0], x[1]);
            let a = g.un("tp::abs", x[0]);
            let q = g.bin("tp::pow", a, x[1]);
            vec![p, q]
        },
        eager: |x| Ok(vec![x[0].pow(&x[1])?, x[0].abs()?.pow(&x[1])?]),
        tol: (1e-5, 1e-30),
    }
}

/// A cheap value (`a = 2x`) whose first outlined consumer (in instruction order) is at a later
/// stage than another consumer: the slot must be filled before the earliest call reads it.
fn spill_for_two_stages() -> Formula {
    Formula {
        name: "tanh(x) / (2x) + exp(2x)",
        build: |g, x| {
            let a = g.bin_c("tp::mul", x[0], 2.0);
            let th = g.un("tp::tanh", x[0]);
            let d = g.bin("tp::div", th, a);
            let e = g.un("tp::exp", a);
            vec![g.bin("tp::add", d, e)]
        },
        eager: |x| {
            let a = x[0].mul_scalar(2.0)?;
            Ok(vec![x[0].tanh()?.div(&a)?.add(&a.exp()?)?])
        },
        tol: (1e-5, 1e-30),
    }
}

/// Ten exps of scaled copies of `x`, summed: twenty scratch slots, so tiles shorter than 512.
fn many_slots() -> Formula {
    Formula {
        name: "sum of exp(x * k / 8), k = 1..=10",
        build: |g, x| {
            let mut acc = None;
            for k in 1..=10 {
                let a = g.bin_c("tp::mul", x[0], k as f64 / 8.0);
                let e = g.un("tp::exp", a);
                acc = Some(match acc {
                    None => e,
                    Some(s) => g.bin("tp::add", s, e),
                });
            }
            vec![acc.unwrap()]
        },
        eager: |x| {
            let mut acc = x[0].mul_scalar(1.0 / 8.0)?.exp()?;
            for k in 2..=10 {
                acc = acc.add(&x[0].mul_scalar(k as f64 / 8.0)?.exp()?)?;
            }
            Ok(vec![acc])
        },
        tol: (1e-5, 1e-30),
    }
}

/// Two inputs of any broadcastable shapes: two levels, a division, two outputs.
fn two_inputs() -> Formula {
    Formula {
        name: "exp(tanh(x) * sigmoid(y + 1)) + x, sqrt(abs(x)) / y",
        build: |g, x| {
            let th = g.un("tp::tanh", x[0]);
            let y1 = g.bin_c("tp::add", x[1], 1.0);
            let sg = g.un("tp::sigmoid", y1);
            let m = g.bin("tp::mul", th, sg);
            let e = g.un("tp::exp", m);
            let o1 = g.bin("tp::add", e, x[0]);
            let a = g.un("tp::abs", x[0]);
            let s = g.un("tp::sqrt", a);
            let o2 = g.bin("tp::div", s, x[1]);
            vec![o1, o2]
        },
        eager: |x| {
            let m = x[0].tanh()?.mul(&x[1].add_scalar(1.0)?.sigmoid()?)?;
            let o1 = m.exp()?.add(&x[0])?;
            let o2 = x[0].abs()?.sqrt()?.div(&x[1])?;
            Ok(vec![o1, o2])
        },
        tol: (1e-5, 1e-6),
    }
}

/// Half inputs (computed in f32), a half output and an f32 output that also reads an f32 input.
fn half_mix() -> Formula {
    Formula {
        name: "half: exp(tanh(x) * sigmoid(x + 1)) + x, f32: exp(z) / f32(x) + gelu(x)",
        build: |g, x| {
            let (h, z) = (x[0], x[1]);
            let th = g.un("tp::tanh", h);
            let h1 = g.bin_c("tp::add", h, 1.0);
            let sg = g.un("tp::sigmoid", h1);
            let m = g.bin("tp::mul", th, sg);
            let e = g.un("tp::exp", m);
            let o1 = g.bin("tp::add", e, h);
            let ez = g.un("tp::exp", z);
            let hf = g.cast(h, DType::F32);
            let d = g.bin("tp::div", ez, hf);
            let ge = g.gelu(h, "none");
            let gf = g.cast(ge, DType::F32);
            let o2 = g.bin("tp::add", d, gf);
            vec![o1, o2]
        },
        eager: |x| {
            // The fused kernel computes half values in f32 and rounds once at the store.
            let d = x[0].dtype();
            let h = x[0].to_dtype(DType::F32)?;
            let m = h.tanh()?.mul(&h.add_scalar(1.0)?.sigmoid()?)?;
            let o1 = m.exp()?.add(&h)?.to_dtype(d)?;
            let ge = h.gelu("none")?.to_dtype(d)?.to_dtype(DType::F32)?;
            let o2 = x[1].exp()?.div(&h)?.add(&ge)?;
            Ok(vec![o1, o2])
        },
        tol: (8e-3, 1e-5),
    }
}

// ---- running ---------------------------------------------------------------------------------

/// A lowered region with its kernel-ordered inputs.
struct Built {
    spec: KernelSpec,
    /// The kernel's scalar arguments.
    params: Vec<Lit>,
    inputs: Vec<Tensor>,
    /// Per kernel output: shape and dtype.
    outputs: Vec<(Vec<usize>, DType)>,
}

fn build(f: &Formula, xs: &[Tensor]) -> R<Built> {
    let mut g = G::new();
    let vs: Vec<ValueRef> = xs.iter().map(|x| g.input(x.shape(), x.dtype())).collect();
    let outs = (f.build)(&mut g, &vs);
    let (graph, region) = g.finish(&outs, RegionKind::Pointwise);
    let lowered = lower(&graph, &region)?;
    let feed: HashMap<ValueRef, Tensor> = vs.iter().copied().zip(xs.iter().cloned()).collect();
    let inputs = lowered.inputs.iter().map(|v| feed[v].clone()).collect();
    let outputs = lowered
        .outputs
        .iter()
        .map(|v| {
            let m = graph.meta(*v).unwrap();
            (m.static_shape().unwrap().to_vec(), m.dtype)
        })
        .collect();
    // Kernel outputs follow the region's outputs here (eager results are compared in order).
    assert_eq!(lowered.outputs, outs, "{}: kernel output order", f.name);
    Ok(Built {
        params: lowered.params,
        spec: lowered.spec,
        inputs,
        outputs,
    })
}

/// Fresh outputs: contiguous, or (when `transposed`) transposed views of 2-D buffers.
fn fresh_outputs(b: &Built, transposed: bool) -> R<Vec<Tensor>> {
    b.outputs
        .iter()
        .map(|(shape, d)| {
            if transposed && shape.len() == 2 {
                Tensor::zeros(&[shape[1], shape[0]], *d).t()
            } else {
                Ok(Tensor::zeros(shape, *d))
            }
        })
        .collect()
}

/// Runs `f` on `xs` with the inline and staged kernels, asserts they agree bit for bit and
/// that they are close to eager; returns the layout they ran with.
fn check(
    ks: &mut Kernels,
    f: &Formula,
    xs: &[Tensor],
    transposed_out: bool,
    what: &str,
) -> R<LoopLayout> {
    let b = build(f, xs)?;
    let ins: Vec<&Tensor> = b.inputs.iter().collect();
    let out_i = fresh_outputs(&b, transposed_out)?;
    let out_s = fresh_outputs(&b, transposed_out)?;
    let refs_i: Vec<&Tensor> = out_i.iter().collect();
    let refs_s: Vec<&Tensor> = out_s.iter().collect();
    let layout = cpu::plan(&b.spec, &ins, &refs_i, None)?.layout().clone();
    let pair = ks.get(&b.spec, &layout)?;
    pair.inline.launch_with_params(&ins, &refs_i, &b.params)?;
    let what = format!("{} [{what}, layout {layout}]", f.name);
    if let Some(staged) = &pair.staged {
        staged.launch_with_params(&ins, &refs_s, &b.params)?;
        for (k, (s, i)) in out_s.iter().zip(&out_i).enumerate() {
            assert_same(s, i, &format!("{what} output {k}"));
        }
    }
    let want = (f.eager)(xs)?;
    for (k, (got, want)) in out_i.iter().zip(&want).enumerate() {
        // Compiled and eager f32 values a few ulps apart may round to neighbouring halves.
        let rtol = match got.dtype() {
            DType::F16 => f.tol.0.max(1e-3),
            DType::BF16 => f.tol.0.max(8e-3),
            _ => f.tol.0,
        };
        let tol = (rtol, f.tol.1);
        assert_close(got, want, tol, &format!("{what} output {k} vs eager"));
    }
    Ok(layout)
}

const SIZES: [usize; 12] = [0, 1, 3, 4, 15, 16, 17, 511, 512, 513, 1025, (1 << 17) + 5];

/// Runs `f` (with `arity` inputs) on 1-D f32 inputs of every size.
fn every_size(ks: &mut Kernels, f: &Formula, arity: usize) -> R<()> {
    for n in SIZES {
        let xs: Vec<Tensor> = (0..arity)
            .map(|k| specials(&[n], DType::F32, 100 + k as u64 * 7 + n as u64))
            .collect();
        let layout = check(ks, f, &xs, false, &format!("n={n}"))?;
        assert_eq!(layout.dims, 1, "{}: 1-D inputs give one loop dim", f.name);
    }
    Ok(())
}

// ---- pointwise tests -------------------------------------------------------------------------

#[test]
fn one_level_kernels_match_inline_at_every_size() -> R<()> {
    let mut ks = Kernels::default();
    every_size(&mut ks, &tanh_only(), 1)?;
    every_size(&mut ks, &exp_mul(), 2)?;
    every_size(&mut ks, &w1(), 1)?;
    every_size(&mut ks, &w2(), 2)?;
    every_size(&mut ks, &w6(), 1)?;
    every_size(&mut ks, &one_level_zoo(), 2)?;
    for n in [0usize, 5, 1000] {
        let i = Tensor::randn_seeded(&[n], DType::F64, 90)?
            .mul_scalar(30.0)?
            .to_dtype(DType::I32)?;
        let y = specials(&[n], DType::F32, 91);
        check(&mut ks, &int_input(), &[i, y], false, &format!("i32 n={n}"))?;
    }
    Ok(())
}

#[test]
fn several_levels_match_inline_at_every_size() -> R<()> {
    let mut ks = Kernels::default();
    every_size(&mut ks, &nested_a(), 1)?;
    every_size(&mut ks, &nested_b(), 1)?;
    every_size(&mut ks, &two_inputs(), 2)?;
    Ok(())
}

#[test]
fn shared_outlined_values_pow_and_spills_match_inline() -> R<()> {
    let mut ks = Kernels::default();
    every_size(&mut ks, &shared_value(), 1)?;
    every_size(&mut ks, &pow_of_outlined(), 2)?;
    every_size(&mut ks, &pow_tensor(), 2)?;
    every_size(&mut ks, &spill_for_two_stages(), 1)?;
    every_size(&mut ks, &many_slots(), 1)?;
    // The same kernels over a 2-D layout (every argument goes through a scratch slot).
    for f in [
        shared_value(),
        pow_of_outlined(),
        pow_tensor(),
        spill_for_two_stages(),
        many_slots(),
    ] {
        let xs: Vec<Tensor> = (0..2)
            .map(|k| specials(&[77, 29], DType::F32, 200 + k).t().unwrap())
            .collect();
        let arity = if f.name.starts_with("pow") { 2 } else { 1 };
        check(&mut ks, &f, &xs[..arity], false, "transposed [29, 77]")?;
    }
    Ok(())
}

#[test]
fn half_inputs_and_outputs_match_inline() -> R<()> {
    let mut ks = Kernels::default();
    for d in [DType::F16, DType::BF16] {
        for n in SIZES {
            let h = specials(&[n], d, 300 + n as u64);
            let z = specials(&[n], DType::F32, 301 + n as u64);
            check(&mut ks, &half_mix(), &[h, z], false, &format!("{d} n={n}"))?;
        }
        // Transposed half input, broadcast f32 row.
        let h = specials(&[45, 67], d, 302).t()?;
        let z = specials(&[45], DType::F32, 303);
        check(
            &mut ks,
            &half_mix(),
            &[h, z],
            false,
            &format!("{d} transposed"),
        )?;
    }
    Ok(())
}

#[test]
fn layouts_match_inline() -> R<()> {
    let mut ks = Kernels::default();
    let f = two_inputs();
    let mk = |shape: &[usize], seed: u64| specials(shape, DType::F32, seed);
    for (r, c) in [(37usize, 41usize), (1000, 3), (3, 1000), (1, 700), (600, 1)] {
        let cases: Vec<(&str, Tensor, Tensor, bool)> = vec![
            ("contiguous", mk(&[r, c], 1), mk(&[r, c], 2), false),
            ("transposed x", mk(&[c, r], 3).t()?, mk(&[r, c], 4), false),
            ("broadcast row y", mk(&[r, c], 5), mk(&[c], 6), false),
            ("broadcast column y", mk(&[r, c], 7), mk(&[r, 1], 8), false),
            (
                "step-2 slice x",
                mk(&[r, 2 * c], 9).slice(1, Some(0), None, 2)?,
                mk(&[r, c], 10),
                false,
            ),
            (
                "expanded scalar y",
                mk(&[r, c], 11),
                mk(&[1], 12).expand(&[r, c])?,
                false,
            ),
            (
                "expanded column y",
                mk(&[r, c], 13),
                mk(&[r, 1], 14).expand(&[r, c])?,
                false,
            ),
            ("transposed output", mk(&[r, c], 15), mk(&[c], 16), true),
        ];
        for (name, x, y, tout) in cases {
            check(&mut ks, &f, &[x, y], tout, &format!("{name} [{r}, {c}]"))?;
        }
    }
    // Short inner rows: a tile spans hundreds of row segments.
    let x = mk(&[1000, 3], 20);
    let y = mk(&[3], 21);
    let layout = check(&mut ks, &f, &[x, y], false, "[1000, 3] + [3]")?;
    assert_eq!(layout.dims, 2);
    // Expanded stride-0 input in one loop dim: the scalar goes through a slot.
    let x = mk(&[5000], 22);
    let y = mk(&[1], 23).expand(&[5000])?;
    let layout = check(&mut ks, &f, &[x, y], false, "[5000] with expanded y")?;
    assert_eq!(layout.classes[1], StrideClass::Zero);
    Ok(())
}

// ---- calls over sub-ranges -------------------------------------------------------------------

/// Calls `k` directly over flattened elements `[start, end)` of plan `p`.
fn call_range(
    k: &CompiledKernel,
    p: &LaunchPlan,
    ins: &[&Tensor],
    outs: &[&Tensor],
    params: &[Lit],
    start: usize,
    end: usize,
) -> R<()> {
    assert_eq!(p.layout(), k.layout());
    let params = ScalarArgs::new(k.param_dtypes(), params)?;
    let ptrs: Vec<*mut u8> = ins
        .iter()
        .chain(outs)
        .map(|x| x.data_ptr_raw())
        .collect::<Result<_, _>>()?;
    let args = KernelArgs {
        ptrs: ptrs.as_ptr(),
        shape: p.shape().as_ptr(),
        strides: p.strides().as_ptr(),
        start: start as i64,
        end: end as i64,
        partials: std::ptr::null_mut(),
        params: params.slots().as_ptr(),
    };
    assert!(end as i64 <= p.shape().iter().product::<i64>());
    // SAFETY: the plan was made for these tensors and this kernel's spec and layout, and the
    // range lies inside its iteration space.
    unsafe { (k.entry())(&args) };
    Ok(())
}

#[test]
fn calls_over_sub_ranges_write_only_their_elements() -> R<()> {
    let mut ks = Kernels::default();
    const SENTINEL: f64 = -12.5;
    let mk = |shape: &[usize], seed: u64| specials(shape, DType::F32, seed);
    // (inputs, ranges): 1-D (direct pointers), short rows, transposed.
    let setups: Vec<(&str, Formula, Vec<Tensor>)> = vec![
        ("1-D", two_inputs(), vec![mk(&[3000], 30), mk(&[3000], 31)]),
        ("1-D shared", shared_value(), vec![mk(&[3000], 32)]),
        (
            "[1000, 3] + [3]",
            two_inputs(),
            vec![mk(&[1000, 3], 33), mk(&[3], 34)],
        ),
        (
            "transposed [50, 60]",
            two_inputs(),
            vec![mk(&[60, 50], 35).t()?, mk(&[50, 1], 36)],
        ),
        ("1-D spill", spill_for_two_stages(), vec![mk(&[3000], 37)]),
        ("1-D 192-element tiles", many_slots(), vec![mk(&[3000], 38)]),
        (
            "transposed [1000, 3] 192-element tiles",
            many_slots(),
            vec![mk(&[3, 1000], 39).t()?],
        ),
    ];
    let ranges = [
        (5usize, 1300usize),
        (0, 1),
        (511, 513),
        (3, 4),
        (1027, 2000),
        (2, 2999),
        (1, 3000),
        (512, 1024),
    ];
    for (name, f, xs) in setups {
        let b = build(&f, &xs)?;
        let ins: Vec<&Tensor> = b.inputs.iter().collect();
        let full = fresh_outputs(&b, false)?;
        let full_refs: Vec<&Tensor> = full.iter().collect();
        let p = cpu::plan(&b.spec, &ins, &full_refs, None)?;
        let pair = ks.get(&b.spec, p.layout())?;
        pair.inline
            .launch_with_params(&ins, &full_refs, &b.params)?;
        let kernels: Vec<(&str, &CompiledKernel)> = std::iter::once(("inline", &pair.inline))
            .chain(pair.staged.iter().map(|k| ("staged", k)))
            .collect();
        for (start, end) in ranges {
            for &(kind, k) in &kernels {
                let outs: Vec<Tensor> = b
                    .outputs
                    .iter()
                    .map(|(s, d)| Tensor::full(s, SENTINEL, *d))
                    .collect();
                let refs: Vec<&Tensor> = outs.iter().collect();
                let p = cpu::plan(&b.spec, &ins, &refs, None)?;
                call_range(k, &p, &ins, &refs, &b.params, start, end)?;
                for (o, (got, want)) in outs.iter().zip(&full).enumerate() {
                    let (g, w) = (bits(got), bits(want));
                    let s = bits(&Tensor::full(&[1], SENTINEL, got.dtype()))[0];
                    for i in 0..g.len() {
                        let expect = if (start..end).contains(&i) { w[i] } else { s };
                        assert_eq!(
                            g[i], expect,
                            "{} {name} {kind} [{start}, {end}) output {o} element {i}",
                            f.name
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

// ---- softmax ---------------------------------------------------------------------------------

/// Softmax (or log-softmax) of `x` over its last dim with both kernels: bit-identical, and close
/// to eager.
fn softmax_check(ks: &mut Kernels, x: &Tensor, log: bool, tol: (f64, f64)) -> R<()> {
    let shape = x.shape().to_vec();
    let mut g = G::new();
    let xv = g.input(&shape, x.dtype());
    let name = if log {
        "tp::log_softmax"
    } else {
        "tp::softmax"
    };
    let s = g.op(
        name,
        vec![t(xv), BuilderArg::named("dim", -1i64)],
        &shape,
        x.dtype(),
    );
    let (graph, region) = g.finish(&[s], RegionKind::Softmax { node: s.node, log });
    let lowered = lower(&graph, &region)?;
    let out_i = Tensor::zeros(&shape, x.dtype());
    let out_s = Tensor::zeros(&shape, x.dtype());
    let layout = cpu::plan(&lowered.spec, &[x], &[&out_i], None)?
        .layout()
        .clone();
    let pair = ks.get(&lowered.spec, &layout)?;
    pair.inline.launch(&[x], &[&out_i])?;
    let what = format!("{name} {} {shape:?} layout {layout}", x.dtype());
    if let Some(staged) = &pair.staged {
        staged.launch(&[x], &[&out_s])?;
        assert_same(&out_s, &out_i, &what);
    }
    let want = if log {
        x.log_softmax(-1)?
    } else {
        x.softmax(-1)?
    };
    assert_close(&out_i, &want, tol, &format!("{what} vs eager"));
    Ok(())
}

/// Rows of normals times 3, with -inf entries in row 0, an all -inf row 1, a NaN in row 2 and
/// +inf in row 3 (as far as there are rows).
fn softmax_input(rows: usize, c: usize, dtype: DType, seed: u64) -> R<Tensor> {
    let mut v = Tensor::randn_seeded(&[rows, c], DType::F64, seed)?
        .mul_scalar(3.0)?
        .to_vec::<f64>()?;
    for (j, x) in v.iter_mut().enumerate().take(c) {
        if j % 3 == 1 {
            *x = f64::NEG_INFINITY;
        }
    }
    if rows > 1 {
        v[c..2 * c].iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
    }
    if rows > 2 {
        v[2 * c + c / 2] = f64::NAN;
    }
    if rows > 3 {
        v[3 * c] = f64::INFINITY;
    }
    Tensor::from_vec(v, &[rows, c])?.to_dtype(dtype)
}

#[test]
fn softmax_rows_with_the_bulk_exp_match_inline() -> R<()> {
    let mut ks = Kernels::default();
    for c in [1usize, 5, 1000, 4099] {
        for rows in [1usize, 6] {
            let x = softmax_input(rows, c, DType::F32, 400 + c as u64)?;
            softmax_check(&mut ks, &x, false, (2e-6, 1e-9))?;
            softmax_check(&mut ks, &x, true, (2e-6, 4e-5))?;
            // Strided input rows (the output is still contiguous: the bulk path).
            let xt = x.t()?.contiguous()?.t()?;
            softmax_check(&mut ks, &xt, false, (2e-6, 1e-9))?;
        }
    }
    // Enough work to split rows across threads.
    let x = softmax_input(40, 4099, DType::F32, 410)?;
    softmax_check(&mut ks, &x, false, (2e-6, 1e-9))?;
    softmax_check(&mut ks, &x, true, (2e-6, 4e-5))?;
    // Half outputs have no bulk path; still right.
    for d in [DType::F16, DType::BF16] {
        let tol = if d == DType::F16 { 2e-3 } else { 1.6e-2 };
        for c in [1usize, 5, 1000] {
            let x = softmax_input(5, c, d, 420 + c as u64)?;
            softmax_check(&mut ks, &x, false, (tol, tol * 1e-3))?;
            softmax_check(&mut ks, &x, true, (tol, tol * 16.0))?;
        }
    }
    Ok(())
}
