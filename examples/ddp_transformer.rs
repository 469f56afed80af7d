//! The transformer of `transformer.rs` (the `Gpt` module of `common/gpt.rs`) trained
//! data-parallel: every rank takes its share of each step's batch, `DistributedDataParallel`
//! averages the gradients during `backward()` (in buckets, overlapping the rest of the pass),
//! and every rank's `Adam` makes the same update.
//! Prints each rank's loss and the average over ranks every few steps, and checks at the end
//! that the replicas' parameters are still identical.
//!
//! `mpirun -np 2 cargo run --release --features distributed --example ddp_transformer`
//! (`STEPS=N` to change the number of steps; `EAGER=1` to train without `compile`). As root,
//! OpenMPI also wants `--allow-run-as-root`.

use std::time::{Duration, Instant};

use tensorplay::Result;
use tensorplay::distributed::{self as dist, Backend, DistributedDataParallel, ReduceOp};
use tensorplay::nn::Module;

// The checkpoint helpers of `Trainer` are `transformer.rs`'s; this example does not save.
#[allow(dead_code)]
#[path = "common/gpt.rs"]
mod gpt;

use gpt::{Gpt, Trainer, batch, setup, steps_from_env};

/// Each rank's share of a step's batch.
const PER_RANK: usize = 8;

fn main() -> Result<()> {
    dist::init_process_group(Backend::Mpi)?;
    let (rank, size) = (dist::rank()?, dist::world_size()?);
    let (data, c) = setup();
    let steps = steps_from_env(200);
    let compiled = std::env::var_os("EAGER").is_none();
    if rank == 0 {
        println!(
            "data-parallel transformer on {size} ranks: batch {PER_RANK} per rank ({} per step), \
             {steps} steps, {}",
            PER_RANK * size,
            if compiled { "compiled" } else { "eager" }
        );
    }
    let model = Gpt::new(c, 0)?;
    let ps = model.parameters();
    // Broadcasts rank 0's parameters and hooks the gradient averaging into backward().
    let ddp = DistributedDataParallel::new(ps.clone(), None)?;
    if rank == 0 {
        println!(
            "{} parameters in {} gradient bucket(s)",
            ddp.parameters().len(),
            ddp.num_buckets()
        );
    }
    // Adam over the model's parameters, and the loss compiled with them as graph inputs.
    let mut trainer = Trainer::new(model, compiled)?;
    let mut times: Vec<Duration> = Vec::new();
    let mut first = None;
    let mut last = 0.0;
    for step in 0..steps {
        // The step's global batch, then this rank's rows of it.
        let (ids, targets) = batch(&data, step, PER_RANK * size, c.context)?;
        let start = (rank * PER_RANK) as i64;
        let t0 = Instant::now();
        // The gradients are averaged over the ranks when backward() returns, before Adam.
        let l = trainer.step(
            ids.narrow(0, start, PER_RANK)?.contiguous()?,
            targets.narrow(0, start, PER_RANK)?.contiguous()?,
        )?;
        times.push(t0.elapsed());
        if step % (steps / 10).max(1) == 0 || step == steps - 1 {
            let mine = l.item::<f32>()?;
            let avg = l.detach().clone_tensor()?;
            dist::all_reduce(&avg, ReduceOp::Avg, None)?;
            let avg = avg.item::<f32>()?;
            println!("rank {rank} step {step:>4}: loss {mine:.4} (average over ranks {avg:.4})");
            first.get_or_insert(avg);
            last = avg;
        }
    }
    // The replicas must still be identical: compare every parameter with rank 0's.
    let mut worst = 0.0f32;
    for p in &ps {
        let theirs = p.detach().clone_tensor()?;
        dist::broadcast(&theirs, 0, None)?;
        worst = worst.max(p.detach().sub(&theirs)?.abs()?.max_all()?.item::<f32>()?);
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "rank {rank}: median step {:.2} ms; largest parameter difference to rank 0: {worst:e}",
        median.as_secs_f64() * 1e3
    );
    dist::barrier(None)?;
    dist::destroy_process_group()?;
    assert!(worst == 0.0, "replicas diverged");
    let first = first.unwrap_or(last);
    assert!(
        last < 0.75 * first,
        "the average loss goes down ({first} -> {last})"
    );
    Ok(())
}
