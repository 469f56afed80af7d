//! Bad inputs give the right `Error` variant with a message naming the op and the offending
//! shapes or values, and no op panics on garbage arguments.

use std::panic::{AssertUnwindSafe, catch_unwind};

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck, no_grad};
use tensorplay_runtime::dispatch;
use tensorplay_runtime::ops::{OpDef, all_ops};
use tensorplay_runtime::{DType, Device, Error, Tensor, Value};

/// Asserts that `$e` is an `Err` matching `$pat` (with an optional guard), printing it if not.
macro_rules! expect_err {
    ($e:expr, $($pat:tt)+) => {{
        match $e {
            Ok(_) => panic!("{} succeeded, expected an error", stringify!($e)),
            Err(err) => {
                #[allow(unused_variables)]
                let shown = err.to_string();
                assert!(matches!(&err, $($pat)+), "{}: unexpected error: {shown} ({err:?})", stringify!($e));
            }
        }
    }};
}

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

fn op(name: &str) -> &'static OpDef {
    all_ops()
        .into_iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no op named {name}"))
}

// ---- shapes ---------------------------------------------------------------------------------

#[test]
fn broadcasting_mismatch_names_both_shapes() {
    let a = f32s(&[2, 3]);
    let b = f32s(&[4]);
    expect_err!(a.add(&b), Error::Shape { op, msg } if op == "add" && msg.contains("[2, 3]") && msg.contains("[4]"));
    expect_err!(&a * &b, Error::Shape { op, msg } if op == "mul" && msg.contains("[2, 3]") && msg.contains("[4]"));
    expect_err!(a.gt(&b), Error::Shape { op, msg } if op == "gt" && msg.contains("[2, 3]"));
}

#[test]
fn view_and_reshape_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.t().unwrap().view(&[6]),
        Error::Shape { op, msg } if op == "view" && msg.contains("[3, 2]") && msg.contains("[6]") && msg.contains("reshape"));
    expect_err!(x.view(&[5]), Error::Shape { op, msg } if op == "view" && msg.contains("[5]") && msg.contains('6'));
    expect_err!(x.reshape(&[4, 4]), Error::Shape { op, msg } if op == "reshape" && msg.contains("[4, 4]") && msg.contains('6'));
    expect_err!(x.reshape_infer(&[-1, -1]), Error::Shape { op, msg } if op == "reshape" && msg.contains("[-1, -1]"));
    expect_err!(x.reshape_infer(&[4, -1]), Error::Shape { op, msg } if op == "reshape" && msg.contains("[4, -1]") && msg.contains('6'));
    // Sizes whose product overflows are refused, not wrapped.
    expect_err!(x.view(&[1 << 40, 1 << 40, 0]), Error::Shape { op, msg } if op == "view" && msg.contains("too large"));
    expect_err!(
        dispatch::call(op("view"), &[(&x).into(), vec![-1i64, 6].into()]),
        Error::Argument { op, arg, got, .. } if op == "view" && arg == "size" && got.contains("-1")
    );
}

#[test]
fn permute_and_transpose_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.permute(&[0, 0]), Error::Argument { op, arg, got, .. } if op == "permute" && arg == "dims" && got.contains("[0, 0]"));
    expect_err!(x.permute(&[0]), Error::Argument { op, expected, got, .. } if op == "permute" && expected.contains("2 dims") && got.contains("[0]"));
    expect_err!(x.permute(&[0, 2]), Error::Shape { op, msg } if op == "permute" && msg.contains("dim 2") && msg.contains("rank 2"));
    expect_err!(x.transpose(0, 5), Error::Shape { op, msg } if op == "transpose" && msg.contains("dim 5") && msg.contains("rank 2"));
    expect_err!(x.transpose(-3, 0), Error::Shape { op, msg } if op == "transpose" && msg.contains("dim -3"));
    expect_err!(f32s(&[2, 2, 2]).t(), Error::Shape { op, msg } if op == "t" && msg.contains('3'));
}

