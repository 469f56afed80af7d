//! Eager semantics of issue 12's elementwise ops: values against f64 references, PyTorch's dtype
//! rules (integer inputs, halves), NaN/inf/±0, empty and 0-d tensors, non-contiguous and
//! broadcast operands, errors, and their behaviour under vmap, autocast and fake tensors.
//! (Gradients: `op_table.rs` gradchecks every entry; closed forms are checked here too.)

use tensorplay_ir::LibmFn;
use tensorplay_math::shims::{acosh_f64, asinh_f64, atanh_f64};
use tensorplay_runtime::autocast::autocast;
use tensorplay_runtime::vmap::vmap;
use tensorplay_runtime::{DType, Device, Error, Result, Tensor};

fn f64s(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn same_bits(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

type Un = fn(&Tensor) -> Result<Tensor>;
/// An op's name, its method and its f64 reference.
type Case = (&'static str, Un, fn(f64) -> f64);

// asinh, acosh and atanh: the references are the f64 forms PyTorch (glibc) computes — `ln |x| +
// ln 2` past 2^28 and atanh through `ln_1p` — where `std`'s `f64::asinh`/`atanh` are one ulp off
// (asinh(1e300), atanh(-0.75)); tests/parity.rs checks these forms against recorded PyTorch.

/// The unary libm ops and their f64 references.
fn libm_cases() -> Vec<Case> {
    vec![
        ("log2", Tensor::log2, f64::log2),
        ("log10", Tensor::log10, f64::log10),
        ("exp2", Tensor::exp2, f64::exp2),
        ("tan", Tensor::tan, f64::tan),
        ("asin", Tensor::asin, f64::asin),
        ("acos", Tensor::acos, f64::acos),
        ("atan", Tensor::atan, f64::atan),
        ("sinh", Tensor::sinh, f64::sinh),
        ("cosh", Tensor::cosh, f64::cosh),
        ("asinh", Tensor::asinh, asinh_f64),
        ("acosh", Tensor::acosh, acosh_f64),
        ("atanh", Tensor::atanh, atanh_f64),
        ("sinc", Tensor::sinc, |x| LibmFn::Sinc.eval(x)),
    ]
}

/// The cases above cover the whole libm table: a function declared there without a case here
/// fails this test.
#[test]
fn libm_cases_cover_the_table() {
    let names: Vec<&str> = libm_cases().iter().map(|c| c.0).collect();
    for f in LibmFn::ALL {
        assert!(names.contains(&f.name()), "no case for {}", f.name());
    }
}

const SPECIALS: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.75,
    2.5,
    100.0,
    -100.0,
    1e-30,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1e300,
];

#[test]
fn libm_ops_are_the_f64_function_rounded_once_in_every_float_dtype() {
    for (name, op, f) in libm_cases() {
        let x = f64s(&SPECIALS);
        let got = op(&x).unwrap().to_vec::<f64>().unwrap();
        for (&v, g) in SPECIALS.iter().zip(&got) {
            assert!(same_bits(*g, f(v)), "{name}({v}) = {g}, want {}", f(v));
        }
        // f32: the f64 value rounded once (correctly rounded); halves through f32.
        let x32 = x.to_dtype(DType::F32).unwrap();
        let got = op(&x32).unwrap();
        assert_eq!(got.dtype(), DType::F32, "{name}");
        for (&v, g) in SPECIALS.iter().zip(got.to_vec::<f32>().unwrap()) {
            let want = f(v as f32 as f64) as f32;
            assert!(
                same_bits(g as f64, want as f64),
                "{name}_f32({v}) = {g}, want {want}"
            );
        }
        for h in [DType::F16, DType::BF16] {
            let y = op(&x.to_dtype(h).unwrap()).unwrap();
            assert_eq!(y.dtype(), h, "{name}");
        }
    }
}

#[test]
fn libm_ops_promote_integers_and_bools_to_f32() {
    for (name, op, f) in libm_cases() {
        let i = Tensor::from_vec(vec![0i64, 1, 2, -3], &[4]).unwrap();
        let y = op(&i).unwrap();
        assert_eq!(y.dtype(), DType::F32, "{name}");
        let want: Vec<f32> = [0.0, 1.0, 2.0, -3.0].iter().map(|&v| f(v) as f32).collect();
        let got = y.to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                same_bits(*g as f64, *w as f64),
                "{name}: {got:?} vs {want:?}"
            );
        }
        let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
        assert_eq!(op(&b).unwrap().dtype(), DType::F32, "{name}");
    }
}

