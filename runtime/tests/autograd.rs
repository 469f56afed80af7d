//! The autograd engine: backward and grad(), accumulation, grad modes, detach, in-place checks,
//! higher-order gradients, deep graphs and concurrent backward passes.

use tensorplay_runtime::autograd::{self, enable_grad, is_grad_enabled, no_grad};
use tensorplay_runtime::{DType, Error, Tensor};

type R = tensorplay_runtime::Result<()>;

fn leaf(v: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn grad_of(t: &Tensor) -> Vec<f64> {
    t.grad().expect("gradient missing").to_vec::<f64>().unwrap()
}

#[test]
fn backward_on_a_scalar() -> R {
    let x = leaf(vec![1.0, -2.0, 3.0], &[3]);
    // y = sum(x * x + 3x) -> dy/dx = 2x + 3
    let y = x.mul(&x)?.add(&x.mul_scalar(3.0)?)?.sum_all()?;
    assert_eq!(y.shape(), &[] as &[usize]);
    assert_eq!(y.grad_fn_name(), Some("sum"));
    y.backward()?;
    assert_eq!(grad_of(&x), vec![5.0, -1.0, 9.0]);
    // One-element non-0-d roots also get an implicit gradient of one.
    let z = leaf(vec![4.0], &[1, 1]);
    z.mul(&z)?.backward()?;
    assert_eq!(grad_of(&z), vec![8.0]);
    Ok(())
}

#[test]
fn backward_with_explicit_gradient() -> R {
    let x = leaf(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = x.mul(&x)?;
    let g = Tensor::from_vec(vec![1.0, 0.5, 0.0, -1.0], &[2, 2])?;
    y.backward_with(&g)?;
    assert_eq!(grad_of(&x), vec![2.0, 2.0, 0.0, -8.0]);
    // A gradient of the wrong shape is an error naming both shapes.
    let err = y
        .backward_with(&Tensor::ones(&[4], DType::F64))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Shape { op, msg } if op == "backward" && msg.contains("[4]") && msg.contains("[2, 2]")),
        "{err}"
    );
    // A gradient of another floating dtype is cast to the output's dtype.
    x.zero_grad();
    y.backward_with(&Tensor::ones(&[2, 2], DType::F32))?;
    assert_eq!(x.grad().unwrap().dtype(), DType::F64);
    assert_eq!(grad_of(&x), vec![2.0, 4.0, 6.0, 8.0]);
    // A non-floating gradient is refused.
    let err = y
        .backward_with(&Tensor::ones(&[2, 2], DType::I64))
        .unwrap_err();
    assert!(
        matches!(&err, Error::DType { op, .. } if op == "backward"),
        "{err}"
    );
    Ok(())
}

#[test]
fn implicit_gradient_needs_a_one_element_output() -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let y = x.mul_scalar(2.0)?;
    let err = y.backward().unwrap_err();
    assert!(
        matches!(&err, Error::Autograd(m) if m.contains("[2]") && m.contains("one element")),
        "{err}"
    );
    assert!(x.grad().is_none(), "a failed backward leaves .grad alone");
    Ok(())
}

#[test]
fn gradients_accumulate_across_backward_calls_until_zero_grad() -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let y = x.mul(&x)?.sum_all()?;
    y.backward()?;
    assert_eq!(grad_of(&x), vec![2.0, 4.0]);
    y.backward()?;
    assert_eq!(grad_of(&x), vec![4.0, 8.0]);
    x.mul_scalar(10.0)?.sum_all()?.backward()?;
    assert_eq!(grad_of(&x), vec![14.0, 18.0]);
    x.zero_grad();
    assert!(x.grad().is_none());
    y.backward()?;
    assert_eq!(grad_of(&x), vec![2.0, 4.0]);
    // Accumulated gradients carry no history.
    assert!(!x.grad().unwrap().requires_grad());
    Ok(())
}

#[test]
fn backward_on_a_leaf_root() -> R {
    let x = leaf(vec![3.0], &[]);
    x.backward()?;
    assert_eq!(grad_of(&x), vec![1.0]);
    Ok(())
}

fn early_return_under_no_grad(fail: bool) -> tensorplay_runtime::Result<()> {
    let _g = no_grad();
    assert!(!is_grad_enabled());
    if fail {
        return Err(Error::Autograd("early".into()));
    }
    Ok(())
}