#[test]
fn expand_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.expand(&[3]), Error::Shape { op, msg } if op == "expand" && msg.contains("[2, 3]") && msg.contains("[3]"));
    expect_err!(x.expand(&[2, 4]), Error::Shape { op, msg } if op == "expand" && msg.contains("[2, 3]") && msg.contains("3 vs 4"));
    expect_err!(
        dispatch::call(op("expand"), &[(&x).into(), vec![-2i64, 2, 3].into()]),
        Error::Argument { op, arg, got, .. } if op == "expand" && arg == "size" && got.contains("-2")
    );
    expect_err!(f32s(&[1]).expand(&[1 << 40, 1 << 40]), Error::Shape { op, msg } if op == "expand" && msg.contains("too large"));
}

#[test]
fn slice_narrow_select_squeeze_errors() {
    let x = f32s(&[3, 4]);
    expect_err!(x.slice(0, None, None, 0), Error::Argument { op, arg, got, .. } if op == "slice" && arg == "step" && got == "0");
    expect_err!(x.slice(2, None, None, 1), Error::Shape { op, msg } if op == "slice" && msg.contains("dim 2"));
    expect_err!(Tensor::scalar(1.0f32).slice(0, None, None, 1), Error::Shape { op, msg } if op == "slice" && msg.contains("0-d"));
    expect_err!(x.narrow(0, 2, 5),
        Error::Shape { op, msg } if op == "narrow" && msg.contains("start 2") && msg.contains("length 5") && msg.contains("size 3"));
    expect_err!(x.select(0, 3), Error::Shape { op, msg } if op == "select" && msg.contains("index 3") && msg.contains("size 3"));
    expect_err!(x.select(1, -5), Error::Shape { op, msg } if op == "select" && msg.contains("index -5") && msg.contains("size 4"));
    expect_err!(Tensor::scalar(1.0f32).select(0, 0), Error::Shape { op, msg } if op == "select" && msg.contains("0-d"));
    expect_err!(x.squeeze(Some(3)), Error::Shape { op, msg } if op == "squeeze" && msg.contains("dim 3"));
    expect_err!(x.unsqueeze(4), Error::Shape { op, msg } if op == "unsqueeze" && msg.contains("dim 4"));
    expect_err!(x.flatten(1, 0), Error::Argument { op, arg, .. } if op == "flatten" && arg == "start_dim");
    expect_err!(Tensor::scalar(1.0f32).size(0), Error::Shape { op, .. } if op == "size");
}

#[test]
fn slice_backward_validates_its_gradient_in_the_meta_rule() {
    // On fake inputs (no data), so the check must live in the meta rule.
    let g = Tensor::empty_fake(&[2, 3], DType::F32, Device::Cpu);
    let sb = op("slice_backward");
    let args = |sizes: Vec<i64>, dim: i64, step: i64| -> Vec<Value> {
        vec![
            (&g).into(),
            sizes.into(),
            dim.into(),
            Value::None,
            Value::None,
            step.into(),
        ]
    };
    let ok = dispatch::call(sb, &args(vec![4, 3], 0, 2)).unwrap();
    assert_eq!(ok[0].shape(), &[4, 3]);
    expect_err!(dispatch::call(sb, &args(vec![5, 3], 0, 1)),
        Error::Shape { op, msg } if op == "slice_backward" && msg.contains("[2, 3]") && msg.contains("[5, 3]"));
    expect_err!(dispatch::call(sb, &args(vec![2, 3, 1], 0, 1)), Error::Shape { op, .. } if op == "slice_backward");
    expect_err!(dispatch::call(sb, &args(vec![2, 3], 2, 1)), Error::Shape { op, .. } if op == "slice_backward");
    expect_err!(dispatch::call(sb, &args(vec![2, 3], 0, 0)), Error::Argument { op, arg, .. } if op == "slice_backward" && arg == "step");
    expect_err!(dispatch::call(sb, &args(vec![1 << 62, 3], 0, 1)), Error::Shape { op, msg } if op == "slice_backward" && msg.contains("too large"));
}

