//! The CUDA emitter without a GPU: every op of the op table (each elementwise op with a scalar
//! lowering, every dtype eager accepts, a contiguous and a broadcast layout), compiled as a
//! one-op graph, collected, compiled by NVRTC to sm_90 PTX and run through the host emulation,
//! compared with eager under the numerics contract: bit-identical for exact ops, 8 ulp for
//! transcendentals. The regression suite and the fuzzer run the same check over their own
//! programs (`cuda_emulated_*` tests there). Also: the emitter's refusals and its cache.

#[path = "common/cuda_emu.rs"]
mod cuda_emu;
#[path = "common/fuzzgen.rs"]
mod fuzzgen;
#[path = "common/numerics.rs"]
mod numerics;

use std::sync::Arc;

use numerics::{Tol, compare};
use tensorplay_compiler::codegen::cuda::{CudaLayout, cached_kernels, emit, get_or_emit};
use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind};
use tensorplay_compiler::{CompiledFn, compile};
use tensorplay_ir::schema::Schema;
use tensorplay_ir::{OpClass, ScalarExpr, ScalarOp};
use tensorplay_runtime::ops::{self, Kernel, Lower};
use tensorplay_runtime::{DType, Result, Tensor, Value};

const ALL: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::Bool,
];

fn transcendental(e: &ScalarExpr) -> bool {
    use ScalarOp::*;
    match e {
        ScalarExpr::Op(op, args) => {
            matches!(
                op,
                Math(_)
                    | Pow
                    // CUDA's (and the host C library's) libm is not Rust's: `asinh` & co. may
                    // differ from eager's in the last f64 bits (f32 rounds them away in practice).
                    | Libm(_)
            ) || matches!(op, Libm2(f) if !f.is_exact())
                || args.iter().any(transcendental)
        }
        _ => false,
    }
}

/// One case of the sweep: a compiled one-op function, its inputs, eager's result.
struct Case {
    what: String,
    f: CompiledFn,
    inputs: Vec<Tensor>,
    want: Vec<Tensor>,
    tol: Tol,
}

/// The tensor operands' positions and the call's other (default) arguments, from the schema;
/// `None` for ops whose non-tensor arguments have no default.
fn call_shape(op: &ops::OpDef) -> Option<Vec<Option<Value>>> {
    let schema = Schema::parse(&format!("tp::{}", op.schema)).ok()?;
    let mut v = Vec::new();
    for p in &schema.params {
        if p.ty.is_tensor() {
            v.push(None);
        } else if p.default.is_some() {
            break;
        } else {
            return match op.name {
                "clamp" | "clamp_min" | "clamp_max" => Some(vec![None, Some(Value::Float(-0.5))]),
                _ => None,
            };
        }
    }
    Some(v)
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for op in ops::all_ops() {
        if op.class != OpClass::Elementwise || matches!(op.kernel, Kernel::Mutate { .. }) {
            continue;
        }
        let Lower::Pointwise(p) = op.lower else {
            continue;
        };
        let Some(shape) = call_shape(op) else {
            continue;
        };
        let expr = (p.expr)(&[]).ok();
        // lerp: eager fuses its multiply-add (as PyTorch); compiled code rounds the product.
        let approx = expr.as_ref().is_some_and(transcendental) || op.name == "lerp";
        let arity = shape.iter().filter(|a| a.is_none()).count();
        let name = format!("tp::{}", op.name);
        for &dtype in &ALL {
            // Contiguous operands (a vector path and its tail), then broadcast ones: [5, 1] op
            // [1, 7] (zero strides), the first operand transposed.
            for layout in 0..2 {
                let inputs: Vec<Tensor> = (0..arity)
                    .map(|k| {
                        let seed = 0xC0DA + 97 * k as u64 + dtype as u64;
                        let t = fuzzgen::data(if layout == 0 { 67 } else { 35 }, dtype, seed)?;
                        match (layout, k) {
                            (0, _) => Ok(t),
                            (_, 0) => t.reshape(&[7, 5])?.t(),
                            (_, _) => Ok(t.reshape(&[5, 7])?.narrow(0, 0, 1)?),
                        }
                    })
                    .collect::<Result<_>>()
                    .expect("inputs build");
                let args = shape.clone();
                let body_name = name.clone();
                let call = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
                    let mut it = xs.iter();
                    let vals: Vec<Value> = args
                        .iter()
                        .map(|a| match a {
                            None => Value::Tensor(it.next().expect("arity").clone()),
                            Some(v) => v.clone(),
                        })
                        .collect();
                    ops::call(&body_name, &vals)
                };
                let Ok(want) = call(&inputs) else {
                    continue; // eager rejects these dtypes
                };
                let tol = if approx && want[0].dtype().is_float() {
                    Tol::Ulps(8.0)
                } else {
                    Tol::Exact
                };
                out.push(Case {
                    what: format!("{name} {dtype} layout {layout}"),
                    f: compile(call),
                    inputs,
                    want,
                    tol,
                });
            }
        }
    }
    out
}

