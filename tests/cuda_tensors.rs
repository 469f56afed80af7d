//! CUDA tensors on two host-emulated devices (`cuda::use_emulated_devices`): storage, copies both
//! ways and between devices, views, the caching allocator, printing, errors, and custom ops with
//! a `cuda` kernel. The same paths run against the driver on a GPU machine; only the device layer
//! (`runtime/src/cuda/device.rs`) differs.

use std::sync::Once;

use tensorplay::library::custom_op;
use tensorplay::{DType, Device, Result, Tensor, cuda};

/// Whether the host C++ compiler the emulated kernels are built with is here (CI installs it);
/// the compiled-graph tests skip with a message without it (fail under `TP_REQUIRE_NVRTC=1`).
fn can_emulate_kernels() -> bool {
    let ok = tensorplay::compiler::codegen::cuda::emulate::compiler_available();
    if !ok {
        assert!(
            std::env::var("TP_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
            "TP_REQUIRE_NVRTC=1 but there is no host C++ compiler (g++ or $CXX)"
        );
        println!("cuda-emulation: no host C++ compiler (g++ or $CXX): compiled-graph test skipped");
    }
    ok
}

fn devices() {
    static INIT: Once = Once::new();
    INIT.call_once(|| cuda::use_emulated_devices(2).expect("emulated devices"));
}

const GPU: Device = Device::Cuda(0);

#[test]
fn every_dtype_round_trips_through_a_device() -> Result<()> {
    devices();
    let base = Tensor::arange(-6.0, 6.0, 1.0, DType::F64)?.reshape(&[3, 4])?;
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ] {
        let x = base.to_dtype(dtype)?;
        let g = x.to_device(GPU)?;
        assert_eq!((g.device(), g.dtype(), g.shape()), (GPU, dtype, x.shape()));
        assert!(g.is_contiguous() && !g.is_fake());
        let back = g.to_device(Device::Cpu)?;
        assert_eq!(back.device(), Device::Cpu);
        assert!(back.equal(&x)?, "{dtype}: {back} vs {x}");
        // Reading values copies to the host behind the scenes.
        assert_eq!(g.to_vec_f64()?, x.to_vec_f64()?);
    }
    Ok(())
}

#[test]
fn strided_views_copy_in_their_element_order() -> Result<()> {
    devices();
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32)?.reshape(&[2, 3, 4])?;
    // A non-contiguous CPU source is made contiguous on the way up.
    let g = x.permute(&[2, 0, 1])?.to_device(GPU)?;
    assert!(g.is_contiguous());
    assert!(g.equal(&x.permute(&[2, 0, 1])?)?);
    // Views of a device tensor share its memory and copy down in their own order.
    let gx = x.to_device(GPU)?;
    for (view, host) in [
        (gx.transpose(0, 2)?, x.transpose(0, 2)?),
        (gx.narrow(2, 1, 2)?, x.narrow(2, 1, 2)?),
        (gx.select(1, 2)?, x.select(1, 2)?),
        (
            gx.reshape(&[6, 4])?.narrow(0, 3, 2)?,
            x.reshape(&[6, 4])?.narrow(0, 3, 2)?,
        ),
        (gx.expand(&[3, 2, 3, 4])?, x.expand(&[3, 2, 3, 4])?),
    ] {
        assert_eq!(view.device(), GPU);
        assert!(view.storage().same(gx.storage()));
        assert_eq!(view.to_vec::<f32>()?, host.to_vec::<f32>()?);
    }
    // Zero-size and 0-d tensors.
    let e = Tensor::zeros(&[3, 0], DType::F32).to_device(GPU)?;
    assert_eq!((e.shape(), e.to_vec::<f32>()?), (&[3usize, 0][..], vec![]));
    assert_eq!(Tensor::scalar(7i64).to_device(GPU)?.item::<i64>()?, 7);
    Ok(())
}

#[test]
fn tensors_move_between_devices() -> Result<()> {
    devices();
    let x = Tensor::randn_seeded(&[5, 7], DType::F32, 3)?;
    let a = x.to_device(Device::Cuda(0))?;
    let b = a.to_device(Device::Cuda(1))?;
    assert_eq!(b.device(), Device::Cuda(1));
    assert!(!b.storage().same(a.storage()));
    assert!(b.to_device(Device::Cpu)?.equal(&x)?);
    assert!(
        a.to_device(Device::Cuda(0))?.same(&a),
        "same device: the tensor itself"
    );
    let m = a.to_device(Device::Meta)?;
    assert!(m.is_fake() && m.device() == Device::Meta);
    Ok(())
}

