//! Views (view/reshape/permute/expand/slice/narrow/select/squeeze/unsqueeze/flatten), storage and
//! version sharing, dtype conversion between every pair of dtypes, fake tensors, and gradient
//! checks of every view op.

use half::{bf16, f16};
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck, no_grad};
use tensorplay_runtime::{DType, Device, Error, Tensor};

type R = tensorplay_runtime::Result<()>;

fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Reads element `idx` of `t` through its shape/strides/offset from the base storage values
/// `base` (row-major contents of the tensor the view was taken from).
fn strided_read(base: &[f32], t: &Tensor, idx: &[usize]) -> f32 {
    let off = t.storage_offset() as isize
        + idx
            .iter()
            .zip(t.strides())
            .map(|(&i, &s)| i as isize * s)
            .sum::<isize>();
    base[off as usize]
}

/// Every multi-index of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut flat| {
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = flat % shape[d];
                flat /= shape[d];
            }
            idx
        })
        .collect()
}

/// Checks that `view` (a view of `base`) reads the values its metadata says it does, and that
/// `to_vec` (which goes through the strided kernels) agrees.
fn check_view_consistent(base_vals: &[f32], view: &Tensor) {
    let expected: Vec<f32> = indices(view.shape())
        .iter()
        .map(|i| strided_read(base_vals, view, i))
        .collect();
    assert_eq!(
        vals(view),
        expected,
        "view {view:?} strides {:?}",
        view.strides()
    );
}

// ---- view / reshape ------------------------------------------------------------------------

#[test]
fn view_of_contiguous_tensor_shares_storage() -> R {
    let x = iota(&[12]);
    let v = x.view(&[3, 4])?;
    assert_eq!(v.shape(), &[3, 4]);
    assert_eq!(v.strides(), &[4, 1]);
    assert!(v.storage().same(x.storage()));
    assert_eq!(vals(&v), vals(&x));
    let v2 = v.view(&[2, 1, 6])?;
    assert_eq!(v2.strides(), &[6, 6, 1]);
    assert_eq!(
        v2.select(0, 1)?.select(0, 0)?.to_vec::<f32>()?,
        vec![6., 7., 8., 9., 10., 11.]
    );
    // 0-d <-> one-element views.
    let s = Tensor::scalar(5.0f32);
    assert_eq!(s.view(&[1, 1])?.shape(), &[1, 1]);
    assert_eq!(s.view(&[1, 1])?.view(&[])?.item::<f32>()?, 5.0);
    // Empty tensors view freely.
    let e = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(e.view(&[3, 0, 5])?.shape(), &[3, 0, 5]);
    Ok(())
}

#[test]
fn view_after_transpose_needs_reshape_copy() -> R {
    let x = iota(&[2, 3]);
    let t = x.t()?;
    assert!(!t.is_contiguous());
    let err = t.view(&[6]).unwrap_err();
    assert!(
        matches!(&err, Error::Shape { op, msg } if op == "view" && msg.contains("[3, 2]") && msg.contains("[6]")),
        "{err}"
    );
    let r = t.reshape(&[6])?;
    assert_eq!(vals(&r), vec![0., 3., 1., 4., 2., 5.]);
    assert!(
        !r.storage().same(x.storage()),
        "the non-viewable reshape must copy"
    );
    assert!(r.is_contiguous());
    // A reshape that is viewable on the transposed strides (adding unit dims) stays a view.
    let r2 = t.reshape(&[3, 1, 2])?;
    assert!(r2.storage().same(x.storage()));
    assert_eq!(vals(&r2), vec![0., 3., 1., 4., 2., 5.]);
    // Splitting a transposed dim is viewable too: [3, 2] strides [1, 3] -> [3, 2, 1].
    let r3 = t.view(&[3, 2, 1])?;
    assert!(r3.storage().same(x.storage()));
    Ok(())
}

/// Deterministic pseudo-random numbers for the property-style sweeps below.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// All factorizations of `n` into `rank` ordered factors (small n only).
fn factorizations(n: usize, rank: usize) -> Vec<Vec<usize>> {
    if rank == 0 {
        return if n == 1 { vec![vec![]] } else { vec![] };
    }
    let mut out = vec![];
    for f in 1..=n {
        if n.is_multiple_of(f) {
            for mut rest in factorizations(n / f, rank - 1) {
                rest.insert(0, f);
                out.push(rest);
            }
        }
    }
    out
}

