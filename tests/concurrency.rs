//! Eight threads at once registering libraries, calling and compiling their ops, dropping the
//! libraries and clearing the kernel cache, for a few seconds. Every result is checked, and the
//! whole run is bounded: a deadlock fails the test instead of hanging CI.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tensorplay::compiler::codegen::cache;
use tensorplay::compiler::compile;
use tensorplay::library::Library;
use tensorplay::{DType, Result, Tensor, ops};

const THREADS: usize = 8;
/// How long the threads keep working.
const RUN_FOR: Duration = Duration::from_secs(3);
/// How long the test waits for them before calling it a deadlock (generous for slow CI hosts).
const DEADLINE: Duration = Duration::from_secs(120);

fn ramp(n: usize, k: usize) -> Tensor {
    Tensor::from_vec((0..n).map(|i| (i + k) as f32 * 0.25).collect(), &[n]).unwrap()
}

/// One round of thread `t`: its own library with one op, eager and compiled calls, a shared
/// compiled function, then the library is dropped (and sometimes the kernel cache cleared).
fn round(t: usize, i: usize, shared: &tensorplay::compiler::CompiledFn) -> Result<()> {
    let ns = format!("conc_t{t}_r{i}");
    let lib = Library::new(&ns, "DEF")?;
    lib.define("scale(Tensor x, float alpha) -> Tensor", "", &[])?;
    lib.r#impl(
        "scale",
        |x: Tensor, alpha: f64| -> Result<Tensor> { x.mul_scalar(alpha) },
        "CompositeExplicitAutograd",
        "",
        true,
    )?;
    let qual = format!("{ns}::scale");
    let n = 1 + (t * 7 + i) % 50;
    let x = ramp(n, t);
    let alpha = (t + 1) as f64;
    let want: Vec<f32> = x
        .to_vec::<f32>()?
        .iter()
        .map(|v| v * alpha as f32)
        .collect();

    let eager = ops::call(&qual, &[x.clone().into(), alpha.into()])?;
    assert_eq!(eager[0].to_vec::<f32>()?, want, "eager {qual}");

    let q = qual.clone();
    let f = compile(move |xs: &[Tensor]| {
        let y = ops::call(&q, &[xs[0].clone().into(), alpha.into()])?;
        Ok(vec![y[0].add_scalar(1.0)?])
    });
    let got = f.call(std::slice::from_ref(&x))?;
    let plus: Vec<f32> = want.iter().map(|v| v + 1.0).collect();
    assert_eq!(got[0].to_vec::<f32>()?, plus, "compiled {qual}");
    drop(f);

    // Everyone shares this one compiled function (and its kernels).
    let got = shared.call(std::slice::from_ref(&x))?;
    let want: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| (v * 2.0).exp()).collect();
    let same = got[0].to_vec::<f32>()?;
    for (g, w) in same.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * w.abs(), "shared: {g} vs {w}");
    }

    drop(lib);
    assert!(
        ops::call(&qual, &[x.into(), alpha.into()]).is_err(),
        "{qual} must be gone once its library is dropped"
    );
    if (t + i).is_multiple_of(5) {
        cache::clear();
    }
    Ok(())
}

#[test]
fn eight_threads_register_call_compile_drop_and_clear() {
    // Two regions around a barrier, with an intermediate (`a`) between them: concurrent calls
    // each get their own arena slots.
    let shared = Arc::new(compile(|xs: &[Tensor]| {
        let a = xs[0].mul_scalar(2.0)?;
        let s = a.cumsum(0, None)?;
        Ok(vec![a.exp()?.add(&s.mul_scalar(0.0)?)?])
    }));
    let rounds = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel::<(usize, std::thread::Result<Result<()>>)>();
    let start = Instant::now();
    for t in 0..THREADS {
        let (shared, rounds, done) = (shared.clone(), rounds.clone(), done.clone());
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut i = 0;
                while start.elapsed() < RUN_FOR {
                    round(t, i, &shared)?;
                    rounds.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok(())
            }));
            let _ = done.send((t, outcome));
        });
    }
    drop(done);
    for _ in 0..THREADS {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match finished.recv_timeout(left) {
            Ok((_, Ok(Ok(())))) => {}
            Ok((t, Ok(Err(e)))) => panic!("thread {t} failed: {e}"),
            Ok((t, Err(_))) => panic!("thread {t} panicked"),
            Err(_) => panic!(
                "deadlock: threads still running after {DEADLINE:?} ({} rounds done)",
                rounds.load(Ordering::Relaxed)
            ),
        }
    }
    assert!(
        rounds.load(Ordering::Relaxed) >= THREADS,
        "every thread did some work"
    );
    // The registry and the cache still work after the storm.
    let y = shared.call(&[Tensor::ones(&[3], DType::F32)]).unwrap();
    assert!(
        y[0].allclose(&Tensor::full(&[3], 2f32.exp(), DType::F32), 1e-6, 0.0)
            .unwrap()
    );
}
