//! Binding a call's arguments to an operator schema: arity, keyword arguments, defaults and types,
//! each checked with an error that names the op and the parameter.

use tensorplay_ir::schema::{BaseType, DefaultValue, Param, Schema, SchemaType};
use tensorplay_ir::{Error, Result};

use tensorplay_core::value::Value;

/// Converts a schema default into the value a kernel receives.
fn default_value(param: &Param, d: &DefaultValue) -> Value {
    match d {
        DefaultValue::None => Value::None,
        DefaultValue::Int(i) => {
            if matches!(param.ty.non_optional().base(), BaseType::Float) && !param.ty.is_list() {
                Value::Float(*i as f64)
            } else {
                Value::Int(*i)
            }
        }
        DefaultValue::Float(f) => Value::Float(*f),
        DefaultValue::Bool(b) => Value::Bool(*b),
        DefaultValue::Str(s) => Value::Str(s.clone()),
        DefaultValue::IntList(v) => Value::IntList(v.clone()),
        DefaultValue::FloatList(v) => Value::FloatList(v.clone()),
        DefaultValue::BoolList(v) => Value::BoolList(v.clone()),
        DefaultValue::Ident(s) => Value::Str(s.clone()),
    }
}

/// Checks `v` against `ty`, returning the value a kernel should see (ints widen to floats for
/// `float` parameters; a single int fills a fixed-size `int[N]`).
fn coerce(op: &str, param: &Param, ty: &SchemaType, v: Value) -> Result<Value> {
    let mismatch = |v: &Value| Error::argument(op, &param.name, ty.to_string(), v.type_name());
    match ty {
        SchemaType::Optional(inner) => match v {
            Value::None | Value::OptionalTensor(None) => Ok(Value::None),
            Value::OptionalTensor(Some(t)) => coerce(op, param, inner, Value::Tensor(t)),
            other => coerce(op, param, inner, other),
        },
        SchemaType::List(inner, len) => {
            let check_len = |n: usize| -> Result<()> {
                match len {
                    Some(l) if *l != n => Err(Error::argument(
                        op,
                        &param.name,
                        format!("{l} elements"),
                        format!("{n} elements"),
                    )),
                    _ => Ok(()),
                }
            };
            match (inner.base(), v) {
                (BaseType::Tensor, Value::OptionalTensorList(ts)) if inner.is_optional() => {
                    check_len(ts.len())?;
                    Ok(Value::OptionalTensorList(ts))
                }
                (BaseType::Tensor, Value::TensorList(ts)) if inner.is_optional() => {
                    check_len(ts.len())?;
                    Ok(Value::OptionalTensorList(
                        ts.into_iter().map(Some).collect(),
                    ))
                }
                (BaseType::Tensor, Value::TensorList(ts)) => {
                    check_len(ts.len())?;
                    Ok(Value::TensorList(ts))
                }
                (BaseType::Int | BaseType::SymInt, Value::IntList(xs)) => {
                    check_len(xs.len())?;
                    Ok(Value::IntList(xs))
                }
                (BaseType::Int | BaseType::SymInt, Value::Int(x)) if len.is_some() => {
                    Ok(Value::IntList(vec![x; len.unwrap_or(1)]))
                }
                (BaseType::Float, Value::FloatList(xs)) => {
                    check_len(xs.len())?;
                    Ok(Value::FloatList(xs))
                }
                (BaseType::Float, Value::IntList(xs)) => {
                    check_len(xs.len())?;
                    Ok(Value::FloatList(xs.into_iter().map(|x| x as f64).collect()))
                }
                (BaseType::Bool, Value::BoolList(xs)) => {
                    check_len(xs.len())?;
                    Ok(Value::BoolList(xs))
                }
                (BaseType::Other(_), v) => Ok(v),
                (_, v) => Err(mismatch(&v)),
            }
        }
        SchemaType::Base(base) => match (base, v) {
            (BaseType::Tensor, Value::Tensor(t)) => Ok(Value::Tensor(t)),
            (BaseType::Tensor, Value::OptionalTensor(Some(t))) => Ok(Value::Tensor(t)),
            (BaseType::Int | BaseType::SymInt, Value::Int(x)) => Ok(Value::Int(x)),
            (BaseType::Float, Value::Float(x)) => Ok(Value::Float(x)),
            (BaseType::Float, Value::Int(x)) => Ok(Value::Float(x as f64)),
            (BaseType::Bool, Value::Bool(x)) => Ok(Value::Bool(x)),
            (BaseType::Str, Value::Str(s)) => Ok(Value::Str(s)),
            (BaseType::Scalar, v @ (Value::Int(_) | Value::Float(_) | Value::Bool(_))) => Ok(v),
            (BaseType::ScalarType, Value::DType(d)) => Ok(Value::DType(d)),
            (BaseType::Device, Value::Device(d)) => Ok(Value::Device(d)),
            // Types TensorPlay does not model are passed through unchecked.
            (
                BaseType::Other(_)
                | BaseType::Layout
                | BaseType::MemoryFormat
                | BaseType::Generator,
                v,
            ) => Ok(v),
            (_, v) => Err(mismatch(&v)),
        },
    }
}