#[test]
fn empty_zero_dim_non_contiguous_inputs() {
    for (name, op, f) in libm_cases() {
        let e = Tensor::zeros(&[0, 3], DType::F32);
        assert_eq!(op(&e).unwrap().shape(), &[0, 3], "{name}");
        let s = Tensor::full(&[], 0.5, DType::F64);
        let y = op(&s).unwrap();
        assert_eq!(y.shape(), &[] as &[usize]);
        assert!(same_bits(y.item::<f64>().unwrap(), f(0.5)), "{name}");
        // A transposed view computes on the logical elements.
        let m = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
        let t = m.t().unwrap();
        let got = op(&t).unwrap().to_vec::<f64>().unwrap();
        let want: Vec<f64> = [0.1, 0.4, 0.2, 0.5, 0.3, 0.6]
            .iter()
            .map(|&v| f(v))
            .collect();
        for (g, w) in got.iter().zip(&want) {
            assert!(same_bits(*g, *w), "{name}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn trunc_and_frac() {
    let x = f64s(&[-2.5, -0.5, -0.0, 0.0, 0.7, 3.0, f64::INFINITY, f64::NAN]);
    let t = x.trunc().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(t[..6], [-2.0, -0.0, -0.0, 0.0, 0.0, 3.0]);
    assert!(t[1].is_sign_negative() && t[2].is_sign_negative());
    assert_eq!(t[6], f64::INFINITY);
    assert!(t[7].is_nan());
    let fr = x.frac().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(fr[..6], [-0.5, -0.5, -0.0, 0.0, 0.7, 0.0]);
    assert!(fr[6].is_nan() && fr[7].is_nan());
    // Integers: trunc copies, frac is an error; bools are an error for both.
    let i = Tensor::from_vec(vec![-3i32, 4], &[2]).unwrap();
    assert_eq!(i.trunc().unwrap().to_vec::<i32>().unwrap(), vec![-3, 4]);
    assert!(matches!(i.frac(), Err(Error::DType { .. })));
    let b = Tensor::from_vec(vec![true], &[1]).unwrap();
    assert!(b.trunc().is_err());
}

#[test]
fn classification_ops() {
    let x = f32s(&[
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -1.5,
        f32::MAX,
    ]);
    let b = |t: Tensor| t.to_vec::<bool>().unwrap();
    assert_eq!(
        b(x.isnan().unwrap()),
        vec![true, false, false, false, false, false]
    );
    assert_eq!(
        b(x.isinf().unwrap()),
        vec![false, true, true, false, false, false]
    );
    assert_eq!(
        b(x.isfinite().unwrap()),
        vec![false, false, false, true, true, true]
    );
    let h = x.to_dtype(DType::F16).unwrap(); // f32::MAX becomes inf in f16
    assert_eq!(
        b(h.isinf().unwrap()),
        vec![false, true, true, false, false, true]
    );
    let i = Tensor::from_vec(vec![i64::MAX, 0], &[2]).unwrap();
    assert_eq!(b(i.isnan().unwrap()), vec![false, false]);
    assert_eq!(b(i.isinf().unwrap()), vec![false, false]);
    assert_eq!(b(i.isfinite().unwrap()), vec![true, true]);
    assert_eq!(i.isnan().unwrap().dtype(), DType::Bool);
}

#[test]
fn nan_to_num_defaults_and_values() {
    let x = f32s(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 2.0]);
    let y = x
        .nan_to_num(None, None, None)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y[..3], [0.0, f32::MAX, f32::MIN]);
    assert!(y[3].is_sign_negative());
    let y = x
        .nan_to_num(Some(1.5), Some(9.0), Some(-9.0))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y, vec![1.5, 9.0, -9.0, -0.0, 2.0]);
    let h = x
        .to_dtype(DType::F16)
        .unwrap()
        .nan_to_num(None, None, None)
        .unwrap();
    assert_eq!(h.to_vec_f64().unwrap()[1], 65504.0);
    let d = x
        .to_dtype(DType::F64)
        .unwrap()
        .nan_to_num(None, None, None)
        .unwrap();
    assert_eq!(d.to_vec::<f64>().unwrap()[2], f64::MIN);
    let i = Tensor::from_vec(vec![3i64, -4], &[2]).unwrap();
    assert_eq!(
        i.nan_to_num(None, None, None)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![3, -4]
    );
}