#[test]
fn every_op_of_the_table_compiles_with_nvrtc_and_matches_eager_emulated() {
    let cases = cases();
    assert!(cases.len() > 200, "only {} cases", cases.len());
    let body = || {
        let mut problems = Vec::new();
        for c in &cases {
            match c.f.call(&c.inputs) {
                Ok(got) => {
                    for (g, w) in got.iter().zip(&c.want) {
                        if let Some(p) = compare(g, w, &c.tol, &c.inputs) {
                            problems.push(format!("{}: {p}", c.what));
                        }
                    }
                }
                Err(e) => problems.push(format!("{}: {e}", c.what)),
            }
        }
        assert!(
            problems.is_empty(),
            "{} cases differ from eager:\n{}",
            problems.len(),
            problems.join("\n")
        );
    };
    cuda_emu::check("op table", body);
}

fn exp_spec() -> KernelSpec {
    KernelSpec {
        rank: 1,
        inputs: vec![DType::F16],
        outputs: vec![DType::F16],
        insts: vec![
            Inst::Load { input: 0 },
            Inst::Op {
                op: ScalarOp::Exp,
                args: vec![0],
                compute: DType::F16,
                out: DType::F16,
            },
            Inst::Store {
                output: 0,
                value: 1,
            },
        ],
        kind: LoopKind::Pointwise,
    }
}

#[test]
fn malformed_specs_and_layouts_are_errors() {
    let one = CudaLayout {
        dims: 1,
        reduced: 0,
        kept_inner: false,
    };
    let mut bad = exp_spec();
    bad.insts[1] = Inst::Op {
        op: ScalarOp::Exp,
        args: vec![0],
        compute: DType::I32,
        out: DType::I32,
    };
    let e = emit(&bad, &one).unwrap_err().to_string();
    assert!(e.contains("exp cannot compute in i32"), "{e}");
    for layout in [
        CudaLayout {
            dims: 0,
            reduced: 0,
            kept_inner: false,
        },
        CudaLayout {
            dims: 2,
            reduced: 1,
            kept_inner: false,
        },
    ] {
        let e = emit(&exp_spec(), &layout).unwrap_err().to_string();
        assert!(e.contains("cuda emitter: layout"), "{e}");
    }
}

#[test]
fn kernels_are_cached_by_structure_and_16_bit_floats_compute_in_f32() {
    let one = CudaLayout {
        dims: 1,
        reduced: 0,
        kept_inner: false,
    };
    let a = get_or_emit(&exp_spec(), &one).expect("emits");
    let before = cached_kernels();
    let b = get_or_emit(&exp_spec(), &one).expect("emits");
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(cached_kernels(), before);
    let two = get_or_emit(
        &exp_spec(),
        &CudaLayout {
            dims: 2,
            reduced: 0,
            kept_inner: false,
        },
    )
    .expect("emits");
    assert_ne!(two.name, a.name);
    let src = a.kernel_source();
    // f16 loads widen to f32, the op runs in f32, the store rounds once.
    assert!(src.contains("const float v1 = tp_exp(v0);"), "{src}");
    assert!(src.contains("tp_vec<tp_half, 8>"), "{src}");
    assert!(src.contains("tp_st(a.out0 + i, y0);"), "{src}");
}

/// The on-disk PTX cache: a second compile of a kernel reads the stored PTX, a changed source or
/// architecture misses, a corrupted key misses (and is rewritten), and no directory (or one that
/// cannot be written) still compiles.
#[test]
fn nvrtc_output_is_cached_on_disk() {
    use tensorplay_compiler::codegen::cuda::{disk_cache, nvrtc};
    if let Err(e) = nvrtc::load() {
        assert!(!cuda_emu::required(), "NVRTC is required here: {e}");
        println!("nvrtc: skipped (disk cache): {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tp-ptx-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let k = get_or_emit(
        &exp_spec(),
        &CudaLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
        },
    )
    .unwrap();
    let compile = |src: &str, arch: &str| {
        disk_cache::compile_ptx(Some(&dir), src, "k.cu", arch).expect("compiles")
    };
    let hits = disk_cache::hits();
    let first = compile(&k.source, "compute_90");
    assert!(first.contains(&format!(".entry {}(", k.name)));
    assert_eq!(disk_cache::hits(), hits, "an empty cache misses");
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, 2, "one entry: its key and its PTX");
    assert_eq!(compile(&k.source, "compute_90"), first);
    assert_eq!(disk_cache::hits(), hits + 1, "the second compile is a hit");
    // Another architecture or source is another entry.
    let sm80 = compile(&k.source, "compute_80");
    assert!(sm80.contains(".target sm_80"));
    let edited = format!("{}\n// edited\n", k.source);
    compile(&edited, "compute_90");
    assert_eq!(disk_cache::hits(), hits + 1);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 6);
    // A key that does not match what is asked (a collision, a stale entry) is a miss.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "key") {
            std::fs::write(&p, "something else").unwrap();
        }
    }
    assert_eq!(compile(&k.source, "compute_90"), first);
    assert_eq!(
        disk_cache::hits(),
        hits + 1,
        "a mismatched key is not trusted"
    );
    assert_eq!(compile(&k.source, "compute_90"), first);
    assert_eq!(disk_cache::hits(), hits + 2, "the rewritten entry is");
    // A directory that cannot be created (a file is in the way) still compiles.
    let blocked = dir.join("k.ptx.not-a-dir");
    std::fs::write(&blocked, "x").unwrap();
    let ptx = disk_cache::compile_ptx(Some(&blocked.join("sub")), &k.source, "k.cu", "compute_90");
    assert_eq!(ptx.unwrap(), first);
    let _ = std::fs::remove_dir_all(&dir);
}