#[test]
fn view_and_reshape_agree_with_a_copy_for_random_layouts() -> R {
    let mut rng = Lcg(42);
    let base = iota(&[4, 6, 5]);
    let base_vals = vals(&base);
    let mut views = 0;
    for _ in 0..300 {
        // A random strided layout: permute, then maybe slice with a step, maybe unsqueeze.
        let perms: [[i64; 3]; 6] = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let mut x = base.permute(&perms[rng.below(6) as usize])?;
        if rng.below(2) == 0 {
            let d = rng.below(3) as i64;
            let size = x.shape()[d as usize] as i64;
            let start = rng.below(size as u64) as i64;
            let step = 1 + rng.below(2) as i64;
            x = x.slice(d, Some(start), None, step)?;
        }
        if rng.below(3) == 0 {
            x = x.unsqueeze(rng.below(4) as i64)?;
        }
        check_view_consistent(&base_vals, &x);
        let logical = vals(&x);
        let n = x.numel();
        let rank = 1 + rng.below(4) as usize;
        let shapes = factorizations(n, rank);
        let target = &shapes[rng.below(shapes.len() as u64) as usize];
        // reshape always works and keeps row-major values.
        let r = x.reshape(target)?;
        assert_eq!(r.shape(), target.as_slice());
        assert_eq!(vals(&r), logical, "reshape {:?} -> {target:?}", x.shape());
        // view either works (and then shares storage and reads the same values) or errors.
        match x.view(target) {
            Ok(v) => {
                views += 1;
                assert!(v.storage().same(base.storage()));
                assert_eq!(vals(&v), logical);
                check_view_consistent(&base_vals, &v);
            }
            Err(e) => {
                assert!(
                    matches!(e, Error::Shape { ref op, .. } if op == "view"),
                    "{e}"
                );
                // Only non-contiguous inputs may refuse a view.
                assert!(
                    !x.is_contiguous(),
                    "contiguous {:?} refused view {target:?}",
                    x.shape()
                );
            }
        }
    }
    assert!(
        views > 30,
        "the sweep should exercise the view path ({views})"
    );
    Ok(())
}

#[test]
fn reshape_infer_resolves_one_hole() -> R {
    let x = iota(&[2, 6]);
    assert_eq!(x.reshape_infer(&[-1, 4])?.shape(), &[3, 4]);
    assert_eq!(x.reshape_infer(&[2, -1, 2])?.shape(), &[2, 3, 2]);
    assert_eq!(x.reshape_infer(&[-1])?.shape(), &[12]);
    assert_eq!(x.reshape_infer(&[12])?.shape(), &[12]);
    assert_eq!(
        vals(&x.t()?.reshape_infer(&[-1])?),
        vals(&x.t()?.contiguous()?)
    );
    let e = Tensor::zeros(&[0, 4], DType::F32);
    assert_eq!(e.reshape_infer(&[-1, 2])?.shape(), &[0, 2]);
    for bad in [
        &[-1, -1][..],
        &[5, -1],
        &[-2, 6],
        &[0, -1],
        &[3, 5],
        &[i64::MAX, 2, -1],
    ] {
        let err = x.reshape_infer(bad).unwrap_err();
        assert!(
            matches!(&err, Error::Shape { op, msg } if op == "reshape" && msg.contains("12")),
            "{bad:?}: {err}"
        );
    }
    Ok(())
}

// ---- permute / transpose / t ------------------------------------------------------------------

#[test]
fn permute_transpose_and_t() -> R {
    let x = iota(&[2, 3, 4]);
    let base = vals(&x);
    let p = x.permute(&[2, 0, 1])?;
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert_eq!(p.strides(), &[1, 12, 4]);
    check_view_consistent(&base, &p);
    assert_eq!(
        p.select(0, 1)?.select(0, 1)?.to_vec::<f32>()?,
        vec![13., 17., 21.]
    );
    let n = x.permute(&[-1, -3, -2])?;
    assert_eq!(n.shape(), p.shape());
    assert_eq!(vals(&n), vals(&p));
    let tr = x.transpose(0, -1)?;
    assert_eq!(tr.shape(), &[4, 3, 2]);
    assert_eq!(tr.strides(), &[1, 4, 12]);
    check_view_consistent(&base, &tr);
    assert!(tr.storage().same(x.storage()));
    assert_eq!(x.transpose(1, 1)?.strides(), x.strides());
    // t() on 1-D and 0-D is the identity, on 2-D a transpose, above that an error.
    let v = iota(&[3]);
    assert_eq!(v.t()?.shape(), &[3]);
    assert_eq!(Tensor::scalar(1.0f32).t()?.shape(), &[] as &[usize]);
    let m = iota(&[2, 3]).t()?;
    assert_eq!(vals(&m), vec![0., 3., 1., 4., 2., 5.]);
    assert!(matches!(x.t(), Err(Error::Shape { ref op, .. }) if op == "t"));
    // Permuting twice with the inverse gives the original layout back.
    let back = p.permute(&[1, 2, 0])?;
    assert_eq!(back.strides(), x.strides());
    assert_eq!(vals(&back), base);
    Ok(())
}

// ---- expand ---------------------------------------------------------------------------------

