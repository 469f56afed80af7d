//! Eager built-in ops on CUDA tensors (two host-emulated devices): every call runs a kernel the
//! compiler generated from the op table, and its result must equal the CPU kernel's under the
//! numerics contract. Covers elementwise ops with broadcasting, strided views and 0-d scalars,
//! casts, reductions, softmax, the in-place ops, autograd and autocast on the device, matmul
//! (cuBLAS's calls, run by the emulation with cuBLAS's argument rules), a compiled MLP block on
//! the device, and the errors for what has no CUDA kernel.

use std::sync::Once;

use tensorplay::{DType, Device, Result, Tensor, cuda};

const GPU: Device = Device::Cuda(0);

/// Emulated devices, or `false` (with a message) where no host C++ compiler builds the kernels.
fn devices() -> bool {
    static INIT: Once = Once::new();
    INIT.call_once(|| cuda::use_emulated_devices(2).expect("emulated devices"));
    let ok = tensorplay::compiler::codegen::cuda::emulate::compiler_available();
    if !ok {
        assert!(
            std::env::var("TP_REQUIRE_NVRTC").map_or(true, |v| v != "1"),
            "TP_REQUIRE_NVRTC=1 but there is no host C++ compiler (g++ or $CXX)"
        );
        println!("cuda-emulation: no host C++ compiler (g++ or $CXX): eager CUDA test skipped");
    }
    ok
}

/// `got` (on the device) equals `want` (on the CPU): same shape and dtype, values within `ulp`
/// units of the dtype's precision (NaN where NaN).
fn same(got: &Tensor, want: &Tensor, what: &str) -> Result<()> {
    assert_eq!(got.device(), GPU, "{what}: the result stays on the device");
    assert_eq!(
        (got.shape(), got.dtype()),
        (want.shape(), want.dtype()),
        "{what}"
    );
    let eps = match want.dtype() {
        DType::F32 => 2.0 * f64::from(f32::EPSILON),
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        DType::F64 => 1e-14,
        _ => 0.0,
    };
    let (g, w) = (got.to_vec_f64()?, want.to_vec_f64()?);
    for (i, (p, q)) in g.iter().zip(&w).enumerate() {
        let ok = p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= eps * q.abs().max(1.0);
        assert!(ok, "{what}: element {i}: {p} on the device, {q} on the cpu");
    }
    Ok(())
}

fn gpu(t: &Tensor) -> Result<Tensor> {
    t.to_device(GPU)
}

#[test]
fn elementwise_ops_match_the_cpu() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[6, 9], DType::F32, 7)?;
    let b = Tensor::randn_seeded(&[9], DType::F32, 8)?;
    let (gx, gb) = (gpu(&x)?, gpu(&b)?);
    same(&gx.exp()?, &x.exp()?, "exp")?;
    same(&gx.tanh()?, &x.tanh()?, "tanh")?;
    same(&gx.gelu("tanh")?, &x.gelu("tanh")?, "gelu")?;
    // Broadcasting a bias, and 0-d Rust scalars (held by the graph as kernel arguments).
    same(&gx.add(&gb)?, &x.add(&b)?, "x + b")?;
    same(&gx.mul_scalar(2.5)?, &x.mul_scalar(2.5)?, "x * 2.5")?;
    same(&gx.mul_scalar(-0.5)?, &x.mul_scalar(-0.5)?, "x * -0.5")?;
    same(&gx.pow_scalar(2.0)?, &x.pow_scalar(2.0)?, "x ** 2")?;
    // A transposed view: the kernel reads it with its strides.
    let xt = x.t()?;
    same(&gpu(&x)?.t()?.relu()?, &xt.relu()?, "relu(x.T)")?;
    same(
        &gpu(&x)?.t()?.contiguous()?,
        &xt.contiguous()?,
        "x.T.contiguous()",
    )?;
    // Comparisons give bool tensors; where picks between device tensors.
    let mask = gx.gt(&gb)?;
    same(&mask, &x.gt(&b)?, "x > b")?;
    same(
        &Tensor::where_cond(&mask, &gx, &gb)?,
        &Tensor::where_cond(&x.gt(&b)?, &x, &b)?,
        "where",
    )?;
    // Integer arithmetic and promotion with a float scalar.
    let i = Tensor::arange(-5.0, 7.0, 1.0, DType::I64)?.reshape(&[3, 4])?;
    let gi = gpu(&i)?;
    same(&gi.mul(&gi)?, &i.mul(&i)?, "i64 * i64")?;
    same(&gi.add_scalar(0.5)?, &i.add_scalar(0.5)?, "i64 + 0.5")?;
    Ok(())
}