#[test]
fn zeros_on_and_the_caching_allocator() -> Result<()> {
    devices();
    let dev = Device::Cuda(1);
    let z = Tensor::zeros_on(&[1000], DType::F64, dev)?;
    assert_eq!((z.device(), z.to_vec::<f64>()?), (dev, vec![0.0; 1000]));
    let held = cuda::memory_allocated(dev)?;
    assert!(held >= 8000, "{held}");
    let p = z.data_ptr_cuda()?;
    drop(z);
    // The block went back to the pool and the next request of its size reuses it.
    assert!(cuda::memory_cached(dev)? >= 8000);
    let again = Tensor::zeros_on(&[999], DType::F64, dev)?;
    assert_eq!(again.data_ptr_cuda()?, p);
    assert_eq!(
        again.to_vec::<f64>()?,
        vec![0.0; 999],
        "zeroed even when reused"
    );
    drop(again);
    cuda::empty_cache()?;
    assert_eq!(cuda::memory_cached(dev)?, 0);
    assert!(cuda::memory_allocated(dev)? < held + 8000);
    cuda::synchronize(dev)?;
    Ok(())
}

#[test]
fn device_tensors_print_with_their_device() -> Result<()> {
    devices();
    let g = Tensor::from_vec(vec![1i32, 2, 3], &[3])?.to_device(Device::Cuda(1))?;
    assert_eq!(
        g.to_string(),
        "tensor([1, 2, 3], dtype=i32, device='cuda:1')"
    );
    Ok(())
}

#[test]
fn clear_errors_for_what_does_not_run_on_a_device() -> Result<()> {
    devices();
    let g = Tensor::ones(&[4], DType::F32).to_device(GPU)?;
    // A built-in op without a CUDA kernel: the error names the op and the device.
    let e = g.cumsum(0, None).unwrap_err().to_string();
    assert!(
        e.contains("cumsum") && e.contains("cuda:0") && e.contains("to_device"),
        "{e}"
    );
    // Mixing devices in one call.
    let e = g
        .add(&Tensor::ones(&[4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda:0") && e.contains("cpu"), "{e}");
    // No such device.
    let e = Tensor::ones(&[2], DType::F32)
        .to_device(Device::Cuda(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda:2") && e.contains("2 (emulated)"), "{e}");
    // Device memory is not CPU memory.
    assert!(
        g.data_ptr_raw()
            .unwrap_err()
            .to_string()
            .contains("device memory")
    );
    assert!(Tensor::ones(&[2], DType::F32).data_ptr_cuda().is_err());
    // Meta tensors have nothing to copy.
    let e = Tensor::empty_fake(&[2], DType::F32, Device::Meta)
        .to_device(GPU)
        .unwrap_err();
    assert!(e.to_string().contains("meta"), "{e}");
    // The emulated devices were chosen for this process.
    assert!(cuda::is_emulated() && cuda::device_count() == 2);
    assert!(cuda::use_emulated_devices(4).is_err());
    Ok(())
}

#[test]
fn fake_tensors_move_as_fake_tensors() -> Result<()> {
    devices();
    let f = Tensor::empty_fake(&[2, 3], DType::BF16, Device::Cpu).to_device(GPU)?;
    assert!(f.is_fake() && f.device() == GPU && f.shape() == [2, 3]);
    Ok(())
}

#[test]
fn a_custom_op_picks_its_cuda_kernel_for_device_tensors() -> Result<()> {
    devices();
    let scale = custom_op("cuda_test::scale2")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { &x * 2.0 })?;
    scale.register_kernel(&["cuda"], |x: Tensor| -> Result<Tensor> {
        // A device kernel: reads and writes device memory. On an emulated device, device
        // addresses are host addresses, so a host loop plays the kernel here.
        assert_eq!(x.device(), GPU);
        let x = x.to_device(GPU)?;
        let out = Tensor::zeros_on(x.shape(), x.dtype(), x.device())?;
        assert!(x.is_contiguous());
        let (src, dst) = (
            x.data_ptr_cuda()? as *const f32,
            out.data_ptr_cuda()? as *mut f32,
        );
        for i in 0..x.numel() {
            // SAFETY: both tensors are contiguous f32 with `numel` elements, and emulated
            // device memory is host memory.
            unsafe { *dst.add(i) = *src.add(i) * 2.0 + 0.5 };
        }
        Ok(out)
    })?;
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    // On the CPU, the default kernel.
    assert_eq!(
        scale.call1(&[x.clone().into()])?.to_vec::<f32>()?,
        vec![2.0, 4.0, 6.0]
    );
    // On cuda:0, the cuda kernel (its `+ 0.5` tells them apart); the result stays there.
    let y = scale.call1(&[x.to_device(GPU)?.into()])?;
    assert_eq!(y.device(), GPU);
    assert_eq!(y.to_vec::<f32>()?, vec![2.5, 4.5, 6.5]);
    Ok(())
}

#[test]
fn concurrent_copies_keep_their_data() {
    devices();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                for i in 0..20u64 {
                    let n = 100 + (t * 37 + i * 11) as usize % 5000;
                    let x = Tensor::rand_seeded(&[n], DType::F32, t * 1000 + i).unwrap();
                    let dev = Device::Cuda((i % 2) as u16);
                    let g = x.to_device(dev).unwrap();
                    assert!(g.to_device(Device::Cpu).unwrap().equal(&x).unwrap());
                }
            });
        }
    });
}