// ---- reductions ------------------------------------------------------------------------------

#[test]
fn reduction_dim_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.sum(&[0, 0], false), Error::Argument { op, arg, got, .. } if op == "sum" && arg == "dim" && got.contains("[0, 0]"));
    expect_err!(x.sum(&[1, -1], false), Error::Argument { op, .. } if op == "sum");
    expect_err!(x.sum(&[5], false), Error::Shape { op, msg } if op == "sum" && msg.contains("dim 5") && msg.contains("rank 2"));
    expect_err!(x.mean(&[-3], true), Error::Shape { op, msg } if op == "mean" && msg.contains("dim -3"));
    expect_err!(Tensor::ones(&[2], DType::I64).mean_all(), Error::DType { op, msg } if op == "mean" && msg.contains("i64"));
}

// ---- dtypes -----------------------------------------------------------------------------------

#[test]
fn dtype_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.to_vec::<i64>(), Error::DType { op, msg } if op == "to_vec" && msg.contains("f32") && msg.contains("i64"));
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    expect_err!(b.sub(&b), Error::DType { op, msg } if op == "sub" && msg.contains("bool"));
    expect_err!(b.neg(), Error::DType { op, msg } if op == "neg" && msg.contains("bool"));
    let i = Tensor::ones(&[2], DType::I64);
    expect_err!(i.add_(&Tensor::ones(&[2], DType::F32)),
        Error::DType { op, msg } if op == "add_" && msg.contains("f32") && msg.contains("i64"));
    expect_err!(i.add_scalar_(0.5), Error::DType { op, msg } if op == "add_" && msg.contains("i64"));
    expect_err!(i.div_(&i), Error::DType { op, msg } if op == "div_" && msg.contains("i64"));
    expect_err!(b.add_(&i), Error::DType { op, msg } if op == "add_" && msg.contains("bool"));
    expect_err!(Tensor::rand(&[2], DType::I32), Error::DType { op, msg } if op == "rand" && msg.contains("i32"));
    expect_err!("float8".parse::<DType>(), Error::Argument { op, arg, got, .. } if op == "dtype" && arg == "name" && got.contains("float8"));
    expect_err!("tpu:0".parse::<Device>(), Error::Argument { op, arg, got, .. } if op == "device" && arg == "name" && got.contains("tpu:0"));
    expect_err!("cuda:x".parse::<Device>(), Error::Argument { op, got, .. } if op == "device" && got.contains("cuda:x"));
}

// ---- data access and factories -----------------------------------------------------------------

#[test]
fn data_access_and_factory_errors() {
    let x = f32s(&[2, 3]);
    expect_err!(x.item::<f32>(), Error::Shape { op, msg } if op == "item" && msg.contains("[2, 3]"));
    expect_err!(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]),
        Error::Shape { op, msg } if op == "from_vec" && msg.contains("3 values") && msg.contains("[2, 2]"));
    expect_err!(Tensor::arange(0.0, 1.0, 0.0, DType::F32),
        Error::Argument { op, arg, got, .. } if op == "arange" && arg == "step" && got.contains("step=0"));
    expect_err!(Tensor::arange(0.0, 1.0, -0.5, DType::F32),
        Error::Argument { op, got, .. } if op == "arange" && got.contains("step=-0.5"));
    let fake = Tensor::empty_fake(&[2, 3], DType::F32, Device::Cpu);
    expect_err!(fake.to_vec::<f32>(), Error::Unsupported { op, msg } if op == "to_vec" && msg.contains("f32[2, 3]") && msg.contains("no data"));
    expect_err!(fake.item::<f32>(), Error::Shape { op, .. } if op == "item");
    expect_err!(fake.select(0, 0).unwrap().select(0, 0).unwrap().item::<f32>(), Error::Unsupported { msg, .. } if msg.contains("no data"));
    expect_err!(Tensor::try_zeros(&[usize::MAX, 2], DType::F32), Error::Shape { op, msg } if op == "zeros" && msg.contains("too large"));
}

