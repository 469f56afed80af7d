//! CUDA device queries never panic, with or without a driver; without one (or without a GPU),
//! moving a tensor to `cuda:N` is an error naming the device and the reason; with one, tensors
//! copy to the device and back through the driver. On a GPU machine
//! (`TP_EXPECT_GPU=1`, set by `scripts/gpu-check.sh`) a device must be found.

use tensorplay::{DType, Device, Tensor, cuda};

#[test]
fn device_queries_never_panic_and_agree() {
    let n = cuda::device_count();
    assert_eq!(cuda::is_available(), n > 0);
    assert_eq!(cuda::unavailable_reason().is_none(), n > 0);
    if std::env::var("TP_EXPECT_GPU").is_ok_and(|v| v == "1") {
        assert!(
            n > 0,
            "a GPU was expected: {:?}",
            cuda::unavailable_reason()
        );
    }
    if let Some(why) = cuda::unavailable_reason() {
        println!("cuda: no device here: {why}");
        assert!(!why.is_empty());
    }
}

#[test]
fn moving_a_tensor_to_cuda_round_trips_or_is_a_clear_error() {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    match x.to_device(Device::Cuda(0)) {
        // A real device (the GPU check): the driver's copies both ways, views included.
        Ok(g) => {
            assert!(cuda::is_available());
            assert_eq!(g.device(), Device::Cuda(0));
            assert_eq!(
                g.t().unwrap().to_vec::<f32>().unwrap(),
                x.t().unwrap().to_vec::<f32>().unwrap()
            );
            assert!(g.to_device(Device::Cpu).unwrap().equal(&x).unwrap());
            let z = Tensor::zeros_on(&[1 << 20], DType::F32, Device::Cuda(0)).unwrap();
            assert!(
                z.sum_all().is_err(),
                "built-in ops have no CUDA kernels yet"
            );
            assert!(z.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
            cuda::synchronize(Device::Cuda(0)).unwrap();
            println!("cuda: copies to and from {} verified", Device::Cuda(0));
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("to_device") && e.contains("cuda:0"), "{e}");
            assert!(!cuda::is_available(), "{e}");
            assert!(e.contains(&cuda::unavailable_reason().unwrap()), "{e}");
        }
    }
    // A device index past the count names the device.
    let e = x.to_device(Device::Cuda(9)).unwrap_err().to_string();
    assert!(e.contains("cuda:9"), "{e}");
    // The CPU and meta devices work.
    assert!(x.to_device(Device::Cpu).unwrap().equal(&x).unwrap());
    assert_eq!(x.to_device(Device::Meta).unwrap().device(), Device::Meta);
}

/// W3 of the anchors: `relu(x + bias) + r`.
fn w3(xs: &[Tensor]) -> tensorplay::Result<Vec<Tensor>> {
    Ok(vec![xs[0].add(&xs[1])?.relu()?.add(&xs[2])?])
}

/// W6 of the anchors: `sqrt(abs((((x*1.1+0.3)*x-0.7)/(x*x+1))+x))`.
fn w6(xs: &[Tensor]) -> tensorplay::Result<Vec<Tensor>> {
    let x = &xs[0];
    let num = x
        .mul_scalar(1.1)?
        .add_scalar(0.3)?
        .mul(x)?
        .sub_scalar(0.7)?;
    let den = x.mul(x)?.add_scalar(1.0)?;
    Ok(vec![num.div(&den)?.add(x)?.abs()?.sqrt()?])
}

/// The largest relative difference between two tensors' values (NaN matching NaN).
fn max_rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    let (x, y) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    assert_eq!(x.len(), y.len());
    x.iter()
        .zip(&y)
        .filter(|(p, q)| !(p.is_nan() && q.is_nan()))
        .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
        .fold(0.0, f64::max)
}

/// On a GPU machine: compiled graphs whose inputs are on `cuda:0` launch their regions as
/// NVRTC-compiled kernels on the device, and match the same graphs on the CPU (pointwise with
/// broadcasts, row and column reductions, softmax rows, W3 and W6), at sizes that take the
/// vector path and its tail. Skips without a device.
#[test]
fn compiled_regions_on_a_gpu_match_the_cpu() {
    if !cuda::is_available() || cuda::is_emulated() {
        println!("cuda: no GPU, compiled-on-device check skipped");
        return;
    }
    let gpu = Device::Cuda(0);
    let programs: Vec<(&str, tensorplay::compiler::CompiledFn)> = vec![
        ("w3", tensorplay::compiler::compile(w3)),
        (
            "w6",
            tensorplay::compiler::compile(|xs: &[Tensor]| w6(&xs[..1])),
        ),
        (
            "reductions",
            tensorplay::compiler::compile(|xs: &[Tensor]| {
                let h = xs[0].mul(&xs[2])?;
                Ok(vec![
                    h.sum(&[1], false)?,
                    h.mean(&[0], true)?,
                    xs[0].softmax(1)?,
                ])
            }),
        ),
    ];
    let mut checked = 0;
    for (rows, cols) in [(1, 7), (33, 1024), (1000, 1027), (4096, 1024)] {
        let x = Tensor::randn_seeded(&[rows, cols], DType::F32, 1).unwrap();
        let bias = Tensor::randn_seeded(&[cols], DType::F32, 2).unwrap();
        let r = Tensor::randn_seeded(&[rows, cols], DType::F32, 3).unwrap();
        let host = [x, bias, r];
        let dev: Vec<Tensor> = host.iter().map(|t| t.to_device(gpu).unwrap()).collect();
        for (name, f) in &programs {
            let want = f.call(&host).unwrap();
            let got = f.call(&dev).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.device(), gpu);
                let d = max_rel_diff(g, w);
                assert!(
                    d <= 1e-5,
                    "{name} at [{rows}, {cols}]: max relative difference {d}"
                );
                checked += 1;
            }
        }
    }
    cuda::synchronize(gpu).unwrap();
    println!("cuda-device: {checked} compiled outputs on {gpu} matched the CPU");
}

