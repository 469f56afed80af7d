//! `opcheck`: proves a custom op is sound by running it several ways and comparing — eager
//! against its schema, its gradients, its fake kernel, and a compiled run at two input sizes.
//!
//! It lives in the compiler crate because its last check compiles the op; the facade re-exports
//! it as `tensorplay::library::opcheck`.

use std::collections::BTreeMap;
use tensorplay_ir::CompileKind;

use tensorplay_ir::{DType, Error, Result};
use tensorplay_runtime::autograd::{grad, no_grad};
use tensorplay_runtime::library::bind::bind;
use tensorplay_runtime::library::{OpLike, Operator};
use tensorplay_runtime::{Tensor, Value, dispatch};

use crate::compile::compile;

/// The checks `opcheck` knows, in the order it runs them.
pub const DEFAULT_TEST_UTILS: [&str; 4] = [
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
];

/// Options of [`opcheck`] (PyTorch's keyword arguments).
#[derive(Debug, Clone)]
pub struct OpcheckOptions {
    /// Which checks to run (default: all four).
    pub test_utils: Vec<String>,
    /// Return an error listing the failures instead of the failure map.
    pub raise_exception: bool,
    /// Absolute tolerance; must be given together with `rtol` (default: per dtype).
    pub atol: Option<f64>,
    /// Relative tolerance; must be given together with `atol`.
    pub rtol: Option<f64>,
}

impl Default for OpcheckOptions {
    fn default() -> Self {
        OpcheckOptions {
            test_utils: DEFAULT_TEST_UTILS.iter().map(|s| s.to_string()).collect(),
            raise_exception: true,
            atol: None,
            rtol: None,
        }
    }
}

/// `(rtol, atol)` for comparing results of `dtype` (PyTorch's `assert_close` defaults).
fn tolerance(dtype: DType, opts: &OpcheckOptions) -> (f64, f64) {
    if let (Some(a), Some(r)) = (opts.atol, opts.rtol) {
        return (r, a);
    }
    match dtype {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F64 => (1e-7, 1e-7),
        _ => (0.0, 0.0),
    }
}

/// A deep copy of every tensor in `args` (so mutating checks do not disturb each other).
fn copy_args(args: &[Value], f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<Vec<Value>> {
    args.iter()
        .map(|v| {
            Ok(match v {
                Value::Tensor(t) => Value::Tensor(f(t)?),
                Value::OptionalTensor(Some(t)) => Value::OptionalTensor(Some(f(t)?)),
                Value::TensorList(ts) => {
                    Value::TensorList(ts.iter().map(f).collect::<Result<_>>()?)
                }
                other => other.clone(),
            })
        })
        .collect()
}

fn real_copy(t: &Tensor) -> Result<Tensor> {
    let _g = no_grad();
    t.detach().clone_tensor()
}

fn tensors(args: &[Value]) -> Vec<Tensor> {
    args.iter()
        .flat_map(|v| v.tensors().cloned().collect::<Vec<_>>())
        .collect()
}

fn close(a: &Tensor, b: &Tensor, opts: &OpcheckOptions) -> Result<bool> {
    let (rtol, atol) = tolerance(a.dtype(), opts);
    a.allclose(b, rtol, atol)
}

fn run(op: &std::sync::Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    dispatch::call_bound(op, args)
}

/// Undeclared inputs stay bitwise unchanged and no output aliases an input's storage.
fn test_schema(op: &std::sync::Arc<Operator>, args: &[Value]) -> Result<Option<String>> {
    let args = copy_args(args, &real_copy)?;
    let declared = op.schema().mutated_params();
    let undeclared: Vec<(String, Tensor, Vec<f64>)> = op
        .schema()
        .params
        .iter()
        .zip(&args)
        .filter(|(p, _)| !declared.contains(&p.name.as_str()))
        .flat_map(|(p, v)| {
            v.tensors()
                .map(|t| (p.name.clone(), t.clone()))
                .collect::<Vec<_>>()
        })
        .map(|(n, t)| Ok((n, t.clone(), t.to_vec_f64()?)))
        .collect::<Result<_>>()?;
    let outs = match run(op, &args) {
        Ok(o) => o,
        Err(e) => return Ok(Some(format!("the op failed: {e}"))),
    };
    for (name, t, before) in &undeclared {
        let after = t.to_vec_f64()?;
        let same = before
            .iter()
            .zip(&after)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            return Ok(Some(format!(
                "argument `{name}` was mutated but is not declared in mutates_args"
            )));
        }
    }
    let inputs = tensors(&args);
    for (i, o) in outs.iter().enumerate() {
        if inputs.iter().any(|t| t.storage().same(o.storage())) {
            return Ok(Some(format!(
                "output {i} aliases an input's storage (return a copy)"
            )));
        }
    }
    Ok(None)
}

