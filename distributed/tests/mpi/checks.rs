//! What every rank checks.

use tensorplay_distributed::{self as dist, Backend, ReduceOp, functional};
use tensorplay_runtime::{DType, Device, Result, Tensor};

type Check = fn(usize, usize) -> Result<()>;

/// Runs `scenario` on this rank; returns the exit code.
pub fn run_rank(scenario: &str) -> i32 {
    if let Err(e) = dist::init_process_group(Backend::Mpi) {
        eprintln!("init_process_group: {e}");
        return 1;
    }
    let (rank, size) = (dist::rank().unwrap(), dist::world_size().unwrap());
    let code = match scenario {
        "timeout" => timeout(rank),
        "error" => error(rank),
        _ => checks(rank, size),
    };
    if code == 0 {
        dist::destroy_process_group().expect("destroy_process_group");
    }
    code
}

fn checks(rank: usize, size: usize) -> i32 {
    let all: &[(&str, Check)] = &[
        ("all_reduce, every dtype and op", all_reduce_every_dtype),
        ("all_reduce on a strided view", all_reduce_strided),
        ("all_reduce async", all_reduce_async),
        ("collectives on (emulated) CUDA tensors", cuda_tensors),
        ("broadcast", broadcast),
        ("all_gather", all_gather),
        ("reduce_scatter", reduce_scatter),
        ("reduce", reduce),
        ("gather and scatter", gather_scatter),
        ("send and recv", send_recv),
        ("sub-groups", sub_groups),
        ("bad arguments", bad_arguments),
        (
            "functional collectives and their gradients",
            functional_grads,
        ),
        (
            "compiled function with an all_reduce",
            crate::ddp::compiled_all_reduce,
        ),
        (
            "DDP equals single-process training",
            crate::ddp::ddp_matches_single_process,
        ),
        ("DDP no_sync accumulation", crate::ddp::ddp_no_sync),
        (
            "DDP after a failed backward",
            crate::ddp::ddp_recovers_from_a_failed_backward,
        ),
    ];
    let mut failures = 0;
    for (name, check) in all {
        // Every rank runs every check in the same order; a failing check's collectives still
        // match (checks compare after communicating).
        match check(rank, size) {
            Ok(()) => println!("rank {rank}: ok   {name}"),
            Err(e) => {
                failures += 1;
                println!("rank {rank}: FAIL {name}: {e}");
            }
        }
    }
    if failures == 0 {
        println!("rank {rank}: all checks passed");
        0
    } else {
        1
    }
}

fn timeout(rank: usize) -> i32 {
    if rank == 1 {
        // Never reaches the collective.
        std::thread::sleep(std::time::Duration::from_secs(120));
        return 0;
    }
    let t = Tensor::ones(&[4], DType::F32);
    let _ = dist::all_reduce(&t, ReduceOp::Sum, None);
    eprintln!("rank 0 returned from an all_reduce nobody else joined");
    0
}

fn error(rank: usize) -> i32 {
    if rank == 1 {
        eprintln!("rank 1 fails on purpose before the all_reduce");
        return 3;
    }
    let t = Tensor::ones(&[4], DType::F32);
    let _ = dist::all_reduce(&t, ReduceOp::Sum, None);
    0
}

pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(tensorplay_runtime::Error::unsupported("check", msg()))
    }
}

/// Rank `r`'s input: `[r + 1, r + 2, ...]` scaled, as f64 (exact in every dtype used).
fn values(r: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| ((r + 1) * (1 + i % 3)) as f64).collect()
}

fn tensor_of(v: &[f64], dtype: DType) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), &[v.len()])?.to_dtype(dtype)
}

fn expect_close(got: &Tensor, want: &[f64], what: &str) -> Result<()> {
    let g = got.to_dtype(DType::F64)?.to_vec::<f64>()?;
    ensure(
        g.len() == want.len()
            && g.iter()
                .zip(want)
                .all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1.0)),
        || format!("{what}: got {g:?}, want {want:?}"),
    )
}

fn reduce_ref(op: ReduceOp, size: usize, n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let vs = (0..size).map(|r| values(r, n)[i]);
            match (op, dtype) {
                (ReduceOp::Sum | ReduceOp::Max, DType::Bool) => 1.0,
                (ReduceOp::Product | ReduceOp::Min, DType::Bool) => 1.0,
                (ReduceOp::Sum, _) => vs.sum(),
                (ReduceOp::Avg, _) => vs.sum::<f64>() / size as f64,
                (ReduceOp::Max, _) => vs.fold(f64::MIN, f64::max),
                (ReduceOp::Min, _) => vs.fold(f64::MAX, f64::min),
                (ReduceOp::Product, _) => vs.product(),
            }
        })
        .collect()
}