#[test]
fn casts_and_copies_keep_values() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[5, 8], DType::F32, 3)?.mul_scalar(100.0)?;
    let gx = gpu(&x)?;
    for d in [DType::F16, DType::BF16, DType::F64, DType::I32, DType::Bool] {
        same(&gx.to_dtype(d)?, &x.to_dtype(d)?, &format!("to {d}"))?;
    }
    same(
        &gx.to_dtype(DType::F16)?.to_dtype(DType::F32)?,
        &x.to_dtype(DType::F16)?.to_dtype(DType::F32)?,
        "f16 round trip",
    )?;
    // clone() is new device memory.
    let c = gx.clone_tensor()?;
    c.add_scalar_(1.0)?;
    same(&gx, &x, "the original after its clone changed")?;
    Ok(())
}

#[test]
fn reductions_and_softmax_match_the_cpu() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[7, 33], DType::F32, 11)?;
    let gx = gpu(&x)?;
    same(&gx.sum(&[1], false)?, &x.sum(&[1], false)?, "sum rows")?;
    same(
        &gx.sum(&[0], true)?,
        &x.sum(&[0], true)?,
        "sum cols keepdim",
    )?;
    same(&gx.sum_all()?, &x.sum_all()?, "sum all")?;
    same(&gx.mean(&[1], false)?, &x.mean(&[1], false)?, "mean")?;
    same(&gx.amax(&[1], false)?, &x.amax(&[1], false)?, "amax")?;
    same(&gx.softmax(1)?, &x.softmax(1)?, "softmax")?;
    same(&gx.log_softmax(0)?, &x.log_softmax(0)?, "log_softmax dim 0")?;
    // A reduction over a transposed view.
    same(
        &gpu(&x)?.t()?.sum(&[1], false)?,
        &x.t()?.sum(&[1], false)?,
        "sum of x.T",
    )?;
    // item() reads a device scalar back.
    let total = gx.sum_all()?.item::<f64>()?;
    assert!((total - x.sum_all()?.item::<f64>()?).abs() < 1e-3);
    Ok(())
}

#[test]
fn in_place_ops_write_the_device_tensor() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[4, 6], DType::F32, 5)?;
    let y = Tensor::randn_seeded(&[6], DType::F32, 6)?;
    let (gx, gy) = (gpu(&x)?, gpu(&y)?);
    let v = gx.version();
    let same_storage = gx.add_(&gy)?;
    assert!(same_storage.same(&gx) && gx.version() > v);
    let cpu = x.clone_tensor()?;
    cpu.add_(&y)?;
    same(&gx, &cpu, "add_")?;
    gx.mul_scalar_(3.0)?;
    cpu.mul_scalar_(3.0)?;
    same(&gx, &cpu, "mul_scalar_")?;
    gx.sub_(&gx)?; // reads and writes the same elements
    cpu.sub_(&cpu)?;
    same(&gx, &cpu, "x.sub_(x)")?;
    // fill_ and copy_ into a strided view: only its elements change.
    let col = gx.select(1, 2)?;
    col.fill_(7.5)?;
    let cpu_col = cpu.select(1, 2)?;
    cpu_col.fill_(7.5)?;
    same(&gx, &cpu, "fill_ of a column")?;
    let row = gx.select(0, 1)?;
    row.copy_(&gy)?;
    cpu.select(0, 1)?.copy_(&y)?;
    same(&gx, &cpu, "copy_ into a row")?;
    // copy_ converts dtypes; an overlapping source is read before it is written.
    let h = gpu(&Tensor::zeros(&[6], DType::F16))?;
    h.copy_(&gy)?;
    same(&h, &y.to_dtype(DType::F16)?, "copy_ f32 into f16")?;
    let sq = Tensor::arange(0.0, 9.0, 1.0, DType::F32)?.reshape(&[3, 3])?;
    let gsq = gpu(&sq)?;
    gsq.copy_(&gsq.t()?)?; // a transpose in place
    same(&gsq, &sq.t()?.contiguous()?, "x.copy_(x.T)")?;
    // The in-place checks still apply.
    let ints = gpu(&Tensor::zeros(&[6], DType::I64))?;
    assert!(ints.add_(&gy).is_err(), "f32 result into an i64 tensor");
    assert!(
        ints.div_(&ints).is_err(),
        "true division into an integer tensor"
    );
    Ok(())
}