/// Gradients reach every floating input with matching shapes.
fn test_autograd_registration(
    op: &std::sync::Arc<Operator>,
    args: &[Value],
) -> Result<Option<String>> {
    if op.schema().is_mutating() {
        return Ok(None);
    }
    let args = copy_args(args, &|t| {
        let c = real_copy(t)?;
        if c.dtype().is_float() {
            c.requires_grad_(true)
        } else {
            Ok(c)
        }
    })?;
    let wrt: Vec<Tensor> = tensors(&args)
        .into_iter()
        .filter(|t| t.requires_grad())
        .collect();
    if wrt.is_empty() {
        return Ok(None);
    }
    let outs = match run(op, &args) {
        Ok(o) => o,
        Err(e) => {
            return Ok(Some(format!(
                "the op failed with inputs requiring grad: {e}"
            )));
        }
    };
    let float_outs: Vec<Tensor> = outs.into_iter().filter(|t| t.dtype().is_float()).collect();
    if float_outs.is_empty() {
        return Ok(None);
    }
    if let Some(i) = float_outs.iter().position(|t| !t.requires_grad()) {
        return Ok(Some(format!(
            "output {i} has no autograd history although its inputs require grad: the kernel left \
             the autograd graph (computed on raw data?) and no formula is registered (use register_autograd)"
        )));
    }
    let grads_out: Vec<Option<Tensor>> = float_outs
        .iter()
        .map(|t| Some(Tensor::ones_like(t)))
        .collect();
    let grads = match grad(&float_outs, &wrt, &grads_out, false) {
        Ok(g) => g,
        Err(e) => return Ok(Some(format!("backward failed: {e}"))),
    };
    for (i, (g, x)) in grads.iter().zip(&wrt).enumerate() {
        match g {
            None => return Ok(Some(format!("no gradient reached floating input {i}"))),
            Some(g) if g.shape() != x.shape() => {
                return Ok(Some(format!(
                    "gradient of input {i} has shape {:?}, the input {:?}",
                    g.shape(),
                    x.shape()
                )));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The fake kernel reproduces the real outputs' shape, dtype, device and strides.
fn test_faketensor(op: &std::sync::Arc<Operator>, args: &[Value]) -> Result<Option<String>> {
    let real = match run(op, &copy_args(args, &real_copy)?) {
        Ok(o) => o,
        Err(e) => return Ok(Some(format!("the op failed: {e}"))),
    };
    let fake_args = copy_args(args, &|t| {
        Ok(Tensor::empty_fake(t.shape(), t.dtype(), t.device()))
    })?;
    let fake = match run(op, &fake_args) {
        Ok(o) => o,
        Err(e) => return Ok(Some(format!("the fake kernel failed: {e}"))),
    };
    if fake.len() != real.len() {
        return Ok(Some(format!(
            "fake kernel returned {} outputs, the kernel {}",
            fake.len(),
            real.len()
        )));
    }
    for (i, (f, r)) in fake.iter().zip(&real).enumerate() {
        let mut diffs = Vec::new();
        if f.shape() != r.shape() {
            diffs.push(format!("shape {:?} vs {:?}", f.shape(), r.shape()));
        }
        if f.dtype() != r.dtype() {
            diffs.push(format!("dtype {} vs {}", f.dtype(), r.dtype()));
        }
        if f.device() != r.device() {
            diffs.push(format!("device {} vs {}", f.device(), r.device()));
        }
        if f.shape() == r.shape() && f.strides() != r.strides() {
            diffs.push(format!("strides {:?} vs {:?}", f.strides(), r.strides()));
        }
        if !diffs.is_empty() {
            return Ok(Some(format!(
                "output {i}: the fake kernel's output differs from the kernel's (fake vs real): {} \
                 (fake {f:?}, real {r:?})",
                diffs.join(", ")
            )));
        }
    }
    Ok(None)
}

/// Arguments with dim 0 of every tensor grown by one, when all tensors of rank ≥ 1 share dim 0
/// (so the op's shape relations still hold); `None` otherwise.
fn second_size(args: &[Value]) -> Result<Option<Vec<Value>>> {
    let ts = tensors(args);
    let lead: Vec<usize> = ts
        .iter()
        .filter(|t| t.rank() > 0)
        .map(|t| t.shape()[0])
        .collect();
    if lead.is_empty() || lead.iter().any(|&d| d != lead[0] || d < 2) {
        return Ok(None);
    }
    let grown = copy_args(args, &|t| {
        if t.rank() == 0 {
            return real_copy(t);
        }
        let mut shape = t.shape().to_vec();
        shape[0] += 1;
        let filler = if t.dtype().is_float() {
            Tensor::rand_seeded(&shape, t.dtype(), 7)?
        } else {
            Tensor::ones(&shape, t.dtype())
        };
        let _g = no_grad();
        filler.narrow(0, 0, t.shape()[0])?.copy_(t)?;
        Ok(filler)
    })?;
    Ok(Some(grown))
}

/// Capture with dynamic shapes and compiled execution reproduce eager outputs (and mutated
/// arguments) within tolerance, also at a second input size without recompiling; for an op
/// that does not mutate, the same holds with inputs that require grad, gradients through the
/// compiled backward included (and again at the first size with other data).
fn test_aot_dispatch_dynamic(
    op: &std::sync::Arc<Operator>,
    args: &[Value],
    opts: &OpcheckOptions,
) -> Result<Option<String>> {
    let template = args.to_vec();
    let op2 = op.clone();
    let f = compile(move |xs: &[Tensor]| {
        let it = std::cell::RefCell::new(xs.iter().cloned());
        let call_args = copy_args(&template, &|_| {
            it.borrow_mut().next().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    "opcheck: tensor argument count changed",
                )
            })
        })?;
        let mut outs = run(&op2, &call_args)?;
        // Mutated arguments are results too: return them so they are compared.
        outs.extend(tensors(&call_args));
        Ok(outs)
    });
    let mut sizes = vec![args.to_vec()];
    if let Some(grown) = second_size(args)? {
        sizes.push(grown);
    }
    for (k, a) in sizes.iter().enumerate() {
        let eager_args = copy_args(a, &real_copy)?;
        let mut expected = match run(op, &eager_args) {
            Ok(o) => o,
            Err(e) => return Ok(Some(format!("the op failed eagerly: {e}"))),
        };
        expected.extend(tensors(&eager_args));
        let compiled_inputs = tensors(&copy_args(a, &real_copy)?);
        let got = match f.call(&compiled_inputs) {
            Ok(o) => o,
            Err(e) => return Ok(Some(format!("compiled run {k} failed: {e}"))),
        };
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            if !close(g, e, opts)? {
                return Ok(Some(format!(
                    "compiled result {i} differs from eager at input size {k}"
                )));
            }
        }
    }
    if f.num_compiled() != 1 {
        return Ok(Some(format!(
            "the second input size recompiled ({} graphs)",
            f.num_compiled()
        )));
    }
    if !op.schema().is_mutating() {
        return aot_gradients(op, &sizes, opts);
    }
    Ok(None)
}

