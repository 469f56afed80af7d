//! Tensor factories, seeded random numbers, printing, and the caching allocator.

use std::sync::Mutex;

use half::{bf16, f16};
use tensorplay_runtime::storage::allocator;
use tensorplay_runtime::{DType, Device, Error, Tensor, manual_seed};

type R = tensorplay_runtime::Result<()>;

/// Serializes the tests that watch allocator counters or draw from the global generator (tests in
/// this binary run in parallel; a draw between `manual_seed` and the next draw breaks the
/// reproducibility check).
static ALLOC_LOCK: Mutex<()> = Mutex::new(());

#[test]
fn constants_have_the_requested_shape_dtype_and_value() -> R {
    for d in DType::ALL {
        let z = Tensor::zeros(&[2, 3], d);
        assert_eq!(
            (z.shape(), z.dtype(), z.device()),
            (&[2usize, 3][..], d, Device::Cpu)
        );
        assert!(z.is_contiguous() && z.is_leaf() && !z.requires_grad() && !z.is_fake());
        assert_eq!(z.to_vec_f64()?, vec![0.0; 6]);
        assert_eq!(Tensor::ones(&[4], d).to_vec_f64()?, vec![1.0; 4]);
    }
    assert_eq!(
        Tensor::full(&[2], 2.5, DType::F32).to_vec::<f32>()?,
        vec![2.5, 2.5]
    );
    // Values are converted with the cast rules: truncation into ints, != 0 into bool.
    assert_eq!(
        Tensor::full(&[2], 3.7, DType::I64).to_vec::<i64>()?,
        vec![3, 3]
    );
    assert_eq!(
        Tensor::full(&[2], -3.7, DType::I32).to_vec::<i32>()?,
        vec![-3, -3]
    );
    assert_eq!(
        Tensor::full(&[1], 0.5, DType::Bool).to_vec::<bool>()?,
        vec![true]
    );
    assert_eq!(
        Tensor::full(&[1], true, DType::F64).to_vec::<f64>()?,
        vec![1.0]
    );
    assert_eq!(
        Tensor::full(&[1], i64::MAX, DType::I64).to_vec::<i64>()?,
        vec![i64::MAX]
    );
    // A finite value beyond the dtype's range is an error, as in PyTorch (inf itself is fine).
    let e = Tensor::try_full(&[1], 70000.0, DType::F16).expect_err("overflows f16");
    assert!(e.to_string().contains("f16"), "{e}");
    assert_eq!(
        Tensor::full(&[1], f64::INFINITY, DType::F16).to_vec::<f16>()?,
        vec![f16::INFINITY]
    );
    assert!(Tensor::full(&[1], f64::NAN, DType::BF16).to_vec::<bf16>()?[0].is_nan());
    // 0-d and empty shapes.
    let s = Tensor::zeros(&[], DType::F32);
    assert_eq!((s.rank(), s.numel()), (0, 1));
    let e = Tensor::ones(&[3, 0], DType::I64);
    assert_eq!((e.numel(), e.to_vec::<i64>()?), (0, vec![]));
    // A cached (large) zeroed buffer is really zero even after a dirty buffer was freed.
    {
        let _l = ALLOC_LOCK.lock().unwrap();
        drop(Tensor::full(&[1 << 18], 9.0, DType::F32));
        let z = Tensor::zeros(&[1 << 18], DType::F32);
        assert!(z.to_vec::<f32>()?.iter().all(|&v| v == 0.0));
    }
    Ok(())
}

