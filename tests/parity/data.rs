//! Recorded cases: their decoded arguments, the tensor pool's bit patterns, how a case prints.

use half::{bf16, f16};
use serde_json::Value as J;
use tensorplay::{DType, Scalar, Tensor, Value};

/// One recorded case, with its arguments decoded.
pub(crate) struct Case<'a> {
    pub(crate) index: usize,
    pub(crate) op: &'a str,
    pub(crate) args: Vec<Arg>,
    pub(crate) kw: Vec<(String, Arg)>,
    /// The expected outputs, or `None` when PyTorch raised.
    pub(crate) expect: Option<Vec<Tensor>>,
    pub(crate) error: Option<String>,
    /// A gradient case: what to differentiate and by which upstream gradients.
    pub(crate) grad: Option<GradSpec>,
    /// The case holds an exact (mpmath) reference instead of PyTorch's result.
    pub(crate) reference: bool,
}

/// What a gradient case differentiates: the tensor arguments at `wrt` (each tensor of a list at
/// such a position) for the upstream gradient `up[k]` of output `k` (`None`: an output without
/// a gradient, such as indices). The case's `expect` holds the gradients of those leaves.
pub(crate) struct GradSpec {
    pub(crate) wrt: Vec<usize>,
    pub(crate) up: Vec<Option<Tensor>>,
}

impl<'a> Case<'a> {
    /// Decodes case number `index` of the file, its tensors taken from `pool`.
    pub(crate) fn decode(index: usize, j: &'a J, pool: &[Tensor]) -> Case<'a> {
        let tensor = |i: &J| pool[i.as_u64().unwrap() as usize].clone();
        Case {
            index,
            op: j["op"].as_str().unwrap(),
            args: j["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| decode_arg(a, pool))
                .collect(),
            kw: j
                .get("kw")
                .and_then(J::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), decode_arg(v, pool)))
                        .collect()
                })
                .unwrap_or_default(),
            expect: j
                .get("out")
                .map(|o| o.as_array().unwrap().iter().map(tensor).collect()),
            error: j.get("error").map(|e| e.as_str().unwrap().to_string()),
            grad: j.get("grad").map(|w| GradSpec {
                wrt: w
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i.as_u64().unwrap() as usize)
                    .collect(),
                up: j["up"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|u| (!u.is_null()).then(|| tensor(u)))
                    .collect(),
            }),
            reference: j.get("ref").is_some(),
        }
    }

    /// The dtype of the first tensor argument.
    pub(crate) fn dtype(&self) -> Option<DType> {
        self.args.iter().find_map(|a| match a {
            Arg::Tensor(t) => Some(t.dtype()),
            _ => None,
        })
    }
}

#[derive(Clone)]
pub(crate) enum Arg {
    Tensor(Tensor),
    /// A Rust scalar in a Tensor slot (PyTorch's wrapped number).
    Wrapped(Scalar),
    /// A Rust scalar in a Scalar slot.
    Scalar(Scalar),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    DType(DType),
    /// A `Tensor[]` argument.
    Tensors(Vec<Tensor>),
    None,
}

impl Arg {
    pub(crate) fn value(&self) -> Value {
        match self {
            Arg::Tensor(t) => t.into(),
            Arg::Wrapped(s) => Tensor::wrapped_scalar(*s).into(),
            Arg::Scalar(s) => (*s).into(),
            Arg::Int(i) => (*i).into(),
            Arg::Float(f) => (*f).into(),
            Arg::Bool(b) => (*b).into(),
            Arg::Str(s) => s.as_str().into(),
            Arg::Ints(v) => v.clone().into(),
            Arg::Floats(v) => Value::FloatList(v.clone()),
            Arg::DType(d) => (*d).into(),
            Arg::Tensors(ts) => Value::TensorList(ts.clone()),
            Arg::None => Value::None,
        }
    }
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Arg::DType(d) => *d,
            _ => panic!("expected a dtype argument"),
        }
    }
    pub(crate) fn tensors(&self) -> &[Tensor] {
        match self {
            Arg::Tensors(ts) => ts,
            _ => panic!("expected a tensor list argument"),
        }
    }
    pub(crate) fn tensor(&self) -> &Tensor {
        match self {
            Arg::Tensor(t) => t,
            _ => panic!("expected a tensor argument"),
        }
    }
    pub(crate) fn scalar(&self) -> Scalar {
        match self {
            Arg::Wrapped(s) | Arg::Scalar(s) => *s,
            Arg::Int(i) => Scalar::Int(*i),
            Arg::Float(f) => Scalar::Float(*f),
            Arg::Bool(b) => Scalar::Bool(*b),
            _ => panic!("expected a scalar argument"),
        }
    }
    pub(crate) fn float(&self) -> f64 {
        match self {
            Arg::Float(f) => *f,
            Arg::Int(i) => *i as f64,
            _ => panic!("expected a float argument"),
        }
    }
    pub(crate) fn opt_float(&self) -> Option<f64> {
        match self {
            Arg::None => None,
            a => Some(a.float()),
        }
    }
    pub(crate) fn opt_tensor(&self) -> Option<&Tensor> {
        match self {
            Arg::None => None,
            a => Some(a.tensor()),
        }
    }
    pub(crate) fn int(&self) -> i64 {
        match self {
            Arg::Int(i) => *i,
            _ => panic!("expected an int argument"),
        }
    }
    pub(crate) fn bool(&self) -> bool {
        match self {
            Arg::Bool(b) => *b,
            _ => panic!("expected a bool argument"),
        }
    }
    pub(crate) fn str(&self) -> &str {
        match self {
            Arg::Str(s) => s,
            _ => panic!("expected a string argument"),
        }
    }
    pub(crate) fn ints(&self) -> &[i64] {
        match self {
            Arg::Ints(v) => v,
            _ => panic!("expected an int list argument"),
        }
    }
    pub(crate) fn opt_floats(&self) -> Option<&[f64]> {
        match self {
            Arg::None => None,
            Arg::Floats(v) => Some(v),
            _ => panic!("expected a float list argument"),
        }
    }
    pub(crate) fn opt_usizes(&self) -> Option<Vec<usize>> {
        match self {
            Arg::None => None,
            a => Some(a.usizes()),
        }
    }
    pub(crate) fn opt_bool(&self) -> Option<bool> {
        match self {
            Arg::None => None,
            a => Some(a.bool()),
        }
    }
    pub(crate) fn usizes(&self) -> Vec<usize> {
        self.ints().iter().map(|&d| d as usize).collect()
    }
}