/// Every floating tensor argument copied as a leaf that requires grad.
fn grad_leaves(args: &[Value]) -> Result<Vec<Value>> {
    copy_args(args, &|t| {
        let c = real_copy(t)?;
        if c.dtype().is_float() {
            c.requires_grad_(true)
        } else {
            Ok(c)
        }
    })
}

/// Outputs and gradients of `call` on grad-requiring copies of `args` (cotangents fixed per
/// output); `Ok(None)` when nothing is differentiable.
#[allow(clippy::type_complexity)]
fn outputs_and_grads(
    args: &[Value],
    call: &dyn Fn(&[Value]) -> Result<Vec<Tensor>>,
) -> Result<Option<(Vec<Tensor>, Vec<Option<Tensor>>)>> {
    let args = grad_leaves(args)?;
    let wrt: Vec<Tensor> = tensors(&args)
        .into_iter()
        .filter(Tensor::requires_grad)
        .collect();
    let outs = call(&args)?;
    let roots: Vec<Tensor> = outs.iter().filter(|t| t.requires_grad()).cloned().collect();
    if wrt.is_empty() || roots.is_empty() {
        return Ok(None);
    }
    let cot: Vec<Option<Tensor>> = roots
        .iter()
        .enumerate()
        .map(|(i, r)| Tensor::rand_seeded(r.shape(), r.dtype(), 11 + i as u64).map(Some))
        .collect::<Result<_>>()?;
    let grads = grad(&roots, &wrt, &cot, false)?;
    Ok(Some((outs.iter().map(Tensor::detach).collect(), grads)))
}