#[test]
fn expand_uses_stride_zero_and_rejects_writes() -> R {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1])?;
    let e = x.expand(&[2, 3, 4])?;
    assert_eq!(e.shape(), &[2, 3, 4]);
    assert_eq!(e.strides(), &[0, 1, 0]);
    assert!(e.storage().same(x.storage()));
    let v = vals(&e);
    assert_eq!(v.len(), 24);
    for (i, val) in v.iter().enumerate() {
        assert_eq!(*val, ((i / 4) % 3 + 1) as f32);
    }
    assert_eq!(x.broadcast_to(&[2, 3, 4])?.strides(), e.strides());
    // -1 keeps a dim (through the dispatcher, which takes i64 sizes).
    let kept = tensorplay_runtime::dispatch::call1(
        &tensorplay_runtime::ops::shape::EXPAND,
        &[(&x).into(), vec![3i64, -1].into()],
    )?;
    assert_eq!(kept.shape(), &[3, 1]);
    // Expanding a 0-d tensor and to zero-size dims.
    let s = Tensor::scalar(7i64).expand(&[2, 2])?;
    assert_eq!(s.to_vec::<i64>()?, vec![7; 4]);
    assert_eq!(x.expand(&[3, 0])?.numel(), 0);
    // Writes through overlapping (stride-0) elements are refused; the base is untouched.
    let before = x.version();
    for r in [
        e.add_scalar_(1.0),
        e.fill_(0.0),
        e.copy_(&Tensor::zeros(&[2, 3, 4], DType::F32)),
        e.mul_(&Tensor::ones(&[4], DType::F32)),
    ] {
        let err = r.unwrap_err();
        assert!(
            matches!(&err, Error::Argument { arg, got, .. } if arg == "self" && got.contains("[2, 3, 4]")),
            "{err}"
        );
    }
    assert_eq!(x.version(), before);
    assert_eq!(vals(&x), vec![1.0, 2.0, 3.0]);
    // Expanding a size-1 dim to 1 keeps it writable.
    let one = Tensor::zeros(&[1, 3], DType::F32);
    one.expand(&[1, 3])?.fill_(2.0)?;
    assert_eq!(vals(&one), vec![2.0; 3]);
    Ok(())
}

// ---- slice / narrow / select ---------------------------------------------------------------

#[test]
fn slice_follows_python_semantics() -> R {
    let x = iota(&[10]);
    let s = |start: Option<i64>, end: Option<i64>, step: i64| -> Vec<f32> {
        vals(&x.slice(0, start, end, step).unwrap())
    };
    assert_eq!(s(Some(2), Some(5), 1), vec![2., 3., 4.]);
    assert_eq!(s(None, None, 3), vec![0., 3., 6., 9.]);
    assert_eq!(s(Some(1), None, 2), vec![1., 3., 5., 7., 9.]);
    assert_eq!(s(Some(-3), None, 1), vec![7., 8., 9.]);
    assert_eq!(s(Some(-3), Some(-1), 1), vec![7., 8.]);
    assert_eq!(s(Some(-100), Some(2), 1), vec![0., 1.]);
    assert_eq!(s(Some(8), Some(100), 1), vec![8., 9.]);
    assert_eq!(s(Some(5), Some(2), 1), Vec::<f32>::new());
    assert_eq!(s(Some(10), None, 1), Vec::<f32>::new());
    assert_eq!(s(Some(100), Some(200), 1), Vec::<f32>::new());
    assert_eq!(s(Some(0), Some(10), 4), vec![0., 4., 8.]);
    assert_eq!(s(Some(3), None, 100), vec![3.]);
    // A huge step must not overflow.
    assert_eq!(s(Some(1), None, i64::MAX), vec![1.]);
    assert_eq!(s(Some(i64::MIN), Some(i64::MAX), i64::MAX), vec![0.]);
    // Slicing a 2-D tensor along dim 1 and -1, and slices of slices.
    let m = iota(&[3, 4]);
    let c = m.slice(-1, Some(1), None, 2)?;
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(c.strides(), &[4, 2]);
    assert_eq!(c.storage_offset(), 1);
    assert_eq!(vals(&c), vec![1., 3., 5., 7., 9., 11.]);
    let cc = c.slice(0, Some(1), None, 1)?.slice(1, Some(1), None, 1)?;
    assert_eq!(cc.storage_offset(), 7);
    assert_eq!(vals(&cc), vec![7., 11.]);
    // Step must be positive.
    for step in [0, -1] {
        let err = x.slice(0, None, None, step).unwrap_err();
        assert!(
            matches!(&err, Error::Argument { op, arg, .. } if op == "slice" && arg == "step"),
            "{err}"
        );
    }
    Ok(())
}

#[test]
fn narrow_and_select_are_views() -> R {
    let m = iota(&[3, 4]);
    let n = m.narrow(1, 1, 2)?;
    assert_eq!(n.shape(), &[3, 2]);
    assert!(n.storage().same(m.storage()));
    assert_eq!(vals(&n), vec![1., 2., 5., 6., 9., 10.]);
    assert_eq!(m.narrow(-2, 2, 1)?.to_vec::<f32>()?, vec![8., 9., 10., 11.]);
    assert_eq!(m.narrow(0, 3, 0)?.shape(), &[0, 4]);
    for (start, len) in [(3, 2), (0, 5), (usize::MAX, 2)] {
        let err = m.narrow(1, start, len).unwrap_err();
        assert!(
            matches!(&err, Error::Shape { op, .. } if op == "narrow"),
            "{err}"
        );
    }
    let r = m.select(0, -1)?;
    assert_eq!(r.shape(), &[4]);
    assert_eq!(vals(&r), vec![8., 9., 10., 11.]);
    assert!(r.storage().same(m.storage()));
    let col = m.select(1, 2)?;
    assert_eq!(col.strides(), &[4]);
    assert_eq!(vals(&col), vec![2., 6., 10.]);
    assert_eq!(m.select(-1, -4)?.to_vec::<f32>()?, vec![0., 4., 8.]);
    // Selecting from a 1-D tensor gives a 0-d view.
    let e = m.select(0, 1)?.select(0, 3)?;
    assert_eq!(e.shape(), &[] as &[usize]);
    assert_eq!(e.item::<f32>()?, 7.0);
    for idx in [3, -4, i64::MAX, i64::MIN] {
        let err = m.select(0, idx).unwrap_err();
        assert!(
            matches!(&err, Error::Shape { op, msg } if op == "select" && msg.contains(&idx.to_string())),
            "{err}"
        );
    }
    Ok(())
}

