//! The recursive-descent parser behind [`Schema::parse`] (and `FromStr`); errors carry the
//! 1-based column of the offending character.

use std::str::FromStr;

use super::default::scalar_literal;
use super::name::{column_of, is_ident_continue, is_ident_start};
use super::{AliasInfo, BaseType, Default, DefaultValue, Param, Return, Schema, SchemaType};
use crate::error::{Error, Result};

/// Deepest accepted type nesting (`int[][]?`…): bounds the recursion when printing or dropping a type.
const MAX_TYPE_DEPTH: usize = 8;

impl Schema {
    /// Parses a schema; a malformed one is an [`Error::Schema`] with the 1-based column.
    ///
    /// ```
    /// use tensorplay_ir::{schema::Schema, Error};
    /// assert!(Schema::parse("mylib::weighted_sum(Tensor x, Tensor weight) -> Tensor").is_ok());
    /// let err = Schema::parse("mylib::weighted_sum").unwrap_err();
    /// assert!(matches!(err, Error::Schema { column: 20, .. }));
    /// ```
    pub fn parse(schema: &str) -> Result<Schema> {
        Parser {
            src: schema,
            pos: 0,
        }
        .schema()
    }
}

impl FromStr for Schema {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Schema::parse(s)
    }
}

/// The recursive-descent parser. `pos` is a byte offset that only ever moves over whole
/// characters, so slicing `src` at it never panics.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn rest(&self) -> &'a str {
        self.src.get(self.pos..).unwrap_or("")
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then consumes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        let found = self.peek() == Some(c);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Skips whitespace, then consumes `token` if it comes next.
    fn eat_str(&mut self, token: &str) -> bool {
        self.skip_ws();
        let found = self.rest().starts_with(token);
        if found {
            self.pos += token.len();
        }
        found
    }

    fn expect(&mut self, c: u8, context: &str) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{}` {context}", c as char)))
        }
    }

    fn error_at(&self, pos: usize, msg: impl Into<String>) -> Error {
        Error::Schema {
            schema: self.src.to_string(),
            column: column_of(self.src, pos),
            msg: msg.into(),
        }
    }

    /// "expected X, found Y" at the current position.
    fn unexpected(&self, expected: &str) -> Error {
        let found = match self.rest().chars().next() {
            Some(c) => format!("`{c}`"),
            None => "end of input".to_string(),
        };
        self.error_at(self.pos, format!("expected {expected}, found {found}"))
    }

    /// `[A-Za-z_][A-Za-z0-9_]*` at the current position (no whitespace skipped).
    fn ident(&mut self, what: &str) -> Result<&'a str> {
        let start = self.pos;
        if !self.peek().is_some_and(is_ident_start) {
            return Err(self.unexpected(what));
        }
        while self.peek().is_some_and(is_ident_continue) {
            self.pos += 1;
        }
        Ok(&self.src[start..self.pos])
    }

    /// `[ns::]name[.overload](params) -> returns`
    fn schema(&mut self) -> Result<Schema> {
        self.skip_ws();
        let first = self.ident("an operator name")?;
        let (namespace, name) = if self.rest().starts_with("::") {
            self.pos += 2;
            (Some(first), self.ident("an operator name after `::`")?)
        } else {
            (None, first)
        };
        let overload = if self.peek() == Some(b'.') {
            self.pos += 1;
            Some(self.ident("an overload name after `.`")?)
        } else {
            None
        };
        self.expect(b'(', "to open the parameter list")?;
        let params = self.params()?;
        if !self.eat_str("->") {
            return Err(self.unexpected("`->` after the parameter list"));
        }
        let (returns, returns_tuple) = self.returns()?;
        self.skip_ws();
        if self.pos < self.src.len() {
            return Err(
                if !returns_tuple && self.peek().is_some_and(is_ident_start) {
                    self.error_at(
                        self.pos,
                        "a named return needs parentheses, e.g. `-> (Tensor out)`",
                    )
                } else {
                    self.unexpected("the end of the schema")
                },
            );
        }
        Ok(Schema {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            overload: overload.map(str::to_string),
            params,
            returns,
            returns_tuple,
        })
    }

    /// The parameters after `(`, through the closing `)`.
    fn params(&mut self) -> Result<Vec<Param>> {
        let mut params = Vec::new();
        if self.eat(b')') {
            return Ok(params);
        }
        let mut kwarg_only = false;
        // Where a `*` with no parameter after it yet sits: it would vanish when printing.
        let mut dangling_star: Option<usize>;
        loop {
            self.skip_ws();
            if self.peek() == Some(b'*') {
                if kwarg_only {
                    return Err(self.error_at(self.pos, "`*` may appear only once"));
                }
                kwarg_only = true;
                dangling_star = Some(self.pos);
                self.pos += 1;
            } else {
                let param = self.param(kwarg_only, &params)?;
                params.push(param);
                dangling_star = None;
            }
            if self.eat(b',') {
                continue;
            }
            if self.eat(b')') {
                break;
            }
            return Err(self.unexpected("`,` or `)` after a parameter"));
        }
        match dangling_star {
            Some(pos) => {
                Err(self.error_at(pos, "`*` must be followed by a keyword-only parameter"))
            }
            None => Ok(params),
        }
    }

    /// `type[(alias)] name[=default]`
    fn param(&mut self, kwarg_only: bool, earlier: &[Param]) -> Result<Param> {
        let (ty, alias) = self.ty()?;
        self.skip_ws();
        let name_pos = self.pos;
        let name = self.ident("a parameter name")?;
        if earlier.iter().any(|p| p.name == name) {
            return Err(self.error_at(name_pos, format!("duplicate parameter name `{name}`")));
        }
        let default = if self.eat(b'=') {
            self.skip_ws();
            Some(self.default(&ty)?)
        } else {
            None
        };
        Ok(Param {
            name: name.to_string(),
            ty,
            alias,
            default,
            kwarg_only,
        })
    }

    /// A type with its alias annotation: `Base[(alias)]` followed by `?`, `[]` and `[N]` suffixes.
    fn ty(&mut self) -> Result<(SchemaType, Option<AliasInfo>)> {
        self.skip_ws();
        let mut ty = SchemaType::Base(self.type_name()?);
        let alias = if self.eat(b'(') {
            Some(self.alias()?)
        } else {
            None
        };
        for depth in 0.. {
            self.skip_ws();
            let at = self.pos;
            let suffix = self.peek();
            if matches!(suffix, Some(b'?' | b'[')) && depth == MAX_TYPE_DEPTH {
                return Err(self.error_at(at, "type is nested too deeply"));
            }
            ty = match suffix {
                Some(b'?') if ty.is_optional() => {
                    return Err(self.error_at(at, "a type can be made optional only once"));
                }
                Some(b'?') => {
                    self.pos += 1;
                    ty.optional()
                }
                Some(b'[') => {
                    self.pos += 1;
                    let len = self.list_len()?;
                    SchemaType::List(Box::new(ty), len)
                }
                _ => break,
            };
        }
        Ok((ty, alias))
    }

    /// A base type name; dotted names (`__torch__.torch.classes.ns.Foo`) are kept whole.
    fn type_name(&mut self) -> Result<BaseType> {
        let start = self.pos;
        self.ident("a type")?;
        while self.peek() == Some(b'.')
            && self
                .src
                .as_bytes()
                .get(self.pos + 1)
                .is_some_and(|&b| is_ident_start(b))
        {
            self.pos += 1;
            self.ident("a type")?;
        }
        Ok(BaseType::from(&self.src[start..self.pos]))
    }

    /// The rest of a list suffix after `[`: `]` or `N]`.
    fn list_len(&mut self) -> Result<Option<usize>> {
        if self.eat(b']') {
            return Ok(None);
        }
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.unexpected("a list size or `]`"));
        }
        let len = self.src[start..self.pos]
            .parse()
            .map_err(|_| self.error_at(start, "list size is too large"))?;
        self.expect(b']', "to close the list size")?;
        Ok(Some(len))
    }

    /// The rest of an alias annotation after `(`: `set[!][ -> set])`.
    fn alias(&mut self) -> Result<AliasInfo> {
        self.skip_ws();
        let set = self.alias_set()?;
        let is_write = self.eat(b'!');
        let after = if self.eat_str("->") {
            self.skip_ws();
            Some(self.alias_set()?)
        } else {
            None
        };
        self.expect(b')', "to close the alias annotation")?;
        Ok(AliasInfo {
            set,
            is_write,
            after,
        })
    }

    /// An alias set: `a`, `*`, or a union `a|b`.
    fn alias_set(&mut self) -> Result<String> {
        let start = self.pos;
        loop {
            if self.peek() == Some(b'*') {
                self.pos += 1;
            } else {
                self.ident("an alias set name")?;
            }
            if self.peek() != Some(b'|') {
                break;
            }
            self.pos += 1;
        }
        Ok(self.src[start..self.pos].to_string())
    }

    /// `-> Type`, `-> ()` or `-> (Type [name], ...)`; also says whether it was parenthesized.
    fn returns(&mut self) -> Result<(Vec<Return>, bool)> {
        if !self.eat(b'(') {
            let (ty, alias) = self.ty()?;
            return Ok((
                vec![Return {
                    name: None,
                    ty,
                    alias,
                }],
                false,
            ));
        }
        let mut returns = Vec::new();
        if self.eat(b')') {
            return Ok((returns, true));
        }
        loop {
            let (ty, alias) = self.ty()?;
            self.skip_ws();
            let name = if self.peek().is_some_and(is_ident_start) {
                Some(self.ident("a return name")?.to_string())
            } else {
                None
            };
            returns.push(Return { name, ty, alias });
            if self.eat(b',') {
                continue;
            }
            if self.eat(b')') {
                return Ok((returns, true));
            }
            return Err(self.unexpected("`,` or `)` after a return"));
        }
    }

    /// A default value: a quoted string, a list, or a bare literal; `ty` decides int vs float.
    fn default(&mut self, ty: &SchemaType) -> Result<Default> {
        let start = self.pos;
        let value = match self.peek() {
            Some(quote @ (b'"' | b'\'')) => DefaultValue::Str(self.string(quote)?),
            Some(b'[') => self.list_default()?,
            _ => {
                let token = self.literal_token("a default value")?;
                scalar_literal(token).map_err(|msg| self.error_at(start, msg))?
            }
        };
        Ok(Default {
            text: self.src[start..self.pos].to_string(),
            value: value.for_base(ty.base()),
        })
    }

    /// A run of `[A-Za-z0-9_.+-]`: numbers (`1e-05`, `-inf`), `True`, `None`, identifiers.
    fn literal_token(&mut self, what: &str) -> Result<&'a str> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| is_ident_continue(b) || matches!(b, b'.' | b'+' | b'-'))
        {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.unexpected(what));
        }
        Ok(&self.src[start..self.pos])
    }

    /// A string in `quote`s, with `\` escapes; returns the unescaped contents.
    fn string(&mut self, quote: u8) -> Result<String> {
        let start = self.pos;
        let mut out = String::new();
        let mut chars = self.rest()[1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote as char => {
                    self.pos += 1 + i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, e @ ('\\' | '"' | '\''))) => out.push(e),
                    Some((_, e)) => out.extend(['\\', e]),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.error_at(start, "unterminated string"))
    }

    /// `[a, b, ...]` of numbers or of booleans.
    fn list_default(&mut self) -> Result<DefaultValue> {
        let start = self.pos;
        self.pos += 1;
        let mut items = Vec::new();
        if !self.eat(b']') {
            loop {
                self.skip_ws();
                let at = self.pos;
                let token = self.literal_token("a list element")?;
                let item = scalar_literal(token).map_err(|msg| self.error_at(at, msg))?;
                if !matches!(
                    item,
                    DefaultValue::Int(_) | DefaultValue::Float(_) | DefaultValue::Bool(_)
                ) {
                    return Err(self.error_at(
                        at,
                        format!("list defaults hold only numbers or booleans, found `{token}`"),
                    ));
                }
                items.push(item);
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b']') {
                    break;
                }
                return Err(self.unexpected("`,` or `]` in a list default"));
            }
        }
        let ints: Option<Vec<i64>> = items
            .iter()
            .map(|v| match v {
                DefaultValue::Int(i) => Some(*i),
                _ => None,
            })
            .collect();
        let bools: Option<Vec<bool>> = items
            .iter()
            .map(|v| match v {
                DefaultValue::Bool(b) => Some(*b),
                _ => None,
            })
            .collect();
        let floats: Option<Vec<f64>> = items
            .iter()
            .map(|v| match v {
                DefaultValue::Int(i) => Some(*i as f64),
                DefaultValue::Float(x) => Some(*x),
                _ => None,
            })
            .collect();
        match (ints, bools, floats) {
            (Some(ints), _, _) => Ok(DefaultValue::IntList(ints)),
            (_, Some(bools), _) => Ok(DefaultValue::BoolList(bools)),
            (_, _, Some(floats)) => Ok(DefaultValue::FloatList(floats)),
            _ => Err(self.error_at(start, "a list default mixes booleans and numbers")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Canonical schemas: each must print back exactly.
    const ROUND_TRIP: &[&str] = &[
        "ns::op.overload(Tensor(a!) x, SymInt[] size, float eps=1e-05, *, Tensor? bias=None) -> (Tensor, Tensor)",
        "mylib::weighted_sum(Tensor x, Tensor weight) -> Tensor",
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        "ns::f(Tensor(a!) out, Tensor(b!)[] outs) -> ()",
        "ns::g(int[2] stride=[1, 1], str mode=\"mean\", ScalarType? dtype=None, bool flag=True, Device? d=None) -> Tensor(a)",
        "op(Tensor x) -> Tensor",
        "op.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
        "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
        "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
        "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
        "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
        "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
        "aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
        "aten::bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor",
        "aten::_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()",
        "aten::sort.values(Tensor self, int dim=-1, bool descending=False, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)",
        "aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
        "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1, SymInt groups=1) -> Tensor",
        "ns::h(float lo=-inf, float hi=inf, float x=nan, int k=-1, float big=1e+20, float tiny=-2.5e-07) -> Tensor",
        "ns::s(str a='single', str b=\"dou\\\"ble\", str c=\"\") -> ()",
        "ns::l(int[] a=[], float[] b=[0.5, 1.0], bool[3] c=[True, False, True], int[]? d=None) -> Tensor",
        "ns::u(MyCustomType t, __torch__.torch.classes.foo.Bar b, Dimname[] names) -> Any",
        "ns::nested(int[][] x, Tensor?[]? ys) -> Tensor?[]",
        "ns::none() -> Tensor",
        "ns::one() -> (Tensor out)",
        "ns::dt(ScalarType dtype=long) -> ()",
        "ns::union(Tensor(a|b) x, Tensor(a! -> *) y) -> Tensor(*)",
    ];

    fn parse(s: &str) -> Schema {
        Schema::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// The column and message of a parse error.
    fn err(s: &str) -> (usize, String) {
        match Schema::parse(s) {
            Err(Error::Schema {
                schema,
                column,
                msg,
            }) => {
                assert_eq!(schema, s);
                (column, msg)
            }
            other => panic!("{s}: expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn round_trips() {
        for s in ROUND_TRIP {
            assert_eq!(parse(s).to_string(), *s);
            assert_eq!(s.parse::<Schema>().unwrap(), parse(s));
        }
    }

    #[test]
    fn whitespace_is_normalized() {
        let s = parse("  ns::f( Tensor ( a ! ) x ,* , int [ 2 ]? y = [1,1] )->( Tensor , int )  ");
        assert_eq!(
            s.to_string(),
            "ns::f(Tensor(a!) x, *, int[2]? y=[1,1]) -> (Tensor, int)"
        );
    }

    #[test]
    fn structure_of_the_lead_example() {
        let s = parse(ROUND_TRIP[0]);
        assert_eq!(s.namespace.as_deref(), Some("ns"));
        assert_eq!(s.name, "op");
        assert_eq!(s.overload.as_deref(), Some("overload"));
        assert_eq!(s.qualified_name(), "ns::op.overload");
        assert_eq!(s.params.len(), 4);
        let x = &s.params[0];
        assert!(x.ty.is_tensor() && x.is_mutated() && !x.kwarg_only);
        assert_eq!(
            x.alias,
            Some(AliasInfo {
                set: "a".into(),
                is_write: true,
                after: None
            })
        );
        assert_eq!(s.params[1].ty, SchemaType::from(BaseType::SymInt).list());
        let eps = s.params[2].default.as_ref().unwrap();
        assert_eq!(
            (eps.text.as_str(), &eps.value),
            ("1e-05", &DefaultValue::Float(1e-5))
        );
        let bias = &s.params[3];
        assert!(bias.kwarg_only && bias.ty.is_optional_tensor());
        assert_eq!(bias.default.as_ref().unwrap().value, DefaultValue::None);
        assert_eq!(s.returns.len(), 2);
        assert!(s.returns_tuple);
        assert_eq!(s.mutated_params(), ["x"]);
        assert!(s.is_mutating());
        assert_eq!(s.tensor_params().len(), 2);
    }

    #[test]
    fn no_namespace() {
        let s = parse("op(Tensor x) -> Tensor");
        assert_eq!(s.namespace, None);
        assert_eq!(s.qualified_name(), "op");
        assert!(!s.returns_tuple && !s.is_mutating());
    }

    #[test]
    fn alias_annotations() {
        let s = parse(
            "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        );
        let a = s.params[0].alias.as_ref().unwrap();
        assert_eq!(
            (a.set.as_str(), a.is_write, a.after.as_deref()),
            ("a", false, Some("*"))
        );
        let ret = &s.returns[0];
        assert!(ret.ty.is_tensor_list());
        assert_eq!(ret.alias.as_ref().unwrap().set, "a");
        let f = parse("ns::f(Tensor(a!) out, Tensor(b!)[] outs) -> ()");
        assert!(f.returns.is_empty());
        assert!(f.params[1].ty.is_tensor_list() && f.params[1].is_mutated());
        assert_eq!(f.mutated_params(), ["out", "outs"]);
    }

    #[test]
    fn types() {
        let s = parse(
            "ns::t(Tensor a, Tensor? b, Tensor[] c, Tensor?[] d, int[]? e, SymInt[2] f, Dimname g, int[][] h) -> ()",
        );
        let ty = |i: usize| &s.params[i].ty;
        assert!(ty(0).is_tensor());
        assert!(ty(1).is_optional_tensor() && ty(1).is_optional());
        assert!(ty(2).is_tensor_list() && ty(3).is_tensor_list());
        assert_eq!(*ty(4), SchemaType::from(BaseType::Int).list().optional());
        assert!(ty(4).is_optional() && ty(4).non_optional().is_list());
        assert_eq!(*ty(5), SchemaType::from(BaseType::SymInt).fixed_list(2));
        assert_eq!(*ty(6).base(), BaseType::Other("Dimname".into()));
        assert_eq!(*ty(7), SchemaType::from(BaseType::Int).list().list());
        let names: Vec<_> = s.tensor_params().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        for name in [
            "Tensor",
            "int",
            "SymInt",
            "float",
            "bool",
            "str",
            "Scalar",
            "ScalarType",
            "Device",
            "Layout",
            "MemoryFormat",
            "Generator",
            "Storage",
        ] {
            assert_eq!(BaseType::from(name).name(), name);
        }
        assert!(SchemaType::from(BaseType::ScalarType).is_scalar_type());
    }

    #[test]
    fn defaults() {
        let s = parse(ROUND_TRIP[21]); // ns::h
        let values: Vec<_> = s
            .params
            .iter()
            .map(|p| &p.default.as_ref().unwrap().value)
            .collect();
        assert_eq!(*values[0], DefaultValue::Float(f64::NEG_INFINITY));
        assert_eq!(*values[1], DefaultValue::Float(f64::INFINITY));
        assert!(matches!(values[2], DefaultValue::Float(x) if x.is_nan()));
        assert_eq!(*values[3], DefaultValue::Int(-1));
        assert_eq!(*values[4], DefaultValue::Float(1e20));
        assert_eq!(*values[5], DefaultValue::Float(-2.5e-7));

        let value = |schema: &str| parse(schema).params[0].default.clone().unwrap().value;
        assert_eq!(value("f(float x=1) -> ()"), DefaultValue::Float(1.0));
        assert_eq!(value("f(Scalar x=1) -> ()"), DefaultValue::Int(1));
        assert_eq!(value("f(bool x=False) -> ()"), DefaultValue::Bool(false));
        assert_eq!(
            value("f(str x='a\\'b') -> ()"),
            DefaultValue::Str("a'b".into())
        );
        assert_eq!(
            value("f(str x=\"m\\\\n\") -> ()"),
            DefaultValue::Str("m\\n".into())
        );
        assert_eq!(value("f(int[] x=[]) -> ()"), DefaultValue::IntList(vec![]));
        assert_eq!(
            value("f(float[] x=[]) -> ()"),
            DefaultValue::FloatList(vec![])
        );
        assert_eq!(
            value("f(bool[] x=[]) -> ()"),
            DefaultValue::BoolList(vec![])
        );
        assert_eq!(
            value("f(float[] x=[1, 2]) -> ()"),
            DefaultValue::FloatList(vec![1.0, 2.0])
        );
        assert_eq!(
            value("f(float[] x=[1, 0.5]) -> ()"),
            DefaultValue::FloatList(vec![1.0, 0.5])
        );
        assert_eq!(
            value("f(bool[2] x=[True, False]) -> ()"),
            DefaultValue::BoolList(vec![true, false])
        );
        assert_eq!(
            value("f(int[2] x=[1, -1]) -> ()"),
            DefaultValue::IntList(vec![1, -1])
        );
        assert_eq!(
            value("f(MemoryFormat x=contiguous_format) -> ()"),
            DefaultValue::Ident("contiguous_format".into())
        );
        assert_eq!(
            value("f(ScalarType x=long) -> ()"),
            DefaultValue::Ident("long".into())
        );
    }

    #[test]
    fn canonical_default_text() {
        let cases = [
            (DefaultValue::Float(1e-5), "1e-05"),
            (DefaultValue::Float(0.0001), "0.0001"),
            (DefaultValue::Float(1.0), "1.0"),
            (DefaultValue::Float(-0.0), "-0.0"),
            (DefaultValue::Float(1e15), "1000000000000000.0"),
            (DefaultValue::Float(1e16), "1e+16"),
            (DefaultValue::Float(1.5e-10), "1.5e-10"),
            (DefaultValue::Float(f64::NAN), "nan"),
            (DefaultValue::Int(-3), "-3"),
            (DefaultValue::None, "None"),
            (DefaultValue::Str("a\"b\\".into()), "\"a\\\"b\\\\\""),
            (DefaultValue::FloatList(vec![0.5, 2.0]), "[0.5, 2.0]"),
            (DefaultValue::BoolList(vec![true, false]), "[True, False]"),
            (DefaultValue::IntList(vec![]), "[]"),
            (DefaultValue::Ident("long".into()), "long"),
        ];
        for (value, text) in cases {
            let d = Default::new(value);
            assert_eq!(d.text, text);
            // The canonical text parses back to the same value.
            let schema = format!("f(Any x={text}) -> ()");
            let back = parse(&schema).params[0].default.clone().unwrap().value;
            assert_eq!(back.to_string(), text);
        }
    }

    #[test]
    fn built_schema_prints() {
        let schema = Schema {
            namespace: Some("mylib".into()),
            name: "scale".into(),
            overload: None,
            params: vec![
                Param {
                    name: "x".into(),
                    ty: SchemaType::tensor(),
                    alias: Some(AliasInfo {
                        set: "a".into(),
                        is_write: true,
                        after: None,
                    }),
                    default: None,
                    kwarg_only: false,
                },
                Param {
                    name: "eps".into(),
                    ty: BaseType::Float.into(),
                    alias: None,
                    default: Some(Default::new(DefaultValue::Float(1e-5))),
                    kwarg_only: true,
                },
            ],
            returns: vec![],
            returns_tuple: false,
        };
        let text = "mylib::scale(Tensor(a!) x, *, float eps=1e-05) -> ()";
        assert_eq!(schema.to_string(), text);
        assert_eq!(parse(text).to_string(), text);
    }

    /// Malformed schemas: the 1-based column of the offending character and the message's start.
    #[rustfmt::skip]
    const ERRORS: &[(&str, usize, &str)] = &[
    ("", 1, "expected an operator name, found end of input"),
    ("1ns::op(Tensor x) -> Tensor", 1, "expected an operator name, found `1`"),
    ("mylib::weighted_sum", 20, "expected `(` to open the parameter list, found end of input"),
    ("ns::op(", 8, "expected a type, found end of input"),
    ("ns::op(Tensor) -> Tensor", 14, "expected a parameter name, found `)`"),
    ("ns::op(Tensor x) Tensor", 18, "expected `->` after the parameter list, found `T`"),
    ("ns::op(Tensor x) ->", 20, "expected a type, found end of input"),
    ("ns::op(Tensor x, *, *, Tensor y) -> Tensor", 21, "`*` may appear only once"),
    ("ns::op(Tensor x, *) -> Tensor", 18, "`*` must be followed by a keyword-only parameter"),
    ("ns::op(Tensor x, Tensor x) -> Tensor", 25, "duplicate parameter name `x`"),
    ("ns::op(str s=\"abc) -> Tensor", 14, "unterminated string"),
    ("ns::op(int x=1.2.3) -> Tensor", 14, "invalid default value `1.2.3`"),
    ("ns::op(int x=99999999999999999999) -> ()", 14, "integer default `99999999999999999999` is out of range"),
    ("ns::op(int x=) -> Tensor", 14, "expected a default value, found `)`"),
    ("ns::op(Tensor(a x) -> Tensor", 17, "expected `)` to close the alias annotation, found `x`"),
    ("ns::op(Tensor() x) -> Tensor", 15, "expected an alias set name, found `)`"),
    ("ns::op(Tensor x) -> Tensor extra", 28, "a named return needs parentheses"),
    ("ns::op(Tensor x) -> Tensor)", 27, "expected the end of the schema, found `)`"),
    ("ns::op(int[x] a) -> Tensor", 12, "expected a list size or `]`, found `x`"),
    ("ns::op(Tensor?? x) -> Tensor", 15, "a type can be made optional only once"),
    ("ns::op(int[] x=[1, True]) -> Tensor", 16, "a list default mixes booleans and numbers"),
    ("ns::op(int[] x=[1, None]) -> Tensor", 20, "list defaults hold only numbers or booleans, found `None`"),
    ("ns::op(int[] x=[1,) -> Tensor", 19, "expected a list element, found `)`"),
    ("ns::op(Tensor x,) -> Tensor", 17, "expected a type, found `)`"),
    ("ns::op(Tensor x) -> (Tensor, )", 30, "expected a type, found `)`"),
    ("ns::op(Tensor x) -> (Tensor a b)", 31, "expected `,` or `)` after a return, found `b`"),
    ("ns::op.(Tensor x) -> Tensor", 8, "expected an overload name after `.`, found `(`"),
    ("ns::öp(Tensor x) -> Tensor", 5, "expected an operator name after `::`, found `ö`"),
    ("ns::op(Tensor x, Tensör y) -> Tensor", 22, "expected a parameter name, found `ö`"),
    ("ns::op(int[][][][][][][][][] x) -> ()", 27, "type is nested too deeply"),
    ("ns::op(int[99999999999999999999999] x) -> ()", 12, "list size is too large"),
    ];

    #[test]
    fn error_columns() {
        for &(schema, column, msg) in ERRORS {
            let (got_column, got_msg) = err(schema);
            assert!(
                got_msg.starts_with(msg),
                "{schema}: message `{got_msg}` does not start with `{msg}`"
            );
            assert_eq!(got_column, column, "{schema}: {got_msg}");
        }
    }

    #[test]
    fn error_display_names_schema_and_column() {
        let e = Schema::parse("ns::op").unwrap_err().to_string();
        assert_eq!(
            e,
            "schema error at column 7: expected `(` to open the parameter list, found end of input in `ns::op`"
        );
    }

    #[test]
    fn prim_namespace_parses() {
        assert_eq!(
            parse("prim::f(Tensor x) -> Tensor").namespace.as_deref(),
            Some("prim")
        );
    }

    /// Valid schemas cut, spliced and corrupted at every position: parsing must never panic, and
    /// whatever parses must print to text that parses back to the same printout.
    #[test]
    fn mangled_schemas_never_panic() {
        let check = |s: &str| {
            if let Ok(schema) = Schema::parse(s) {
                let printed = schema.to_string();
                assert_eq!(parse(&printed).to_string(), printed, "from {s:?}");
            }
        };
        let noise = [
            '(', ')', '[', ']', ',', '*', '?', '!', '=', '"', '\'', '-', '>', ':', '.', ' ', '1',
            'é',
        ];
        for s in ROUND_TRIP {
            let boundaries: Vec<usize> =
                s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
            for &i in &boundaries {
                check(&s[..i]);
                check(&s[i..]);
                for c in noise {
                    check(&format!("{}{c}{}", &s[..i], &s[i..]));
                }
            }
            for w in boundaries.windows(2) {
                check(&format!("{}{}", &s[..w[0]], &s[w[1]..]));
            }
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use proptest::sample::select;

        /// A canonical parameter type with an optional alias annotation.
        fn param_type() -> impl Strategy<Value = String> {
            let base = select(
                &[
                    "Tensor", "int", "SymInt", "float", "bool", "str", "Scalar", "Foo",
                ][..],
            );
            let alias = select(&["", "", "(a)", "(a!)", "(b -> *)", "(a|b)"][..]);
            let suffix = select(&["", "", "?", "[]", "[2]", "?[]", "[]?", "[1]?"][..]);
            (base, alias, suffix).prop_map(|(b, a, s)| format!("{b}{a}{s}"))
        }

        /// Canonical schemas assembled from valid pieces (distinct parameter names).
        fn canonical_schema() -> impl Strategy<Value = String> {
            let default = select(
                &[
                    "", "", "=None", "=1", "=-1", "=1e-05", "=-inf", "=True", "=[]", "=[1, 2]",
                    "='s'", "=\"m\"", "=long",
                ][..],
            );
            let params = prop::collection::vec((param_type(), default), 0..5);
            let returns = select(
                &[
                    "Tensor",
                    "()",
                    "(Tensor, Tensor)",
                    "Tensor(a)[]",
                    "(Tensor(a!) out, int n)",
                    "(Tensor)",
                    "int[]?",
                ][..],
            );
            (params, any::<prop::sample::Index>(), any::<bool>(), returns).prop_map(
                |(params, star_at, has_star, returns)| {
                    let mut items: Vec<String> = params
                        .iter()
                        .enumerate()
                        .map(|(i, (ty, default))| format!("{ty} p{i}{default}"))
                        .collect();
                    if has_star && !items.is_empty() {
                        items.insert(star_at.index(items.len()), "*".to_string());
                    }
                    format!("ns::op.ov({}) -> {returns}", items.join(", "))
                },
            )
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(s in "\\PC{0,80}") {
                let _ = Schema::parse(&s);
            }

            #[test]
            fn canonical_schemas_round_trip(s in canonical_schema()) {
                let parsed = Schema::parse(&s);
                prop_assert!(parsed.is_ok(), "{s}: {parsed:?}");
                prop_assert_eq!(parsed.unwrap().to_string(), s);
            }

            #[test]
            fn corrupted_schemas_reprint_stably(
                s in canonical_schema(),
                at in any::<prop::sample::Index>(),
                cut in 0usize..4,
                noise in "[()\\[\\],*?!=\"' :.>|a-z0-9-]{0,3}",
            ) {
                let at = at.index(s.len() + 1);
                let end = (at + cut).min(s.len());
                let mangled = format!("{}{noise}{}", &s[..at], &s[end..]);
                if let Ok(schema) = Schema::parse(&mangled) {
                    let printed = schema.to_string();
                    let again = Schema::parse(&printed).map(|x| x.to_string());
                    prop_assert_eq!(again, Ok(printed));
                }
            }
        }
    }
}
