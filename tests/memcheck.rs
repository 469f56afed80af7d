//! The memory-safety suite: small eager ops (including in-place ops that write into their own
//! input, and views), the caching allocator, a few compiled graphs, and CUDA tensors on an
//! emulated device. `.ci/run` runs this binary
//! under valgrind memcheck (`--error-exitcode=1`), so it stays small and quick; it is also an
//! ordinary test target with its own assertions.

use tensorplay::compiler::compile;
use tensorplay::{DType, Result, Tensor};
use tensorplay_runtime::storage::allocator;

fn ramp(n: usize) -> Tensor {
    Tensor::from_vec((0..n).map(|i| i as f32 * 0.5 - 3.0).collect(), &[n]).unwrap()
}

#[test]
fn empty_is_zero_filled_for_every_dtype() -> Result<()> {
    for n in [0usize, 1, 7, 40_000] {
        // `bool` is the dtype where a stray byte would be undefined behaviour to read.
        assert!(
            Tensor::empty(&[n], DType::Bool)
                .to_vec::<bool>()?
                .iter()
                .all(|&b| !b)
        );
        assert!(
            Tensor::empty(&[n], DType::F32)
                .to_vec::<f32>()?
                .iter()
                .all(|&v| v == 0.0)
        );
        let like = Tensor::empty_like(&Tensor::ones(&[n, 2], DType::I64));
        assert!(like.to_vec::<i64>()?.iter().all(|&v| v == 0));
    }
    // A recycled allocator buffer is zeroed again (1 MiB is in the cached size range).
    let n = 1 << 18;
    drop(Tensor::full(&[n], 7, DType::I32));
    let t = Tensor::empty(&[n], DType::I32);
    assert!(t.to_vec::<i32>()?.iter().all(|&v| v == 0));
    Ok(())
}

#[test]
fn in_place_ops_that_read_their_own_output() -> Result<()> {
    for n in [1usize, 5, 67] {
        let a = ramp(n);
        let want: Vec<f32> = a.to_vec::<f32>()?.iter().map(|v| v + v).collect();
        // `a` is both the output and both inputs.
        a.add_(&a)?;
        assert_eq!(a.to_vec::<f32>()?, want);
        // A broadcast scalar and a strided view of the same storage.
        a.mul_scalar_(2.0)?;
        let b = ramp(2 * n).view(&[n, 2])?.t()?; // [2, n], strided
        let row = b.select(0, 1)?; // odd elements, stride 2
        let before = row.to_vec::<f32>()?;
        row.sub_(&row)?;
        assert!(row.to_vec::<f32>()?.iter().all(|&v| v == 0.0));
        assert_eq!(b.select(0, 1)?.to_vec::<f32>()?, vec![0.0; n], "{before:?}");
        // Another view of the same storage as the operand: the op reads a copy.
        let c = ramp(n + 1);
        let (head, tail) = (c.narrow(0, 0, n)?, c.narrow(0, 1, n)?);
        let want: Vec<f32> = head
            .to_vec::<f32>()?
            .iter()
            .zip(tail.to_vec::<f32>()?)
            .map(|(x, y)| x + y)
            .collect();
        head.add_(&tail)?;
        assert_eq!(head.to_vec::<f32>()?, want);
        // Converting copy and fill into views.
        let d = Tensor::zeros(&[n, 3], DType::F64);
        d.select(1, 2)?.copy_(&ramp(n))?;
        d.select(1, 0)?.fill_(1.5)?;
        let v = d.to_vec::<f64>()?;
        for i in 0..n {
            assert_eq!(v[3 * i], 1.5);
            assert_eq!(v[3 * i + 1], 0.0);
            assert_eq!(v[3 * i + 2], i as f64 * 0.5 - 3.0);
        }
    }
    // An expanded (self-overlapping) target is refused before any write.
    let e = Tensor::zeros(&[1], DType::F32).expand(&[4])?;
    assert!(e.add_scalar_(1.0).is_err());
    Ok(())
}

#[test]
fn eager_ops_on_small_tensors_and_views() -> Result<()> {
    let x = ramp(12).view(&[3, 4])?;
    let xt = x.t()?;
    let y = xt.exp()?.mul(&xt)?.add_scalar(1.0)?;
    assert_eq!(y.shape(), &[4, 3]);
    let s = x.sum(&[1], false)?.to_vec::<f32>()?;
    assert_eq!(s, vec![-9.0, -1.0, 7.0]);
    let m = x.matmul(&xt)?;
    assert_eq!(m.shape(), &[3, 3]);
    let sm = x.softmax(1)?.sum(&[1], false)?.to_vec::<f32>()?;
    assert!(sm.iter().all(|v| (v - 1.0).abs() < 1e-6));
    let w = Tensor::where_cond(&x.gt(&Tensor::scalar(0f32))?, &x, &x.neg()?)?;
    assert_eq!(w.to_vec::<f32>()?, x.abs()?.to_vec::<f32>()?);
    let h = x
        .to_dtype(DType::F16)?
        .to_dtype(DType::BF16)?
        .to_dtype(DType::F32)?;
    assert_eq!(h.shape(), &[3, 4]);
    let c = Tensor::cat(&[x.clone(), x.clone()], 0)?;
    assert_eq!(c.shape(), &[6, 4]);
    Ok(())
}

