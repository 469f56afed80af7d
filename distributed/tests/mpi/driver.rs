//! The driver: launches the rank programs with `mpirun` and checks their exit and output.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn mpirun(np: usize, scenario: &str, extra_env: &[(&str, &str)]) -> Option<(Output, Duration)> {
    let exe = std::env::current_exe().expect("the test's own path");
    let mut cmd = Command::new("mpirun");
    cmd.args(["-np", &np.to_string(), "--oversubscribe"])
        .arg(exe)
        .env("TP_DIST_SCENARIO", scenario)
        // Root in CI containers; loopback only.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("TP_NUM_THREADS", "1");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    match cmd.output() {
        Ok(out) => Some((out, t0.elapsed())),
        Err(e) => {
            eprintln!("cannot start mpirun: {e}");
            None
        }
    }
}

fn show(what: &str, out: &Output) {
    println!("---- {what}: {}", out.status);
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs every scenario; returns the exit code.
pub fn run() -> i32 {
    if Command::new("mpirun").arg("--version").output().is_err() {
        if std::env::var_os("TP_REQUIRE_MPI").is_some() {
            eprintln!("mpirun not found and TP_REQUIRE_MPI is set: failing");
            return 1;
        }
        println!("mpirun not found: the multi-process tests are skipped");
        return 0;
    }
    let mut failed = Vec::new();
    for np in [2, 3] {
        let Some((out, _)) = mpirun(np, "checks", &[("TP_CUDA_EMULATE", "1")]) else {
            return 1;
        };
        show(&format!("checks on {np} ranks"), &out);
        let passes = String::from_utf8_lossy(&out.stdout)
            .matches("all checks passed")
            .count();
        if !out.status.success() || passes != np {
            failed.push(format!(
                "checks on {np} ranks ({passes} of {np} ranks passed)"
            ));
        }
    }
    // A rank that never reaches a collective: the other times out with a message naming itself
    // and the collective, and the job ends instead of hanging.
    let Some((out, took)) = mpirun(2, "timeout", &[("TP_DIST_TIMEOUT", "3")]) else {
        return 1;
    };
    show("timeout", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success()
        || !err.contains("all_reduce on rank 0")
        || !err.contains("TP_DIST_TIMEOUT")
        || took > Duration::from_secs(60)
    {
        failed.push(format!("timeout scenario (took {took:?})"));
    }
    // A rank that fails: the job ends promptly (mpirun ends the others), no hang.
    let Some((out, took)) = mpirun(2, "error", &[]) else {
        return 1;
    };
    show("error", &out);
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success()
        || !err.contains("rank 1 fails on purpose")
        || took > Duration::from_secs(60)
    {
        failed.push(format!("error scenario (took {took:?})"));
    }
    if failed.is_empty() {
        println!("distributed tests: all scenarios passed");
        0
    } else {
        eprintln!("distributed tests FAILED: {}", failed.join("; "));
        1
    }
}
