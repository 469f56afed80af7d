//! The code of the custom-operator tutorial (`docs/guide/custom-ops.md`), run as tests. The last
//! test checks that every Rust block of the guide appears verbatim (up to indentation) in this
//! file, so the guide cannot drift from code that compiles and passes.

use tensorplay::autocast::autocast;
use tensorplay::autograd::{GradcheckOptions, gradcheck};
use tensorplay::library::{
    self, AutogradCtx, CpuLauncher, DefineOptions, ImplOptions, Kind, LaunchArg, Library,
    ProgramArg, Tag, VmapInfo, wrap_triton,
};
use tensorplay::vmap::{fallback_calls, vmap};
use tensorplay::{DType, Device, Error, Result, Tensor, Value, ops};

#[test]
fn weighted_sum_walkthrough() -> Result<()> {
    // -- guide: define --
    let weighted_sum = library::custom_op("mylib::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: &Tensor, weight: &Tensor| -> Result<Tensor> { x.mul(weight)?.sum_all() })?;
    assert_eq!(
        weighted_sum.schema().to_string(),
        "mylib::weighted_sum(Tensor x, Tensor weight) -> Tensor"
    );

    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    let w = Tensor::from_vec(vec![0.5f32, 0.5, 2.0], &[3])?;
    // The handle is typed: a tuple of arguments in, the closure's result type out.
    let y: Tensor = weighted_sum.call((&x, &w))?;
    assert_eq!(y.item::<f32>()?, 7.5);
    // Keyword arguments by name.
    let y = weighted_sum.call_kw((&x,), &[("weight", w.clone().into())])?;
    assert_eq!(y.item::<f32>()?, 7.5);

    // By name, from anywhere in the process (builtins live under `tp::`).
    let y = ops::call("mylib::weighted_sum", &[x.clone().into(), w.clone().into()])?;
    assert_eq!(y[0].item::<f32>()?, 7.5);
    // Arguments are bound to the schema: a missing one is an error naming it.
    let err = weighted_sum.call_values(&[x.clone().into()]).unwrap_err();
    assert!(err.to_string().contains("weight"));
    // -- end --

    // -- guide: implicit autograd --
    let xg = x.clone().requires_grad_(true)?;
    let y = weighted_sum.call1(&[xg.clone().into(), w.clone().into()])?;
    y.backward()?;
    assert_eq!(xg.grad().unwrap().to_vec::<f32>()?, vec![0.5, 0.5, 2.0]);
    // -- end --

    // -- guide: cpu kernel --
    weighted_sum.register_kernel(&["cpu"], |x: Tensor, weight: Tensor| -> Result<Tensor> {
        // A hand-written loop over the raw data.
        let (xs, ws) = (x.to_vec_f64()?, weight.to_vec_f64()?);
        let s: f64 = xs.iter().zip(&ws).map(|(a, b)| a * b).sum();
        Tensor::scalar(s).to_dtype(x.dtype())
    })?;
    let y = weighted_sum.call1(&[xg.clone().into(), w.clone().into()])?;
    assert_eq!(y.item::<f32>()?, 7.5);
    // The loop left the autograd graph: no gradient can flow through `y`.
    assert!(!y.requires_grad());

    // Switch the cpu kernel off for a while: calls fall back to the default kernel.
    {
        let _guard = weighted_sum.set_kernel_enabled("cpu", false)?;
        assert!(
            weighted_sum
                .call1(&[xg.clone().into(), w.clone().into()])?
                .requires_grad()
        );
    } // the guard restores the cpu kernel here
    let kernel = library::get_kernel(&weighted_sum, "cpu")?;
    assert_eq!(
        kernel(&[x.clone().into(), w.clone().into()])?[0].item::<f32>()?,
        7.5
    );
    // -- end --

    // -- guide: register_autograd --
    weighted_sum.register_autograd(
        |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            let (x, weight) = (&ctx.saved_tensors()[0], &ctx.saved_tensors()[1]);
            let g = grads[0].clone().expect("the output was used");
            let needs = ctx.needs_input_grad();
            let gx = if needs[0] {
                Some(weight.mul(&g)?)
            } else {
                None
            };
            let gw = if needs[1] { Some(x.mul(&g)?) } else { None };
            Ok(vec![gx, gw])
        },
        Some(Box::new(
            |ctx: &mut AutogradCtx, inputs: &[Value], _outputs: &[Tensor]| -> Result<()> {
                let (Value::Tensor(x), Value::Tensor(weight)) = (&inputs[0], &inputs[1]) else {
                    return Err(Error::Autograd("weighted_sum takes two tensors".into()));
                };
                ctx.save_for_backward(&[x, weight]);
                Ok(())
            },
        )),
    )?;
    xg.zero_grad();
    weighted_sum
        .call1(&[xg.clone().into(), w.clone().into()])?
        .backward()?;
    assert_eq!(xg.grad().unwrap().to_vec::<f32>()?, vec![0.5, 0.5, 2.0]);

    // Check the formula against finite differences (f64 inputs).
    let a = Tensor::randn_seeded(&[5], DType::F64, 0)?.requires_grad_(true)?;
    let b = Tensor::randn_seeded(&[5], DType::F64, 1)?.requires_grad_(true)?;
    gradcheck(
        |xs| weighted_sum.call1(&[xs[0].clone().into(), xs[1].clone().into()]),
        &[a, b],
        GradcheckOptions::default(),
    )?;
    // -- end --

    // -- guide: register_autograd_typed --
    weighted_sum.register_autograd_typed(
        // backward: the saved state (its type named) and the output gradients.
        |(x, weight): &(Tensor, Tensor), grads| {
            let g = grads.grad(0).expect("the output was used");
            let gx = if grads.needs_input_grad(0) {
                Some(weight.mul(g)?)
            } else {
                None
            };
            let gw = if grads.needs_input_grad(1) {
                Some(x.mul(g)?)
            } else {
                None
            };
            Ok((gx, gw))
        },
        // setup_context: the arguments as a tuple (types checked against the schema now);
        // what it returns is the saved state.
        |(x, weight): (Tensor, Tensor), _outputs| Ok((x, weight)),
    )?;
    xg.zero_grad();
    weighted_sum.call((&xg, &w))?.backward()?;
    assert_eq!(xg.grad().unwrap().to_vec::<f32>()?, vec![0.5, 0.5, 2.0]);
    // -- end --

    // -- guide: autocast --
    weighted_sum.register_autocast("cpu", DType::F32)?;
    let (xh, wh) = (x.to_dtype(DType::BF16)?, w.to_dtype(DType::BF16)?);
    {
        let _region = autocast("cpu", DType::BF16)?;
        // bf16 (and f16, f32) inputs are cast to f32 before the kernel runs ...
        let y = weighted_sum.call1(&[xh.clone().into(), wh.clone().into()])?;
        assert_eq!(y.dtype(), DType::F32);
        // ... f64 inputs are never cast, and builtin ops follow their own policy.
        let xd = x.to_dtype(DType::F64)?;
        assert_eq!(
            weighted_sum.call1(&[xd.clone().into(), xd.into()])?.dtype(),
            DType::F64
        );
        assert_eq!(
            x.reshape(&[1, 3])?.matmul(&w.reshape(&[3, 1])?)?.dtype(),
            DType::BF16
        );
    }
    // Outside the region nothing is cast.
    assert_eq!(
        weighted_sum.call1(&[xh.into(), wh.into()])?.dtype(),
        DType::BF16
    );
    // -- end --

    // -- guide: fake tensors --
    // Fake tensors have a shape, dtype and device but no data.
    let fx = Tensor::empty_fake(&[1024], DType::F16, Device::Cuda(0));
    assert!(
        weighted_sum
            .call_values(&[fx.clone().into(), fx.clone().into()])
            .is_err()
    ); // no fake kernel yet

    weighted_sum.register_fake(|x: Tensor, weight: Tensor| -> Result<Tensor> {
        // Builtin ops compute metadata only on fake tensors; reading data would be an error.
        x.mul(&weight)?.sum_all()
    })?;
    let fy = weighted_sum.call1(&[fx.clone().into(), fx.into()])?;
    assert!(fy.is_fake());
    assert_eq!(fy.shape(), &[] as &[usize]);
    assert_eq!((fy.dtype(), fy.device()), (DType::F16, Device::Cuda(0)));
    // -- end --

    // -- guide: vmap --
    // One weighted sum per row of `xb`, all with the same weights.
    let per_row = vmap(
        |xs: &[Tensor]| {
            Ok(vec![
                weighted_sum.call1(&[xs[0].clone().into(), xs[1].clone().into()])?,
            ])
        },
        vec![Some(0), None],
        vec![0],
    );
    let xb = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let before = fallback_calls();
    assert_eq!(
        per_row(&[xb.clone(), w.clone()])?[0].to_vec::<f32>()?,
        vec![7.5, 16.5]
    );
    assert!(fallback_calls() > before); // no batching rule: one call per row, then a stack

    // The arguments as a typed tuple, their batch dims as a tuple of Option<usize>.
    weighted_sum.register_vmap_typed(
        |info: &VmapInfo,
         (x, weight): (Tensor, Tensor),
         (x_dim, weight_dim): (Option<usize>, Option<usize>)| {
            // Move each batch dim to the front; an unbatched operand broadcasts from the right.
            let batch_first = |t: &Tensor, dim: Option<usize>| -> Result<Tensor> {
                let Some(d) = dim else { return Ok(t.clone()) };
                let mut order: Vec<i64> = (0..t.rank() as i64).filter(|&i| i != d as i64).collect();
                order.insert(0, d as i64);
                t.permute(&order)
            };
            let prod = batch_first(&x, x_dim)?.mul(&batch_first(&weight, weight_dim)?)?;
            let sums = prod
                .reshape_infer(&[info.batch_size as i64, -1])?
                .sum(&[1], false)?;
            Ok((sums, Some(0))) // the output and its batch dim
        },
    )?;
    let before = fallback_calls();
    assert_eq!(
        per_row(&[xb.clone(), w.clone()])?[0].to_vec::<f32>()?,
        vec![7.5, 16.5]
    );
    assert_eq!(fallback_calls(), before); // the rule ran once for the whole batch
    // -- end --
    Ok(())
}

