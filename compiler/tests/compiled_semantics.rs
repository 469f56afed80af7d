//! Nothing silently wrong in compiled code (issue 9, item 4): mutations of tensors a closure
//! closes over, opaque ops whose kernels disagree with their fake kernels, kernels returning fake
//! tensors to eager callers, and the recompile limit of `CompiledFn`.

use tensorplay_compiler::compile;
use tensorplay_runtime::library::{self, MutatesArgs};
use tensorplay_runtime::{DType, Error, Result, Tensor, Value};

#[test]
fn mutating_a_closed_over_tensor_fails_at_capture_and_leaves_it_untouched() -> Result<()> {
    // The running-statistics pattern: `c += 1` then `x + c`.
    let c = Tensor::zeros(&[3], DType::F32);
    let held = c.clone();
    let f = compile(move |xs: &[Tensor]| {
        held.add_scalar_(1.0)?;
        Ok(vec![xs[0].add(&held)?])
    });
    let x = Tensor::ones(&[3], DType::F32);
    let err = f.call(std::slice::from_ref(&x)).unwrap_err().to_string();
    assert!(
        err.contains("tp::add_") && err.contains("closes over") && err.contains("input"),
        "{err}"
    );
    assert_eq!(
        c.to_vec::<f32>()?,
        vec![0.0; 3],
        "capture did not mutate it"
    );

    // A view of it, read first and mutated later: refused too.
    let held = c.clone();
    let f = compile(move |xs: &[Tensor]| {
        let y = xs[0].add(&held)?;
        held.narrow(0, 0, 2)?.mul_scalar_(3.0)?;
        Ok(vec![y])
    });
    assert!(f.call(std::slice::from_ref(&x)).is_err());
    assert_eq!(c.to_vec::<f32>()?, vec![0.0; 3]);

    // Passed as an input instead, the same update has eager's semantics on every call.
    let f = compile(|xs: &[Tensor]| {
        xs[1].add_scalar_(1.0)?;
        Ok(vec![xs[0].add(&xs[1])?])
    });
    for call in 1..=3 {
        let y = f.call(&[x.clone(), c.clone()])?;
        assert_eq!(y[0].to_vec::<f32>()?, vec![1.0 + call as f32; 3]);
        assert_eq!(c.to_vec::<f32>()?, vec![call as f32; 3]);
    }

    // A tensor computed from a closed-over one is a graph value and may be mutated.
    let k = Tensor::full(&[3], 2.0, DType::F32);
    let f = compile(move |xs: &[Tensor]| {
        let d = k.mul_scalar(1.0)?;
        d.add_scalar_(1.0)?;
        Ok(vec![xs[0].mul(&d)?])
    });
    for _ in 0..2 {
        assert_eq!(
            f.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?,
            vec![3.0; 3]
        );
    }
    Ok(())
}

#[test]
fn an_opaque_op_whose_kernel_disagrees_with_its_fake_kernel_is_named() -> Result<()> {
    // The real kernel transposes; the fake kernel claims the input's shape.
    let op = library::custom_op("sem_lie::flip")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let v = x.to_vec::<f32>()?;
            Tensor::from_vec(v, &[x.shape()[1], x.shape()[0]])
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let f = compile(move |xs: &[Tensor]| {
        let y = op.call1(&[Value::Tensor(xs[0].exp()?)])?;
        Ok(vec![y.add_scalar(1.0)?])
    });
    let x = Tensor::ones(&[2, 3], DType::F32);
    let err = f.call(&[x]).unwrap_err().to_string();
    assert!(
        err.contains("sem_lie::flip") && err.contains("fake kernel") && err.contains("[3, 2]"),
        "{err}"
    );

    // A dtype lie is caught the same way.
    let op = library::custom_op("sem_lie::widen")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            x.to_vec::<f32>().and_then(|_| x.to_dtype(DType::F64))
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let f = compile(move |xs: &[Tensor]| Ok(vec![op.call1(&[Value::Tensor(xs[0].clone())])?]));
    let err = f
        .call(&[Tensor::ones(&[4], DType::F32)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sem_lie::widen") && err.contains("f64"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_kernel_returning_a_fake_tensor_to_an_eager_caller_is_an_error() -> Result<()> {
    let op = library::custom_op("sem_fake::ghost")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            Ok(Tensor::empty_fake(x.shape(), x.dtype(), x.device()))
        })?;
    let err = op
        .call1(&[Value::Tensor(Tensor::ones(&[2], DType::F32))])
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::Argument { .. })
            && msg.contains("sem_fake::ghost")
            && msg.contains("fake"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn past_the_recompile_limit_calls_run_eagerly() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul_scalar(2.0)?.sum_all()?]))
        .with_recompile_limit(2);
    assert_eq!(f.recompile_limit(), 2);
    // Ranks 1, 2 compile; ranks 3, 4 miss both graphs' guards and run eagerly.
    for rank in 1..=4usize {
        let shape = vec![2; rank];
        let x = Tensor::ones(&shape, DType::F32);
        let y = f.call(&[x])?;
        assert_eq!(
            y[0].item::<f64>()?,
            2.0 * 2f64.powi(rank as i32),
            "rank {rank}"
        );
    }
    assert_eq!((f.num_compiled(), f.eager_calls()), (2, 2));
    // Inputs a kept graph accepts still run compiled.
    f.call(&[Tensor::ones(&[5], DType::F32)])?;
    assert_eq!((f.num_compiled(), f.eager_calls()), (2, 2));
    Ok(())
}