/// On a GPU machine: eager built-in ops on `cuda:0` tensors (the compiler's generated kernels,
/// through the driver) match the CPU kernels, autograd included. Skips without a device.
#[test]
fn eager_ops_on_a_gpu_match_the_cpu() {
    if !cuda::is_available() || cuda::is_emulated() {
        println!("cuda: no GPU, eager-on-device check skipped");
        return;
    }
    let gpu = Device::Cuda(0);
    let mut checked = 0;
    for (rows, cols) in [(3, 5), (257, 1031)] {
        let x = Tensor::randn_seeded(&[rows, cols], DType::F32, 4).unwrap();
        let b = Tensor::randn_seeded(&[cols], DType::F32, 5).unwrap();
        let (gx, gb) = (x.to_device(gpu).unwrap(), b.to_device(gpu).unwrap());
        let pairs = [
            (
                gx.add(&gb).unwrap().gelu("tanh").unwrap(),
                x.add(&b).unwrap().gelu("tanh").unwrap(),
            ),
            (
                gx.mul_scalar(3.0).unwrap().exp().unwrap(),
                x.mul_scalar(3.0).unwrap().exp().unwrap(),
            ),
            (
                gx.t().unwrap().contiguous().unwrap(),
                x.t().unwrap().contiguous().unwrap(),
            ),
            (
                gx.to_dtype(DType::F16).unwrap(),
                x.to_dtype(DType::F16).unwrap(),
            ),
            (gx.sum(&[1], false).unwrap(), x.sum(&[1], false).unwrap()),
            (gx.amax(&[0], true).unwrap(), x.amax(&[0], true).unwrap()),
            (gx.softmax(1).unwrap(), x.softmax(1).unwrap()),
            (gx.log_softmax(0).unwrap(), x.log_softmax(0).unwrap()),
            // cuBLAS: a product with a transposed view (op = T) and a vector.
            (
                gx.matmul(&gx.t().unwrap()).unwrap(),
                x.matmul(&x.t().unwrap()).unwrap(),
            ),
            (gx.matmul(&gb).unwrap(), x.matmul(&b).unwrap()),
        ];
        for (k, (g, w)) in pairs.iter().enumerate() {
            assert_eq!(g.device(), gpu);
            let d = max_rel_diff(g, w);
            assert!(
                d <= 1e-3,
                "op {k} at [{rows}, {cols}]: max relative difference {d}"
            );
            checked += 1;
        }
        // In place, and autograd with the grads on the device.
        let t = gx.clone_tensor().unwrap();
        t.add_(&gb).unwrap();
        t.mul_scalar_(0.5).unwrap();
        let want = x.add(&b).unwrap().mul_scalar(0.5).unwrap();
        assert!(max_rel_diff(&t, &want) <= 1e-6);
        let leaf = gx.requires_grad_(true).unwrap();
        leaf.tanh().unwrap().sum_all().unwrap().backward().unwrap();
        let grad = leaf.grad().unwrap();
        assert_eq!(grad.device(), gpu);
        let cpu_leaf = x.requires_grad_(true).unwrap();
        cpu_leaf
            .tanh()
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(max_rel_diff(&grad, &cpu_leaf.grad().unwrap()) <= 1e-5);
        checked += 2;
    }
    cuda::synchronize(gpu).unwrap();
    println!("cuda-device: {checked} eager results on {gpu} matched the CPU");
}

/// Median seconds of `f` over `reps` runs, each ended by a device synchronization.
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = std::time::Instant::now();
            f();
            cuda::synchronize(Device::Cuda(0)).unwrap();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

