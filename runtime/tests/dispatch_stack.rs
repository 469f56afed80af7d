//! One dispatcher for builtin and custom ops: both pass the same ordered layers (autocast → vmap
//! → autograd → backend), observed through `dispatch::trace_layers` and `TP_LOGS=dispatch`.
//!
//! Every test uses its own namespace (`ds_<test>`): the registry is global and tests run in
//! parallel in one process.

use std::sync::Arc;

use parking_lot::Mutex;
use tensorplay_runtime::autocast::{any_active, autocast};
use tensorplay_runtime::dispatch::{self, LayerEvent, trace_layers};
use tensorplay_runtime::library::{self, VmapInfo};
use tensorplay_runtime::vmap::vmap;
use tensorplay_runtime::{DType, Error, Result, Tensor, Value};

/// The layers `op` entered, in order.
fn layers_of<'a>(events: &'a [LayerEvent], op: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e.op == op)
        .map(|e| e.layer)
        .collect()
}

#[test]
fn the_stack_is_autocast_vmap_autograd_backend() {
    assert_eq!(
        dispatch::layer_names(),
        vec!["autocast", "vmap", "autograd", "backend"]
    );
}

#[test]
fn builtin_and_custom_ops_pass_the_same_layers() -> Result<()> {
    let fresh = library::custom_op("ds_same::fresh")
        .schema("(Tensor x) -> Tensor")
        .build(|args: &[Value]| -> Result<Vec<Tensor>> {
            let Value::Tensor(x) = &args[0] else {
                return Err(Error::unsupported("ds_same::fresh", "x is not a tensor"));
            };
            Ok(vec![Tensor::ones(x.shape(), x.dtype())])
        })?;
    let x = Tensor::ones(&[3], DType::F32);
    let (y, builtin) = trace_layers(|| x.exp());
    y?;
    let (y, custom) = trace_layers(|| fresh.call1(&[x.clone().into()]));
    y?;
    assert_eq!(layers_of(&builtin, "tp::exp"), dispatch::layer_names());
    assert_eq!(
        layers_of(&custom, "ds_same::fresh"),
        dispatch::layer_names()
    );
    assert_eq!(builtin.len(), 4, "{builtin:?}");
    // The custom kernel made no op call (Tensor::ones is a factory, not an op).
    assert_eq!(custom.len(), 4, "{custom:?}");
    // The same holds with grad on and under autocast (the layers pass the call on).
    let g = Tensor::ones(&[3], DType::F32).requires_grad_(true)?;
    let _ac = autocast("cpu", DType::BF16)?;
    let (y, builtin) = trace_layers(|| g.exp());
    y?;
    let (y, custom) = trace_layers(|| fresh.call1(&[g.clone().into()]));
    y?;
    assert_eq!(layers_of(&builtin, "tp::exp"), dispatch::layer_names());
    assert_eq!(
        layers_of(&custom, "ds_same::fresh"),
        dispatch::layer_names()
    );
    Ok(())
}

#[test]
fn a_custom_kernel_s_ops_are_dispatched_from_the_top_below_its_backend() -> Result<()> {
    let add = library::custom_op("ds_nested::add")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<Tensor> { a.add(&b) })?;
    let x = Tensor::ones(&[2], DType::F32);
    let (y, events) = trace_layers(|| add.call1(&[x.clone().into(), x.clone().into()]));
    assert_eq!(y?.to_vec::<f32>()?, vec![2.0, 2.0]);
    let got: Vec<(&str, &str)> = events.iter().map(|e| (e.layer, e.op.as_str())).collect();
    let mut want: Vec<(&str, &str)> = dispatch::layer_names()
        .into_iter()
        .map(|l| (l, "ds_nested::add"))
        .collect();
    want.extend(dispatch::layer_names().into_iter().map(|l| (l, "tp::add")));
    assert_eq!(got, want);
    Ok(())
}

