//! The multi-process tests. Run by `cargo test -p tensorplay-distributed --features mpi`: the
//! driver (this program started without `mpirun`) relaunches itself as `mpirun -np 2` and
//! `-np 3` and then as the failure scenarios, and fails when any rank fails. Under `mpirun`
//! every rank runs every check; a check compares with a reference each rank computes alone
//! (inputs are functions of the rank).

mod checks;
mod ddp;
mod driver;

fn main() {
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some()
    {
        let scenario = std::env::var("TP_DIST_SCENARIO").unwrap_or_default();
        std::process::exit(checks::run_rank(&scenario));
    }
    std::process::exit(driver::run());
}
