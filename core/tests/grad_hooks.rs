//! Post-accumulate-grad hooks and backward callbacks (what DistributedDataParallel builds on).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorplay_core::{DType, Error, Result, Tensor, autograd};

fn counter() -> (Arc<AtomicUsize>, impl Fn() -> usize) {
    let c = Arc::new(AtomicUsize::new(0));
    let read = {
        let c = c.clone();
        move || c.load(Ordering::SeqCst)
    };
    (c, read)
}

#[test]
fn hooks_run_once_per_pass_after_the_last_contribution() -> Result<()> {
    let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
    let (c, seen) = counter();
    let handle = w.register_post_accumulate_grad_hook(Arc::new(move |leaf: &Tensor| {
        // All three uses have been accumulated when the hook runs: d/dw (w*w + 3w) = 2w + 3.
        assert_eq!(leaf.grad().unwrap().to_vec::<f32>()?, vec![5.0, 5.0]);
        c.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }))?;
    (&w * &w)?.add(&w.mul_scalar(3.0)?)?.sum_all()?.backward()?;
    assert_eq!(seen(), 1);
    // `grad()` writes no `.grad` and runs no hooks.
    autograd::grad(
        &[w.mul_scalar(2.0)?.sum_all()?],
        std::slice::from_ref(&w),
        &[None],
        false,
    )?;
    assert_eq!(seen(), 1);
    // A leaf that is itself the root.
    w.zero_grad();
    handle.remove();
    let (c2, seen2) = counter();
    let _h = w.register_post_accumulate_grad_hook(Arc::new(move |_: &Tensor| {
        c2.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }))?;
    w.backward_with(&Tensor::ones(&[2], DType::F32))?;
    assert_eq!((seen(), seen2()), (1, 1), "removed hook stays removed");
    Ok(())
}

#[test]
fn a_failing_hook_fails_backward_and_only_leaves_take_hooks() -> Result<()> {
    let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
    let _h = w.register_post_accumulate_grad_hook(Arc::new(|_: &Tensor| {
        Err(Error::Autograd("hook says no".into()))
    }))?;
    let err = w.mul_scalar(2.0)?.sum_all()?.backward().unwrap_err();
    assert!(err.to_string().contains("hook says no"), "{err}");
    let y = w.mul_scalar(2.0)?;
    let err = y
        .register_post_accumulate_grad_hook(Arc::new(|_: &Tensor| Ok(())))
        .err()
        .expect("a non-leaf is refused");
    assert!(err.to_string().contains("leaf"), "{err}");
    let plain = Tensor::ones(&[2], DType::F32);
    assert!(
        plain
            .register_post_accumulate_grad_hook(Arc::new(|_: &Tensor| Ok(())))
            .is_err()
    );
    Ok(())
}

#[test]
fn callbacks_run_after_every_hook_in_queue_order() -> Result<()> {
    let a = Tensor::ones(&[1], DType::F32).requires_grad_(true)?;
    let b = Tensor::ones(&[1], DType::F32).requires_grad_(true)?;
    let log = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for (name, t) in [("a", &a), ("b", &b)] {
        let log = log.clone();
        handles.push(
            t.register_post_accumulate_grad_hook(Arc::new(move |_: &Tensor| {
                log.lock().push(format!("hook {name}"));
                let log = log.clone();
                autograd::queue_callback(Box::new(move || {
                    log.lock().push(format!("callback {name}"));
                    Ok(())
                }))
            }))?,
        );
    }
    a.mul(&b)?.sum_all()?.backward()?;
    let log = log.lock().clone();
    assert_eq!(log.len(), 4, "{log:?}");
    assert!(log[..2].iter().all(|l| l.starts_with("hook")), "{log:?}");
    assert!(
        log[2..].iter().all(|l| l.starts_with("callback")),
        "{log:?}"
    );
    Ok(())
}