/// `args` with every floating tensor's elements in reverse order: the same sizes and values
/// (so the op's domain), other data at each position.
fn reversed_data(args: &[Value]) -> Result<Vec<Value>> {
    copy_args(args, &|t| {
        let c = real_copy(t)?;
        if !c.dtype().is_float() || c.rank() == 0 {
            return Ok(c);
        }
        let dims: Vec<i64> = (0..c.rank() as i64).collect();
        let _g = no_grad();
        c.flip(&dims)?.clone_tensor()
    })
}

/// The op inside a compiled graph whose inputs require grad: the compiled backward (the op's
/// autograd formula or its traced ops, captured with the forward) gives eager's gradients, at
/// each size and again at the first size with other data (a backward that captured a tensor
/// of the first call instead of saving it fails here even when a new size recompiled), without
/// falling back to the interpreter and without recompiling.
fn aot_gradients(
    op: &std::sync::Arc<Operator>,
    sizes: &[Vec<Value>],
    opts: &OpcheckOptions,
) -> Result<Option<String>> {
    let template = sizes[0].clone();
    let mut sizes = sizes.to_vec();
    sizes.push(reversed_data(&template)?);
    let op2 = op.clone();
    let f = compile(move |xs: &[Tensor]| {
        let it = std::cell::RefCell::new(xs.iter().cloned());
        let call_args = copy_args(&template, &|_| {
            it.borrow_mut().next().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    "opcheck: tensor argument count changed",
                )
            })
        })?;
        run(&op2, &call_args)
    });
    for (k, a) in sizes.iter().enumerate() {
        let Some((want_out, want)) = outputs_and_grads(a, &|args| run(op, args))? else {
            return Ok(None);
        };
        let got = outputs_and_grads(a, &|args| f.call(&tensors(args)));
        let (got_out, got) = match got {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Ok(Some(format!(
                    "compiled run {k} with inputs requiring grad returned no output that \
                     requires grad"
                )));
            }
            Err(e) => {
                return Ok(Some(format!(
                    "compiled run {k} with inputs requiring grad failed (forward or compiled \
                     backward): {e}"
                )));
            }
        };
        if let Some(why) = f.training_fallbacks().first() {
            return Ok(Some(format!(
                "no compiled backward for inputs requiring grad: {why}"
            )));
        }
        for (i, (g, e)) in got_out.iter().zip(&want_out).enumerate() {
            if !close(g, e, opts)? {
                return Ok(Some(format!(
                    "compiled result {i} with inputs requiring grad differs from eager at input \
                     size {k}"
                )));
            }
        }
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            let same = match (g, e) {
                (Some(g), Some(e)) => g.shape() == e.shape() && close(g, e, opts)?,
                (None, None) => true,
                _ => false,
            };
            if !same {
                let run = if k + 1 == sizes.len() {
                    "at the first input size with other data".to_string()
                } else {
                    format!("at input size {k}")
                };
                return Ok(Some(format!(
                    "the compiled backward's gradient of tensor input {i} differs from eager's \
                     {run} (does the backward read a tensor it did not save with \
                     save_for_backward?)"
                )));
            }
        }
    }
    if f.num_compiled() != 1 {
        return Ok(Some(format!(
            "the second input size recompiled the training graph ({} graphs)",
            f.num_compiled()
        )));
    }
    Ok(None)
}