#[test]
fn fallible_constructors_report_impossible_shapes() -> R {
    // A refused allocation empties the cache before giving up; keep that away from the
    // allocator-counter tests.
    let _l = ALLOC_LOCK.lock().unwrap();
    for shape in [
        &[1usize << 40, 1 << 40][..],
        &[usize::MAX, 2],
        &[1 << 62, 1 << 3],
    ] {
        let err = Tensor::try_zeros(shape, DType::F32).unwrap_err();
        assert!(
            matches!(&err, Error::Shape { op, msg } if op == "zeros" && msg.contains("too large")),
            "{err}"
        );
        assert!(Tensor::try_empty(shape, DType::F64).is_err());
        assert!(Tensor::try_full(shape, 1.0, DType::I32).is_err());
        assert!(Tensor::from_vec(Vec::<f32>::new(), shape).is_err());
    }
    // Representable but far beyond any machine's memory: an error, not an abort.
    let err = Tensor::try_zeros(&[1 << 58], DType::I64).unwrap_err();
    assert!(
        matches!(&err, Error::Unsupported { op, msg } if op == "zeros" && msg.contains("out of memory")),
        "{err}"
    );
    assert!(Tensor::try_empty(&[1 << 59], DType::F64).is_err());
    // A zero-size dim makes even huge other dims fine when their product fits.
    assert_eq!(Tensor::try_zeros(&[1 << 40, 0], DType::F32)?.numel(), 0);
    assert_eq!(
        Tensor::try_full(&[2], 7, DType::I32)?.to_vec::<i32>()?,
        vec![7, 7]
    );
    Ok(())
}

#[test]
fn arange_covers_float_negative_and_integer_steps() -> R {
    let r = Tensor::arange(0.0, 1.0, 0.1, DType::F64)?;
    assert_eq!(r.shape(), &[10]);
    let v = r.to_vec::<f64>()?;
    for (i, x) in v.iter().enumerate() {
        assert_eq!(
            *x,
            i as f64 * 0.1,
            "values come from the index, not an accumulated sum"
        );
    }
    assert_eq!(
        Tensor::arange(0.0, 10.0, 3.0, DType::I64)?.to_vec::<i64>()?,
        vec![0, 3, 6, 9]
    );
    assert_eq!(
        Tensor::arange(1.0, 0.0, -0.25, DType::F32)?.to_vec::<f32>()?,
        vec![1.0, 0.75, 0.5, 0.25]
    );
    assert_eq!(
        Tensor::arange(-3.0, 0.0, 1.0, DType::I32)?.to_vec::<i32>()?,
        vec![-3, -2, -1]
    );
    // An integer dtype with a fractional step: the length is ceil(5 / 1.5) = 4, the values step
    // by the step truncated to the dtype (1), as PyTorch computes them.
    assert_eq!(
        Tensor::arange(0.0, 5.0, 1.5, DType::I64)?.to_vec::<i64>()?,
        vec![0, 1, 2, 3]
    );
    assert_eq!(Tensor::arange(2.0, 2.0, 1.0, DType::F32)?.shape(), &[0]);
    assert_eq!(Tensor::arange(2.0, 2.0, -1.0, DType::F32)?.shape(), &[0]);
    assert_eq!(
        Tensor::arange(0.0, 3.0, 1.0, DType::BF16)?.dtype(),
        DType::BF16
    );
    // Errors: zero step, wrong sign, non-finite values, absurd lengths.
    for (start, end, step) in [
        (0.0, 1.0, 0.0),
        (0.0, 1.0, -1.0),
        (1.0, 0.0, 0.5),
        (0.0, f64::INFINITY, 1.0),
        (f64::NAN, 1.0, 1.0),
        (0.0, 1.0, f64::NAN),
        (0.0, 1e300, 1.0),
        (-1e308, 1e308, 1e-300),
    ] {
        let err = Tensor::arange(start, end, step, DType::F32).unwrap_err();
        assert!(
            matches!(&err, Error::Argument { op, arg, .. } if op == "arange" && arg == "step"),
            "arange({start}, {end}, {step}): {err}"
        );
    }
    let msg = Tensor::arange(0.0, 1.0, -1.0, DType::F32)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("step=-1") && msg.contains("end=1"), "{msg}");
    Ok(())
}