#[test]
fn grad_mode_guards_nest_and_restore() -> R {
    let w = leaf(vec![1.0, 2.0], &[2]);
    assert!(is_grad_enabled());
    {
        let _outer = no_grad();
        assert!(!is_grad_enabled());
        let y = w.mul_scalar(2.0)?;
        assert!(!y.requires_grad() && y.grad_fn_name().is_none());
        {
            let _inner = no_grad();
            assert!(!is_grad_enabled());
        }
        assert!(
            !is_grad_enabled(),
            "the inner guard restores the outer no_grad"
        );
        {
            let _on = enable_grad();
            assert!(is_grad_enabled());
            let z = w.mul_scalar(2.0)?;
            assert!(z.requires_grad());
            assert_eq!(z.grad_fn_name(), Some("mul"));
        }
        assert!(!is_grad_enabled());
    }
    assert!(is_grad_enabled());
    // Restored after an early return (and after a panic unwinds through the guard).
    assert!(early_return_under_no_grad(true).is_err());
    assert!(is_grad_enabled());
    early_return_under_no_grad(false)?;
    assert!(is_grad_enabled());
    let r = std::panic::catch_unwind(|| {
        let _g = no_grad();
        panic!("boom");
    });
    assert!(r.is_err());
    assert!(is_grad_enabled());
    // Grad mode is per thread.
    let _g = no_grad();
    let other = std::thread::spawn(is_grad_enabled).join().unwrap();
    assert!(other);
    Ok(())
}

#[test]
fn detach_shares_data_but_cuts_history() -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let y = x.mul_scalar(3.0)?;
    let d = y.detach();
    assert!(!d.requires_grad() && d.is_leaf() && d.grad_fn_name().is_none());
    assert!(d.storage().same(y.storage()));
    // Using the detached tensor contributes no gradient.
    let z = x.mul(&d)?.sum_all()?;
    z.backward()?;
    assert_eq!(grad_of(&x), vec![3.0, 6.0]);
    // detach() of a leaf that requires grad gives a new leaf that does not.
    assert!(!x.detach().requires_grad());
    Ok(())
}

#[test]
fn requires_grad_rules() -> R {
    let i = Tensor::ones(&[2], DType::I64);
    let err = i.clone().requires_grad_(true).unwrap_err();
    assert!(
        matches!(&err, Error::Argument { op, got, .. } if op == "requires_grad_" && got.contains("i64")),
        "{err}"
    );
    assert!(
        Tensor::ones(&[2], DType::Bool)
            .requires_grad_(true)
            .is_err()
    );
    // Turning it off on an int tensor is fine.
    assert!(!i.requires_grad_(false)?.requires_grad());
    let x = leaf(vec![1.0], &[1]);
    let y = x.mul_scalar(2.0)?;
    assert!(!y.is_leaf());
    let err = y.requires_grad_(false).unwrap_err();
    assert!(
        matches!(&err, Error::Autograd(m) if m.contains("leaf")),
        "{err}"
    );
    // Every floating dtype can require grad.
    for d in [DType::F16, DType::BF16, DType::F32, DType::F64] {
        assert!(Tensor::zeros(&[1], d).requires_grad_(true)?.requires_grad());
    }
    let x = x.requires_grad_(false)?;
    assert!(!x.requires_grad());
    Ok(())
}

#[test]
fn grad_returns_gradients_without_touching_dot_grad() -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let w = leaf(vec![3.0, 4.0], &[2]);
    let unrelated = leaf(vec![5.0], &[1]);
    let h = x.mul(&w)?; // non-leaf input
    let y = h.mul(&h)?.sum_all()?; // y = sum((x w)^2)
    let g = autograd::grad(
        std::slice::from_ref(&y),
        &[x.clone(), h.clone(), unrelated.clone(), w.clone()],
        &[None],
        false,
    )?;
    assert_eq!(
        g[0].as_ref().unwrap().to_vec::<f64>()?,
        vec![2.0 * 3.0 * 3.0, 2.0 * 8.0 * 4.0]
    );
    assert_eq!(g[1].as_ref().unwrap().to_vec::<f64>()?, vec![6.0, 16.0]);
    assert!(g[2].is_none());
    assert_eq!(
        g[3].as_ref().unwrap().to_vec::<f64>()?,
        vec![2.0 * 3.0, 2.0 * 8.0 * 2.0]
    );
    assert!(x.grad().is_none() && w.grad().is_none() && unrelated.grad().is_none());
    // An input that does not require grad is an error.
    let plain = Tensor::ones(&[2], DType::F64);
    assert!(matches!(
        autograd::grad(std::slice::from_ref(&y), &[plain], &[None], false),
        Err(Error::Autograd(_))
    ));
    // A wrong number of output gradients is an argument error.
    assert!(matches!(
        autograd::grad(&[y], &[x], &[None, None], false),
        Err(Error::Argument { .. })
    ));
    Ok(())
}

