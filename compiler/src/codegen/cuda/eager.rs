//! Eager built-in ops on CUDA tensors, served by this back end (the runtime's
//! [`EagerKernels`] provider). A call is captured as a one-op graph with dynamic sizes and
//! compiled: its region becomes a CUDA kernel generated from the op table's lowering, cached by
//! structure like every compiled region (so an op meets NVRTC once per dtype and loop layout,
//! not once per call or size), and the graph runs on the call's device.
//!
//! Graphs are kept per op and *call form*: the non-tensor arguments, which tensor slots are
//! filled, and the value of every 0-d CPU scalar (`x + 2.0`'s wrapped number, which the graph
//! holds as a constant — a kernel argument, so another value reuses the kernel but captures a
//! new graph). Under one form, a graph serves every input that passes its guards (rank, dtype,
//! device, size-1 dims), as a compiled function does.
//!
//! In-place ops (`add_`, `sub_`, `mul_`, `div_`, `copy_`, `fill_`) compute the target's new value
//! as a pointwise graph and write it over the target with [`CompiledGraph::run_into`]'s in-place
//! variant.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, LazyLock, Mutex};

use tensorplay_ir::{CompileKind, Device, Error, Result, TensorMeta};
use tensorplay_runtime::cuda::{EagerKernels, ProviderScope, install_eager_kernels};
use tensorplay_runtime::dispatch;
use tensorplay_runtime::ops::{Kernel, Lower, OpDef, binary, inplace};
use tensorplay_runtime::{Args, Tensor, Value};

use crate::capture::{CaptureOptions, capture};
use crate::executor::{Admission, CompiledGraph, ShapeEntry};

/// Makes built-in ops run on CUDA tensors in eager mode (idempotent; `tensorplay::cuda::init`
/// and every compile call it).
///
/// ```
/// use tensorplay_runtime::{cuda, DType, Device, Tensor};
/// tensorplay_compiler::codegen::cuda::eager::install();
/// assert!(cuda::eager_kernels_installed());
/// ```
pub fn install() {
    install_eager_kernels(&PROVIDER);
}

static PROVIDER: Provider = Provider;

/// Graphs kept per op and call form; a form keeps at most [`GRAPHS_PER_FORM`] graphs and the
/// table at most [`MAX_FORMS`] forms (past that it starts over: the kernels stay cached).
struct Provider;

const GRAPHS_PER_FORM: usize = 8;
const MAX_FORMS: usize = 4096;

