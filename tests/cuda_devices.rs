//! CUDA device queries never panic, with or without a driver; without one (or without a GPU),
//! moving a tensor to `cuda:N` is an error naming the device and the reason. On a GPU machine
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
fn moving_a_tensor_to_cuda_is_a_clear_error() {
    let x = Tensor::ones(&[3], DType::F32);
    let e = x.to_device(Device::Cuda(0)).unwrap_err().to_string();
    assert!(e.contains("to_device") && e.contains("cuda:0"), "{e}");
    if !cuda::is_available() {
        assert!(e.contains(&cuda::unavailable_reason().unwrap()), "{e}");
    }
    // A device index past the count names the count.
    let e = x.to_device(Device::Cuda(9)).unwrap_err().to_string();
    assert!(e.contains("cuda:9"), "{e}");
    // The CPU and meta devices work.
    assert_eq!(
        x.to_device(Device::Cpu).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0; 3]
    );
    assert_eq!(x.to_device(Device::Meta).unwrap().device(), Device::Meta);
}