/// True when `coerce` returns `v` unchanged for a parameter of type `ty` (the binding fast path;
/// anything it does not recognise takes the general path).
fn kept_as_is(ty: &SchemaType, v: &Value) -> bool {
    match ty {
        SchemaType::Optional(inner) => matches!(v, Value::None) || kept_as_is(inner, v),
        SchemaType::List(inner, len) => {
            let n = match (inner.base(), v) {
                (BaseType::Tensor, Value::TensorList(ts)) if !inner.is_optional() => ts.len(),
                (BaseType::Int | BaseType::SymInt, Value::IntList(xs)) => xs.len(),
                (BaseType::Float, Value::FloatList(xs)) => xs.len(),
                (BaseType::Bool, Value::BoolList(xs)) => xs.len(),
                _ => return false,
            };
            len.is_none_or(|l| l == n)
        }
        SchemaType::Base(base) => matches!(
            (base, v),
            (BaseType::Tensor, Value::Tensor(_))
                | (BaseType::Int | BaseType::SymInt, Value::Int(_))
                | (BaseType::Float, Value::Float(_))
                | (BaseType::Bool, Value::Bool(_))
                | (BaseType::Str, Value::Str(_))
                | (
                    BaseType::Scalar,
                    Value::Int(_) | Value::Float(_) | Value::Bool(_)
                )
                | (BaseType::ScalarType, Value::DType(_))
                | (BaseType::Device, Value::Device(_))
        ),
    }
}

/// Binds positional `args` and keyword `kwargs` to `schema`'s parameters, filling defaults and
/// checking types. The result has one value per parameter, in schema order.
///
/// ```
/// use tensorplay_ir::schema::Schema;
/// use tensorplay_runtime::library::bind::bind;
/// use tensorplay_runtime::{Tensor, DType, Value};
/// let s = Schema::parse("ns::op(Tensor x, *, float eps=1e-05) -> Tensor")?;
/// let x = Tensor::zeros(&[2], DType::F32);
/// let bound = bind("ns::op", &s, &[x.into()], &[])?;
/// assert!(matches!(bound[1], Value::Float(e) if e == 1e-5));
/// assert!(bind("ns::op", &s, &[], &[]).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn bind(
    op: &str,
    schema: &Schema,
    args: &[Value],
    kwargs: &[(String, Value)],
) -> Result<Vec<Value>> {
    // The common case: every parameter passed positionally with a value `coerce` would keep as
    // it is — the bound arguments are the arguments.
    if kwargs.is_empty()
        && args.len() == schema.params.len()
        && schema
            .params
            .iter()
            .zip(args)
            .all(|(p, v)| !p.kwarg_only && kept_as_is(&p.ty, v))
    {
        return Ok(args.to_vec());
    }
    let positional = schema.params.iter().filter(|p| !p.kwarg_only).count();
    if args.len() > positional {
        return Err(Error::argument(
            op,
            "args",
            format!("at most {positional} positional arguments"),
            format!("{}", args.len()),
        ));
    }
    for (name, _) in kwargs {
        let Some(i) = schema.params.iter().position(|p| &p.name == name) else {
            return Err(Error::argument(
                op,
                name,
                format!(
                    "one of the parameters ({})",
                    schema
                        .params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "an unknown keyword argument",
            ));
        };
        if i < args.len() {
            return Err(Error::argument(
                op,
                name,
                "one value",
                "both a positional and a keyword value",
            ));
        }
        if kwargs.iter().filter(|(n, _)| n == name).count() > 1 {
            return Err(Error::argument(op, name, "one value", "the keyword twice"));
        }
    }
    schema
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let given = if i < args.len() {
                Some(args[i].clone())
            } else {
                kwargs
                    .iter()
                    .find(|(n, _)| n == &p.name)
                    .map(|(_, v)| v.clone())
            };
            match given {
                Some(v) => coerce(op, p, &p.ty, v),
                None => match &p.default {
                    Some(d) => Ok(default_value(p, &d.value)),
                    None if p.ty.is_optional() => Ok(Value::None),
                    None => Err(Error::argument(
                        op,
                        &p.name,
                        "a value (no default)",
                        "nothing",
                    )),
                },
            }
        })
        .collect()
}
