//! The shape of a `register_vmap` rule (defined beside the vmap layer, in `tensorplay-core`):
//! [`VmapInfo`] carries the batch size and the randomness mode of the enclosing `vmap`.
//!
//! ```
//! use tensorplay_runtime::library::{self, VmapInfo};
//! use tensorplay_runtime::vmap::vmap;
//! use tensorplay_runtime::{Error, Result, Tensor, Value};
//! // Sum of each sample: the rule sees the whole batch and its size.
//! let total = library::custom_op("docs_vmapinfo::total")
//!     .arg_names(&["x"])
//!     .build(|x: &Tensor| -> Result<Tensor> { x.sum_all() })?;
//! total.register_vmap(|info: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
//!     let (Value::Tensor(x), Some(0)) = (&args[0], in_dims[0]) else {
//!         return Err(Error::unsupported("total's vmap rule", "a tensor batched at dim 0"));
//!     };
//!     let rows = x.reshape_infer(&[info.batch_size as i64, -1])?;
//!     Ok((vec![rows.sum(&[1], false)?], vec![Some(0)]))
//! })?;
//! let per_row = vmap(|xs: &[Tensor]| Ok(vec![total.call(&xs[0])?]), vec![Some(0)], vec![0]);
//! let y = per_row(&[Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?])?;
//! assert_eq!(y[0].to_vec::<f32>()?, vec![3.0, 7.0]);
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

pub use tensorplay_core::vmap::custom_rule::{VmapInfo, VmapRule};
