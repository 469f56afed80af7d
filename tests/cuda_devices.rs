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