fn all_reduce_every_dtype(rank: usize, size: usize) -> Result<()> {
    for dtype in DType::ALL {
        for op in ReduceOp::ALL {
            if op == ReduceOp::Avg && !dtype.is_float() {
                let t = tensor_of(&values(rank, 5), dtype)?;
                ensure(dist::all_reduce(&t, op, None).is_err(), || {
                    format!("avg on {dtype} must be refused")
                })?;
                continue;
            }
            let t = tensor_of(&values(rank, 5), dtype)?;
            dist::all_reduce(&t, op, None)?;
            expect_close(
                &t,
                &reduce_ref(op, size, 5, dtype),
                &format!("{op} {dtype}"),
            )?;
        }
    }
    Ok(())
}

fn all_reduce_strided(rank: usize, size: usize) -> Result<()> {
    // A transposed view of a [3, 4] tensor: staged contiguous and written back through the view.
    let base = Tensor::from_vec(values(rank, 12), &[3, 4])?.to_dtype(DType::F32)?;
    let view = base.t()?;
    dist::all_reduce(&view, ReduceOp::Sum, None)?;
    let want = reduce_ref(ReduceOp::Sum, size, 12, DType::F32);
    expect_close(&base.reshape(&[12])?, &want, "through a transposed view")?;
    // bf16 under a reduction goes through f32.
    let h = tensor_of(&values(rank, 6), DType::BF16)?;
    dist::all_reduce(&h, ReduceOp::Avg, None)?;
    ensure(h.dtype() == DType::BF16, || "dtype kept".into())?;
    expect_close(
        &h,
        &reduce_ref(ReduceOp::Avg, size, 6, DType::BF16),
        "bf16 avg",
    )
}

fn all_reduce_async(rank: usize, size: usize) -> Result<()> {
    let a = tensor_of(&values(rank, 1000), DType::F32)?;
    let b = tensor_of(&values(rank, 7), DType::F64)?;
    let wa = dist::all_reduce_async(&a, ReduceOp::Sum, None)?;
    let wb = dist::all_reduce_async(&b, ReduceOp::Max, None)?;
    wb.wait()?;
    wa.wait()?;
    expect_close(
        &a,
        &reduce_ref(ReduceOp::Sum, size, 1000, DType::F32),
        "async a",
    )?;
    expect_close(
        &b,
        &reduce_ref(ReduceOp::Max, size, 7, DType::F64),
        "async b",
    )
}

/// CUDA tensors go through host staging (the driver runs the ranks with `TP_CUDA_EMULATE=1`).
fn cuda_tensors(rank: usize, size: usize) -> Result<()> {
    let dev = Device::Cuda(0);
    let t = tensor_of(&values(rank, 6), DType::F32)?.to_device(dev)?;
    dist::all_reduce(&t, ReduceOp::Sum, None)?;
    ensure(t.device() == dev, || "stays on the device".into())?;
    expect_close(
        &t.to_device(Device::Cpu)?,
        &reduce_ref(ReduceOp::Sum, size, 6, DType::F32),
        "cuda all_reduce",
    )?;
    let b = tensor_of(&values(rank, 4), DType::F16)?.to_device(dev)?;
    dist::broadcast(&b, 0, None)?;
    expect_close(&b.to_device(Device::Cpu)?, &values(0, 4), "cuda broadcast")?;
    let out = Tensor::zeros(&[size, 2], DType::F32).to_device(dev)?;
    let x = tensor_of(&values(rank, 2), DType::F32)?.to_device(dev)?;
    dist::all_gather_into_tensor(&out, &x, None)?;
    let want: Vec<f64> = (0..size).flat_map(|r| values(r, 2)).collect();
    expect_close(
        &out.to_device(Device::Cpu)?.reshape(&[2 * size])?,
        &want,
        "cuda all_gather",
    )
}

