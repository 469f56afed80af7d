//! Pointwise kernels launched in place (outputs that are exactly their inputs' elements) and
//! over groups of operand sets — what the fused optimizers run on every step.
//!
//! Each kernel is launched twice on equal data: once into fresh outputs, once writing over its
//! inputs; the results must be bit-identical. The specs are chosen so that the wrong order would
//! show: an output stored in an early stage of a staged kernel while a later stage still reads
//! the input it overwrites, a bulk result written straight into an output, and stores listed
//! before loads of the same element.

use tensorplay_compiler::codegen::cache;
use tensorplay_compiler::codegen::cpu;
use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, Lit, LoopKind};
use tensorplay_ir::{DType, Result, ScalarOp};
use tensorplay_runtime::Tensor;

fn op(op: ScalarOp, args: Vec<usize>) -> Inst {
    Inst::Op {
        op,
        args,
        compute: DType::F32,
        out: DType::F32,
    }
}

/// `out0 = in0 * 2` (stored in the first stage), `out1 = exp(in1) * in0 + in1` (a bulk call,
/// then cheap ops that reload both inputs in a later stage), `out2 = sqrt(in0 * in0 + in1)`
/// (a bulk result stored unchanged: straight into the output when not in place).
fn staged_spec() -> KernelSpec {
    KernelSpec {
        rank: 1,
        inputs: vec![DType::F32; 2],
        outputs: vec![DType::F32; 3],
        insts: vec![
            Inst::Load { input: 0 }, // 0
            Inst::Const {
                value: Lit::Float(2.0),
                dtype: DType::F32,
            }, // 1
            op(ScalarOp::Mul, vec![0, 1]), // 2
            Inst::Store {
                output: 0,
                value: 2,
            }, // 3
            Inst::Load { input: 1 }, // 4
            op(ScalarOp::Exp, vec![4]), // 5
            op(ScalarOp::Mul, vec![5, 0]), // 6
            op(ScalarOp::Add, vec![6, 4]), // 7
            Inst::Store {
                output: 1,
                value: 7,
            }, // 8
            op(ScalarOp::Mul, vec![0, 0]), // 9
            op(ScalarOp::Add, vec![9, 4]), // 10
            op(ScalarOp::Sqrt, vec![10]), // 11
            Inst::Store {
                output: 2,
                value: 11,
            }, // 12
        ],
        kind: LoopKind::Pointwise,
    }
}

/// `out0 = in1 - in0`, `out1 = in0 + in1` with no bulk call: the store of `out0` comes before
/// the second use of `in0` in instruction order.
fn plain_spec() -> KernelSpec {
    KernelSpec {
        rank: 1,
        inputs: vec![DType::F32; 2],
        outputs: vec![DType::F32; 2],
        insts: vec![
            Inst::Load { input: 0 },
            Inst::Load { input: 1 },
            op(ScalarOp::Sub, vec![1, 0]),
            Inst::Store {
                output: 0,
                value: 2,
            },
            Inst::Load { input: 0 },
            op(ScalarOp::Add, vec![4, 1]),
            Inst::Store {
                output: 1,
                value: 5,
            },
        ],
        kind: LoopKind::Pointwise,
    }
}

fn ramp(n: usize, from: f32, step: f32) -> Result<Tensor> {
    Tensor::from_vec(
        (0..n)
            .map(|i| from + step * (i % 1000) as f32)
            .collect::<Vec<_>>(),
        &[n],
    )
}

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect())
}

/// Runs `spec` into fresh outputs and then in place (output `k` over input `alias[k]`, or a
/// fresh tensor when `None`), and compares every output bit for bit.
fn check(spec: &KernelSpec, n: usize, alias: &[Option<usize>]) -> Result<()> {
    let inputs = [ramp(n, 0.25, 0.003)?, ramp(n, -1.5, 0.002)?];
    let fresh: Vec<Tensor> = (0..spec.outputs.len())
        .map(|_| Tensor::zeros(&[n], DType::F32))
        .collect();
    let in_refs: Vec<&Tensor> = inputs.iter().collect();
    let out_refs: Vec<&Tensor> = fresh.iter().collect();
    let p = cpu::plan(spec, &in_refs, &out_refs, None)?;
    assert!(!p.layout().in_place);
    cache::get_or_compile(spec, p.layout())?.launch(&in_refs, &out_refs)?;

    let work: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.clone_tensor())
        .collect::<Result<_>>()?;
    let outs: Vec<Tensor> = alias
        .iter()
        .map(|a| match a {
            Some(i) => work[*i].clone(),
            None => Tensor::zeros(&[n], DType::F32),
        })
        .collect();
    let in_refs: Vec<&Tensor> = work.iter().collect();
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    let p = cpu::plan(spec, &in_refs, &out_refs, None)?;
    assert!(p.layout().in_place, "n={n}: {}", p.layout());
    cache::get_or_compile(spec, p.layout())?.launch(&in_refs, &out_refs)?;
    for (k, (a, b)) in fresh.iter().zip(&outs).enumerate() {
        assert_eq!(
            bits(a)?,
            bits(b)?,
            "n={n}, output {k} (aliases {:?})",
            alias[k]
        );
    }
    Ok(())
}

