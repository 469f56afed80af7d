//! Compiled training over the op table: for every differentiable builtin op (`ops::all_ops()`,
//! sampled like `runtime/tests/op_table.rs` does), the gradients through the compiled backward
//! equal eager ones, no op falls back to the interpreter, and — for ops whose sample is plain
//! `[2, 3]` tensors — the same compiled function serves a second size (elementwise ops without
//! recompiling: their backward reads no sizes).

#[path = "../../runtime/tests/common/op_samples.rs"]
#[allow(dead_code)]
mod op_samples;

use op_samples::{Arg, sample, shapes, tensor, values};
use tensorplay_compiler::compile;
use tensorplay_ir::OpClass;
use tensorplay_runtime::ops::{self, Kernel};
use tensorplay_runtime::{DType, Result, Tensor, autograd};

/// Output 0 and the gradients of `<output 0, gout>` with respect to `inputs`.
fn run_grads(
    run: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
) -> Result<(Tensor, Vec<Option<Tensor>>)> {
    let out = run(inputs)?.swap_remove(0);
    let gout = Tensor::randn_seeded(out.shape(), out.dtype(), 99)?;
    let g = autograd::grad(std::slice::from_ref(&out), inputs, &[Some(gout)], false)?;
    Ok((out.detach(), g))
}

fn close(a: &Tensor, b: &Tensor) -> Result<bool> {
    if a.shape() != b.shape() {
        return Ok(false);
    }
    let (a, b) = (
        a.to_dtype(DType::F64)?.to_vec::<f64>()?,
        b.to_dtype(DType::F64)?.to_vec::<f64>()?,
    );
    Ok(a.iter().zip(&b).all(|(x, y)| {
        (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-9 * (1.0 + y.abs())
    }))
}

#[test]
fn compiled_gradients_equal_eager_for_every_differentiable_op() -> Result<()> {
    let mut checked = 0;
    let mut resized = 0;
    let mut problems = Vec::new();
    for op in ops::all_ops() {
        if op.derivative.is_none() || matches!(op.kernel, Kernel::Mutate { .. }) {
            continue;
        }
        let args = sample(op).unwrap_or_else(|| panic!("{}: no sample", op.name));
        let name = format!("tp::{}", op.name);
        let plain = args
            .iter()
            .all(|a| matches!(a, Arg::T(s) if s.as_slice() == [2, 3]));
        let args = std::sync::Arc::new(args);
        let body = {
            let (args, name) = (args.clone(), name.clone());
            move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
                Ok(vec![ops::call(&name, &values(&args, xs))?.swap_remove(0)])
            }
        };
        let f = compile(body.clone());
        let mut sizes = vec![shapes(&args)];
        if plain {
            sizes.push(sizes[0].iter().map(|_| vec![4, 5]).collect());
        }
        for (round, shapes) in sizes.iter().enumerate() {
            let inputs: Vec<Tensor> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| tensor(op.name, i, s).requires_grad_(true))
                .collect::<Result<_>>()?;
            let (ye, ge) = run_grads(&body, &inputs)?;
            let (yc, gc) = match run_grads(&|x| f.call(x), &inputs) {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!("{name} (round {round}): compiled call failed: {e}"));
                    continue;
                }
            };
            if !close(&yc, &ye)? {
                problems.push(format!("{name} (round {round}): outputs differ"));
            }
            for (i, (c, e)) in gc.iter().zip(&ge).enumerate() {
                match (c, e) {
                    (Some(c), Some(e)) if close(c, e)? => {}
                    (None, None) => {}
                    _ => problems.push(format!(
                        "{name} (round {round}): gradient of input {i} differs: compiled {c:?}, \
                         eager {e:?}"
                    )),
                }
            }
            if round == 1 {
                resized += 1;
                if op.class == OpClass::Elementwise && f.num_compiled() != 1 {
                    problems.push(format!("{name}: recompiled at the second size"));
                }
            }
        }
        for why in f.training_fallbacks() {
            problems.push(format!("{name}: fell back: {why}"));
        }
        checked += 1;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 40, "only {checked} ops checked");
    assert!(resized > 20, "only {resized} ops called at a second size");
    Ok(())
}