#[test]
fn from_vec_and_scalar() -> R {
    let t = Tensor::from_vec(vec![1u8 != 0, false, true], &[3])?;
    assert_eq!(t.dtype(), DType::Bool);
    let i = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    assert_eq!((i.dtype(), i.shape()), (DType::I32, &[2usize, 3][..]));
    assert_eq!(i.to_vec::<i32>()?, vec![1, 2, 3, 4, 5, 6]);
    let err = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert!(
        matches!(&err, Error::Shape { op, msg } if op == "from_vec" && msg.contains('3') && msg.contains("[2, 2]")),
        "{err}"
    );
    assert!(Tensor::from_slice(&[1.0f64], &[]).is_ok());
    assert!(Tensor::from_slice(&[1.0f64, 2.0], &[]).is_err());
    let s = Tensor::scalar(half::bf16::from_f32(2.5));
    assert_eq!((s.rank(), s.dtype()), (0, DType::BF16));
    assert_eq!(s.item::<f64>()?, 2.5);
    assert_eq!(Tensor::scalar(i64::MIN).item::<i64>()?, i64::MIN);
    assert_eq!(Tensor::scalar(true).item::<i32>()?, 1);
    assert_eq!(Tensor::scalar(-2.9f32).item::<i64>()?, -2);
    // to_vec checks the element type; to_vec_f64 converts any dtype.
    assert!(matches!(i.to_vec::<i64>(), Err(Error::DType { ref op, .. }) if op == "to_vec"));
    assert_eq!(i.to_vec_f64()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    Ok(())
}

#[test]
fn like_factories_copy_shape_and_dtype() -> R {
    // `rand_like`/`randn_like` below draw from the global generator.
    let _l = ALLOC_LOCK.lock().unwrap();
    let base = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?.t()?;
    for t in [
        Tensor::zeros_like(&base),
        Tensor::ones_like(&base),
        Tensor::full_like(&base, 7),
        Tensor::empty_like(&base),
    ] {
        assert_eq!((t.shape(), t.dtype()), (&[3usize, 2][..], DType::I32));
        assert!(t.is_contiguous());
        assert!(!t.storage().same(base.storage()));
    }
    assert_eq!(Tensor::full_like(&base, 7).to_vec::<i32>()?, vec![7; 6]);
    assert_eq!(Tensor::ones_like(&base).to_vec::<i32>()?, vec![1; 6]);
    // Random *_like needs a floating dtype.
    assert!(matches!(Tensor::rand_like(&base), Err(Error::DType { .. })));
    assert!(matches!(
        Tensor::randn_like(&base),
        Err(Error::DType { .. })
    ));
    let f = Tensor::zeros(&[4, 5], DType::F16);
    assert_eq!(Tensor::rand_like(&f)?.shape(), &[4, 5]);
    assert_eq!(Tensor::randn_like(&f)?.dtype(), DType::F16);
    Ok(())
}

#[test]
fn seeded_random_numbers_are_reproducible_and_well_distributed() -> R {
    // The generator's sequence after `manual_seed` must not be disturbed by another test's
    // draw, and its large buffers would disturb the allocator-counter tests, hence the lock.
    let _l = ALLOC_LOCK.lock().unwrap();
    manual_seed(1234);
    let a = Tensor::rand(&[64], DType::F32)?.to_vec::<f32>()?;
    let b = Tensor::randn(&[64], DType::F64)?.to_vec::<f64>()?;
    manual_seed(1234);
    assert_eq!(Tensor::rand(&[64], DType::F32)?.to_vec::<f32>()?, a);
    assert_eq!(Tensor::randn(&[64], DType::F64)?.to_vec::<f64>()?, b);
    // Successive draws differ.
    assert_ne!(Tensor::rand(&[64], DType::F32)?.to_vec::<f32>()?, a);
    manual_seed(99);
    assert_ne!(Tensor::rand(&[64], DType::F32)?.to_vec::<f32>()?, a);

    // Explicit seeds.
    let x = Tensor::randn_seeded(&[100_000], DType::F64, 7)?;
    assert_eq!(
        x.to_vec::<f64>()?,
        Tensor::randn_seeded(&[100_000], DType::F64, 7)?.to_vec::<f64>()?
    );
    assert_ne!(
        x.to_vec::<f64>()?[..10],
        Tensor::randn_seeded(&[10], DType::F64, 8)?.to_vec::<f64>()?[..]
    );
    let v = x.to_vec::<f64>()?;
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    assert!(mean.abs() < 0.02, "mean {mean}");
    assert!((std - 1.0).abs() < 0.015, "std {std}");
    // Tails: about 4.55 % beyond two standard deviations.
    let tail = v.iter().filter(|x| x.abs() > 2.0).count() as f64 / n;
    assert!((tail - 0.0455).abs() < 0.004, "tail fraction {tail}");
    // An odd count uses half of the last Box-Muller pair, and a prefix matches.
    assert_eq!(
        Tensor::randn_seeded(&[3], DType::F64, 7)?.to_vec::<f64>()?,
        v[..3].to_vec()
    );

    let u = Tensor::rand_seeded(&[100_000], DType::F64, 3)?.to_vec::<f64>()?;
    let mean = u.iter().sum::<f64>() / n;
    assert!((mean - 0.5).abs() < 0.01, "uniform mean {mean}");
    let below_tenth = u.iter().filter(|&&x| x < 0.1).count() as f64 / n;
    assert!((below_tenth - 0.1).abs() < 0.006, "{below_tenth}");
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    // Reduced precision must still stay below 1.0 (rounding up would produce exact ones).
    for d in [DType::BF16, DType::F16, DType::F32] {
        let w = Tensor::rand_seeded(&[100_000], d, 11)?.to_vec_f64()?;
        assert!(
            w.iter().all(|&x| (0.0..1.0).contains(&x)),
            "{d} rand produced 1.0"
        );
        let m = w.iter().sum::<f64>() / n;
        assert!((m - 0.5).abs() < 0.01, "{d} mean {m}");
    }
    // The global generator's *_like and explicit dtypes.
    assert!(
        matches!(Tensor::rand(&[2], DType::I32), Err(Error::DType { ref op, .. }) if op == "rand")
    );
    assert!(
        matches!(Tensor::randn_seeded(&[2], DType::Bool, 1), Err(Error::DType { ref op, .. }) if op == "randn")
    );
    Ok(())
}

#[test]
fn display_and_debug_formatting() -> R {
    let t = Tensor::from_vec(vec![1.0f32, -2.5, 0.125, f32::INFINITY], &[2, 2])?;
    assert_eq!(
        t.to_string(),
        "tensor([[1.0000, -2.5000],\n        [0.1250, inf]], dtype=f32)"
    );
    assert_eq!(format!("{t:?}"), "Tensor(f32[2, 2], cpu)");
    let w = t.clone().requires_grad_(true)?;
    assert_eq!(format!("{w:?}"), "Tensor(f32[2, 2], cpu, requires_grad)");
    let y = w.mul_scalar(2.0)?;
    assert_eq!(format!("{y:?}"), "Tensor(f32[2, 2], cpu, grad_fn=mul)");
    // Integers print exactly, even beyond 2^53, and views print their logical order.
    let i = Tensor::from_vec(vec![i64::MAX, -1, 9_007_199_254_740_993, 0], &[2, 2])?;
    assert_eq!(
        i.t()?.to_string(),
        "tensor([[9223372036854775807, 9007199254740993],\n        [-1, 0]], dtype=i64)"
    );
    assert_eq!(
        Tensor::from_vec(vec![-7i32], &[1])?.to_string(),
        "tensor([-7], dtype=i32)"
    );
    assert_eq!(
        Tensor::from_vec(vec![false], &[1, 1])?.to_string(),
        "tensor([[False]], dtype=bool)"
    );
    assert_eq!(
        Tensor::scalar(f64::NAN).to_string(),
        "tensor(nan, dtype=f64)"
    );
    assert_eq!(
        Tensor::zeros(&[0], DType::F32).to_string(),
        "tensor([], dtype=f32)"
    );
    // 3-D nesting indents each level.
    let c = Tensor::from_vec((0..8).collect::<Vec<i64>>(), &[2, 2, 2])?;
    assert_eq!(
        c.to_string(),
        "tensor([[[0, 1],\n         [2, 3]],\n        [[4, 5],\n         [6, 7]]], dtype=i64)"
    );
    // Large tensors are summarized at each end of every long dim.
    let big = Tensor::arange(0.0, 2000.0, 1.0, DType::I64)?;
    assert_eq!(
        big.to_string(),
        "tensor([0, 1, 2, ..., 1997, 1998, 1999], dtype=i64)"
    );
    let big2 = big.reshape(&[40, 50])?.to_string();
    assert!(
        big2.starts_with("tensor([[0, 1, 2, ..., 47, 48, 49],"),
        "{big2}"
    );
    assert!(big2.contains("...,\n"));
    assert!(
        big2.ends_with("[1950, 1951, 1952, ..., 1997, 1998, 1999]], dtype=i64)"),
        "{big2}"
    );
    // Fake and meta tensors print metadata only.
    let f = Tensor::empty_fake(&[2, 3], DType::BF16, Device::Meta);
    assert_eq!(f.to_string(), "tensor(<fake bf16[2, 3]@meta>)");
    assert_eq!(format!("{f:?}"), "Tensor(bf16[2, 3]@meta, fake)");
    Ok(())
}

#[test]
fn equal_and_allclose() -> R {
    let a = Tensor::from_vec(vec![1.0f32, f32::NAN, f32::INFINITY], &[3])?;
    assert!(a.equal(&a)?);
    assert!(a.allclose(&a, 0.0, 0.0)?);
    let b = Tensor::from_vec(vec![1.0f64 + 1e-7, f64::NAN, f64::INFINITY], &[3])?;
    assert!(!a.equal(&b)?);
    assert!(a.allclose(&b, 1e-6, 0.0)?);
    assert!(!a.allclose(&b, 1e-8, 0.0)?);
    let c = Tensor::from_vec(vec![1.0f32, f32::NAN, f32::NEG_INFINITY], &[3])?;
    assert!(!a.allclose(&c, 1.0, 1.0)?, "infinities must match exactly");
    assert!(!a.equal(&a.view(&[3, 1])?)?, "shapes must match");
    // Integers compare exactly, beyond f64's 2^53.
    let big = Tensor::from_vec(vec![(1i64 << 53) + 1], &[1])?;
    let big2 = Tensor::from_vec(vec![1i64 << 53], &[1])?;
    assert!(!big.equal(&big2)?);
    assert!(big.equal(&big.clone_tensor()?)?);
    let small = Tensor::from_vec(vec![3i32], &[1])?;
    assert!(small.equal(&Tensor::from_vec(vec![3i64], &[1])?)?);
    assert!(small.equal(&Tensor::from_vec(vec![3.0f32], &[1])?)?);
    Ok(())
}

#[test]
fn steady_state_elementwise_loop_allocates_from_the_cache() -> R {
    let _l = ALLOC_LOCK.lock().unwrap();
    let n = 1usize << 22;
    let a = Tensor::ones(&[n], DType::F32);
    let b = Tensor::full(&[n], 2.0, DType::F32);
    let mut out = (&a + &b)?; // warm the size class
    let (hits0, misses0) = allocator::stats();
    const ITERS: usize = 20;
    for _ in 0..ITERS {
        // The previous result is freed when it is replaced, so its buffer serves the next one.
        let next = (&a + &b)?;
        out = next;
    }
    let (hits1, misses1) = allocator::stats();
    assert!(
        hits1 - hits0 >= ITERS - 2,
        "expected >= {} cache hits over {ITERS} iterations, got {} (misses {})",
        ITERS - 2,
        hits1 - hits0,
        misses1 - misses0
    );
    assert_eq!(out.to_vec::<f32>()?[n - 1], 3.0);
    Ok(())
}

#[test]
fn empty_cache_releases_cached_buffers() -> R {
    let _l = ALLOC_LOCK.lock().unwrap();
    // A size class no other test here uses (~3 MiB).
    let elems = 3 * (1 << 18) + 17;
    drop(Tensor::zeros(&[elems], DType::F32));
    assert!(
        allocator::cached_bytes() >= elems * 4,
        "a freed large buffer is cached"
    );
    let (h0, _) = allocator::stats();
    drop(Tensor::zeros(&[elems], DType::F32));
    let (h1, _) = allocator::stats();
    assert!(h1 > h0, "re-allocating the same size hits the cache");
    allocator::empty_cache();
    assert_eq!(allocator::cached_bytes(), 0);
    let (_, m0) = allocator::stats();
    let t = Tensor::zeros(&[elems], DType::F32);
    let (_, m1) = allocator::stats();
    assert!(m1 > m0, "after empty_cache the allocation misses");
    assert!(t.to_vec::<f32>()?.iter().all(|&v| v == 0.0));
    // Small buffers bypass the cache entirely.
    let before = allocator::stats();
    drop(Tensor::zeros(&[16], DType::F32));
    assert_eq!(allocator::stats(), before);
    assert!(allocator::cache_limit_bytes() > 0);
    Ok(())
}