#[test]
fn diamond_graph_sums_both_paths() -> R {
    let x = leaf(vec![2.0, -1.0], &[2]);
    let a = x.mul_scalar(3.0)?; // da/dx = 3
    let b = x.mul(&x)?; // db/dx = 2x
    let y = a.add(&b)?.mul(&x)?.sum_all()?; // y = (3x + x^2) x -> 6x + 3x^2
    y.backward()?;
    assert_eq!(grad_of(&x), vec![12.0 + 12.0, -6.0 + 3.0]);
    // The same non-leaf used twice.
    let z = leaf(vec![3.0], &[1]);
    let s = z.mul_scalar(2.0)?;
    s.mul(&s)?.sum_all()?.backward()?; // (2z)^2 -> 8z
    assert_eq!(grad_of(&z), vec![24.0]);
    Ok(())
}

fn deep_chain(n: usize) -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let mut y = x.clone();
    for i in 0..n {
        y = if i % 2 == 0 {
            y.add_scalar(1.0)?
        } else {
            y.mul_scalar(1.0)?
        };
    }
    let out = y.sum_all()?;
    out.backward()?;
    assert_eq!(grad_of(&x), vec![1.0, 1.0]);
    assert_eq!(
        y.to_vec::<f64>()?,
        vec![1.0 + (n / 2 + n % 2) as f64, 2.0 + (n / 2 + n % 2) as f64]
    );
    // Dropping the chain's head must not recurse through every node either.
    drop(out);
    drop(y);
    Ok(())
}

#[test]
fn a_deep_chain_neither_recurses_in_backward_nor_in_drop() -> R {
    deep_chain(10_000)?;
    // Much deeper, on a thread with a small stack: only an iterative engine and an iterative
    // node drop survive this.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| deep_chain(30_000))
        .unwrap()
        .join()
        .expect("deep chain overflowed the stack")?;
    Ok(())
}

#[test]
fn create_graph_allows_second_derivatives() -> R {
    let x = leaf(vec![2.0, -1.5], &[2]);
    let y = x.mul(&x)?.mul(&x)?.sum_all()?; // x^3
    let g = autograd::grad(&[y], std::slice::from_ref(&x), &[None], true)?
        .remove(0)
        .unwrap();
    assert_eq!(g.to_vec::<f64>()?, vec![12.0, 6.75]); // 3x^2
    assert!(
        g.requires_grad(),
        "create_graph records the backward computation"
    );
    let gg = autograd::grad(&[g.sum_all()?], std::slice::from_ref(&x), &[None], false)?
        .remove(0)
        .unwrap();
    assert_eq!(gg.to_vec::<f64>()?, vec![12.0, -9.0]); // 6x
    // Third derivative through backward(create_graph) -> .grad with history.
    let y = x.mul(&x)?.mul(&x)?.sum_all()?;
    autograd::backward(&[y], &[None], true)?;
    let g1 = x.grad().unwrap();
    assert!(g1.requires_grad());
    x.zero_grad();
    let g2 = autograd::grad(&[g1.sum_all()?], std::slice::from_ref(&x), &[None], true)?
        .remove(0)
        .unwrap();
    let g3 = autograd::grad(&[g2.sum_all()?], &[x], &[None], false)?
        .remove(0)
        .unwrap();
    assert_eq!(g3.to_vec::<f64>()?, vec![6.0, 6.0]);
    Ok(())
}