#[test]
fn autograd_and_autocast_run_on_the_device() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[3, 5], DType::F32, 21)?;
    let w = Tensor::randn_seeded(&[5], DType::F32, 22)?;
    // Leaves on the device: backward's ops run there and the grads land there.
    let gx = gpu(&x)?.requires_grad_(true)?;
    let gw = gpu(&w)?.requires_grad_(true)?;
    gx.mul(&gw)?.tanh()?.sum_all()?.backward()?;
    let cx = x.requires_grad_(true)?;
    let cw = w.requires_grad_(true)?;
    cx.mul(&cw)?.tanh()?.sum_all()?.backward()?;
    same(&gx.grad().expect("grad of x"), &cx.grad().unwrap(), "dx")?;
    same(&gw.grad().expect("grad of w"), &cw.grad().unwrap(), "dw")?;
    // A second backward accumulates into the device grads.
    gx.mul(&gw)?.sum_all()?.backward()?;
    cx.mul(&cw)?.sum_all()?.backward()?;
    same(&gw.grad().unwrap(), &cw.grad().unwrap(), "accumulated dw")?;
    // Autocast on cuda casts the device tensors an op's policy names; a CPU region leaves them.
    let a = gpu(&Tensor::randn_seeded(&[4], DType::F32, 1)?)?;
    {
        let _ac = tensorplay::autocast::autocast("cuda", DType::F16)?;
        let y = a.add(&a)?;
        let cpu = a.to_device(Device::Cpu)?;
        let want = {
            let _ac = tensorplay::autocast::autocast("cpu", DType::F16)?;
            cpu.add(&cpu)?
        };
        same(&y, &want, "add under autocast")?;
    }
    Ok(())
}

#[test]
fn ops_without_a_cuda_kernel_fail_clearly() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let g = gpu(&Tensor::ones(&[4, 4], DType::F32))?;
    let e = g.cumsum(0, None).unwrap_err().to_string();
    assert!(
        e.contains("cumsum") && e.contains("cuda:0") && e.contains("to_device"),
        "{e}"
    );
    // cuBLAS multiplies floating types only.
    let i = gpu(&Tensor::ones(&[4, 4], DType::I64))?;
    let e = i.matmul(&i).unwrap_err().to_string();
    assert!(
        e.contains("matmul") && e.contains("cuda:0") && e.contains("i64"),
        "{e}"
    );
    // Integer division by zero is an error eager reports on the CPU; its integer form has no
    // generated kernel (it runs through the dispatcher), so the device names it.
    let i = gpu(&Tensor::ones(&[4], DType::I64))?;
    let e = i.floor_divide(&i).unwrap_err().to_string();
    assert!(e.contains("cuda:0"), "{e}");
    // Two devices in one call.
    let other = Tensor::ones(&[4, 4], DType::F32).to_device(Device::Cuda(1))?;
    let e = g.add(&other).unwrap_err().to_string();
    assert!(e.contains("cuda:0") && e.contains("cuda:1"), "{e}");
    Ok(())
}

