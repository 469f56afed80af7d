//! With the `mpi` feature: compiles `src/engine/mpi_consts.c`, which hands Rust the MPI
//! implementation's `MPI_IN_PLACE` (a macro the `mpi` crate's bindings do not carry), against the
//! headers `build-probe-mpi` finds (the same probe the `mpi` crate uses).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "mpi")]
    mpi_consts();
}

#[cfg(feature = "mpi")]
fn mpi_consts() {
    println!("cargo:rerun-if-changed=src/engine/mpi_consts.c");
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => panic!(
            "tensorplay-distributed: the `mpi` feature needs an MPI installation (OpenMPI: \
             `apt-get install libopenmpi-dev openmpi-bin`); the probe said: {errs:?}"
        ),
    };
    let mut build = cc::Build::new();
    build.file("src/engine/mpi_consts.c");
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("tp_mpi_consts");
}