#[test]
fn the_allocator_recycles_and_frees_buffers() -> Result<()> {
    let n = 1 << 16; // 256 KiB of f32: cached on free
    let before = allocator::stats();
    for _ in 0..4 {
        let t = Tensor::ones(&[n], DType::F32).add_scalar(1.0)?;
        assert_eq!(t.to_vec::<f32>()?[n - 1], 2.0);
    }
    let after = allocator::stats();
    assert!(after.0 + after.1 > before.0 + before.1);
    allocator::empty_cache();
    Ok(())
}

#[test]
fn a_few_compiled_graphs() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        let y = xs[0].mul(&xs[1])?.add_scalar(1.0)?.exp()?;
        Ok(vec![y.sum(&[1], false)?, y.softmax(1)?])
    });
    for n in [1usize, 3, 17] {
        let x = ramp(2 * n).view(&[2, n])?;
        let w = ramp(n).neg()?;
        let got = f.call(&[x.clone(), w.clone()])?;
        let y = x.mul(&w)?.add_scalar(1.0)?.exp()?;
        assert!(got[0].allclose(&y.sum(&[1], false)?, 1e-5, 1e-6)?);
        assert!(got[1].allclose(&y.softmax(1)?, 1e-5, 1e-6)?);
    }
    // A mutation barrier between regions, on a strided input.
    let g = compile(|xs: &[Tensor]| {
        let t = xs[0].mul_scalar(2.0)?;
        t.add_scalar_(1.0)?;
        Ok(vec![t.relu()?])
    });
    let x = ramp(12).view(&[3, 4])?.t()?;
    let got = g.call(std::slice::from_ref(&x))?;
    let want = x.mul_scalar(2.0)?.add_scalar(1.0)?.relu()?;
    assert!(got[0].equal(&want)?);
    // A whole-tensor sum of products and row means, with rows of every tail length and
    // longer than a summation block (assembled at full width where the CPU allows).
    let h = compile(|xs: &[Tensor]| {
        Ok(vec![
            xs[0].mul(&xs[1])?.sum_all()?,
            xs[0].mean(&[1], false)?,
        ])
    });
    for n in [1usize, 5, 37, 4133] {
        let x = ramp(2 * n).mul_scalar(0.01)?.view(&[2, n])?;
        let w = ramp(2 * n).view(&[2, n])?;
        let got = h.call(&[x.clone(), w.clone()])?;
        let tol = 1e-6 * n as f64;
        assert!(got[0].allclose(&x.mul(&w)?.sum_all()?, tol, tol)?);
        assert!(got[1].allclose(&x.mean(&[1], false)?, tol, tol)?);
    }
    Ok(())
}

/// CUDA tensors on an emulated device (device memory is host memory, so memcheck sees every
/// copy): round trips of views whose span starts and ends inside the storage, reused allocator
/// blocks, device-to-device copies, and a pointwise region launched as its emulated CUDA kernel.
#[test]
fn cuda_tensors_on_an_emulated_device() -> Result<()> {
    use tensorplay::{Device, cuda};
    cuda::use_emulated_devices(1)?;
    let gpu = Device::Cuda(0);
    let x = Tensor::from_vec((0..60).map(|i| i as f32).collect(), &[3, 4, 5])?;
    let g = x.to_device(gpu)?;
    for (view, host) in [
        (g.narrow(2, 1, 3)?, x.narrow(2, 1, 3)?),
        (
            g.transpose(0, 2)?.select(0, 4)?,
            x.transpose(0, 2)?.select(0, 4)?,
        ),
        (
            g.narrow(0, 2, 1)?.narrow(1, 3, 1)?,
            x.narrow(0, 2, 1)?.narrow(1, 3, 1)?,
        ),
    ] {
        assert_eq!(view.to_vec::<f32>()?, host.to_vec::<f32>()?);
    }
    for n in [0usize, 1, 100, 300] {
        let z = Tensor::zeros_on(&[n], DType::Bool, gpu)?;
        assert!(z.to_vec::<bool>()?.iter().all(|&b| !b));
        let c = ramp(n).to_device(gpu)?.clone_on_device()?;
        assert_eq!(c.to_vec::<f32>()?, ramp(n).to_vec::<f32>()?);
    }
    if tensorplay::compiler::codegen::cuda::emulate::compiler_available() {
        let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[0])?.add_scalar(1.0)?]));
        let y = f.call(&[ramp(37).to_device(gpu)?])?;
        let want: Vec<f32> = ramp(37)
            .to_vec::<f32>()?
            .iter()
            .map(|v| v * v + 1.0)
            .collect();
        assert_eq!(y[0].to_vec::<f32>()?, want);
    }
    drop(g);
    cuda::empty_cache()?;
    Ok(())
}