#[test]
fn squeeze_unsqueeze_flatten() -> R {
    let x = iota(&[1, 3, 1, 2]);
    assert_eq!(x.squeeze(None)?.shape(), &[3, 2]);
    assert_eq!(x.squeeze(Some(0))?.shape(), &[3, 1, 2]);
    assert_eq!(x.squeeze(Some(-2))?.shape(), &[1, 3, 2]);
    assert_eq!(
        x.squeeze(Some(1))?.shape(),
        &[1, 3, 1, 2],
        "a non-1 dim stays"
    );
    assert!(x.squeeze(None)?.storage().same(x.storage()));
    assert_eq!(x.unsqueeze(0)?.shape(), &[1, 1, 3, 1, 2]);
    assert_eq!(x.unsqueeze(4)?.shape(), &[1, 3, 1, 2, 1]);
    assert_eq!(x.unsqueeze(-1)?.shape(), &[1, 3, 1, 2, 1]);
    assert_eq!(x.unsqueeze(-5)?.shape(), &[1, 1, 3, 1, 2]);
    assert!(x.unsqueeze(5).is_err());
    assert!(x.unsqueeze(-6).is_err());
    let s = Tensor::scalar(2.0f32);
    assert_eq!(s.unsqueeze(0)?.shape(), &[1]);
    assert_eq!(s.unsqueeze(-1)?.shape(), &[1]);
    assert_eq!(s.squeeze(None)?.shape(), &[] as &[usize]);
    let y = iota(&[2, 3, 4]);
    assert_eq!(y.flatten(0, -1)?.shape(), &[24]);
    assert_eq!(y.flatten(1, 2)?.shape(), &[2, 12]);
    assert_eq!(y.flatten(0, 1)?.shape(), &[6, 4]);
    assert_eq!(y.flatten(1, 1)?.shape(), &[2, 3, 4]);
    assert_eq!(s.flatten(0, -1)?.shape(), &[1]);
    assert!(y.flatten(2, 1).is_err());
    // Flattening a transposed tensor copies and keeps logical order.
    let t = y.transpose(0, 2)?;
    let f = t.flatten(0, -1)?;
    assert_eq!(vals(&f), vals(&t.contiguous()?));
    Ok(())
}

#[test]
fn contiguous_returns_self_or_a_copy() -> R {
    let x = iota(&[2, 3]);
    assert!(x.contiguous()?.same(&x));
    let t = x.t()?;
    let c = t.contiguous()?;
    assert!(c.is_contiguous());
    assert!(!c.storage().same(x.storage()));
    assert_eq!(c.strides(), &[2, 1]);
    assert_eq!(vals(&c), vec![0., 3., 1., 4., 2., 5.]);
    // Unit dims and empty tensors count as contiguous whatever their strides.
    assert!(x.unsqueeze(1)?.is_contiguous());
    assert!(x.slice(0, Some(0), Some(0), 1)?.is_contiguous());
    assert!(!x.slice(1, None, None, 2)?.is_contiguous());
    let clone = x.clone_tensor()?;
    assert!(!clone.storage().same(x.storage()));
    assert_eq!(vals(&clone), vals(&x));
    Ok(())
}

// ---- shared storage and versions --------------------------------------------------------------

#[test]
fn writes_through_views_reach_the_base_and_bump_its_version() -> R {
    let base = Tensor::zeros(&[2, 3], DType::F32);
    let row = base.select(0, 1)?;
    let col = base.t()?.select(0, 2)?;
    let v0 = base.version();
    assert_eq!(row.version(), v0);
    row.fill_(5.0)?;
    assert_eq!(vals(&base), vec![0., 0., 0., 5., 5., 5.]);
    assert_eq!(base.version(), v0 + 1);
    assert_eq!(
        col.version(),
        v0 + 1,
        "every view shares the storage's counter"
    );
    col.add_scalar_(1.0)?;
    assert_eq!(vals(&base), vec![0., 0., 1., 5., 5., 6.]);
    assert_eq!(base.version(), v0 + 2);
    // A strided in-place op through a transposed view.
    base.t()?
        .mul_(&Tensor::from_vec(vec![10.0f32, 100.0], &[2])?)?;
    assert_eq!(vals(&base), vec![0., 0., 10., 500., 500., 600.]);
    assert_eq!(base.version(), v0 + 3);
    // copy_ between overlapping views of one storage reads the source before writing.
    let sq = iota(&[3, 3]);
    sq.copy_(&sq.t()?)?;
    assert_eq!(vals(&sq), vec![0., 3., 6., 1., 4., 7., 2., 5., 8.]);
    let line = iota(&[5]);
    line.slice(0, Some(1), None, 1)?
        .copy_(&line.slice(0, None, Some(4), 1)?)?;
    assert_eq!(vals(&line), vec![0., 0., 1., 2., 3.]);
    // Out-of-place ops and views do not bump versions; detach shares the counter.
    let v = base.version();
    let _ = (&base + 1.0)?;
    let _ = base.view(&[6])?;
    let d = base.detach();
    assert_eq!(base.version(), v);
    d.zero_()?;
    assert_eq!(base.version(), v + 1);
    assert_eq!(vals(&base), vec![0.0; 6]);
    Ok(())
}