// ---- in-place --------------------------------------------------------------------------------

#[test]
fn inplace_errors() {
    let base = f32s(&[3]);
    let e = base.expand(&[2, 3]).unwrap();
    expect_err!(e.add_scalar_(1.0), Error::Argument { op, arg, got, .. } if op == "add_" && arg == "self" && got.contains("[2, 3]") && got.contains("expanded"));
    expect_err!(e.fill_(1.0), Error::Argument { op, .. } if op == "fill_");
    let t = f32s(&[2, 3]);
    expect_err!(t.copy_(&f32s(&[4])), Error::Shape { op, msg } if op == "copy_" && msg.contains("[2, 3]") && msg.contains("[4]"));
    // The source may broadcast to the target, never the other way round.
    expect_err!(f32s(&[3]).copy_(&t), Error::Shape { op, msg } if op == "copy_" && msg.contains("[3]") && msg.contains("[2, 3]"));
    expect_err!(f32s(&[1, 3]).add_(&t), Error::Shape { op, msg } if op == "add_" && msg.contains("[1, 3]") && msg.contains("[2, 3]"));
    assert_eq!(base.version(), 0, "no refused write bumps the version");
}

// ---- autograd ---------------------------------------------------------------------------------

#[test]
fn autograd_errors() {
    expect_err!(Tensor::ones(&[2], DType::I64).requires_grad_(true),
        Error::Argument { op, got, .. } if op == "requires_grad_" && got.contains("i64"));
    let w = Tensor::ones(&[2, 3], DType::F64)
        .requires_grad_(true)
        .unwrap();
    let y = w.mul_scalar(2.0).unwrap();
    expect_err!(y.backward(), Error::Autograd(m) if m.contains("[2, 3]"));
    expect_err!(y.clone().requires_grad_(false), Error::Autograd(m) if m.contains("leaf"));
    expect_err!(y.backward_with(&Tensor::ones(&[3, 2], DType::F64)),
        Error::Shape { op, msg } if op == "backward" && msg.contains("[3, 2]") && msg.contains("[2, 3]"));
    expect_err!(Tensor::ones(&[], DType::F32).backward(), Error::Autograd(m) if m.contains("does not require grad"));
    expect_err!(w.add_scalar_(1.0), Error::Autograd(m) if m.contains("add_") && m.contains("requires grad"));
    expect_err!(autograd::grad(&[y.sum_all().unwrap()], std::slice::from_ref(&w), &[None, None], false),
        Error::Argument { op, arg, got, .. } if op == "backward" && arg == "grad_tensors" && got == "2");
    let z = y.mul(&y).unwrap().sum_all().unwrap();
    {
        let _g = no_grad();
        y.add_scalar_(1.0).unwrap();
    }
    expect_err!(z.backward(), Error::Autograd(m) if m.contains("`mul`") && m.contains("version 0") && m.contains("now 1"));
    expect_err!(gradcheck(|xs| xs[0].gt_scalar(0.0), std::slice::from_ref(&w), GradcheckOptions::default()),
        Error::Argument { op, got, .. } if op == "gradcheck" && got.contains("bool"));
    expect_err!(gradcheck(|xs| xs[0].exp(), &[Tensor::ones(&[1], DType::F64)], GradcheckOptions::default()),
        Error::Argument { op, arg, .. } if op == "gradcheck" && arg == "inputs");
    // A wrong derivative is caught by gradcheck, naming input and element.
    let x = Tensor::from_vec(vec![0.5f64, 1.0], &[2])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    expect_err!(
        gradcheck(|xs| { let d = xs[0].detach(); xs[0].mul(&d.exp()?) }, &[x], GradcheckOptions::default()),
        Error::Autograd(m) if m.contains("input 0") && m.contains("element 0")
    );
}

// ---- devices -----------------------------------------------------------------------------------