#[test]
fn modifying_a_saved_tensor_in_place_fails_backward_clearly() -> R {
    let x = leaf(vec![1.0, 2.0], &[2]);
    let y = x.mul_scalar(1.0)?; // non-leaf
    let z = y.mul(&y)?.sum_all()?; // mul saves y
    {
        let _g = no_grad();
        y.add_scalar_(1.0)?;
    }
    let err = z.backward().unwrap_err();
    assert!(
        matches!(&err, Error::Autograd(m) if m.contains("mul") && m.contains("in-place") && m.contains("version")),
        "{err}"
    );
    // The same through a view of the saved tensor's storage.
    let x2 = leaf(vec![1.0, 2.0, 3.0], &[3]);
    let e = x2.exp()?; // exp saves its output
    let out = e.sum_all()?;
    {
        let _g = no_grad();
        e.slice(0, Some(1), None, 1)?.fill_(0.0)?;
    }
    assert!(matches!(out.backward(), Err(Error::Autograd(m)) if m.contains("exp")));
    // Ops that save nothing are unaffected by in-place writes.
    let a = leaf(vec![1.0], &[1]);
    let b = a.add_scalar(1.0)?;
    let c = b.add_scalar(2.0)?.sum_all()?;
    {
        let _g = no_grad();
        b.mul_scalar_(5.0)?;
    }
    c.backward()?;
    assert_eq!(grad_of(&a), vec![1.0]);
    Ok(())
}

#[test]
fn inplace_on_tensors_requiring_grad_needs_no_grad() -> R {
    let w = leaf(vec![1.0, 2.0], &[2]);
    let err = w.add_scalar_(1.0).unwrap_err();
    assert!(
        matches!(&err, Error::Autograd(m) if m.contains("add_") && m.contains("no_grad")),
        "{err}"
    );
    assert_eq!(
        w.to_vec::<f64>()?,
        vec![1.0, 2.0],
        "a refused in-place op writes nothing"
    );
    // An operand that requires grad is refused too.
    let buf = Tensor::zeros(&[2], DType::F64);
    assert!(matches!(buf.add_(&w), Err(Error::Autograd(_))));
    {
        let _g = no_grad();
        w.sub_(&Tensor::from_vec(vec![0.5f64, 0.5], &[2])?)?;
        buf.copy_(&w)?;
    }
    assert_eq!(w.to_vec::<f64>()?, vec![0.5, 1.5]);
    assert_eq!(buf.to_vec::<f64>()?, vec![0.5, 1.5]);
    assert!(w.is_leaf() && w.requires_grad());
    // The updated leaf still trains.
    w.mul(&w)?.sum_all()?.backward()?;
    assert_eq!(grad_of(&w), vec![1.0, 3.0]);
    Ok(())
}

#[test]
fn broadcast_gradients_reduce_to_operand_shapes() -> R {
    let a = leaf(vec![1.0, 2.0, 3.0], &[3, 1]);
    let b = leaf(vec![10.0, 20.0], &[2]);
    let s = Tensor::from_vec(vec![2.0f64], &[])?.requires_grad_(true)?;
    let y = a.mul(&b)?.add(&s)?; // [3, 2]
    assert_eq!(y.shape(), &[3, 2]);
    y.sum_all()?.backward()?;
    assert_eq!(a.grad().unwrap().shape(), &[3, 1]);
    assert_eq!(grad_of(&a), vec![30.0; 3]);
    assert_eq!(b.grad().unwrap().shape(), &[2]);
    assert_eq!(grad_of(&b), vec![6.0, 6.0]);
    assert_eq!(s.grad().unwrap().shape(), &[] as &[usize]);
    assert_eq!(grad_of(&s), vec![6.0]);
    // A broadcast leading dim with a Rust scalar on the other side.
    let c = leaf(vec![1.0, 2.0], &[1, 2]);
    c.expand(&[4, 2])?.div_scalar(2.0)?.sum_all()?.backward()?;
    assert_eq!(grad_of(&c), vec![2.0, 2.0]);
    Ok(())
}