const LENGTHS: [usize; 7] = [1, 3, 64, 517, 4096, 70_001, 300_000];

#[test]
fn staged_kernels_write_over_their_inputs_correctly() -> Result<()> {
    let spec = staged_spec();
    for n in LENGTHS {
        check(&spec, n, &[Some(1), Some(0), None])?;
        check(&spec, n, &[Some(0), Some(1), None])?;
        check(&spec, n, &[None, None, Some(0)])?;
    }
    Ok(())
}

#[test]
fn inline_kernels_write_over_their_inputs_correctly() -> Result<()> {
    let spec = plain_spec();
    for n in LENGTHS {
        check(&spec, n, &[Some(0), Some(1)])?;
        check(&spec, n, &[Some(1), Some(0)])?;
    }
    Ok(())
}

#[test]
fn partial_overlap_is_still_an_error() -> Result<()> {
    let spec = plain_spec();
    let x = ramp(9, 0.0, 1.0)?;
    let (a, b) = (
        x.slice(0, Some(0), Some(8), 1)?,
        x.slice(0, Some(1), Some(9), 1)?,
    );
    let y = Tensor::zeros(&[8], DType::F32);
    let e = cpu::plan(
        &spec,
        &[&a, &y],
        &[&b, &Tensor::zeros(&[8], DType::F32)],
        None,
    )
    .expect_err("shifted by one element");
    assert!(e.to_string().contains("overlapping input 0"), "{e}");
    // The same address but another stride is not "the same elements" either.
    let z = ramp(16, 0.0, 1.0)?;
    let (dense, every_other) = (z.slice(0, Some(0), Some(8), 1)?, z.slice(0, None, None, 2)?);
    let out1 = Tensor::zeros(&[8], DType::F32);
    let e = cpu::plan(&spec, &[&dense, &y], &[&every_other, &out1], None).expect_err("stride");
    assert!(e.to_string().contains("output 0"), "{e}");
    Ok(())
}

#[test]
fn a_plan_made_without_aliasing_is_not_reused_for_aliased_operands() -> Result<()> {
    let spec = plain_spec();
    let (a, b) = (ramp(100, 1.0, 1.0)?, ramp(100, 0.5, 0.5)?);
    let (o0, o1) = (
        Tensor::zeros(&[100], DType::F32),
        Tensor::zeros(&[100], DType::F32),
    );
    let p = cpu::plan(&spec, &[&a, &b], &[&o0, &o1], None)?;
    let k = cache::get_or_compile(&spec, p.layout())?;
    let params = cpu::ScalarArgs::new(&[], &[])?;
    let detached = p.detach();
    assert!(k.relaunch(&detached, &[&a, &b], &[&o0, &o1], None, &params)?);
    // The same shapes and strides, now aliased: the caller must plan anew.
    assert!(!k.relaunch(&detached, &[&a, &b], &[&a, &b], None, &params)?);
    assert_eq!(a.to_vec::<f32>()?[..2], [1.0, 2.0], "nothing ran");
    Ok(())
}

#[test]
fn a_group_launch_equals_one_launch_per_set() -> Result<()> {
    let spec = plain_spec();
    let sizes = [5usize, 1000, 200_000, 64];
    let make = || -> Result<Vec<[Tensor; 2]>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Ok([ramp(n, i as f32, 0.5)?, ramp(n, -(i as f32), 0.25)?]))
            .collect()
    };
    let (one, group) = (make()?, make()?);
    let probe = &one[0];
    let p = cpu::plan(
        &spec,
        &[&probe[0], &probe[1]],
        &[&probe[0], &probe[1]],
        None,
    )?;
    let k = cache::get_or_compile(&spec, p.layout())?;
    for [a, b] in &one {
        k.launch(&[a, b], &[a, b])?;
    }
    let refs: Vec<[&Tensor; 2]> = group.iter().map(|[a, b]| [a, b]).collect();
    let sets: Vec<(&[&Tensor], &[&Tensor])> = refs.iter().map(|r| (&r[..], &r[..])).collect();
    k.launch_group(&sets, &[])?;
    for (i, ([a1, b1], [a2, b2])) in one.iter().zip(&group).enumerate() {
        assert_eq!(bits(a1)?, bits(a2)?, "set {i}, output 0");
        assert_eq!(bits(b1)?, bits(b2)?, "set {i}, output 1");
    }
    // A set of another layout (a strided view) is an error naming it, before anything runs.
    let x = ramp(10, 0.0, 1.0)?;
    let s = x.slice(0, Some(0), None, 2)?;
    let before = bits(&group[0][0])?;
    let g0 = [&group[0][0], &group[0][1]];
    let bad = [&s, &s.clone_tensor()?];
    let e = k
        .launch_group(&[(&g0[..], &g0[..]), (&bad[..], &bad[..])], &[])
        .expect_err("strided set");
    assert!(e.to_string().contains("sets[1]"), "{e}");
    assert_eq!(bits(&group[0][0])?, before, "the first set did not run");
    Ok(())
}