type Forms = HashMap<(&'static str, String), Vec<Arc<CompiledGraph>>>;

static FORMS: LazyLock<Mutex<Forms>> = LazyLock::new(Mutex::default);

/// One argument of a call as the captured function sees it: a tensor taken from the graph's
/// inputs, or a value fixed in the graph.
#[derive(Clone)]
enum Slot {
    Input,
    OptInput(bool),
    List(usize),
    OptList(Vec<bool>),
    Fixed(Value),
}

/// A call split into its form (slots, key) and its graph inputs.
struct Form {
    slots: Vec<Slot>,
    key: String,
    inputs: Vec<Tensor>,
}

impl Form {
    fn of(args: &[Value]) -> Result<Form> {
        let mut form = Form {
            slots: Vec::with_capacity(args.len()),
            key: String::new(),
            inputs: Vec::new(),
        };
        for v in args {
            let slot = match v {
                Value::Tensor(t) if t.is_wrapped_scalar() => {
                    let d = t.dtype();
                    let _ = if d.is_float() {
                        write!(form.key, "s{d}:{:x};", t.item::<f64>()?.to_bits())
                    } else {
                        write!(form.key, "s{d}:{};", t.item::<i64>()?)
                    };
                    Slot::Fixed(v.clone())
                }
                Value::Tensor(t) => {
                    form.inputs.push(t.clone());
                    Slot::Input
                }
                Value::OptionalTensor(t) => {
                    form.inputs.extend(t.iter().cloned());
                    Slot::OptInput(t.is_some())
                }
                Value::TensorList(ts) => {
                    form.inputs.extend(ts.iter().cloned());
                    Slot::List(ts.len())
                }
                Value::OptionalTensorList(ts) => {
                    form.inputs.extend(ts.iter().flatten().cloned());
                    Slot::OptList(ts.iter().map(Option::is_some).collect())
                }
                other => Slot::Fixed(other.clone()),
            };
            let _ = match &slot {
                Slot::Fixed(Value::Tensor(_)) => Ok(()),
                Slot::Fixed(v) => write!(form.key, "{v:?};"),
                Slot::Input => write!(form.key, "T;"),
                Slot::OptInput(some) => write!(form.key, "T?{some};"),
                Slot::List(n) => write!(form.key, "T[{n}];"),
                Slot::OptList(mask) => write!(form.key, "T?{mask:?};"),
            };
            form.slots.push(slot);
        }
        Ok(form)
    }

    /// The call's arguments with the graph's input tensors `xs` in the tensor slots.
    fn args(slots: &[Slot], xs: &[Tensor]) -> Vec<Value> {
        let mut xs = xs.iter().cloned();
        let mut next = || xs.next().expect("one graph input per filled tensor slot");
        slots
            .iter()
            .map(|s| match s {
                Slot::Input => Value::Tensor(next()),
                Slot::OptInput(true) => Value::OptionalTensor(Some(next())),
                Slot::OptInput(false) => Value::OptionalTensor(None),
                Slot::List(n) => Value::TensorList((0..*n).map(|_| next()).collect()),
                Slot::OptList(mask) => {
                    Value::OptionalTensorList(mask.iter().map(|&m| m.then(&mut next)).collect())
                }
                Slot::Fixed(v) => v.clone(),
            })
            .collect()
    }
}

/// What a graph computes from the call's arguments.
type Body = Arc<dyn Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync>;

/// The graph of `op` for this call form that accepts `inputs`, captured and compiled on a miss,
/// with the shapes it admitted the inputs at (when it was found rather than compiled).
fn graph_for(
    op: &'static OpDef,
    form: &Form,
    body: Body,
) -> Result<(Arc<CompiledGraph>, Option<Arc<ShapeEntry>>)> {
    let key = (op.name, form.key.clone());
    {
        let forms = FORMS.lock().unwrap_or_else(|e| e.into_inner());
        for g in forms.get(&key).into_iter().flatten().rev() {
            if g.accepts(&form.inputs)
                && let Admission::Run(shapes) = g.admit(&form.inputs)?
            {
                return Ok((g.clone(), Some(shapes)));
            }
        }
    }
    let metas: Vec<TensorMeta> = form.inputs.iter().map(Tensor::meta).collect();
    let slots = form.slots.clone();
    let graph = capture(
        |xs| body(&Form::args(&slots, xs)),
        &metas,
        CaptureOptions { dynamic: true },
    )?;
    let compiled = Arc::new(CompiledGraph::new(&graph)?);
    let mut forms = FORMS.lock().unwrap_or_else(|e| e.into_inner());
    if forms.len() >= MAX_FORMS && !forms.contains_key(&key) {
        forms.clear();
    }
    let kept = forms.entry(key).or_default();
    if kept.len() >= GRAPHS_PER_FORM {
        kept.remove(0);
    }
    kept.push(compiled.clone());
    Ok((compiled, None))
}

/// The out-of-place op whose result an in-place op writes (`add_` → `add`), if it is one of
/// the arithmetic ones.
fn out_of_place(op: &'static OpDef) -> Option<&'static OpDef> {
    let pairs: [(&'static OpDef, &'static OpDef); 4] = [
        (&inplace::ADD_, &binary::ADD),
        (&inplace::SUB_, &binary::SUB),
        (&inplace::MUL_, &binary::MUL),
        (&inplace::DIV_, &binary::DIV),
    ];
    pairs
        .into_iter()
        .find(|(i, _)| std::ptr::eq(*i, op))
        .map(|(_, o)| o)
}

fn is_copy(op: &'static OpDef) -> bool {
    std::ptr::eq(op, &inplace::COPY_)
}

fn is_fill(op: &'static OpDef) -> bool {
    std::ptr::eq(op, &inplace::FILL_)
}

/// Runs a computing op: its graph's fresh outputs.
fn run_compute(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let form = Form::of(args)?;
    let body: Body = match softmax_dim(op, args) {
        // The generated kernels take softmax rows along the last dim: move `dim` there and back.
        Some((dim, last)) => Arc::new(move |a| {
            let mut a = a.to_vec();
            let Some(Value::Tensor(x)) = a.first() else {
                return Err(Error::argument(
                    op.name,
                    "self",
                    "a tensor",
                    format!("{a:?}"),
                ));
            };
            a[0] = Value::Tensor(x.transpose(dim, last)?);
            a[1] = Value::Int(last);
            let y = dispatch::call1(op, &a)?;
            Ok(vec![y.transpose(dim, last)?.contiguous()?])
        }),
        None => Arc::new(move |a| dispatch::call(op, a)),
    };
    let (graph, admitted) = graph_for(op, &form, body)?;
    let _scope = ProviderScope::enter();
    match admitted {
        Some(shapes) => graph.run_admitted(&form.inputs, &shapes),
        None => graph.run(&form.inputs),
    }
}

/// For a softmax over a dim other than the last: that dim and the last one.
fn softmax_dim(op: &'static OpDef, args: &[Value]) -> Option<(i64, i64)> {
    let Lower::Softmax { .. } = op.lower else {
        return None;
    };
    let (Some(Value::Tensor(x)), Some(Value::Int(dim))) = (args.first(), args.get(1)) else {
        return None;
    };
    let rank = x.shape().len() as i64;
    let dim = if *dim < 0 { dim + rank } else { *dim };
    (rank > 1 && (0..rank - 1).contains(&dim)).then_some((dim, rank - 1))
}

/// Writes `value(target, rest...)` over `target` (an in-place op's `args`, checked).
fn run_in_place(op: &'static OpDef, args: &[Value], device: Device) -> Result<Vec<Tensor>> {
    let (Some(Value::Tensor(target)), Some(second)) = (args.first(), args.get(1)) else {
        return Err(Error::compile(
            CompileKind::Launch,
            format!("{}: unexpected arguments {args:?}", op.name),
        ));
    };
    let target = target.clone();
    let dtype = target.dtype();
    let mut args = args.to_vec();
    if is_fill(op) {
        // `fill_(t, v)` is `copy_(t, v)` from a 0-d tensor holding `v` on the device.
        let v = Args::new(op.name, &args).scalar(1)?;
        args[1] = Value::Tensor(Tensor::try_full(&[], v, dtype)?.to_device(device)?);
    } else if let Value::Tensor(value) = second
        && value.storage().same(target.storage())
        && !value.same(&target)
    {
        // The kernel would read elements it already wrote: read a copy (as eager does).
        args[1] = Value::Tensor(value.clone_tensor()?);
    }
    // The value to write in the target's dtype (arithmetic results already have its shape: the
    // op's check saw to that). The `clone` keeps a same-dtype copy one pointwise region.
    let math = out_of_place(op);
    let body: Body = match math {
        Some(math) => Arc::new(move |a| Ok(vec![dispatch::call1(math, a)?.to_dtype(dtype)?])),
        None => Arc::new(move |a| match a.get(1) {
            Some(Value::Tensor(src)) => Ok(vec![src.to_dtype(dtype)?.clone_tensor()?]),
            _ => Err(Error::argument(
                "copy_",
                "src",
                "a tensor",
                format!("{a:?}"),
            )),
        }),
    };
    if math.is_none()
        && let Value::Tensor(src) = &args[1]
    {
        // Broadcast the source here (a view, on any device), so the graph is the region alone.
        args[1] = Value::Tensor(src.expand(target.shape())?);
    }
    let form = Form::of(&args)?;
    let (graph, _) = graph_for(op, &form, body)?;
    let _scope = ProviderScope::enter();
    graph.run_into(&form.inputs, std::slice::from_ref(&target))?;
    Ok(vec![target])
}

impl EagerKernels for Provider {
    fn supports(&self, op: &'static OpDef) -> bool {
        match op.kernel {
            Kernel::Compute { .. } => !matches!(op.lower, Lower::None),
            Kernel::Mutate { .. } => out_of_place(op).is_some() || is_copy(op) || is_fill(op),
            Kernel::View(_) => false,
        }
    }

    fn run(&self, op: &'static OpDef, args: &[Value], device: Device) -> Result<Vec<Tensor>> {
        // The layers above did their part for this call (autocast's casts, autograd's node):
        // the graph records the op alone.
        let _grad = tensorplay_runtime::autograd::no_grad();
        let _autocast = tensorplay_runtime::autocast::suspend();
        match op.kernel {
            Kernel::Mutate { .. } => run_in_place(op, args, device),
            _ => run_compute(op, args),
        }
    }
}