/// `a` and `b` agree within `tol` (relative, with an absolute floor for values near zero).
fn close(a: &Tensor, b: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_vec_f64()?, b.to_vec_f64()?);
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()) || (p.is_nan() && q.is_nan()),
            "element {i}: {p} vs {q}"
        );
    }
    Ok(())
}

#[test]
fn compiled_regions_run_as_cuda_kernels_on_the_device() -> Result<()> {
    devices();
    if !can_emulate_kernels() {
        return Ok(());
    }
    // Pointwise with a broadcast bias, a row reduction and softmax rows: three kernel classes.
    let f = tensorplay::compiler::compile(|xs: &[Tensor]| {
        let h = xs[0].mul(&xs[1])?.add(&xs[2])?.relu()?;
        let rows = h.sum(&[1], false)?;
        let mean = xs[0].exp()?.mean(&[0], true)?;
        Ok(vec![h.clone(), rows, xs[0].softmax(1)?, mean])
    });
    for (m, n) in [(3, 5), (17, 40), (64, 129)] {
        let x = Tensor::randn_seeded(&[m, n], DType::F32, 1)?;
        let w = Tensor::randn_seeded(&[m, n], DType::F32, 2)?;
        let b = Tensor::randn_seeded(&[n], DType::F32, 3)?;
        let want = f.call(&[x.clone(), w.clone(), b.clone()])?;
        let on_gpu: Vec<Tensor> = [&x, &w, &b]
            .iter()
            .map(|t| t.to_device(GPU))
            .collect::<Result<_>>()?;
        let got = f.call(&on_gpu)?;
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.device(), GPU, "outputs stay on the device");
            close(g, w, 1e-5)?;
        }
        // A transposed (non-contiguous) device input runs the same kernels with its strides.
        let xt = x.t()?.contiguous()?.to_device(GPU)?.t()?;
        let got = f.call(&[xt, on_gpu[1].clone(), on_gpu[2].clone()])?;
        close(&got[0], &want[0], 1e-6)?;
    }
    Ok(())
}

#[test]
fn compiled_graphs_keep_custom_cuda_kernels_and_constants_on_the_device() -> Result<()> {
    devices();
    if !can_emulate_kernels() {
        return Ok(());
    }
    let shift = custom_op("cuda_test::shift")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(10.0) })?;
    shift.register_kernel(&["cuda"], |x: Tensor| -> Result<Tensor> {
        assert!(x.is_contiguous());
        let out = Tensor::zeros_on(x.shape(), x.dtype(), x.device())?;
        let (src, dst) = (
            x.data_ptr_cuda()? as *const f32,
            out.data_ptr_cuda()? as *mut f32,
        );
        for i in 0..x.numel() {
            // SAFETY: contiguous f32 tensors of `numel` elements in (emulated) host memory.
            unsafe { *dst.add(i) = *src.add(i) + 10.0 };
        }
        Ok(out)
    })?;
    shift.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let table = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 4.0], &[4])?;
    // The same program for inputs on `device`, its tensor constant there too.
    let program = |device: Device| -> Result<tensorplay::compiler::CompiledFn> {
        let (op, table) = (shift.clone(), table.to_device(device)?);
        Ok(tensorplay::compiler::compile(move |xs: &[Tensor]| {
            let a = xs[0].mul_scalar(2.0)?.add(&table)?; // region 1, with a tensor constant
            let b = op.call1(&[a.into()])?; // a barrier: the op's cpu or cuda kernel
            Ok(vec![b.tanh()?]) // region 2
        }))
    };
    let x = Tensor::randn_seeded(&[3, 4], DType::F32, 7)?;
    let want = program(Device::Cpu)?.call(std::slice::from_ref(&x))?;
    let got = program(GPU)?.call(&[x.to_device(GPU)?])?;
    assert_eq!(got[0].device(), GPU);
    close(&got[0], &want[0], 1e-6)?;
    Ok(())
}