#[test]
fn under_vmap_both_kinds_stop_at_the_vmap_layer_and_redispatch_the_physical_call() -> Result<()> {
    // No vmap rule: the per-example fallback calls the op once per example, from the top.
    let fresh = library::custom_op("ds_vmap::twice")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
    let xs = Tensor::ones(&[3, 2], DType::F32);
    let f = fresh.clone();
    let (y, events) = trace_layers(|| {
        vmap(
            move |a: &[Tensor]| Ok(vec![f.call1(&[a[0].clone().into()])?, a[0].exp()?]),
            vec![Some(0)],
            vec![0],
        )(std::slice::from_ref(&xs))
    });
    let y = y?;
    assert_eq!(y[0].to_vec::<f32>()?, vec![2.0; 6]);
    let per_example = ["autocast", "vmap", "autograd", "backend"];
    let mut want = vec!["autocast", "vmap"];
    for _ in 0..3 {
        want.extend(per_example);
    }
    assert_eq!(layers_of(&events, "ds_vmap::twice"), want);
    // exp has an elementwise rule: one physical call.
    let mut want = vec!["autocast", "vmap"];
    want.extend(per_example);
    assert_eq!(layers_of(&events, "tp::exp"), want);
    Ok(())
}

#[test]
fn below_an_autocast_cast_autocast_is_off_for_custom_and_builtin_ops() -> Result<()> {
    // A custom op's vmap rule runs below the autocast layer: after the op's registered cast, the
    // rule's own ops are not cast again (as for a builtin's batching rule).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let op = library::custom_op("ds_ac::mm")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<Tensor> { a.matmul(&b) })?;
    op.register_autocast("cpu", DType::F32)?;
    let s = seen.clone();
    op.register_vmap(
        move |_: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
            let (Value::Tensor(a), Value::Tensor(b)) = (&args[0], &args[1]) else {
                return Err(Error::unsupported("ds_ac::mm rule", "unexpected arguments"));
            };
            s.lock().push((any_active(), a.dtype()));
            let a = match in_dims[0] {
                Some(0) => a.clone(),
                _ => return Err(Error::unsupported("ds_ac::mm rule", "a batched at 0")),
            };
            // A builtin matmul would run in bf16 if autocast were still on here.
            Ok((vec![a.matmul(b)?], vec![Some(0)]))
        },
    )?;
    let a = Tensor::ones(&[4, 2, 3], DType::BF16);
    let b = Tensor::ones(&[3, 2], DType::BF16);
    let _ac = autocast("cpu", DType::BF16)?;
    let o = op.clone();
    let y = vmap(
        move |xs: &[Tensor]| {
            Ok(vec![o.call_values(&[
                xs[0].clone().into(),
                xs[1].clone().into(),
            ])?])
        },
        vec![Some(0), None],
        vec![0],
    )(&[a, b])?;
    assert_eq!(*seen.lock(), vec![(false, DType::F32)]);
    assert_eq!(
        y[0].dtype(),
        DType::F32,
        "the rule's matmul was not cast to bf16"
    );
    assert_eq!(y[0].shape(), &[4, 2, 2]);
    assert!(any_active(), "the region is back after the call");
    Ok(())
}

/// Run by `tp_logs_dispatch_prints_every_layer` in a child process with `TP_LOGS=dispatch`.
#[test]
#[ignore = "run as a child process by tp_logs_dispatch_prints_every_layer"]
fn child_prints_a_trace() -> Result<()> {
    let x = Tensor::ones(&[2], DType::F32);
    x.add(&x)?;
    Ok(())
}

#[test]
fn tp_logs_dispatch_prints_every_layer() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_prints_a_trace",
            "--include-ignored",
            "--nocapture",
        ])
        .env("TP_LOGS", "dispatch")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("[tp:dispatch]"))
        .collect();
    let want: Vec<String> = dispatch::layer_names()
        .iter()
        .map(|l| format!("[tp:dispatch] {l:<8} tp::add"))
        .collect();
    assert_eq!(lines, want, "{err}");
}