#[test]
fn device_errors() {
    let cpu = f32s(&[2]);
    let meta = Tensor::empty_fake(&[2], DType::F32, Device::Meta);
    expect_err!(cpu.add(&meta), Error::Device { op, msg } if op == "add" && msg.contains("cpu") && msg.contains("meta"));
    let cuda = Tensor::empty_fake(&[2], DType::F32, Device::Cuda(0));
    expect_err!(cuda.mul(&cpu), Error::Device { op, msg } if op == "mul" && msg.contains("cuda:0") && msg.contains("cpu"));
    expect_err!(cpu.copy_(&cuda), Error::Device { op, .. } if op == "copy_");
    expect_err!(Tensor::empty_fake(&[2], DType::F32, Device::Cuda(1)).add(&cuda),
        Error::Device { op, msg } if op == "add" && msg.contains("cuda:1") && msg.contains("cuda:0"));
    // A Rust scalar adapts to any device; fake + fake on one device computes metadata.
    let r = cuda.add_scalar(1.0).unwrap();
    assert_eq!((r.device(), r.is_fake()), (Device::Cuda(0), true));
    assert_eq!(meta.add(&meta).unwrap().device(), Device::Meta);
}

/// Runs `f`, turning a panic into a descriptive error so `expect_err!` reports it.
fn no_panic<T>(
    what: &str,
    f: impl FnOnce() -> tensorplay_runtime::Result<T>,
) -> tensorplay_runtime::Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => panic!(
            "{what} panicked instead of returning an error: {}",
            panic_message(&p)
        ),
    }
}

#[test]
fn huge_results_are_errors_not_panics() {
    // 2^46 f32 elements (256 TiB) are representable, but no machine can allocate them; the two
    // broadcast together would have 2^92 elements, which no shape can describe.
    let tall = f32s(&[1]).expand(&[1 << 46, 1]).unwrap();
    let wide = f32s(&[1]).expand(&[1, 1 << 46]).unwrap();
    expect_err!(no_panic("add", || tall.add(&wide)), Error::Shape { op, msg } if op == "add" && msg.contains("too large"));
    expect_err!(no_panic("neg", || tall.neg()), Error::Unsupported { op, msg } if op == "neg" && msg.contains("out of memory"));
    expect_err!(no_panic("contiguous", || tall.contiguous()), Error::Unsupported { op, .. } if op == "clone");
    // Fake tensors need no memory: the same shapes work as metadata (up to the shape limit).
    let fake = Tensor::empty_fake(&[1 << 46, 1], DType::F32, Device::Meta);
    assert_eq!(fake.neg().unwrap().shape(), &[1 << 46, 1]);
}

// ---- the dispatcher's argument checks ----------------------------------------------------------

#[test]
fn dispatcher_argument_errors() {
    let add = op("add");
    let x = f32s(&[2]);
    expect_err!(dispatch::call(add, &[Value::Int(1), (&x).into()]),
        Error::Argument { op, arg, expected, got } if op == "add" && arg == "#0" && expected == "Tensor" && got == "int");
    expect_err!(dispatch::call(add, &[(&x).into()]),
        Error::Argument { op, arg, got, .. } if op == "add" && arg == "#1" && got == "1");
    expect_err!(dispatch::call(op("sum"), &[(&x).into(), Value::Str("x".into())]),
        Error::Argument { op, arg, got, .. } if op == "sum" && arg == "#1" && got == "str");
    expect_err!(dispatch::call(op("to_dtype"), &[(&x).into(), Value::Int(3)]),
        Error::Argument { op, expected, .. } if op == "to_dtype" && expected == "ScalarType");
}

// ---- other families: op name and shapes in the message -------------------------------------------

#[test]
fn other_families_name_op_and_shapes() {
    let a = f32s(&[2, 3]);
    let b = f32s(&[4, 5]);
    expect_err!(a.matmul(&b), Error::Shape { op, msg } if op == "matmul" && msg.contains("[2, 3]") && msg.contains("[4, 5]"));
    expect_err!(Tensor::cat(&[a.clone(), f32s(&[2, 4])], 0),
        Error::Shape { op, msg } if op == "cat" && msg.contains("[2, 3]") && msg.contains("[2, 4]"));
    expect_err!(Tensor::cat(&[], 0), Error::Argument { op, .. } | Error::Shape { op, .. } if op == "cat");
    expect_err!(Tensor::stack(&[a.clone(), f32s(&[3, 2])], 0),
        Error::Shape { op, msg } if op == "stack" && msg.contains("[2, 3]") && msg.contains("[3, 2]"));
    expect_err!(a.softmax(2), Error::Shape { op, msg } if op == "softmax" && msg.contains("dim 2"));
}