pub(crate) fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// A tensor from its recorded dtype, shape and little-endian element bits.
pub(crate) fn decode_tensor(j: &J) -> Tensor {
    let dtype: DType = j["d"].as_str().unwrap().parse().unwrap();
    let shape: Vec<usize> = j["s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let raw = base64_decode(j["x"].as_str().unwrap());
    let w = dtype.size();
    let words = raw.chunks(w);
    let t = match dtype {
        DType::F32 => Tensor::from_vec(
            words
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::F64 => Tensor::from_vec(
            words
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::F16 => Tensor::from_vec(
            words
                .map(|c| f16::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::BF16 => Tensor::from_vec(
            words
                .map(|c| bf16::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::I32 => Tensor::from_vec(
            words
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::I64 => Tensor::from_vec(
            words
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            &shape,
        ),
        DType::Bool => Tensor::from_vec(words.map(|c| c[0] != 0).collect(), &shape),
    };
    t.unwrap()
}

pub(crate) fn decode_scalar(j: &J) -> Scalar {
    if let Some(b) = j.get("b") {
        Scalar::Bool(b.as_bool().unwrap())
    } else if let Some(i) = j.get("i") {
        Scalar::Int(i.as_str().unwrap().parse().unwrap())
    } else {
        let h = j["f"].as_str().unwrap();
        Scalar::Float(f64::from_bits(u64::from_str_radix(h, 16).unwrap()))
    }
}

pub(crate) fn decode_arg(j: &J, pool: &[Tensor]) -> Arg {
    let (k, v) = j.as_object().unwrap().iter().next().unwrap();
    match k.as_str() {
        "t" => Arg::Tensor(pool[v.as_u64().unwrap() as usize].clone()),
        "w" => Arg::Wrapped(decode_scalar(v)),
        "s" => Arg::Scalar(decode_scalar(v)),
        "int" => Arg::Int(v.as_i64().unwrap()),
        "float" => Arg::Float(f64::from_bits(
            u64::from_str_radix(v.as_str().unwrap(), 16).unwrap(),
        )),
        "bool" => Arg::Bool(v.as_bool().unwrap()),
        "str" => Arg::Str(v.as_str().unwrap().to_string()),
        "ints" => Arg::Ints(
            v.as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect(),
        ),
        "floats" => Arg::Floats(
            v.as_array()
                .unwrap()
                .iter()
                .map(|h| f64::from_bits(u64::from_str_radix(h.as_str().unwrap(), 16).unwrap()))
                .collect(),
        ),
        "dtype" => Arg::DType(v.as_str().unwrap().parse().unwrap()),
        "ts" => Arg::Tensors(
            v.as_array()
                .unwrap()
                .iter()
                .map(|i| pool[i.as_u64().unwrap() as usize].clone())
                .collect(),
        ),
        "none" => Arg::None,
        other => panic!("unknown argument kind {other}"),
    }
}

pub(crate) fn describe(c: &Case) -> String {
    let args: Vec<String> = c
        .args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) => {
                let v = t.to_vec_f64().unwrap();
                let shown: Vec<String> = v.iter().take(6).map(|x| format!("{x}")).collect();
                format!(
                    "{}{:?}[{}{}]",
                    t.dtype(),
                    t.shape(),
                    shown.join(", "),
                    if v.len() > 6 { ", .." } else { "" }
                )
            }
            Arg::Wrapped(s) | Arg::Scalar(s) => format!("{s:?}"),
            Arg::Int(i) => i.to_string(),
            Arg::Float(f) => f.to_string(),
            Arg::Bool(b) => b.to_string(),
            Arg::Str(s) => format!("{s:?}"),
            Arg::Ints(v) => format!("{v:?}"),
            Arg::Floats(v) => format!("{v:?}"),
            Arg::DType(d) => d.to_string(),
            Arg::Tensors(ts) => format!("[{} tensors]", ts.len()),
            Arg::None => "None".into(),
        })
        .collect();
    let kw: Vec<String> =
        c.kw.iter()
            .map(|(k, v)| format!("{k}={:?}", v.value()))
            .collect();
    format!(
        "case {}: {}({}{})",
        c.index,
        c.op,
        args.join(", "),
        if kw.is_empty() {
            String::new()
        } else {
            format!("; {}", kw.join(", "))
        }
    )
}
