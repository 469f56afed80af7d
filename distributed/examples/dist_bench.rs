//! Distributed benchmarks (PERFORMANCE.md, "Distributed"), run under `mpirun` by
//! `scripts/bench/distributed.sh`:
//!
//! - `dist_bench allreduce`: `all_reduce` (sum, f32, in place) at 1 KiB … 256 MiB; per size the
//!   median time of the rank-0 view and the bus bandwidth `2 (n - 1) / n × bytes / time`
//!   (NCCL-tests' definition), printed as `allreduce tensorplay bytes=… us=… busbw_GBps=…` —
//!   the same lines `scripts/bench/allreduce_mpi.c` prints for `MPI_Allreduce` called from C.
//! - `dist_bench ddp`: the median step (forward, backward with DDP's bucketed all-reduce, Adam)
//!   of `examples/train_mlp`'s model at hidden 512 with batch 64 per rank, eager and compiled,
//!   with DDP (`ddp`) and without (`local`: the ranks train independently, so the difference is
//!   what communication adds on top of the ranks sharing the machine): run it on 1 and 2 ranks.

use std::time::{Duration, Instant};

use tensorplay_compiler::compile;
use tensorplay_compiler::optim::Adam;
use tensorplay_distributed::{self as dist, Backend, DistributedDataParallel, ReduceOp};
use tensorplay_runtime::{DType, Result, Tensor};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The slowest rank's time of each repetition (what the job waits for), medianed.
fn timed(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        dist::barrier(None)?;
        let t0 = Instant::now();
        f()?;
        let t = Tensor::from_vec(vec![t0.elapsed().as_secs_f64()], &[1])?;
        dist::all_reduce(&t, ReduceOp::Max, None)?;
        times.push(Duration::from_secs_f64(t.item::<f64>()?));
    }
    Ok(median(times))
}

fn allreduce(rank: usize, size: usize) -> Result<()> {
    let mut bytes = 1024usize;
    while bytes <= 256 << 20 {
        let t = Tensor::ones(&[bytes / 4], DType::F32);
        let reps = ((64 << 20) / bytes).clamp(5, 200);
        // Warm-up: first touch of the pages and MPI's connection set-up.
        for _ in 0..3 {
            dist::all_reduce(&t, ReduceOp::Sum, None)?;
        }
        let med = timed(reps, || dist::all_reduce(&t, ReduceOp::Sum, None))?;
        if rank == 0 {
            let bus = 2.0 * (size - 1) as f64 / size as f64 * bytes as f64 / med.as_secs_f64();
            println!(
                "allreduce tensorplay bytes={bytes} us={:.1} busbw_GBps={:.3}",
                med.as_secs_f64() * 1e6,
                bus / 1e9
            );
        }
        bytes *= 4;
    }
    Ok(())
}

fn mlp_loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y, w1, b1, w2, b2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let h = x.matmul(w1)?.add(b1)?.gelu("tanh")?;
    let d = h.matmul(w2)?.add(b2)?.sub(y)?;
    Ok(vec![d.mul(&d)?.mean_all()?])
}

fn ddp(rank: usize, size: usize) -> Result<()> {
    let (batch, dim, hidden, out) = (64, 512, 512, 64);
    let p = |shape: &[usize], seed: u64| -> Result<Tensor> {
        Tensor::randn_seeded(shape, DType::F32, seed)?
            .mul_scalar(0.05)?
            .requires_grad_(true)
    };
    for (compiled, with_ddp) in [(false, false), (false, true), (true, false), (true, true)] {
        let ps = vec![
            p(&[dim, hidden], 1)?,
            p(&[hidden], 2)?,
            p(&[hidden, out], 3)?,
            p(&[out], 4)?,
        ];
        let _ddp = with_ddp
            .then(|| DistributedDataParallel::new(ps.clone(), None))
            .transpose()?;
        let mut opt = Adam::new(ps.clone(), 1e-3, (0.9, 0.999), 1e-8)?;
        let f = compile(mlp_loss);
        let x = Tensor::randn_seeded(&[batch, dim], DType::F32, 10 + rank as u64)?;
        let y = Tensor::randn_seeded(&[batch, out], DType::F32, 20 + rank as u64)?;
        let mut step = || -> Result<()> {
            let mut ins = vec![x.clone(), y.clone()];
            ins.extend(ps.iter().cloned());
            let l = if compiled {
                f.call(&ins)?
            } else {
                mlp_loss(&ins)?
            }
            .swap_remove(0);
            l.backward()?;
            if compiled {
                opt.step()?
            } else {
                opt.step_eager()?
            }
            opt.zero_grad();
            Ok(())
        };
        for _ in 0..5 {
            step()?;
        }
        let med = timed(50, &mut step)?;
        if rank == 0 {
            println!(
                "{} {} ranks={size} step_ms={:.3}",
                if with_ddp { "ddp" } else { "local" },
                if compiled { "compiled" } else { "eager" },
                med.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    dist::init_process_group(Backend::Mpi)?;
    let (rank, size) = (dist::rank()?, dist::world_size()?);
    match std::env::args().nth(1).as_deref() {
        Some("allreduce") => allreduce(rank, size)?,
        Some("ddp") => ddp(rank, size)?,
        other => eprintln!("usage: dist_bench allreduce|ddp (got {other:?})"),
    }
    dist::destroy_process_group()
}
