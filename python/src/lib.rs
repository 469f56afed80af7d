//! `tensorplay._C`: the extension module behind the `tensorplay` Python package — tensors, the
//! generic op call, autograd, vmap, compile, `tensorplay.library`'s registrations and
//! `tensorplay.optim`'s optimizers and schedulers over the Rust runtime. The pure-Python package
//! (`python/tensorplay/`) adds signatures, decorators and the op methods generated from the op
//! table.

mod call;
mod callbacks;
mod checkpoint;
mod compile;
mod convert;
mod error;
mod factory;
mod inflight;
mod library;
mod methods;
mod nn;
mod nn_args;
mod nn_cnn;
mod nn_resize;
mod operators;
mod optim;
mod tensor;

use pyo3::prelude::*;

/// The module: classes, then functions.
#[pymodule(name = "_C", gil_used = true)]
fn tensorplay_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<convert::PyDType>()?;
    m.add_class::<convert::PyDevice>()?;
    m.add_class::<call::GradMode>()?;
    m.add_class::<call::Autocast>()?;
    m.add_class::<call::CustomOpCall>()?;
    m.add_class::<compile::Compiled>()?;
    m.add_class::<library::PyLibrary>()?;
    m.add_class::<library::KernelEnabled>()?;
    m.add_class::<library::PyKernel>()?;
    m.add_class::<library::PyFakeCtx>()?;
    m.add_class::<optim::PyOptimizer>()?;
    m.add_class::<optim::PyScheduler>()?;
    for d in [
        tensorplay::DType::F32,
        tensorplay::DType::F64,
        tensorplay::DType::F16,
        tensorplay::DType::BF16,
        tensorplay::DType::I32,
        tensorplay::DType::I64,
        tensorplay::DType::Bool,
    ] {
        m.add(convert::dtype_name(d), convert::PyDType { dtype: d })?;
    }
    m.add_function(wrap_pyfunction!(tensor::_from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::_from_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(factory::tensor, m)?)?;
    m.add_function(wrap_pyfunction!(factory::zeros, m)?)?;
    m.add_function(wrap_pyfunction!(factory::ones, m)?)?;
    m.add_function(wrap_pyfunction!(factory::empty, m)?)?;
    m.add_function(wrap_pyfunction!(factory::full, m)?)?;
    m.add_function(wrap_pyfunction!(factory::arange, m)?)?;
    m.add_function(wrap_pyfunction!(factory::randn, m)?)?;
    m.add_function(wrap_pyfunction!(factory::rand, m)?)?;
    m.add_function(wrap_pyfunction!(factory::manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(factory::_like, m)?)?;
    m.add_function(wrap_pyfunction!(call::_call, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::save_file, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::load_file, m)?)?;
    m.add_function(wrap_pyfunction!(call::_op_table, m)?)?;
    m.add_function(wrap_pyfunction!(call::_schema, m)?)?;
    m.add_function(wrap_pyfunction!(call::is_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(call::grad, m)?)?;
    m.add_function(wrap_pyfunction!(call::_vmap, m)?)?;
    m.add_function(wrap_pyfunction!(library::_custom_op, m)?)?;
    m.add_function(wrap_pyfunction!(library::_define, m)?)?;
    m.add_function(wrap_pyfunction!(library::_impl, m)?)?;
    m.add_function(wrap_pyfunction!(library::_register_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(library::_register_fake, m)?)?;
    m.add_function(wrap_pyfunction!(library::_register_autograd, m)?)?;
    m.add_function(wrap_pyfunction!(library::_register_autocast, m)?)?;
    m.add_function(wrap_pyfunction!(library::_register_vmap, m)?)?;
    m.add_function(wrap_pyfunction!(library::_set_kernel_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(library::_get_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(library::_opcheck, m)?)?;
    m.add_function(wrap_pyfunction!(library::_get_ctx, m)?)?;
    let nn_mod = PyModule::new(m.py(), "_nn")?;
    nn::register(&nn_mod)?;
    m.add_submodule(&nn_mod)?;
    Ok(())
}