#[test]
fn inplace_ops_compute_in_the_common_dtype_and_round_once() -> R {
    // f16 target, f32 operand: 1 + (2^-11 + 2^-20) is above the f16 tie at 1 + 2^-11, so the
    // correctly rounded sum is 1 + 2^-10. Rounding the operand to f16 first gives the tie
    // 2^-11, and 1 + 2^-11 rounds to even (1.0).
    let a = Tensor::from_vec(vec![f16::ONE], &[1])?;
    let b = Tensor::from_vec(vec![2f32.powi(-11) + 2f32.powi(-20)], &[1])?;
    a.add_(&b)?;
    assert_eq!(
        a.to_vec::<f16>()?,
        vec![f16::from_f32(1.0 + 2f32.powi(-10))]
    );
    assert_eq!(a.dtype(), DType::F16);
    // f32 target, f64 operand: multiply in f64, round once.
    let x = Tensor::from_vec(vec![3.0f32], &[1])?;
    x.mul_(&Tensor::from_vec(vec![0.1f64], &[1])?)?;
    assert_eq!(x.to_vec::<f32>()?, vec![(3.0f64 * 0.1) as f32]);
    // Integer targets keep integer semantics (wrapping) with wider integer operands.
    let i = Tensor::from_vec(vec![i32::MAX], &[1])?;
    i.add_(&Tensor::from_vec(vec![1i64], &[1])?)?;
    assert_eq!(i.to_vec::<i32>()?, vec![i32::MIN]);
    // Lower-category operands are fine; float into int is not.
    let f = Tensor::from_vec(vec![1.5f32], &[1])?;
    f.add_(&Tensor::from_vec(vec![2i64], &[1])?)?;
    assert_eq!(f.to_vec::<f32>()?, vec![3.5]);
    assert!(i.add_(&Tensor::from_vec(vec![1.0f32], &[1])?).is_err());
    Ok(())
}

// ---- dtype conversion ----------------------------------------------------------------------

/// Source values for each dtype, given as f64 (exactly representable in that dtype), covering
/// zeros, fractions, rounding ties, NaN, infinities, overflow and the integer extremes.
fn source_values(d: DType) -> Vec<f64> {
    match d {
        DType::F64 => vec![
            0.0,
            -0.0,
            1.5,
            -1.5,
            2.5,
            -2.7,
            0.1,
            1e10,
            -1e10,
            3e38,
            1e300,
            65519.0,
            65520.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.0 + 2f64.powi(-8),
            16777217.0,
            9.3e18,
            -9.3e18,
            5e-324,
        ],
        DType::F32 => vec![
            0.0,
            -0.0,
            1.5,
            -1.5,
            2.5,
            -2.7f32 as f64,
            0.1f32 as f64,
            1e10,
            3e38f32 as f64,
            65519.0,
            65520.0,
            65504.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.0 + 2f64.powi(-8),
            1.0 + 3.0 * 2f64.powi(-8),
            2147483648.0,
            -2147483904.0,
            1e-45f32 as f64,
        ],
        DType::F16 => vec![
            0.0,
            -0.0,
            1.5,
            -2.5,
            0.099975586,
            65504.0,
            -65504.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            2f64.powi(-24),
            1.0 + 2f64.powi(-10),
            2049.0 - 1.0,
        ],
        DType::BF16 => vec![
            0.0,
            -0.0,
            1.5,
            -2.5,
            3.0e38f32 as f64,
            1.0 + 2f64.powi(-7),
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            257.0 - 1.0,
            1e-40,
            3.3895314e38,
        ],
        DType::I32 => vec![
            0.0,
            1.0,
            -1.0,
            7.0,
            -7.0,
            2147483647.0,
            -2147483648.0,
            16777217.0,
            2049.0,
            16842753.0,
        ],
        DType::I64 => vec![
            0.0,
            1.0,
            -1.0,
            3.0,
            2147483648.0,
            -2147483649.0,
            4294967297.0,
            16777217.0,
            9007199254740993.0,
            2049.0,
            257.0,
            65520.0,
            16842753.0,
            -9.2e18,
        ],
        DType::Bool => vec![0.0, 1.0],
    }
}

fn make(d: DType, v: &[f64]) -> Tensor {
    let n = [v.len()];
    match d {
        DType::F64 => Tensor::from_vec(v.to_vec(), &n),
        DType::F32 => Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), &n),
        DType::F16 => Tensor::from_vec(v.iter().map(|&x| f16::from_f32(x as f32)).collect(), &n),
        DType::BF16 => Tensor::from_vec(v.iter().map(|&x| bf16::from_f32(x as f32)).collect(), &n),
        DType::I32 => Tensor::from_vec(v.iter().map(|&x| x as i32).collect(), &n),
        DType::I64 => Tensor::from_vec(v.iter().map(|&x| x as i64).collect(), &n),
        DType::Bool => Tensor::from_vec(v.iter().map(|&x| x != 0.0).collect(), &n),
    }
    .unwrap()
}

