//! `tensorplay-macros`: the `#[custom_op]` attribute macro behind `tensorplay::library::custom_op`,
//! and `#[derive(Module)]` behind `tensorplay::nn::Module` (`module`).
//!
//! Use it through the `tensorplay` crate (`#[tensorplay::library::custom_op("ns::name")]`); the
//! generated code names only `::tensorplay::...` paths, so this crate is never a direct dependency.
//! The runnable examples live in the `tensorplay::library` docs.
//!
//! Layout, bottom up: `types` classifies the Rust types a custom op may use, `default` reads
//! `#[default(..)]`, `params` reads the parameters, `attr` the attribute's options, and `expand`
//! generates the module; this file is the entry point.

mod attr;
mod default;
mod expand;
mod module;
mod params;
mod types;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::ItemFn;

use expand::expand;
use params::strip_defaults;

/// Turns a free function into a custom operator, keeping the function callable as written.
///
/// ```text
/// #[tensorplay::library::custom_op("mylib::weighted_sum")]
/// fn weighted_sum(x: &Tensor, weight: &Tensor) -> Result<Tensor> { x.mul(weight)?.sum_all() }
/// ```
///
/// Next to the function it generates a module of the same name with
/// - `pub fn op() -> Result<CustomOpDef>` — defines the operator on first use (once per process;
///   a failed definition returns its error and is retried on the next call);
/// - `pub fn call(<the function's parameters>) -> Result<<its return type>>` — calls the operator
///   through the dispatcher, so autograd, autocast, vmap, fake tensors and capture apply.
///
/// Options: `mutates_args = ["out", ...]` or `mutates_args = "unknown"` (every tensor parameter),
/// and `device_types = ["cpu", "cuda"]` (every device when omitted). A parameter attribute
/// `#[default(...)]` (a literal, a negated number, `None`, `f64::INFINITY`/`NEG_INFINITY`/`NAN`,
/// or a list literal) gives the schema default.
///
/// Must be used on a function at module level (not inside a function body): the generated
/// module reaches the function through `super::`.
#[proc_macro_attribute]
pub fn custom_op(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = TokenStream2::from(attr);
    let item = TokenStream2::from(item);
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                "#[custom_op] applies to a free function (`fn name(x: &Tensor) -> Result<Tensor>`)",
            )
            .to_compile_error();
            return quote!(#e #item).into();
        }
    };
    // Strip the `#[default(..)]` helper attributes first, so the function is emitted cleanly even
    // when expansion fails (one error, not a cascade of unknown-attribute errors).
    let defaults = strip_defaults(&mut func);
    match expand(attr, &func, defaults) {
        Ok(ts) => ts.into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#e #func).into()
        }
    }
}

/// `#[derive(Module)]`: implements `tensorplay::nn::Module` for a struct from its fields.
///
/// Fields by type: `Tensor`, `Option<Tensor>`, `Vec<Tensor>` are parameters (buffers with
/// `#[buffer]`); `training: bool` is the mode flag; scalars, `String`, `char` and
/// `Option`/`Vec`/arrays/tuples of them are ignored, as is any field marked `#[skip]`; every other field must
/// implement `Module` (a compile error at the field otherwise). `#[module(crate = path)]`
/// names the crate holding `Module` (default `::tensorplay::nn`). The runnable examples live in
/// `tensorplay::nn`'s docs.
#[proc_macro_derive(Module, attributes(module, buffer, skip))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    match module::expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}
