//! Dispatch overhead: what a call costs beyond its kernel, on 1-element tensors (the kernels do
//! next to nothing, so the time is the path through the dispatcher).
//!
//! - `builtin/add_method`: `a.add(&b)` — the typed method, straight into the op table.
//! - `builtin/ops_call_by_name`: `ops::call("tp::add", ..)` — registry lookup + schema binding.
//! - `builtin/call_operator`: the same with the registry entry resolved once, which is the path
//!   `CustomOpDef::call` takes (`dispatch::call_operator`).
//! - `custom/add_kernel`: `CustomOpDef::call` of a custom op whose kernel is one builtin `add`.
//! - `custom/fresh_kernel`: a custom op whose kernel returns a fresh tensor without calling any
//!   builtin op — the custom-op path alone, plus one allocation.
//! - `custom/fresh_kernel_boxed`: the same with a boxed kernel (no typed-argument conversion).
//! - `custom/fresh_by_name`: `ops::call("bench_dispatch::fresh", ..)`.
//! - `reference/alloc_1elem`: `Tensor::empty(&[1], F32)` — the allocation `fresh_kernel` makes,
//!   to subtract from it.
//!
//! Run: `cargo bench --bench dispatch -- --warm-up-time 1 --measurement-time 3`. Medians and
//! ratios go into docs/PERFORMANCE.md ("Dispatch overhead").

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tensorplay::library::{self, registry};
use tensorplay::{DType, Result, Tensor, Value, dispatch, ops};

fn dispatch_overhead(c: &mut Criterion) {
    let a = Tensor::ones(&[1], DType::F32);
    let b = Tensor::ones(&[1], DType::F32);
    let args: [Value; 2] = [a.clone().into(), b.clone().into()];

    let add_entry = registry().get("tp::add").expect("builtin add");
    let add_op = library::custom_op("bench_dispatch::add")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<Tensor> { a.add(&b) })
        .expect("define bench_dispatch::add");
    let fresh_op = library::custom_op("bench_dispatch::fresh")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, _b: Tensor| -> Result<Tensor> {
            Ok(Tensor::empty(a.shape(), a.dtype()))
        })
        .expect("define bench_dispatch::fresh");
    let fresh_boxed = library::custom_op("bench_dispatch::fresh_boxed")
        .schema("(Tensor a, Tensor b) -> Tensor")
        .build(|args: &[Value]| -> Result<Vec<Tensor>> {
            let Value::Tensor(a) = &args[0] else {
                return Err(tensorplay::Error::Lookup("a".into()));
            };
            Ok(vec![Tensor::empty(a.shape(), a.dtype())])
        })
        .expect("define bench_dispatch::fresh_boxed");

    let mut g = c.benchmark_group("dispatch_overhead");
    g.bench_function("builtin/add_method", |bench| {
        bench.iter(|| black_box(a.add(&b).unwrap()))
    });
    g.bench_function("builtin/ops_call_by_name", |bench| {
        bench.iter(|| black_box(ops::call("tp::add", &args).unwrap()))
    });
    g.bench_function("builtin/call_operator", |bench| {
        bench.iter(|| black_box(dispatch::call_operator(&add_entry, &args, &[]).unwrap()))
    });
    g.bench_function("custom/add_kernel", |bench| {
        bench.iter(|| black_box(add_op.call_values(&args).unwrap()))
    });
    g.bench_function("custom/fresh_kernel", |bench| {
        bench.iter(|| black_box(fresh_op.call_values(&args).unwrap()))
    });
    g.bench_function("custom/fresh_kernel_boxed", |bench| {
        bench.iter(|| black_box(fresh_boxed.call(&args).unwrap()))
    });
    g.bench_function("custom/fresh_by_name", |bench| {
        bench.iter(|| black_box(ops::call("bench_dispatch::fresh", &args).unwrap()))
    });
    g.bench_function("reference/alloc_1elem", |bench| {
        bench.iter(|| black_box(Tensor::empty(&[1], DType::F32)))
    });
    g.finish();
}

criterion_group!(benches, dispatch_overhead);
criterion_main!(benches);
