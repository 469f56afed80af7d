//! Typed kernels against an op's schema, checked when they are registered: the parameter count,
//! and each parameter's type — a kernel, fake kernel or typed autograd setup whose Rust types
//! cannot receive what the schema passes is refused then, naming the parameter, instead of
//! failing at its first call.

use tensorplay_ir::schema::{BaseType, Schema, SchemaType};
use tensorplay_ir::{Error, Result};

/// Checks the schema types of a typed kernel's parameters (`types`, from
/// [`KernelArg::SCHEMA`](super::KernelArg::SCHEMA)) against `schema`. `what` names the
/// registration in the error (`register_fake`, …).
pub(crate) fn check_params(op: &str, what: &str, types: &[&str], schema: &Schema) -> Result<()> {
    if types.len() != schema.params.len() {
        return Err(Error::Registration(format!(
            "`{op}`: {what}: the kernel takes {} parameters but the schema has {} (`{schema}`)",
            types.len(),
            schema.params.len()
        )));
    }
    for (ty, p) in types.iter().zip(&schema.params) {
        let kernel = parse_type(ty)?;
        if !accepts(&kernel, &p.ty) {
            return Err(Error::Registration(format!(
                "`{op}`: {what}: parameter `{}` is {} in the schema, {ty} in the kernel (a \
                 kernel reads it as {})",
                p.name,
                p.ty,
                rust_type(&p.ty)
            )));
        }
    }
    Ok(())
}

fn parse_type(ty: &str) -> Result<SchemaType> {
    let schema = Schema::parse(&format!("k({ty} x) -> ()"))?;
    schema
        .params
        .into_iter()
        .next()
        .map(|p| p.ty)
        .ok_or_else(|| Error::Registration(format!("`{ty}` is not a parameter type")))
}

/// Whether a kernel parameter whose schema type is `kernel` receives every value a parameter
/// declared `declared` can hold. `int` and `SymInt` read the same values, a `float` (or
/// `Scalar`) kernel parameter takes integers too, an optional one takes present values, and a
/// declared type the runtime does not model (`Dimname`) is not checked. A `Tensor` kernel
/// parameter does not take a `Tensor?` (a `None` would reach it).
pub(crate) fn accepts(kernel: &SchemaType, declared: &SchemaType) -> bool {
    use SchemaType::{Base, List, Optional};
    if matches!(declared.base(), BaseType::Other(_)) {
        return true;
    }
    match (kernel, declared) {
        (Base(k), Base(d)) => base_accepts(k, d),
        (Optional(k), Optional(d)) => accepts(k, d),
        (Optional(k), d) => accepts(k, d),
        (List(k, _), List(d, _)) => accepts(k, d),
        _ => false,
    }
}

fn base_accepts(kernel: &BaseType, declared: &BaseType) -> bool {
    use BaseType::{Bool, Float, Int, Scalar, SymInt};
    let int = |b: &BaseType| matches!(b, Int | SymInt);
    kernel == declared
        || (int(kernel) && int(declared))
        || (*kernel == Float && int(declared))
        || (*kernel == Scalar && (int(declared) || matches!(declared, Float | Bool)))
}

/// The Rust parameter type that reads a schema type, for the error's hint.
fn rust_type(ty: &SchemaType) -> String {
    match ty {
        SchemaType::Optional(inner) => match &**inner {
            SchemaType::Base(BaseType::Tensor) => "Option<&Tensor>".into(),
            other => format!("Option<{}>", rust_type(other)),
        },
        SchemaType::List(inner, _) => match &**inner {
            SchemaType::Base(BaseType::Tensor) => "&[Tensor] or Vec<Tensor>".into(),
            other => format!("Vec<{}>", rust_type(other)),
        },
        SchemaType::Base(b) => match b {
            BaseType::Tensor => "&Tensor or Tensor",
            BaseType::Int | BaseType::SymInt => "i64",
            BaseType::Float => "f64",
            BaseType::Bool => "bool",
            BaseType::Str => "String",
            BaseType::Scalar => "Scalar",
            BaseType::ScalarType => "DType",
            BaseType::Device => "Device",
            _ => "a type the runtime does not model",
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(s: &str) -> SchemaType {
        parse_type(s).unwrap()
    }

    #[test]
    fn accepted_pairings() {
        for (kernel, declared) in [
            ("Tensor", "Tensor"),
            ("SymInt", "int"),
            ("SymInt", "SymInt"),
            ("float", "int"),
            ("float", "float"),
            ("Scalar", "float"),
            ("Scalar", "bool"),
            ("Tensor?", "Tensor"),
            ("Tensor?", "Tensor?"),
            ("Tensor?[]", "Tensor[]"),
            ("SymInt[]", "int[2]"),
            ("float[]", "int[]"),
            ("SymInt[]?", "int[]?"),
            ("Tensor", "Dimname"),
        ] {
            assert!(
                accepts(&ty(kernel), &ty(declared)),
                "{kernel} for {declared}"
            );
        }
    }

    #[test]
    fn refused_pairings() {
        for (kernel, declared) in [
            ("Tensor", "float"),
            ("float", "Tensor"),
            ("SymInt", "float"),
            ("Tensor", "Tensor?"),
            ("Tensor", "Tensor[]"),
            ("Tensor[]", "Tensor"),
            ("SymInt[]", "int[]?"),
            ("bool", "int"),
            ("str", "ScalarType"),
        ] {
            assert!(
                !accepts(&ty(kernel), &ty(declared)),
                "{kernel} for {declared}"
            );
        }
    }

    #[test]
    fn the_error_names_the_parameter_and_both_types() {
        let s = Schema::parse("mylib::ws(Tensor x, float weight) -> Tensor").unwrap();
        let e = check_params("mylib::ws", "register_fake", &["Tensor", "Tensor"], &s)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "`mylib::ws`: register_fake: parameter `weight` is float in the schema, Tensor \
                 in the kernel"
            ) && e.contains("f64"),
            "{e}"
        );
        let e = check_params("mylib::ws", "register_kernel", &["Tensor"], &s)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("takes 1 parameters") && e.contains("has 2"),
            "{e}"
        );
        assert!(check_params("mylib::ws", "k", &["Tensor", "float"], &s).is_ok());
    }
}