#[test]
fn gradients_flow_back_through_device_copies() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[4, 3], DType::F32, 31)?;
    // A CPU leaf used on the device: its grad comes back to the CPU.
    let leaf = Tensor::randn_seeded(&[4, 3], DType::F32, 31)?.requires_grad_(true)?;
    let on_gpu = leaf.to_device(GPU)?;
    assert!(on_gpu.requires_grad() && on_gpu.device() == GPU);
    on_gpu.exp()?.mul(&on_gpu)?.sum_all()?.backward()?;
    let grad = leaf.grad().expect("the CPU leaf's grad");
    assert_eq!(grad.device(), Device::Cpu);
    let want = x.exp()?.mul(&x.add_scalar(1.0)?)?; // d/dx x·eˣ
    let (g, w) = (grad.to_vec::<f32>()?, want.to_vec::<f32>()?);
    for (p, q) in g.iter().zip(&w) {
        assert!((p - q).abs() <= 1e-5 * q.abs().max(1.0), "{p} vs {q}");
    }
    // A device leaf whose result is finished on the CPU: its grad lands on the device.
    let dev_leaf = gpu(&x)?.requires_grad_(true)?;
    dev_leaf.to_device(Device::Cpu)?.sum_all()?.backward()?;
    let g = dev_leaf.grad().expect("the device leaf's grad");
    assert_eq!(g.device(), GPU);
    assert_eq!(g.to_vec::<f32>()?, vec![1.0; 12]);
    // Without grad mode (or for tensors that need none) the copy is a plain leaf.
    let _off = tensorplay::autograd::no_grad();
    assert!(!leaf.to_device(GPU)?.requires_grad());
    Ok(())
}

/// `got` (on the device) is within `tol` of `want` (on the CPU), relative to the larger of 1 and
/// the value: products sum in a different order than the CPU's gemm.
fn close(got: &Tensor, want: &Tensor, tol: f64, what: &str) -> Result<()> {
    assert_eq!(got.device(), GPU, "{what}: the result stays on the device");
    assert_eq!(
        (got.shape(), got.dtype()),
        (want.shape(), want.dtype()),
        "{what}"
    );
    let (g, w) = (got.to_vec_f64()?, want.to_vec_f64()?);
    for (i, (p, q)) in g.iter().zip(&w).enumerate() {
        assert!(
            (p - q).abs() <= tol * q.abs().max(1.0),
            "{what}: element {i}: {p} on the device, {q} on the cpu"
        );
    }
    Ok(())
}