#[test]
fn activations() {
    let x = f64s(&[-4.0, -3.0, -1.0, -0.0, 0.5, 3.0, 4.0, f64::NAN]);
    let v = |t: Tensor| t.to_vec::<f64>().unwrap();
    let hs = v(x.hardsigmoid().unwrap());
    assert_eq!(hs[..7], [0.0, 0.0, 2.0 / 6.0, 0.5, 3.5 / 6.0, 1.0, 1.0]);
    assert!(hs[7].is_nan());
    let hw = v(x.hardswish().unwrap());
    assert_eq!(
        hw[..7],
        [-0.0, -0.0, -2.0 / 6.0, -0.0, 0.5 * 3.5 / 6.0, 3.0, 4.0]
    );
    assert!(hw[7].is_nan());
    let ht = v(x.hardtanh(-2.0, 1.0).unwrap());
    assert_eq!(ht[..7], [-2.0, -2.0, -1.0, -0.0, 0.5, 1.0, 1.0]);
    assert!(ht[7].is_nan());
    let e = v(x.elu(0.5, 2.0, 1.5).unwrap());
    assert_eq!(e[0], (-4.0f64 * 1.5).exp_m1() * 1.0);
    assert_eq!(e[4], 1.0);
    assert!(e[3].is_sign_negative() && e[3] == 0.0);
    let m = v(x.mish().unwrap());
    for (xi, mi) in [-4.0f64, -1.0, 0.5, 4.0]
        .iter()
        .zip([m[0], m[2], m[4], m[6]])
    {
        let want = xi * xi.exp().ln_1p().tanh();
        assert!((mi - want).abs() <= 1e-15 * want.abs(), "mish({xi})");
    }
    // mish's far tail keeps precision (x e^x), and large x gives x.
    let far = f64s(&[-100.0, -800.0, 1e4])
        .mish()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!((far[0] / (-100.0 * (-100.0f64).exp()) - 1.0).abs() < 1e-15);
    assert_eq!(far[1], -0.0);
    assert_eq!(far[2], 1e4);
    let f32_tail = f32s(&[-100.0]).mish().unwrap().to_vec::<f32>().unwrap()[0];
    assert_eq!(f32_tail, (-100.0f64 * (-100.0f64).exp()) as f32);
    // Floating only.
    let i = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    for r in [
        i.hardsigmoid(),
        i.hardswish(),
        i.mish(),
        i.elu(1.0, 1.0, 1.0),
        i.hardtanh(-1.0, 1.0),
    ] {
        assert!(matches!(r, Err(Error::DType { .. })));
    }
}

