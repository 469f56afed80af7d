//! The buffer arena: a compiled graph keeps its intermediates' memory across calls, so a
//! multi-region graph at 2^24 elements faults in no fresh pages per call, and memory someone
//! else still uses is never recycled.
//!
//! The runtime's caching allocator would also hand the same 64 MiB buffers back call after
//! call, so the page-fault test turns its cache off first: what it measures is the arena alone.
//! Page-fault counts are per process, so the tests of this file run one at a time.

use std::sync::Mutex;

use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::executor::CompiledGraph;
use tensorplay_ir::{DType, Device, Result, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::storage::allocator;

/// Tests of this file run one at a time (page-fault counts are per process).
static SERIAL: Mutex<()> = Mutex::new(());

/// Minor page faults of this process so far (`/proc/self/stat` field 10), if readable.
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is parenthesised and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(7)?.parse().ok()
}

/// Three fused regions separated by two in-place (mutating, opaque) ops; the last region is a
/// reduction, so every large buffer is an intermediate.
fn three_regions(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = xs[0].mul_scalar(2.0)?.add_scalar(1.0)?;
    a.mul_scalar_(0.5)?;
    let b = a.sub(&xs[0])?.relu()?;
    b.mul_scalar_(3.0)?;
    Ok(vec![b.add(&xs[0])?.sum_all()?])
}

#[test]
fn a_three_region_graph_at_2_pow_24_faults_in_no_pages_per_call() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let limit = allocator::cache_limit_bytes();
    allocator::set_cache_limit_bytes(0);
    let outcome = faults_per_call();
    allocator::set_cache_limit_bytes(limit);
    outcome
}

fn faults_per_call() -> Result<()> {
    const N: usize = 1 << 24;
    let m = TensorMeta::new(&[N], DType::F32, Device::Cpu);
    let g = capture(three_regions, &[m], CaptureOptions::default())?;
    let c = CompiledGraph::new(&g)?;
    assert_eq!(c.num_kernels(), 3, "{}", c.explain());
    let x = Tensor::randn_seeded(&[N], DType::F32, 3)?;
    let want = three_regions(std::slice::from_ref(&x))?[0].item::<f32>()?;
    for _ in 0..2 {
        let got = c.run(std::slice::from_ref(&x))?[0].item::<f32>()?;
        assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
    }
    // Two intermediates of 64 MiB live at once (a is read while b is written).
    assert!(
        c.arena_bytes() >= 2 * N * 4,
        "arena holds {}",
        c.arena_bytes()
    );
    let Some(before) = minor_faults() else {
        eprintln!("arena: /proc/self/stat unreadable, page faults not counted");
        return Ok(());
    };
    const CALLS: u64 = 4;
    for _ in 0..CALLS {
        let got = c.run(std::slice::from_ref(&x))?[0].item::<f32>()?;
        assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
    }
    let per_call = (minor_faults().unwrap_or(before) - before) / CALLS;
    println!("arena: {per_call} minor page faults per call (a fresh 64 MiB buffer is 16384)");
    // Without the arena (and the allocator's cache) each call maps two 64 MiB intermediates
    // anew: at least 32768 faults.
    assert!(per_call < 2048, "{per_call} page faults per call");
    Ok(())
}

#[test]
fn memory_still_in_use_is_not_recycled() -> Result<()> {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // `a` is an intermediate; its view `v` is returned, so `a` escapes and its memory stays
    // the caller's. `b` (an intermediate read by the reduction) is recycled.
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let a = xs[0].exp()?.add_scalar(1.0)?;
        let s = a.cumsum(0, None)?;
        let b = s.mul_scalar(2.0)?.sub(&xs[0])?;
        Ok(vec![a.reshape(&[4, 256])?, b.cumsum(0, None)?])
    };
    let m = TensorMeta::new(&[1024], DType::F32, Device::Cpu);
    let c = CompiledGraph::new(&capture(f, &[m], CaptureOptions::default())?)?;
    let x1 = Tensor::randn_seeded(&[1024], DType::F32, 1)?;
    let x2 = Tensor::randn_seeded(&[1024], DType::F32, 2)?;
    let first = c.run(std::slice::from_ref(&x1))?;
    let kept = first[0].to_vec::<f32>()?;
    for x in [&x2, &x1, &x2] {
        let out = c.run(std::slice::from_ref(x))?;
        let want = f(std::slice::from_ref(x))?;
        for (k, (o, w)) in out.iter().zip(&want).enumerate() {
            let (o, w) = (o.to_vec::<f32>()?, w.to_vec::<f32>()?);
            assert!(
                o.iter()
                    .zip(&w)
                    .all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs())),
                "output {k}"
            );
        }
        assert_eq!(
            first[0].to_vec::<f32>()?,
            kept,
            "a returned view was overwritten"
        );
    }
    Ok(())
}