#[test]
fn matmul_matches_the_cpu_for_every_layout() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let r = |shape: &[usize], seed: u64| Tensor::randn_seeded(shape, DType::F32, seed);
    let check = |x: &Tensor, y: &Tensor, what: &str| -> Result<()> {
        let got = gpu(x)?.matmul(&gpu(y)?)?;
        close(&got, &x.matmul(y)?, 1e-5, what)
    };
    let (a, b) = (r(&[5, 7], 1)?, r(&[7, 3], 2)?);
    check(&a, &b, "[5, 7] @ [7, 3]")?;
    // Transposed views are read in place (cuBLAS's op = T), on either side.
    let (at, bt) = (r(&[7, 5], 3)?.t()?, r(&[3, 7], 4)?.t()?);
    check(&at, &b, "a.T @ b")?;
    check(&a, &bt, "a @ b.T")?;
    check(&at, &bt, "a.T @ b.T")?;
    // Vectors on either side, and a dot product.
    let (v7, v5) = (r(&[7], 5)?, r(&[5], 6)?);
    check(&v7, &b, "[7] @ [7, 3]")?;
    check(&a, &v7, "[5, 7] @ [7]")?;
    check(&v5, &at, "[5] @ a.T")?;
    check(&v7, &v7, "dot")?;
    // Batches: a shared right side (batch stride 0), broadcast batch dims, and a permuted batch
    // whose entries have no common stride (one cuBLAS call per entry).
    check(
        &r(&[2, 3, 4, 5], 7)?,
        &r(&[5, 6], 8)?,
        "[2, 3, 4, 5] @ [5, 6]",
    )?;
    check(
        &r(&[2, 1, 4, 5], 9)?,
        &r(&[3, 5, 6], 10)?,
        "broadcast batch",
    )?;
    let permuted = r(&[3, 2, 4, 5], 11)?.permute(&[1, 0, 2, 3])?;
    check(&permuted, &r(&[2, 3, 5, 2], 12)?, "permuted batch")?;
    // Strides neither cuBLAS reading can take: copied to contiguous first.
    let every_other = r(&[5, 14], 13)?.slice(1, None, None, 2)?;
    check(&every_other, &b, "x[:, ::2] @ b")?;
    let expanded = r(&[1, 7], 14)?.expand(&[5, 7])?;
    check(&expanded, &b, "expanded rows @ b")?;
    // Empty products: k = 0 gives zeros, m = 0 an empty result.
    check(&r(&[3, 0], 15)?, &r(&[0, 4], 16)?, "k = 0")?;
    check(&r(&[0, 7], 17)?, &b, "m = 0")?;
    // Other floating types: f64 exactly as precise, half types accumulate in f32.
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F16, 4e-3), (DType::BF16, 3e-2)] {
        let (x, y) = (a.to_dtype(dtype)?, b.to_dtype(dtype)?);
        let got = gpu(&x)?.matmul(&gpu(&y)?)?;
        close(&got, &x.matmul(&y)?, tol, &format!("{dtype} matmul"))?;
        let (xb, yb) = (
            r(&[2, 3, 4], 18)?.to_dtype(dtype)?,
            r(&[4, 2], 19)?.to_dtype(dtype)?,
        );
        let got = gpu(&xb)?.matmul(&gpu(&yb)?)?;
        close(&got, &xb.matmul(&yb)?, tol, &format!("batched {dtype}"))?;
    }
    Ok(())
}

#[test]
fn matmul_gradients_and_a_compiled_mlp_run_on_the_device() -> Result<()> {
    if !devices() {
        return Ok(());
    }
    let x = Tensor::randn_seeded(&[6, 8], DType::F32, 41)?;
    let w = Tensor::randn_seeded(&[8, 4], DType::F32, 42)?;
    let gx = gpu(&x)?.requires_grad_(true)?;
    let gw = gpu(&w)?.requires_grad_(true)?;
    gx.matmul(&gw)?.tanh()?.sum_all()?.backward()?;
    let cx = x.requires_grad_(true)?;
    let cw = w.requires_grad_(true)?;
    cx.matmul(&cw)?.tanh()?.sum_all()?.backward()?;
    close(&gx.grad().expect("dx"), &cx.grad().unwrap(), 1e-5, "dx")?;
    close(&gw.grad().expect("dw"), &cw.grad().unwrap(), 1e-5, "dw")?;

    // The quickstart's block, compiled, on device inputs: matmuls are barriers that run on the
    // device; the bias/gelu and bias/residual regions are generated CUDA kernels.
    let block = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let h = xs[0].matmul(&xs[1])?.add(&xs[2])?.gelu("tanh")?;
        Ok(vec![h.matmul(&xs[3])?.add(&xs[4])?.add(&xs[0])?])
    };
    let inputs = [
        Tensor::randn_seeded(&[16, 8], DType::F32, 43)?,
        Tensor::randn_seeded(&[8, 32], DType::F32, 44)?.mul_scalar(0.35)?,
        Tensor::randn_seeded(&[32], DType::F32, 45)?,
        Tensor::randn_seeded(&[32, 8], DType::F32, 46)?.mul_scalar(0.18)?,
        Tensor::randn_seeded(&[8], DType::F32, 47)?,
    ];
    let want = block(&inputs)?.remove(0);
    let on_device: Vec<Tensor> = inputs.iter().map(gpu).collect::<Result<_>>()?;
    let compiled = tensorplay::compiler::compile(block);
    let got = compiled.call(&on_device)?.remove(0);
    close(&got, &want, 1e-5, "compiled MLP block on cuda:0")?;
    Ok(())
}