/// A converted value as bits, so NaN and -0.0 compare exactly.
#[derive(Debug, PartialEq)]
enum Bits {
    F(u64),
    I(i64),
    B(bool),
}

fn read_bits(t: &Tensor) -> Vec<Bits> {
    match t.dtype() {
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(|v| Bits::F(v.to_bits()))
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|v| Bits::F(v.to_bits() as u64))
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .into_iter()
            .map(|v| Bits::F(v.to_bits() as u64))
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .into_iter()
            .map(|v| Bits::F(v.to_bits() as u64))
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|v| Bits::I(v as i64))
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(Bits::I)
            .collect(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(Bits::B)
            .collect(),
    }
}

/// The oracle: PyTorch's cast rules written out case by case. `v` is the exact source value and
/// `exact_i64` the exact integer when the source is an integer dtype.
fn expected(dst: DType, v: f64, exact_i64: Option<i64>) -> Bits {
    // Float -> float rounds once to the target, except that double -> half types go through
    // float (PyTorch's Half/BFloat16 constructors take a float).
    let to_float = |x: f64| -> u64 {
        match dst {
            DType::F64 => x.to_bits(),
            DType::F32 => (x as f32).to_bits() as u64,
            DType::F16 => f16::from_f32(x as f32).to_bits() as u64,
            DType::BF16 => bf16::from_f32(x as f32).to_bits() as u64,
            _ => unreachable!(),
        }
    };
    match dst {
        DType::Bool => Bits::B(v != 0.0 || v.is_nan()),
        DType::F64 => Bits::F(match exact_i64 {
            Some(i) => (i as f64).to_bits(),
            None => v.to_bits(),
        }),
        DType::F32 | DType::F16 | DType::BF16 => Bits::F(match exact_i64 {
            // Integers round once to f32 (not via f64), then to the half type.
            Some(i) => to_float(i as f32 as f64),
            None => to_float(v),
        }),
        DType::I32 | DType::I64 => Bits::I(match (exact_i64, dst) {
            // Integer narrowing wraps.
            (Some(i), DType::I32) => i as i32 as i64,
            (Some(i), _) => i,
            // Truncate toward zero; NaN -> 0; out of range saturates (our documented choice;
            // Rust's `as` does exactly that).
            (None, DType::I32) => v.trunc() as i32 as i64,
            (None, _) => v.trunc() as i64,
        }),
    }
}

#[test]
fn to_dtype_between_all_49_pairs_follows_pytorch_casts() -> R {
    for src in DType::ALL {
        let values = source_values(src);
        let x = make(src, &values);
        // The exact source values (after storing in `src`), and exact integers for int sources.
        let stored = x.to_vec_f64()?;
        let exact: Vec<Option<i64>> = match src {
            DType::I32 => x
                .to_vec::<i32>()?
                .into_iter()
                .map(|v| Some(v as i64))
                .collect(),
            DType::I64 => x.to_vec::<i64>()?.into_iter().map(Some).collect(),
            DType::Bool => x
                .to_vec::<bool>()?
                .into_iter()
                .map(|v| Some(v as i64))
                .collect(),
            _ => vec![None; stored.len()],
        };
        for dst in DType::ALL {
            let y = x.to_dtype(dst)?;
            assert_eq!(y.dtype(), dst);
            assert_eq!(y.shape(), x.shape());
            let got = read_bits(&y);
            for (k, (&v, &e)) in stored.iter().zip(&exact).enumerate() {
                let want = expected(dst, v, e);
                assert_eq!(got[k], want, "{src} -> {dst} of {v:e} (element {k})");
            }
            // Strided input converts the same way.
            let rev = x.slice(0, None, None, 2)?.to_dtype(dst)?;
            let got_s = read_bits(&rev);
            for (j, g) in got_s.iter().enumerate() {
                assert_eq!(*g, got[2 * j], "{src} -> {dst} strided element {j}");
            }
        }
    }
    Ok(())
}