#[test]
fn logit() {
    let x = f32s(&[0.5, 0.0, 1.0, 0.25, -0.5, f32::NAN]);
    let y = x.logit(None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(
        y[..4],
        [0.0, f32::NEG_INFINITY, f32::INFINITY, (0.25f32 / 0.75).ln()]
    );
    assert!(y[4].is_nan() && y[5].is_nan());
    let y = x.logit(Some(0.1)).unwrap().to_vec::<f32>().unwrap();
    let lo = (0.1f32 / (1.0 - 0.1)).ln();
    assert_eq!(y[1], lo);
    assert_eq!(y[4], lo);
    assert!(y[5].is_nan());
    let i = Tensor::from_vec(vec![0i64, 1], &[2]).unwrap();
    assert_eq!(i.logit(None).unwrap().dtype(), DType::F32);
}

#[test]
fn binary_libm_ops() {
    let a = f64s(&[1.0, -1.0, 0.0, -0.0, 3.0, f64::INFINITY, f64::NAN, -7.5]);
    let b = f64s(&[1.0, -1.0, -1.0, -1.0, 4.0, f64::NAN, 1.0, 2.0]);
    let v = |t: Tensor| t.to_vec::<f64>().unwrap();
    for (i, g) in v(a.atan2(&b).unwrap()).iter().enumerate() {
        let (p, q) = (a.to_vec::<f64>().unwrap()[i], b.to_vec::<f64>().unwrap()[i]);
        assert!(same_bits(*g, p.atan2(q)), "atan2({p}, {q})");
    }
    let h = v(a.hypot(&b).unwrap());
    assert_eq!(h[4], 5.0);
    assert_eq!(h[5], f64::INFINITY); // hypot(inf, NaN) = inf
    let c = v(a.copysign(&b).unwrap());
    assert_eq!(c[..5], [1.0, -1.0, -0.0, -0.0, 3.0]);
    assert!(c[2].is_sign_negative());
    let m = v(a.fmod(&b).unwrap());
    assert_eq!(m[7], -1.5);
    assert!(m[6].is_nan());
    assert!(v(a.fmod_scalar(0.0).unwrap())[0].is_nan());
    // Dtype rules: atan2/copysign compute integers in f32; hypot refuses them.
    let i = Tensor::from_vec(vec![1i64, -2], &[2]).unwrap();
    assert_eq!(i.atan2(&i).unwrap().dtype(), DType::F32);
    assert_eq!(
        i.copysign_scalar(-1).unwrap().to_vec::<f32>().unwrap(),
        vec![-1.0, -2.0]
    );
    assert!(matches!(i.hypot(&i), Err(Error::DType { .. })));
    // Integer fmod keeps the dividend's sign; a zero divisor is an error.
    assert_eq!(
        Tensor::from_vec(vec![-7i32, 7], &[2])
            .unwrap()
            .fmod_scalar(-3)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![-1, 1]
    );
    assert!(matches!(
        i.fmod(&Tensor::zeros(&[2], DType::I64)),
        Err(Error::Argument { .. })
    ));
    // Broadcasting: [2, 1] with [3].
    let col = Tensor::from_vec(vec![1.0f32, -1.0], &[2, 1]).unwrap();
    let row = f32s(&[1.0, 0.0, -1.0]);
    assert_eq!(col.atan2(&row).unwrap().shape(), &[2, 3]);
}

#[test]
fn fmax_fmin_and_floor_divide() {
    let a = f32s(&[f32::NAN, 1.0, f32::NAN, -2.0]);
    let b = f32s(&[2.0, f32::NAN, f32::NAN, 3.0]);
    let mx = a.fmax(&b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(mx[..2], [2.0, 1.0]);
    assert!(mx[2].is_nan());
    assert_eq!(mx[3], 3.0);
    let mn = a.fmin(&b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!((mn[0], mn[1], mn[3]), (2.0, 1.0, -2.0));
    let i = Tensor::from_vec(vec![5i64, -5], &[2]).unwrap();
    assert_eq!(
        i.fmax_scalar(0).unwrap().to_vec::<i64>().unwrap(),
        vec![5, 0]
    );
    // Python floor division.
    let x = f64s(&[7.0, -7.0, 7.0, -7.0, 0.0, -0.0, 1.0, 5.0]);
    let y = f64s(&[2.0, 2.0, -2.0, -2.0, -3.0, 3.0, 0.0, 0.5]);
    let q = x.floor_divide(&y).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(q[..4], [3.0, -4.0, -4.0, 3.0]);
    assert!(q[4] == 0.0 && q[4].is_sign_negative()); // 0 / -3 = -0
    assert!(q[5] == 0.0 && q[5].is_sign_negative());
    assert_eq!(q[6], f64::INFINITY);
    assert_eq!(q[7], 10.0);
    let iq = Tensor::from_vec(vec![7i32, -7, i32::MIN], &[3])
        .unwrap()
        .floor_divide(&Tensor::from_vec(vec![2i32, 2, -1], &[3]).unwrap())
        .unwrap();
    assert_eq!(iq.to_vec::<i32>().unwrap(), vec![3, -4, i32::MIN]);
    assert!(i.floor_divide_scalar(0).is_err());
    let bools = Tensor::from_vec(vec![true], &[1]).unwrap();
    assert!(bools.floor_divide(&bools).is_err());
}

#[test]
fn lerp_ends_are_exact_and_dtypes_must_match() {
    let s = f32s(&[1.0, -3.0, 1e30, 0.0]);
    let e = f32s(&[2.0, 5.0, -1e30, 1.0]);
    assert_eq!(
        s.lerp_scalar(&e, 0.0).unwrap().to_vec::<f32>().unwrap(),
        s.to_vec::<f32>().unwrap()
    );
    assert_eq!(
        s.lerp_scalar(&e, 1.0).unwrap().to_vec::<f32>().unwrap(),
        e.to_vec::<f32>().unwrap()
    );
    let w = f32s(&[0.25, 0.5, 0.5, 0.75]);
    assert_eq!(
        s.lerp(&e, &w).unwrap().to_vec::<f32>().unwrap(),
        vec![1.25, 1.0, 0.0, 0.75]
    );
    // Broadcast weight of shape [1].
    assert_eq!(s.lerp(&e, &f32s(&[0.5])).unwrap().shape(), &[4]);
    let d = e.to_dtype(DType::F64).unwrap();
    assert!(matches!(s.lerp(&d, &w), Err(Error::Argument { .. })));
    let i = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    assert!(matches!(i.lerp(&i, &i), Err(Error::DType { .. })));
    assert_eq!(
        s.to_dtype(DType::BF16)
            .unwrap()
            .lerp_scalar(&e.to_dtype(DType::BF16).unwrap(), 0.5)
            .unwrap()
            .dtype(),
        DType::BF16
    );
}

#[test]
fn bitwise_ops() {
    let a = Tensor::from_vec(vec![12i64, -1, 0, 5], &[4]).unwrap();
    let b = Tensor::from_vec(vec![10i64, 3, 7, -1], &[4]).unwrap();
    let v = |t: Tensor| t.to_vec::<i64>().unwrap();
    assert_eq!(v(a.bitwise_and(&b).unwrap()), vec![8, 3, 0, 5]);
    assert_eq!(v(a.bitwise_or(&b).unwrap()), vec![14, -1, 7, -1]);
    assert_eq!(v(a.bitwise_xor(&b).unwrap()), vec![6, -4, 7, -6]);
    assert_eq!(v(a.bitwise_not().unwrap()), vec![-13, 0, -1, -6]);
    // Out-of-range shift amounts: 0 for <<, the sign fill for >>.
    let s = Tensor::from_vec(vec![2i64, 63, 64, -1], &[4]).unwrap();
    assert_eq!(
        v(a.bitwise_left_shift(&s).unwrap()),
        vec![48, i64::MIN, 0, 0]
    );
    assert_eq!(v(a.bitwise_right_shift(&s).unwrap()), vec![3, -1, 0, 0]);
    let i32s = Tensor::from_vec(vec![1i32, -8], &[2]).unwrap();
    assert_eq!(
        i32s.bitwise_left_shift_scalar(31)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![i32::MIN, 0]
    );
    assert_eq!(
        i32s.bitwise_right_shift_scalar(32)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![0, -1]
    );
    // Bools: logical; shifts refuse them; floats are an error everywhere.
    let t = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let f = Tensor::from_vec(vec![true, true], &[2]).unwrap();
    assert_eq!(
        t.bitwise_and(&f).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false]
    );
    assert_eq!(
        t.bitwise_not().unwrap().to_vec::<bool>().unwrap(),
        vec![false, true]
    );
    assert!(t.bitwise_left_shift(&f).is_err());
    let x = f32s(&[1.0]);
    assert!(matches!(x.bitwise_and(&x), Err(Error::DType { .. })));
    assert!(matches!(x.bitwise_not(), Err(Error::DType { .. })));
    assert!(matches!(a.bitwise_or_scalar(1.5), Err(Error::DType { .. })));
    // Promotion: i32 with a Rust integer stays i32; i32 with i64 is i64.
    assert_eq!(i32s.bitwise_xor_scalar(1).unwrap().dtype(), DType::I32);
    assert_eq!(
        i32s.bitwise_xor(&a.narrow(0, 0, 2).unwrap())
            .unwrap()
            .dtype(),
        DType::I64
    );
}

#[test]
fn fake_tensors_get_shapes_and_dtypes() {
    let x = Tensor::empty_fake(&[2, 3], DType::F16, Device::Cpu);
    let i = Tensor::empty_fake(&[3], DType::I32, Device::Cpu);
    assert_eq!(x.tan().unwrap().dtype(), DType::F16);
    assert_eq!(i.log2().unwrap().dtype(), DType::F32);
    assert_eq!(x.isinf().unwrap().dtype(), DType::Bool);
    assert_eq!(x.atan2(&i).unwrap().shape(), &[2, 3]);
    assert_eq!(i.bitwise_left_shift(&i).unwrap().dtype(), DType::I32);
    assert!(x.bitwise_and(&x).is_err());
    assert!(x.tan().unwrap().is_fake());
}

#[test]
fn vmap_batches_the_new_ops() {
    let x = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
    let y = Tensor::from_vec(vec![1.0f64, -2.0, 3.0], &[3]).unwrap();
    let out = vmap(
        |xs: &[Tensor]| Ok(vec![xs[0].asin()?.atan2(&xs[1])?.mish()?]),
        vec![Some(0), None],
        vec![0],
    )(&[x.clone(), y.clone()])
    .unwrap();
    let want = x.asin().unwrap().atan2(&y).unwrap().mish().unwrap();
    assert_eq!(
        out[0].to_vec::<f64>().unwrap(),
        want.to_vec::<f64>().unwrap()
    );
}

#[test]
fn autocast_runs_range_sensitive_ops_in_f32() {
    let x = Tensor::from_vec(vec![0.5f32, 0.25], &[2])
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let _g = autocast("cpu", DType::BF16).unwrap();
    assert_eq!(x.tan().unwrap().dtype(), DType::F32);
    assert_eq!(x.log2().unwrap().dtype(), DType::F32);
    assert_eq!(x.atan().unwrap().dtype(), DType::BF16);
}

#[test]
fn closed_form_gradients() {
    let x = f64s(&[0.3, -0.6]).requires_grad_(true).unwrap();
    let y = x.atanh().unwrap().sum(&[], false).unwrap();
    y.backward().unwrap();
    let g = x.grad().unwrap().to_vec::<f64>().unwrap();
    assert!((g[0] - 1.0 / (1.0 - 0.09)).abs() < 1e-15);
    assert!((g[1] - 1.0 / (1.0 - 0.36)).abs() < 1e-15);
    // nan_to_num passes the gradient only where x is finite.
    let x = f64s(&[f64::INFINITY, 2.0]).requires_grad_(true).unwrap();
    x.nan_to_num(None, None, None)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.0, 1.0]);
    // hardtanh: zero at and beyond the bounds.
    let x = f64s(&[-1.0, 0.5, 2.0]).requires_grad_(true).unwrap();
    x.hardtanh(-1.0, 1.0)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 1.0, 0.0]
    );
    // lerp: weight gradient is end - self.
    let s = f64s(&[1.0]).requires_grad_(true).unwrap();
    let e = f64s(&[4.0]);
    let w = f64s(&[0.25]).requires_grad_(true).unwrap();
    s.lerp(&e, &w)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec::<f64>().unwrap(), vec![3.0]);
    assert_eq!(s.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.75]);
}