fn broadcast(rank: usize, size: usize) -> Result<()> {
    let src = size - 1;
    for dtype in DType::ALL {
        let t = tensor_of(&values(rank, 4), dtype)?;
        dist::broadcast(&t, src, None)?;
        expect_close(
            &t,
            &tensor_of(&values(src, 4), dtype)?
                .to_dtype(DType::F64)?
                .to_vec()?,
            &format!("broadcast {dtype}"),
        )?;
    }
    Ok(())
}

fn all_gather(rank: usize, size: usize) -> Result<()> {
    for dtype in [DType::F32, DType::I64, DType::BF16, DType::Bool] {
        let x = tensor_of(&values(rank, 3), dtype)?;
        let outs: Vec<Tensor> = (0..size).map(|_| Tensor::zeros(&[3], dtype)).collect();
        dist::all_gather(&outs, &x, None)?;
        for (r, o) in outs.iter().enumerate() {
            let want = tensor_of(&values(r, 3), dtype)?
                .to_dtype(DType::F64)?
                .to_vec()?;
            expect_close(o, &want, &format!("all_gather {dtype} from {r}"))?;
        }
        let into = Tensor::zeros(&[size, 3], dtype);
        dist::all_gather_into_tensor(&into, &x, None)?;
        let want: Vec<f64> = (0..size)
            .flat_map(|r| {
                tensor_of(&values(r, 3), dtype)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec()
                    .unwrap()
            })
            .collect();
        expect_close(&into.reshape(&[size * 3])?, &want, "all_gather_into_tensor")?;
    }
    Ok(())
}

fn reduce_scatter(rank: usize, size: usize) -> Result<()> {
    // Rank r contributes values(r, 2 * size); rank r keeps block r of the sum.
    let n = 2 * size;
    let full = reduce_ref(ReduceOp::Sum, size, n, DType::F32);
    let mine = &full[2 * rank..2 * rank + 2];
    let input = tensor_of(&values(rank, n), DType::F32)?;
    let out = Tensor::zeros(&[2], DType::F32);
    dist::reduce_scatter_tensor(&out, &input, ReduceOp::Sum, None)?;
    expect_close(&out, mine, "reduce_scatter_tensor")?;
    let list = input.split(2, 0)?;
    let out = Tensor::zeros(&[2], DType::F16);
    let list16: Vec<Tensor> = list
        .iter()
        .map(|t| t.to_dtype(DType::F16))
        .collect::<Result<_>>()?;
    dist::reduce_scatter(&out, &list16, ReduceOp::Sum, None)?;
    expect_close(&out, mine, "reduce_scatter f16 list")
}

fn reduce(rank: usize, size: usize) -> Result<()> {
    let dst = size / 2;
    let t = tensor_of(&values(rank, 4), DType::I32)?;
    dist::reduce(&t, dst, ReduceOp::Sum, None)?;
    if rank == dst {
        expect_close(
            &t,
            &reduce_ref(ReduceOp::Sum, size, 4, DType::I32),
            "reduce at dst",
        )
    } else {
        expect_close(&t, &values(rank, 4), "reduce leaves others alone")
    }
}

fn gather_scatter(rank: usize, size: usize) -> Result<()> {
    let dst = size - 1;
    let x = tensor_of(&values(rank, 2), DType::F64)?;
    let list: Vec<Tensor> = (0..size).map(|_| Tensor::zeros(&[2], DType::F64)).collect();
    let arg = (rank == dst).then_some(&list[..]);
    dist::gather(&x, arg, dst, None)?;
    if rank == dst {
        for (r, t) in list.iter().enumerate() {
            expect_close(t, &values(r, 2), "gather")?;
        }
    }
    // Scatter from rank 0: rank r receives [10 r, 10 r + 1].
    let parts: Vec<Tensor> = (0..size)
        .map(|r| Tensor::from_vec(vec![10.0 * r as f32, 10.0 * r as f32 + 1.0], &[2]))
        .collect::<Result<_>>()?;
    let out = Tensor::zeros(&[2], DType::F32);
    dist::scatter(&out, (rank == 0).then_some(&parts[..]), 0, None)?;
    expect_close(
        &out,
        &[10.0 * rank as f64, 10.0 * rank as f64 + 1.0],
        "scatter",
    )?;
    // The root must pass a list.
    let e = dist::scatter(&out, None, rank, None);
    ensure(e.is_err(), || {
        "scatter without a list on the root must fail".into()
    })
}