/// Runs the selected checks of `op` on `args`/`kwargs` and returns the failures keyed by check
/// name (empty: all passed). With `raise_exception` (the default) failures are an error instead:
/// [`Error::Opcheck`], carrying the same map.
/// Unknown check names, or only one of `atol`/`rtol`, are errors.
///
/// ```
/// use tensorplay_compiler::opcheck::{opcheck, OpcheckOptions};
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let op = library::custom_op("docs_opcheck::weighted_sum")
///     .arg_names(&["x", "weight"])
///     .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
/// op.register_fake(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
/// let x = Tensor::randn_seeded(&[8], DType::F32, 0)?;
/// let w = Tensor::randn_seeded(&[8], DType::F32, 1)?;
/// let failures = opcheck(&op, &[x.into(), w.into()], &[], OpcheckOptions::default())?;
/// assert!(failures.is_empty());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn opcheck(
    op: impl OpLike,
    args: &[Value],
    kwargs: &[(&str, Value)],
    opts: OpcheckOptions,
) -> Result<BTreeMap<String, String>> {
    let op = op.resolve()?;
    for t in &opts.test_utils {
        if !DEFAULT_TEST_UTILS.contains(&t.as_str()) {
            return Err(Error::argument(
                "opcheck",
                "test_utils",
                format!("names from {DEFAULT_TEST_UTILS:?}"),
                format!("`{t}`"),
            ));
        }
    }
    if opts.atol.is_some() != opts.rtol.is_some() {
        return Err(Error::argument(
            "opcheck",
            "atol, rtol",
            "both or neither",
            "only one",
        ));
    }
    let kw: Vec<(String, Value)> = kwargs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let bound = bind(op.qualname(), op.schema(), args, &kw)?;
    let mut failures = BTreeMap::new();
    for name in DEFAULT_TEST_UTILS {
        if !opts.test_utils.iter().any(|t| t == name) {
            continue;
        }
        let failure = match name {
            "test_schema" => test_schema(&op, &bound)?,
            "test_autograd_registration" => test_autograd_registration(&op, &bound)?,
            "test_faketensor" => test_faketensor(&op, &bound)?,
            _ => test_aot_dispatch_dynamic(&op, &bound, &opts)?,
        };
        if let Some(msg) = failure {
            failures.insert(name.to_string(), msg);
        }
    }
    if opts.raise_exception && !failures.is_empty() {
        return Err(Error::Opcheck {
            op: op.qualname().to_string(),
            failures,
        });
    }
    Ok(failures)
}