#[test]
fn clamp_with_tensor_bounds() {
    let x = f32s(&[-2.0, 0.5, 3.0, f32::NAN, 1.0, 0.0]);
    let lo = f32s(&[-1.0, 1.0, 0.0, 0.0, f32::NAN, 2.0]);
    let hi = f32s(&[1.0, 2.0, 2.0, 1.0, 3.0, 1.0]);
    let y = x.clamp_tensor(&lo, &hi).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y[..3], [-1.0, 1.0, 2.0]);
    assert!(y[3].is_nan() && y[4].is_nan()); // NaN input, NaN bound
    assert_eq!(y[5], 1.0); // lo > hi gives hi
    // Broadcast bounds and promotion: i32 tensor with f32 bounds gives f32.
    let i = Tensor::from_vec(vec![-5i32, 0, 5], &[3]).unwrap();
    let (l, h) = (f32s(&[-1.5]), f32s(&[2.5]));
    let r = i.clamp_tensor(&l, &h).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![-1.5, 0.0, 2.5]);
    let il = Tensor::from_vec(vec![-1i32], &[1]).unwrap();
    let ih = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    assert_eq!(
        i.clamp_tensor(&il, &ih).unwrap().to_vec::<i64>().unwrap(),
        vec![-1, 0, 1]
    );
    let b = Tensor::from_vec(vec![true], &[1]).unwrap();
    assert!(matches!(b.clamp_tensor(&b, &b), Err(Error::DType { .. })));
    assert!(matches!(
        x.clamp_tensor(&f32s(&[0.0, 1.0]), &hi),
        Err(Error::Shape { .. })
    ));
    // Gradients: to self inside, to min below, to max above.
    let x = f64s(&[-2.0, 0.5, 3.0]).requires_grad_(true).unwrap();
    let lo = f64s(&[-1.0, 0.0, 0.0]).requires_grad_(true).unwrap();
    let hi = f64s(&[1.0]).requires_grad_(true).unwrap();
    x.clamp_tensor(&lo, &hi)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 1.0, 0.0]
    );
    assert_eq!(
        lo.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![1.0, 0.0, 0.0]
    );
    assert_eq!(hi.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0]);
}