// ---- no panics on garbage ------------------------------------------------------------------------

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize].clone()
    }
    fn chance(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

/// Tensors of every flavour: dtypes, ranks, empty, non-contiguous, expanded, fake, other
/// devices, requiring grad.
fn tensor_pool() -> Vec<Tensor> {
    let g = |shape: &[usize]| {
        Tensor::randn_seeded(shape, DType::F64, 3)
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    };
    vec![
        f32s(&[]),
        f32s(&[3]),
        f32s(&[2, 3]),
        f32s(&[1, 4, 1]),
        f32s(&[2, 0, 3]),
        f32s(&[0]),
        f32s(&[2, 3]).t().unwrap(),
        f32s(&[3]).expand(&[2, 3]).unwrap(),
        f32s(&[4, 6]).slice(1, Some(1), None, 2).unwrap(),
        Tensor::from_vec(vec![1.0f64, f64::NAN, -0.0, f64::INFINITY], &[2, 2]).unwrap(),
        Tensor::from_vec(vec![i64::MAX, i64::MIN, 0, -1, 7, 3], &[2, 3]).unwrap(),
        Tensor::from_vec(vec![1i32, -2, 3], &[3]).unwrap(),
        Tensor::from_vec(vec![true, false, true, true, false, false], &[2, 3]).unwrap(),
        Tensor::ones(&[2, 3], DType::F16),
        Tensor::ones(&[3], DType::BF16),
        Tensor::scalar(5i64),
        Tensor::empty_fake(&[2, 3], DType::F32, Device::Cpu),
        Tensor::empty_fake(&[2, 3], DType::F32, Device::Meta),
        Tensor::empty_fake(&[3], DType::F32, Device::Cuda(0)),
        g(&[2, 3]),
        g(&[3]),
        g(&[]),
        g(&[3, 3]).t().unwrap(),
    ]
}

fn int_pool() -> Vec<i64> {
    // Only tiny or absurd values: mid-sized ones could make a valid call allocate gigabytes.
    vec![
        0,
        1,
        -1,
        2,
        -2,
        3,
        5,
        100,
        -100,
        1 << 40,
        -(1 << 40),
        i64::MAX,
        i64::MIN,
    ]
}

fn random_value(rng: &mut Lcg, tensors: &[Tensor]) -> Value {
    let ints = int_pool();
    match rng.next() % 14 {
        0..=2 => Value::Tensor(rng.pick(tensors)),
        3 => Value::OptionalTensor(if rng.chance(2) {
            None
        } else {
            Some(rng.pick(tensors))
        }),
        4 => {
            let n = rng.next() % 4;
            Value::TensorList((0..n).map(|_| rng.pick(tensors)).collect())
        }
        5 => Value::Int(rng.pick(&ints)),
        6 => Value::Float(rng.pick(&[0.0, -1.5, 2.0, f64::NAN, f64::INFINITY, -1e308, 1e-310])),
        7 => Value::Bool(rng.chance(2)),
        8 => Value::Str(
            rng.pick(&["", "none", "tanh", "garbage", "mean"])
                .to_string(),
        ),
        9 | 10 => {
            let n = rng.next() % 5;
            Value::IntList((0..n).map(|_| rng.pick(&ints)).collect())
        }
        11 => Value::FloatList(vec![rng.pick(&[0.5, f64::NAN, -1.0])]),
        12 => match rng.next() % 3 {
            0 => Value::DType(rng.pick(&DType::ALL)),
            1 => Value::Device(rng.pick(&[Device::Cpu, Device::Meta, Device::Cuda(0)])),
            _ => Value::BoolList(vec![true, false]),
        },
        _ => Value::None,
    }
}

/// A value of the schema type `ty` (mostly well-typed, so calls get past argument parsing and
/// exercise the kernels with odd values).
fn typed_value(rng: &mut Lcg, ty: &str, tensors: &[Tensor]) -> Value {
    let ints = int_pool();
    let small = [-3i64, -2, -1, 0, 1, 2, 3];
    let ty = ty.split('(').next().unwrap_or(ty);
    let optional = ty.ends_with('?');
    if optional && rng.chance(3) {
        return Value::None;
    }
    let base = ty.trim_end_matches('?');
    let int = |rng: &mut Lcg| {
        if rng.chance(4) {
            rng.pick(&ints)
        } else {
            rng.pick(&small)
        }
    };
    match base {
        "Tensor" => Value::Tensor(rng.pick(tensors)),
        "Tensor[]" => {
            let n = rng.next() % 4;
            // Sometimes several copies of one tensor, so list ops can succeed.
            let t = rng.pick(tensors);
            Value::TensorList(
                (0..n)
                    .map(|_| {
                        if rng.chance(2) {
                            t.clone()
                        } else {
                            rng.pick(tensors)
                        }
                    })
                    .collect(),
            )
        }
        "int" | "SymInt" => Value::Int(int(rng)),
        "int[]" | "SymInt[]" => {
            let n = rng.next() % 4;
            Value::IntList((0..n).map(|_| int(rng)).collect())
        }
        "float" => Value::Float(rng.pick(&[0.0, 1e-5, -1.0, f64::NAN, f64::INFINITY])),
        "Scalar" => match rng.next() % 3 {
            0 => Value::Int(int(rng)),
            1 => Value::Float(rng.pick(&[0.5, -0.0, f64::NAN, f64::NEG_INFINITY, 1e300])),
            _ => Value::Bool(rng.chance(2)),
        },
        "bool" => Value::Bool(rng.chance(2)),
        "str" => Value::Str(rng.pick(&["none", "tanh", "", "bogus"]).to_string()),
        "ScalarType" => Value::DType(rng.pick(&DType::ALL)),
        _ => random_value(rng, tensors),
    }
}

/// The parameter types of a schema string, in order (keyword-only marker skipped).
fn schema_types(schema: &str) -> Vec<String> {
    let open = schema.find('(').unwrap();
    let close = schema.find(") ->").unwrap_or(schema.len() - 1);
    schema[open + 1..close]
        .split(", ")
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != "*")
        .map(|p| p.split(' ').next().unwrap().to_string())
        .collect()
}