/// On a GPU machine with `TP_GPU_BENCH=1` (set by `scripts/gpu-check.sh`): the bandwidth of
/// fused W3 and W6 at 2^28 f32 elements as a fraction of a device-to-device copy of one input
/// measured in the same run (a copy moves 8 bytes per element; W3 moves 12, W6 8). Prints; asserts
/// nothing about speed.
#[test]
fn fused_bandwidth_on_a_gpu() {
    if !cuda::is_available()
        || cuda::is_emulated()
        || std::env::var("TP_GPU_BENCH").map_or(true, |v| v != "1")
    {
        println!("cuda: bandwidth check skipped (needs a GPU and TP_GPU_BENCH=1)");
        return;
    }
    let gpu = Device::Cuda(0);
    let n: usize = 1 << 28;
    let cols = 1024;
    let x = Tensor::rand_seeded(&[n / cols, cols], DType::F32, 1)
        .unwrap()
        .to_device(gpu)
        .unwrap();
    let bias = Tensor::rand_seeded(&[cols], DType::F32, 2)
        .unwrap()
        .to_device(gpu)
        .unwrap();
    let r = Tensor::rand_seeded(&[n / cols, cols], DType::F32, 3)
        .unwrap()
        .to_device(gpu)
        .unwrap();
    let copy = median_secs(7, || drop(x.clone_on_device().unwrap()));
    let copy_gbs = 8.0 * n as f64 / copy / 1e9;
    println!("gpu-bandwidth: device-to-device copy {copy_gbs:.0} GB/s (2^28 f32)");
    let f3 = tensorplay::compiler::compile(w3);
    let f6 = tensorplay::compiler::compile(w6);
    let ins3 = [x.clone(), bias, r];
    let ins6 = [x];
    for (name, f, ins, bytes) in [("W3", &f3, &ins3[..], 12.0), ("W6", &f6, &ins6[..], 8.0)] {
        drop(f.call(ins).unwrap()); // compile and load
        let secs = median_secs(7, || drop(f.call(ins).unwrap()));
        let gbs = bytes * n as f64 / secs / 1e9;
        println!(
            "gpu-bandwidth: {name} fused {gbs:.0} GB/s = {:.2} of the copy",
            gbs / copy_gbs
        );
    }
}

/// The CUDA C of the small kernel the triton-op test ships: `out = x * alpha + 1`.
const SCALE_ADD_CU: &str = r#"
extern "C" __global__ void scale_add(const float* x, float* out, long long n, float alpha) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * alpha + 1.0f;
}
"#;

/// A triton op whose body launches a PTX kernel through `wrap_triton(GpuKernel)`. The PTX is
/// compiled from [`SCALE_ADD_CU`] by NVRTC (every run that has NVRTC proves that); on a GPU the
/// op runs on `cuda:0` and must match the CPU formula.
#[test]
fn a_triton_op_launches_a_ptx_kernel_on_a_gpu() {
    use tensorplay::compiler::codegen::cuda::nvrtc;
    use tensorplay::library::{GpuImage, GpuKernel, LaunchArg, triton_op, wrap_triton};
    let gpu = cuda::is_available() && !cuda::is_emulated();
    let arch = match gpu {
        true => {
            let (major, minor) = cuda::compute_capability(Device::Cuda(0)).unwrap();
            format!("compute_{major}{minor}")
        }
        false => "compute_90".to_string(),
    };
    let ptx = match nvrtc::load() {
        Ok(n) => n.compile_ptx(SCALE_ADD_CU, "scale_add.cu", &arch).unwrap(),
        Err(e) => {
            assert!(
                std::env::var("TP_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
                "TP_REQUIRE_NVRTC=1 but NVRTC is missing: {e}"
            );
            println!("triton-ptx: no NVRTC, skipped: {e}");
            return;
        }
    };
    assert!(ptx.contains(".entry scale_add"), "{ptx}");
    if !gpu {
        println!("triton-ptx: scale_add compiled to PTX for {arch}; launch skipped (no GPU)");
        return;
    }
    let kernel = wrap_triton(GpuKernel {
        name: "scale_add_ptx".into(),
        entry: "scale_add".into(),
        image: GpuImage::Ptx(ptx),
        num_warps: 4,
        shared_mem_bytes: 0,
    });
    let op = triton_op("gpu_test::scale_add")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> tensorplay::Result<Tensor> {
            let out = Tensor::zeros_on(x.shape(), x.dtype(), x.device())?;
            let n = x.numel();
            let grid = n.div_ceil(128).max(1) as u32;
            kernel.launch(
                [grid, 1, 1],
                &[
                    LaunchArg::In(x),
                    LaunchArg::Out(out.clone()),
                    LaunchArg::Int(n as i64),
                    LaunchArg::Float(2.0),
                ],
            )?;
            Ok(out)
        })
        .unwrap();
    for n in [1usize, 1000, 1 << 20] {
        let x = Tensor::randn_seeded(&[n], DType::F32, 5).unwrap();
        let y = op
            .call1(&[x.to_device(Device::Cuda(0)).unwrap().into()])
            .unwrap();
        assert_eq!(y.device(), Device::Cuda(0));
        let want: Vec<f32> = x
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v * 2.0 + 1.0)
            .collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), want, "n = {n}");
    }
    println!("triton-ptx: scale_add ran on cuda:0 through a triton op and matched");
}