#[test]
fn only_one_output_of_a_node_receiving_a_gradient() -> R {
    // The two halves of a tensor as two views; only one feeds the loss.
    let x = leaf(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let y = x.mul_scalar(2.0)?;
    let first = y.narrow(0, 0, 2)?;
    let _second = y.narrow(0, 2, 2)?;
    first.mul(&first)?.sum_all()?.backward()?;
    assert_eq!(grad_of(&x), vec![8.0, 16.0, 0.0, 0.0]);
    // A multi-output op (max over a dim returns values and indices) where only values are used.
    let m = leaf(vec![1.0, 5.0, 3.0, 2.0], &[2, 2]);
    let outs = tensorplay_runtime::dispatch::call(
        tensorplay_runtime::ops::all_ops()
            .into_iter()
            .find(|o| o.name == "max_dim")
            .expect("max_dim op"),
        &[(&m).into(), 1i64.into(), false.into()],
    )?;
    assert!(outs.len() >= 2);
    outs[0].sum_all()?.backward()?;
    assert_eq!(grad_of(&m), vec![0.0, 1.0, 1.0, 0.0]);
    Ok(())
}

#[test]
fn backward_on_independent_graphs_from_eight_threads() -> R {
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || -> tensorplay_runtime::Result<()> {
                for round in 0..50 {
                    let v = (t * 100 + round) as f64;
                    let x = leaf(vec![v, v + 1.0, v + 2.0], &[3]);
                    let y = x.mul(&x)?.mul_scalar(0.5)?.add(&x)?.sum_all()?; // grad = x + 1
                    y.backward()?;
                    assert_eq!(grad_of(&x), vec![v + 1.0, v + 2.0, v + 3.0]);
                    let g = autograd::grad(
                        &[x.exp()?.sum_all()?],
                        std::slice::from_ref(&x),
                        &[None],
                        false,
                    )?;
                    assert!(g[0].as_ref().unwrap().allclose(&x.exp()?, 1e-12, 0.0)?);
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("backward thread panicked")?;
    }
    Ok(())
}

#[test]
fn shared_leaf_accumulates_from_concurrent_backward_passes() -> R {
    // Several threads backpropagating into one shared leaf must not lose updates.
    let w = leaf(vec![1.0, 1.0], &[2]);
    std::thread::scope(|s| {
        for _ in 0..8 {
            let w = w.clone();
            s.spawn(move || {
                for _ in 0..25 {
                    w.mul_scalar(2.0)
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .backward()
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(grad_of(&w), vec![400.0, 400.0]);
    Ok(())
}

#[test]
fn backward_errors_for_tensors_without_history() -> R {
    let plain = Tensor::ones(&[], DType::F32);
    let err = plain.backward().unwrap_err();
    assert!(
        matches!(&err, Error::Autograd(m) if m.contains("does not require grad")),
        "{err}"
    );
    // An int result of a tracked op (a comparison) has no history either.
    let x = leaf(vec![1.0], &[]);
    let c = x.gt_scalar(0.0)?;
    assert!(!c.requires_grad());
    assert!(c.to_dtype(DType::F32)?.backward().is_err());
    Ok(())
}

#[test]
fn gradients_match_leaf_dtype_for_mixed_precision() -> R {
    let h = Tensor::from_vec(vec![half::f16::from_f32(1.5)], &[1])?.requires_grad_(true)?;
    let f = Tensor::from_vec(vec![2.0f32], &[1])?.requires_grad_(true)?;
    let y = h.mul(&f)?.sum_all()?; // promoted to f32
    assert_eq!(y.dtype(), DType::F32);
    y.backward()?;
    assert_eq!(h.grad().unwrap().dtype(), DType::F16);
    assert_eq!(h.grad().unwrap().to_vec_f64()?, vec![2.0]);
    assert_eq!(f.grad().unwrap().dtype(), DType::F32);
    assert_eq!(f.grad().unwrap().to_vec_f64()?, vec![1.5]);
    Ok(())
}

/// Derivatives written in terms of an op's output (exp, tanh, sigmoid, sqrt...) stay
/// differentiable under `create_graph`: d²/dx² exp(x) = exp(x), d²/dx² tanh(x) = -2 tanh(x)(1 - tanh²(x)).
#[test]
fn second_derivatives_through_output_based_formulas() -> tensorplay_runtime::Result<()> {
    use tensorplay_runtime::autograd::grad;
    let x = Tensor::from_vec(vec![0.3f64, -0.7, 1.1], &[3])?.requires_grad_(true)?;
    let y = x.exp()?.sum_all()?;
    let g = grad(&[y], std::slice::from_ref(&x), &[None], true)?[0]
        .clone()
        .unwrap();
    let gg = grad(&[g.sum_all()?], std::slice::from_ref(&x), &[None], false)?[0]
        .clone()
        .unwrap();
    for (a, b) in gg.to_vec::<f64>()?.iter().zip(x.exp()?.to_vec::<f64>()?) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    let t = x.tanh()?.sum_all()?;
    let g = grad(&[t], std::slice::from_ref(&x), &[None], true)?[0]
        .clone()
        .unwrap();
    let gg = grad(&[g.sum_all()?], std::slice::from_ref(&x), &[None], false)?[0]
        .clone()
        .unwrap();
    for (a, v) in gg.to_vec::<f64>()?.iter().zip(x.to_vec::<f64>()?) {
        let th = v.tanh();
        let want = -2.0 * th * (1.0 - th * th);
        assert!((a - want).abs() < 1e-12, "{a} vs {want}");
    }
    Ok(())
}