#[test]
fn compiled_graphs_with_builtin_barriers_on_the_device_fail_clearly() -> Result<()> {
    devices();
    // cumsum has no CUDA kernel (matmul has cuBLAS's; see tests/cuda_eager.rs).
    let f = tensorplay::compiler::compile(|xs: &[Tensor]| Ok(vec![xs[0].cumsum(0, None)?.relu()?]));
    let x = Tensor::ones(&[4, 4], DType::F32).to_device(GPU)?;
    let e = f.call(&[x]).unwrap_err().to_string();
    assert!(e.contains("cumsum") && e.contains("cuda:0"), "{e}");
    // Inputs on two devices.
    let f = tensorplay::compiler::compile(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?]));
    let a = Tensor::ones(&[4], DType::F32).to_device(Device::Cuda(0))?;
    let b = Tensor::ones(&[4], DType::F32).to_device(Device::Cuda(1))?;
    assert!(f.call(&[a, b]).is_err());
    Ok(())
}

#[test]
fn run_into_updates_device_tensors_in_place() -> Result<()> {
    use tensorplay::compiler::capture::{CaptureOptions, capture};
    use tensorplay::compiler::tp_compile;
    use tensorplay::ir::TensorMeta;
    devices();
    if !can_emulate_kernels() {
        return Ok(());
    }
    let meta = TensorMeta::new(&[5], DType::F32, GPU);
    let g = capture(
        |xs| Ok(vec![xs[0].mul_scalar(2.0)?.add_scalar(1.0)?]),
        &[meta],
        CaptureOptions::default(),
    )?;
    let compiled = tp_compile(&g)?;
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0], &[5])?.to_device(GPU)?;
    let before = x.version();
    compiled.run_into(std::slice::from_ref(&x), std::slice::from_ref(&x))?;
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, 3.0, 5.0, 7.0, 9.0]);
    assert!(x.version() > before);
    // A destination on the host is refused, naming the devices.
    let e = compiled
        .run_into(std::slice::from_ref(&x), &[Tensor::zeros(&[5], DType::F32)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda:0") && e.contains("cpu"), "{e}");
    Ok(())
}

#[test]
fn gpu_kernels_do_not_run_on_emulated_devices() -> Result<()> {
    use tensorplay::library::{GpuImage, GpuKernel, LaunchArg, triton_op, wrap_triton};
    devices();
    let kernel = wrap_triton(GpuKernel {
        name: "k_ptx".into(),
        entry: "k".into(),
        image: GpuImage::Ptx(".version 8.0\n.target sm_90\n".into()),
        num_warps: 4,
        shared_mem_bytes: 0,
    });
    let op =
        triton_op("cuda_test::k")
            .arg_names(&["x"])
            .build(move |x: Tensor| -> Result<Tensor> {
                let out = Tensor::zeros_on(x.shape(), x.dtype(), x.device())?;
                kernel.launch([1, 1, 1], &[LaunchArg::In(x), LaunchArg::Out(out.clone())])?;
                Ok(out)
            })?;
    let x = Tensor::ones(&[4], DType::F32);
    let e = op
        .call1(&[x.to_device(GPU)?.into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("emulated") && e.contains("cuda:0"), "{e}");
    // Host tensors are refused, naming the kernel.
    let e = op.call1(&[x.into()]).unwrap_err().to_string();
    assert!(e.contains("k_ptx") && e.contains("CUDA"), "{e}");
    Ok(())
}

#[test]
fn a_compiled_function_runs_on_the_device_from_many_threads() -> Result<()> {
    devices();
    if !can_emulate_kernels() {
        return Ok(());
    }
    // A kernel no other test uses, so the threads race to its first build and load.
    let f = std::sync::Arc::new(tensorplay::compiler::compile(|xs: &[Tensor]| {
        let y = xs[0].sigmoid()?.mul_scalar(3.0)?.sub(&xs[0])?;
        Ok(vec![y.clone(), y.sum(&[1], false)?]) // a pointwise and a block-tree kernel
    }));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = f.clone();
            s.spawn(move || {
                for i in 0..3u64 {
                    let x = Tensor::randn_seeded(&[9, 31], DType::F32, t * 10 + i).unwrap();
                    let want = f.call(std::slice::from_ref(&x)).unwrap();
                    let dev = Device::Cuda((t % 2) as u16);
                    let got = f.call(&[x.to_device(dev).unwrap()]).unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(g.device(), dev);
                        close(g, w, 1e-5).unwrap();
                    }
                }
            });
        }
    });
    Ok(())
}