#[test]
fn library_handles() -> Result<()> {
    // -- guide: library --
    let lib = Library::new("mylib_ext", Kind::Def)?; // or the seed's "DEF"
    // Typed options: the schema's tags, the device type an implementation is for.
    let opts = DefineOptions {
        tags: vec![Tag::Pointwise],
        ..DefineOptions::default()
    };
    lib.define_with("scale(Tensor x, float alpha=2.0) -> Tensor", opts)?;
    let any_device = ImplOptions::default(); // CompositeExplicitAutograd
    lib.impl_with(
        "scale",
        |x: Tensor, alpha: f64| -> Result<Tensor> { x.mul_scalar(alpha) },
        any_device,
    )?;
    let y = ops::call("mylib_ext::scale", &[Tensor::ones(&[2], DType::F32).into()])?;
    assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 2.0]);
    let y = ops::call_kw(
        "mylib_ext::scale",
        &[Tensor::ones(&[2], DType::F32).into()],
        &[("alpha", 3.0.into())],
    )?;
    assert_eq!(y[0].to_vec::<f32>()?, vec![3.0, 3.0]);
    assert_eq!(
        library::op_handle("mylib_ext::scale")?.tags(),
        vec![Tag::Pointwise]
    );

    // The seed's positional forms: alias analysis and tags, then device type, dispatch key and
    // allow_override.
    lib.define("shift(Tensor x) -> Tensor", "", &[])?;
    lib.r#impl("shift", |x: &Tensor| x.add_scalar(1.0), "cpu", "", false)?;
    let y = ops::call("mylib_ext::shift", &[Tensor::ones(&[2], DType::F32).into()])?;
    assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 2.0]);

    drop(lib); // removes the op and everything the library registered
    assert!(ops::call("mylib_ext::scale", &[Tensor::ones(&[2], DType::F32).into()]).is_err());
    // -- end --
    Ok(())
}