#[test]
fn where_with_scalar_branches() {
    let c = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    let w = Tensor::where_scalar(&c, 2.5, 1).unwrap();
    assert_eq!(w.dtype(), DType::F32);
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![2.5, 1.0, 2.5]);
    assert_eq!(Tensor::where_scalar(&c, 3, -4).unwrap().dtype(), DType::I64);
    assert_eq!(
        Tensor::where_scalar(&c, true, false).unwrap().dtype(),
        DType::Bool
    );
    let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3])
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    let r = Tensor::where_tensor_scalar(&c, &a, -1).unwrap();
    assert_eq!(r.dtype(), DType::F16);
    assert_eq!(r.to_vec_f64().unwrap(), vec![1.0, -1.0, 3.0]);
    let r =
        Tensor::where_scalar_tensor(&c, 0.5, &Tensor::from_vec(vec![7i64, 8, 9], &[3]).unwrap())
            .unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.5, 8.0, 0.5]);
    // A 0-d condition broadcasts against the tensor branch.
    let c0 = Tensor::from_vec(vec![false], &[]).unwrap();
    assert_eq!(
        Tensor::where_tensor_scalar(&c0, &a, 0).unwrap().shape(),
        &[3]
    );
    assert!(Tensor::where_scalar(&a, 1, 2).is_err()); // non-bool condition
}