fn describe(args: &[Value]) -> String {
    let parts: Vec<String> = args
        .iter()
        .map(|a| match a {
            Value::Tensor(t) => format!("{t:?} strides {:?}", t.strides()),
            other => format!("{other:?}"),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The same argument with every tensor replaced by a fake of its shape, dtype and device.
fn fakeify(v: &Value) -> Value {
    let f = |t: &Tensor| Tensor::empty_fake(t.shape(), t.dtype(), t.device());
    match v {
        Value::Tensor(t) => Value::Tensor(f(t)),
        Value::OptionalTensor(t) => Value::OptionalTensor(t.as_ref().map(f)),
        Value::TensorList(ts) => Value::TensorList(ts.iter().map(f).collect()),
        other => other.clone(),
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "<non-string panic>".into())
}

#[test]
fn no_op_panics_on_garbage_arguments() {
    let tensors = tensor_pool();
    let mut rng = Lcg(0x7e57_0f6a_4b00);
    let mut panics: Vec<String> = Vec::new();
    let mut fake_mismatches: Vec<String> = Vec::new();
    let mut successes = 0usize;
    let ops = all_ops();
    assert!(
        ops.len() >= 20,
        "the op table looks incomplete: {} ops",
        ops.len()
    );
    for op in &ops {
        let types = schema_types(op.schema);
        let mut reported = 0;
        let before = successes;
        for iter in 0..400 {
            let args: Vec<Value> = if iter % 3 == 0 {
                // Pure garbage: any arity, any types.
                let n = rng.next() % 7;
                (0..n).map(|_| random_value(&mut rng, &tensors)).collect()
            } else {
                // Schema-typed, sometimes with trailing arguments dropped or one extra.
                let mut v: Vec<Value> = types
                    .iter()
                    .map(|t| typed_value(&mut rng, t, &tensors))
                    .collect();
                if rng.chance(5) {
                    let keep = (rng.next() as usize) % (v.len() + 1);
                    v.truncate(keep);
                } else if rng.chance(10) {
                    v.push(random_value(&mut rng, &tensors));
                }
                v
            };
            let result = catch_unwind(AssertUnwindSafe(|| {
                let _quiet = if rng.chance(4) { Some(no_grad()) } else { None };
                let outs = dispatch::call(op, &args)?;
                // Backpropagate through whatever came out, to reach the derivative too.
                for o in &outs {
                    if o.requires_grad() && !o.is_fake() {
                        let g = Tensor::ones(o.shape(), o.dtype());
                        let _ = autograd::backward(std::slice::from_ref(o), &[Some(g)], false);
                    }
                }
                Ok::<_, Error>(outs)
            }));
            match result {
                Err(p) => {
                    if reported < 3 {
                        panics.push(format!(
                            "{}: {} with args {}",
                            op.name,
                            panic_message(&p),
                            describe(&args)
                        ));
                    }
                    reported += 1;
                }
                Ok(Ok(outs)) => {
                    successes += 1;
                    // The meta rule (fake kernel) must agree with the real kernel.
                    if outs.iter().all(|o| !o.is_fake()) {
                        let fake_args: Vec<Value> = args.iter().map(fakeify).collect();
                        let fake = catch_unwind(AssertUnwindSafe(|| {
                            let _g = no_grad();
                            dispatch::call(op, &fake_args)
                        }));
                        match fake {
                            Ok(Ok(f)) => {
                                let real: Vec<_> = outs
                                    .iter()
                                    .map(|o| (o.shape().to_vec(), o.dtype()))
                                    .collect();
                                let fk: Vec<_> =
                                    f.iter().map(|o| (o.shape().to_vec(), o.dtype())).collect();
                                if real != fk && fake_mismatches.len() < 20 {
                                    fake_mismatches.push(format!(
                                        "{}: real {real:?} vs fake {fk:?} for {}",
                                        op.name,
                                        describe(&args)
                                    ));
                                }
                            }
                            // Ops whose output size depends on the data (nonzero) have no fake
                            // kernel: on fake tensors they say so.
                            Ok(Err(e)) if e.to_string().contains("depends on the data") => {}
                            Ok(Err(e)) => {
                                if fake_mismatches.len() < 20 {
                                    fake_mismatches.push(format!(
                                        "{}: fake call failed ({e}) where the real one worked: {}",
                                        op.name,
                                        describe(&args)
                                    ));
                                }
                            }
                            Err(p) => panics.push(format!(
                                "{} (fake): {} with args {}",
                                op.name,
                                panic_message(&p),
                                describe(&fake_args)
                            )),
                        }
                    }
                }
                Ok(Err(_)) => {}
            }
        }
        if std::env::var("TP_FUZZ_VERBOSE").is_ok() {
            eprintln!("fuzz: {:<16} {} valid calls", op.name, successes - before);
        }
    }
    if std::env::var("TP_FUZZ_VERBOSE").is_ok() {
        eprintln!("fuzz: {successes} successful calls");
    }
    assert!(
        successes > 200,
        "the fuzzer should also produce valid calls ({successes})"
    );
    assert!(
        panics.is_empty(),
        "{} op calls panicked:\n{}",
        panics.len(),
        panics.join("\n")
    );
    assert!(
        fake_mismatches.is_empty(),
        "fake kernels disagree with real kernels:\n{}",
        fake_mismatches.join("\n")
    );
}