#[test]
fn cast_spot_checks() -> R {
    // Float -> int truncates toward zero; NaN -> 0.
    let f = Tensor::from_vec(vec![-2.7f32, 2.7, -0.5, f32::NAN], &[4])?;
    assert_eq!(f.to_dtype(DType::I64)?.to_vec::<i64>()?, vec![-2, 2, 0, 0]);
    assert_eq!(f.to_dtype(DType::I32)?.to_vec::<i32>()?, vec![-2, 2, 0, 0]);
    // -> bool is != 0 (NaN is true, -0.0 is false).
    let z = Tensor::from_vec(vec![0.0f32, -0.0, 0.1, f32::NAN], &[4])?;
    assert_eq!(
        z.to_dtype(DType::Bool)?.to_vec::<bool>()?,
        vec![false, false, true, true]
    );
    // f32 -> f16 overflows to inf beyond 65520, rounds to 65504 below it.
    let big = Tensor::from_vec(vec![65519.0f32, 65520.0, -1e6, 1e-8], &[4])?;
    let h = big.to_dtype(DType::F16)?.to_vec::<f16>()?;
    assert_eq!(h[0], f16::from_f32(65504.0));
    assert_eq!(h[1], f16::INFINITY);
    assert_eq!(h[2], f16::NEG_INFINITY);
    assert_eq!(h[3], f16::ZERO);
    // f32 -> bf16 rounds to nearest, ties to even.
    let ties = Tensor::from_vec(
        vec![
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            1.0 + 2f32.powi(-8) + 2f32.powi(-20),
        ],
        &[3],
    )?;
    let b = ties.to_dtype(DType::BF16)?.to_vec::<bf16>()?;
    assert_eq!(b[0].to_f32(), 1.0);
    assert_eq!(b[1].to_f32(), 1.015625);
    assert_eq!(b[2].to_f32(), 1.0078125);
    // Bool -> numbers are 0/1; i64 -> i32 wraps.
    let t = Tensor::from_vec(vec![true, false], &[2])?;
    assert_eq!(t.to_dtype(DType::F32)?.to_vec::<f32>()?, vec![1.0, 0.0]);
    let w = Tensor::from_vec(vec![(1i64 << 32) + 5, -1], &[2])?;
    assert_eq!(w.to_dtype(DType::I32)?.to_vec::<i32>()?, vec![5, -1]);
    // Same dtype returns the same handle.
    assert!(f.to_dtype(DType::F32)?.same(&f));
    Ok(())
}

// ---- fake tensors ---------------------------------------------------------------------------

#[test]
fn views_of_fake_tensors_need_no_data() -> R {
    for device in [Device::Cpu, Device::Meta, Device::Cuda(0)] {
        let x = Tensor::empty_fake(&[2, 3, 4], DType::F32, device);
        assert!(x.is_fake());
        let views = [
            x.view(&[6, 4])?,
            x.reshape(&[4, 6])?,
            x.permute(&[2, 0, 1])?,
            x.transpose(0, 1)?,
            x.slice(2, Some(1), None, 2)?,
            x.narrow(1, 1, 2)?,
            x.select(0, -1)?,
            x.unsqueeze(1)?,
            x.flatten(0, 1)?,
            x.select(1, 0)?.unsqueeze(0)?.expand(&[5, 2, 4])?,
            x.squeeze(None)?,
        ];
        let shapes: [&[usize]; 11] = [
            &[6, 4],
            &[4, 6],
            &[4, 2, 3],
            &[3, 2, 4],
            &[2, 3, 2],
            &[2, 2, 4],
            &[3, 4],
            &[2, 1, 3, 4],
            &[6, 4],
            &[5, 2, 4],
            &[2, 3, 4],
        ];
        for (v, s) in views.iter().zip(shapes) {
            assert!(v.is_fake());
            assert_eq!(v.shape(), s);
            assert_eq!(v.device(), device);
            assert!(v.storage().same(x.storage()));
        }
        // A copy of a non-contiguous fake (reshape of a transpose) is fake too.
        let c = x.transpose(0, 2)?.reshape(&[24])?;
        assert!(c.is_fake());
        assert_eq!(c.shape(), &[24]);
        let d = x.to_dtype(DType::F16)?;
        assert!(d.is_fake() && d.dtype() == DType::F16);
        // Reading data errors and names the op.
        let err = x.to_vec::<f32>().unwrap_err();
        assert!(
            matches!(&err, Error::Unsupported { op, msg } if op == "to_vec" && msg.contains("no data")),
            "{err}"
        );
        assert!(views[4].to_vec_f64().is_err());
        assert!(
            x.select(0, 0)?
                .select(0, 0)?
                .select(0, 0)?
                .item::<f32>()
                .is_err()
        );
        assert!(format!("{x}").contains("fake"));
    }
    Ok(())
}

// ---- gradient checks of the view ops -------------------------------------------------------------

fn leaf(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn gc(f: impl Fn(&[Tensor]) -> tensorplay_runtime::Result<Tensor>, inputs: &[Tensor]) -> R {
    gradcheck(f, inputs, GradcheckOptions::default())
}

#[test]
fn gradcheck_view_reshape_flatten() -> R {
    let x = leaf(&[3, 4], 1);
    gc(|xs| xs[0].view(&[2, 6]), std::slice::from_ref(&x))?;
    gc(
        |xs| xs[0].view(&[12])?.mul(&xs[0].view(&[12])?),
        std::slice::from_ref(&x),
    )?;
    // reshape of a transpose takes the copy path.
    gc(|xs| xs[0].t()?.reshape(&[2, 6]), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].reshape_infer(&[-1, 3]), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].t()?.flatten(0, -1), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].unsqueeze(1)?.flatten(1, 2), &[x])?;
    Ok(())
}

#[test]
fn gradcheck_permute_transpose() -> R {
    let x = leaf(&[2, 3, 4], 2);
    gc(|xs| xs[0].permute(&[2, 0, 1]), std::slice::from_ref(&x))?;
    gc(
        |xs| xs[0].permute(&[1, 2, 0])?.exp(),
        std::slice::from_ref(&x),
    )?;
    gc(
        |xs| xs[0].transpose(0, 2)?.mul(&xs[0].transpose(0, 2)?),
        &[x],
    )?;
    let m = leaf(&[3, 2], 3);
    gc(|xs| xs[0].t(), &[m])?;
    Ok(())
}