fn send_recv(rank: usize, size: usize) -> Result<()> {
    // A ring: even ranks send first, odd ranks receive first (blocking sends cannot deadlock).
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let out = tensor_of(&values(rank, 3), DType::F32)?;
    let inp = Tensor::zeros(&[3], DType::F32);
    let send = dist::isend(&out, next, None, 7)?;
    let got = dist::recv(&inp, prev, None, 7)?;
    send.wait()?;
    ensure(got == prev, || format!("recv returned {got}"))?;
    expect_close(&inp, &values(prev, 3), "ring")?;
    ensure(dist::send(&out, rank, None, 0).is_err(), || {
        "send to self must fail".into()
    })
}

fn sub_groups(rank: usize, size: usize) -> Result<()> {
    let g = dist::new_group(&[0, size - 1])?;
    let t = tensor_of(&values(rank, 2), DType::F32)?;
    dist::all_reduce(&t, ReduceOp::Sum, Some(&g))?;
    if g.rank().is_some() {
        let want: Vec<f64> = (0..2)
            .map(|i| values(0, 2)[i] + values(size - 1, 2)[i])
            .collect();
        expect_close(&t, &want, "sub-group all_reduce")?;
        ensure(g.size() == 2, || format!("group size {}", g.size()))?;
    } else {
        // Not a member: nothing happens.
        expect_close(&t, &values(rank, 2), "non-member unchanged")?;
    }
    ensure(dist::new_group(&[size]).is_err(), || {
        "rank out of range".into()
    })
}

fn bad_arguments(rank: usize, size: usize) -> Result<()> {
    let x = Tensor::zeros(&[3], DType::F32);
    let e = dist::broadcast(&x, size, None).unwrap_err().to_string();
    ensure(e.contains("broadcast") && e.contains("src"), || e.clone())?;
    let outs: Vec<Tensor> = (0..size + 1)
        .map(|_| Tensor::zeros(&[3], DType::F32))
        .collect();
    let e = dist::all_gather(&outs, &x, None).unwrap_err().to_string();
    ensure(
        e.contains("tensor_list") && e.contains(&format!("{size} tensors")),
        || e.clone(),
    )?;
    let wrong = Tensor::zeros(&[size * 3], DType::F64);
    let e = dist::all_gather_into_tensor(&wrong, &x, None)
        .unwrap_err()
        .to_string();
    ensure(e.contains("output") && e.contains("dtype"), || e.clone())?;
    let _ = rank;
    Ok(())
}

fn functional_grads(rank: usize, size: usize) -> Result<()> {
    // y = all_reduce(x * (r + 1)); d sum(y) / dx = size * (r + 1).
    let x = Tensor::ones(&[3], DType::F32).requires_grad_(true)?;
    let y = functional::all_reduce(&x.mul_scalar((rank + 1) as f64)?, ReduceOp::Sum, None)?;
    let total: f64 = (1..=size).map(|r| r as f64).sum();
    expect_close(&y, &[total; 3], "functional all_reduce")?;
    y.sum_all()?.backward()?;
    let g = x.grad().expect("grad");
    expect_close(&g, &[(size * (rank + 1)) as f64; 3], "all_reduce gradient")?;

    // all_gather then a rank-weighted sum; its gradient is a reduce_scatter.
    let x = Tensor::ones(&[2], DType::F64).requires_grad_(true)?;
    let gathered = functional::all_gather_tensor(&x, None)?;
    ensure(gathered.shape() == [2 * size], || {
        format!("{:?}", gathered.shape())
    })?;
    let w: Vec<f64> = (0..2 * size).map(|i| i as f64).collect();
    let w = Tensor::from_vec(w, &[2 * size])?;
    gathered.mul(&w)?.sum_all()?.backward()?;
    // Every rank's output gradient is w; rank r's input gets block r of sum over ranks = size * w.
    let want: Vec<f64> = (0..2).map(|i| (size * (2 * rank + i)) as f64).collect();
    expect_close(&x.grad().expect("grad"), &want, "all_gather gradient")?;

    let x = Tensor::ones(&[2 * size], DType::F32).requires_grad_(true)?;
    let part = functional::reduce_scatter_tensor(&x, ReduceOp::Sum, None)?;
    expect_close(&part, &[size as f64; 2], "functional reduce_scatter")?;
    part.sum_all()?.backward()?;
    expect_close(
        &x.grad().expect("grad"),
        &vec![1.0; 2 * size],
        "reduce_scatter gradient",
    )
}