#[test]
fn mutating_custom_ops_on_closed_over_tensors_are_refused_too() -> Result<()> {
    let scale = library::custom_op("sem_mut::scale_")
        .arg_names(&["x"])
        .mutates_args(MutatesArgs::from(["x"]))
        .build(|x: Tensor| -> Result<()> {
            x.mul_scalar_(2.0)?;
            Ok(())
        })?;
    let c = Tensor::ones(&[2], DType::F32);
    let held = c.clone();
    let f = compile(move |xs: &[Tensor]| {
        scale.call_values(&[Value::Tensor(held.clone())])?;
        Ok(vec![xs[0].add(&held)?])
    });
    let err = f
        .call(&[Tensor::ones(&[2], DType::F32)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("sem_mut::scale_"), "{err}");
    assert_eq!(c.to_vec::<f32>()?, vec![1.0; 2]);
    Ok(())
}

#[test]
fn an_unused_integer_remainder_by_zero_still_fails_like_eager() -> Result<()> {
    // Found by the fuzzer: dead-code elimination dropped the unused remainder, so the compiled
    // call succeeded where eager reports the zero divisor.
    let f = compile(|xs: &[Tensor]| {
        let _unused = xs[0].remainder(&xs[1])?;
        Ok(vec![xs[0].add(&xs[1])?])
    });
    let a = Tensor::from_vec(vec![5i64, 7, 9], &[3])?;
    let ok = Tensor::from_vec(vec![2i64, 3, 4], &[3])?;
    assert_eq!(
        f.call(&[a.clone(), ok.clone()])?[0].to_vec::<i64>()?,
        vec![7, 10, 13]
    );
    let zero = Tensor::from_vec(vec![2i64, 0, 4], &[3])?;
    let eager = a.remainder(&zero).unwrap_err().to_string();
    let compiled = f.call(&[a.clone(), zero]).unwrap_err().to_string();
    assert!(compiled.contains("remainder"), "{compiled}");
    assert_eq!(compiled, eager);
    // Floating remainder by zero is NaN, not an error, and stays removable.
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    let y = Tensor::from_vec(vec![0.0f32, 1.0], &[2])?;
    assert_eq!(f.call(&[x.clone(), y])?[0].to_vec::<f32>()?, vec![1.0, 3.0]);
    let _ = x;
    Ok(())
}

#[test]
fn a_half_tensor_times_a_computed_0d_f32_keeps_the_factor_in_f32() -> Result<()> {
    // Found by the fuzzer: eager (like PyTorch) multiplies an f16 tensor by a 0-d f32 operand's
    // f32 value; the compiled kernel rounded the operand to f16 first. `x / 70000` as f16 is
    // `x / inf` if the divisor is rounded.
    let f = compile(|xs: &[Tensor]| {
        let s = xs[1].relu()?.neg()?;
        let s = s.mul(&s)?;
        Ok(vec![
            xs[0].mul(&s)?,
            xs[0].div(&xs[2])?,
            xs[0].floor_divide(&xs[2])?,
            xs[0].floor_divide_scalar(0.3)?,
        ])
    });
    let x = Tensor::from_vec(vec![-1.0f32, -1988.0 / 1024.0, 3.5, 60000.0], &[4])?
        .to_dtype(DType::F16)?;
    let s = Tensor::from_vec(vec![0.661_837_1f32], &[])?;
    let big = Tensor::from_vec(vec![70000.0f32], &[])?;
    for dtype in [DType::F16, DType::BF16] {
        let x = x.to_dtype(dtype)?;
        let got = f.call(&[x.clone(), s.clone(), big.clone()])?;
        let t = s.relu()?.neg()?;
        let t = t.mul(&t)?;
        let want = [
            x.mul(&t)?,
            x.div(&big)?,
            x.floor_divide(&big)?,
            x.floor_divide_scalar(0.3)?,
        ];
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.dtype(), dtype);
            let (g, w) = (g.to_dtype(DType::F32)?, w.to_dtype(DType::F32)?);
            assert_eq!(g.to_vec::<f32>()?, w.to_vec::<f32>()?, "{dtype}");
        }
    }
    Ok(())
}