#[test]
fn gradcheck_expand_sums_over_broadcast_dims() -> R {
    let x = leaf(&[3, 1], 4);
    gc(|xs| xs[0].expand(&[2, 3, 4]), std::slice::from_ref(&x))?;
    gc(
        |xs| xs[0].expand(&[3, 5])?.mul(&xs[0].expand(&[3, 5])?),
        std::slice::from_ref(&x),
    )?;
    let s = Tensor::randn_seeded(&[], DType::F64, 5)?.requires_grad_(true)?;
    gc(|xs| xs[0].expand(&[2, 2]), &[s])?;
    // The gradient of an expand is the sum over the expanded dims.
    let y = x.expand(&[2, 3, 4])?.sum_all()?;
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![8.0; 3]);
    Ok(())
}

#[test]
fn gradcheck_slice_narrow_select() -> R {
    let x = leaf(&[4, 5], 6);
    gc(
        |xs| xs[0].slice(1, Some(1), None, 2),
        std::slice::from_ref(&x),
    )?;
    gc(
        |xs| xs[0].slice(0, Some(-3), Some(-1), 1),
        std::slice::from_ref(&x),
    )?;
    gc(
        |xs| xs[0].t()?.slice(0, None, None, 3),
        std::slice::from_ref(&x),
    )?;
    gc(|xs| xs[0].narrow(0, 1, 2), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].narrow(-1, 4, 1), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].select(1, -2), std::slice::from_ref(&x))?;
    gc(
        |xs| xs[0].select(0, 0)?.mul(&xs[0].select(0, 3)?),
        std::slice::from_ref(&x),
    )?;
    // Two overlapping slices accumulate into the shared elements.
    gc(
        |xs| {
            xs[0]
                .slice(1, None, Some(3), 1)?
                .add(&xs[0].slice(1, Some(2), None, 1)?)
        },
        std::slice::from_ref(&x),
    )?;
    // A slice called with only some of its arguments (defaults for the rest) differentiates too.
    let slice = &tensorplay_runtime::ops::shape::SLICE;
    gc(
        |xs| tensorplay_runtime::dispatch::call1(slice, &[(&xs[0]).into()]),
        std::slice::from_ref(&x),
    )?;
    gc(
        |xs| {
            tensorplay_runtime::dispatch::call1(slice, &[(&xs[0]).into(), 1i64.into(), 2i64.into()])
        },
        std::slice::from_ref(&x),
    )?;
    // The slice gradient is zero outside the window and the incoming gradient inside it.
    x.slice(1, Some(1), None, 2)?.sum_all()?.backward()?;
    let g = x.grad().unwrap().to_vec::<f64>()?;
    for (i, v) in g.iter().enumerate() {
        let col = i % 5;
        assert_eq!(
            *v,
            if col == 1 || col == 3 { 1.0 } else { 0.0 },
            "element {i}"
        );
    }
    Ok(())
}

#[test]
fn gradcheck_squeeze_unsqueeze() -> R {
    let x = leaf(&[3, 1, 2], 7);
    gc(|xs| xs[0].squeeze(None), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].squeeze(Some(1)), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].unsqueeze(0), std::slice::from_ref(&x))?;
    gc(|xs| xs[0].unsqueeze(-1)?.squeeze(None)?.exp(), &[x])?;
    Ok(())
}

#[test]
fn gradcheck_dtype_round_trip_and_clone() -> R {
    let x = leaf(&[2, 3], 8);
    // f64 -> f32 -> f64 loses precision: loose tolerance and a larger step.
    gradcheck(
        |xs| {
            xs[0]
                .to_dtype(DType::F32)?
                .mul_scalar(3.0)?
                .to_dtype(DType::F64)
        },
        std::slice::from_ref(&x),
        GradcheckOptions {
            eps: 1e-3,
            atol: 1e-2,
            rtol: 1e-2,
        },
    )?;
    gc(
        |xs| xs[0].clone_tensor()?.mul(&xs[0]),
        std::slice::from_ref(&x),
    )?;
    gc(|xs| xs[0].t()?.contiguous(), std::slice::from_ref(&x))?;
    // The gradient of a dtype conversion has the input's dtype.
    let y = x.to_dtype(DType::F32)?.sum_all()?;
    x.zero_grad();
    y.backward()?;
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F64);
    assert_eq!(g.to_vec::<f64>()?, vec![1.0; 6]);
    Ok(())
}

#[test]
fn views_under_no_grad_do_not_track_history() -> R {
    let x = leaf(&[2, 3], 9);
    let v = x.t()?;
    assert_eq!(v.grad_fn_name(), Some("permute"));
    assert!(v.requires_grad() && !v.is_leaf());
    let w = {
        let _g = no_grad();
        x.t()?
    };
    assert!(!w.requires_grad());
    assert!(w.is_leaf());
    Ok(())
}

#[test]
fn size_reports_dims_and_rejects_0d() -> R {
    let x = iota(&[2, 3]);
    assert_eq!(x.size(0)?, 2);
    assert_eq!(x.size(-1)?, 3);
    assert!(matches!(x.size(2), Err(Error::Shape { .. })));
    assert!(
        matches!(Tensor::scalar(1.0f32).size(0), Err(Error::Shape { ref op, .. }) if op == "size")
    );
    Ok(())
}