#[test]
fn triton_vector_add() -> Result<()> {
    // -- guide: triton --
    const BLOCK: usize = 256;
    // One program per block of BLOCK elements: out[i] = x[i] + y[i].
    let add_kernel = wrap_triton(CpuLauncher::new("add_kernel", |pid, args| {
        let (
            ProgramArg::Tensor(x),
            ProgramArg::Tensor(y),
            ProgramArg::Tensor(out),
            ProgramArg::Int(n),
        ) = (&args[0], &args[1], &args[2], &args[3])
        else {
            return Err(Error::unsupported("add_kernel", "expected (x, y, out, n)"));
        };
        let start = pid[0] as usize * BLOCK;
        for i in start..(start + BLOCK).min(*n as usize) {
            // SAFETY: x, y and out hold n f32 values; each program writes only its own block.
            unsafe { out.write(i, x.read::<f32>(i) + y.read::<f32>(i)) };
        }
        Ok(())
    }));

    let my_add = library::triton_op("mylib::my_add")
        .arg_names(&["x", "y"])
        .build(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            if x.dtype() != DType::F32 || y.dtype() != DType::F32 || x.shape() != y.shape() {
                return Err(Error::argument(
                    "mylib::my_add",
                    "y",
                    "an f32 tensor shaped like x",
                    format!("{y:?}"),
                ));
            }
            let (x, y) = (x.contiguous()?, y.contiguous()?);
            let out = Tensor::empty(x.shape(), DType::F32); // fresh: the only tensor written
            let n = x.numel();
            let grid = [n.div_ceil(BLOCK) as u32, 1, 1];
            add_kernel.launch(
                grid,
                &[
                    LaunchArg::In(x),
                    LaunchArg::In(y),
                    LaunchArg::Out(out.clone()),
                    LaunchArg::Int(n as i64),
                ],
            )?;
            Ok(out)
        })?;

    let x = Tensor::randn_seeded(&[1000], DType::F32, 0)?;
    let y = Tensor::randn_seeded(&[1000], DType::F32, 1)?;
    let out = my_add.call1(&[x.clone().into(), y.clone().into()])?;
    assert!(out.equal(&x.add(&y)?)?);
    // -- end --
    Ok(())
}

/// Lines of `text` trimmed, without blank lines.
fn normalized(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn every_guide_code_block_is_tested_here() {
    let guide = include_str!("../docs/guide/custom-ops.md");
    let source = normalized(include_str!("library_guide.rs"));
    let mut blocks = 0;
    let mut rest = guide;
    while let Some(start) = rest.find("```rust\n") {
        let body_start = start + "```rust\n".len();
        let len = rest[body_start..].find("```").expect("closed code block");
        let block = normalized(&rest[body_start..body_start + len]);
        assert!(!block.is_empty());
        let found = source.windows(block.len()).any(|w| w == block.as_slice());
        assert!(
            found,
            "this guide block is not in library_guide.rs:\n{}",
            block.join("\n")
        );
        blocks += 1;
        rest = &rest[body_start + len + 3..];
    }
    assert!(blocks >= 9, "found only {blocks} rust blocks in the guide");
}
