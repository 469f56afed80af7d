//! Symbolic sizes: `SymExpr`, an integer expression over the input dims of a captured graph
//! (`s0, s1, …`) and literals, with `+ − ×`, floor division, modulo, `min` and `max`.
//!
//! Expressions are hash-consed: a `SymExpr` is a small `Copy` handle into a process-wide table,
//! built only through simplifying constructors, so equal expressions are equal handles and every
//! expression is kept in one canonical form — a sum `c + Σ kᵢ·tᵢ` of distinct non-sum terms
//! (symbols, products, quotients, remainders, minima, maxima) in a fixed order. That is enough
//! for `s0 - 1 + 1` to be `s0`, `(2*s0) // 2` to be `s0` and `min(s0, s0 + 1)` to be `s0`.
//!
//! Symbols stand for input dims that capture made symbolic, which are never 0 or 1 (those sizes
//! are specialised; the executor guards every symbolic dim to be ≥ 2). Simplification relies on
//! that lower bound (see [`SymExpr::lower_bound`]).
//!
//! ```
//! use tensorplay_ir::symint::SymExpr;
//! let n = SymExpr::sym(0);
//! assert_eq!((n - 1 + 1).to_string(), "s0");
//! assert_eq!((n * 2 + SymExpr::sym(1) - 3).to_string(), "2*s0 + s1 - 3");
//! assert_eq!(n.floor_div(SymExpr::lit(2)).to_string(), "s0 // 2");
//! assert_eq!(SymExpr::parse("s0 - 1 + 1")?, n);
//! assert_eq!((n - 1).eval(&|_| Some(12)), Some(11));
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, RwLock};

use crate::error::{CompileKind, Error, Result};

/// An integer expression over symbols `s0, s1, …` (interned; compare and hash by handle).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SymExpr(u32);

/// The interned node behind a handle (canonical by construction).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Node {
    /// `c + Σ k·t` — with no terms, the literal `c`. Never a single term `1·t` with `c == 0`
    /// (that is `t` itself); terms are non-`Lin` nodes in [`cmp`] order with non-zero `k`.
    Lin { c: i64, terms: Vec<(SymExpr, i64)> },
    /// An input dim.
    Sym(u32),
    /// A product of two or more non-literal factors in [`cmp`] order.
    Mul(Vec<SymExpr>),
    /// Floor division (Python's `//`).
    FloorDiv(SymExpr, SymExpr),
    /// Remainder with the divisor's sign (Python's `%`).
    Mod(SymExpr, SymExpr),
    /// The smaller of an ordered pair.
    Min(SymExpr, SymExpr),
    /// The larger of an ordered pair.
    Max(SymExpr, SymExpr),
}

#[derive(Default)]
struct Store {
    nodes: Vec<Node>,
    ids: HashMap<Node, u32>,
}

static STORE: LazyLock<RwLock<Store>> = LazyLock::new(|| RwLock::new(Store::default()));

fn intern(node: Node) -> SymExpr {
    if let Some(&id) = STORE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .ids
        .get(&node)
    {
        return SymExpr(id);
    }
    let mut st = STORE.write().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = st.ids.get(&node) {
        return SymExpr(id);
    }
    let id = st.nodes.len() as u32;
    st.nodes.push(node.clone());
    st.ids.insert(node, id);
    SymExpr(id)
}

fn node(e: SymExpr) -> Node {
    STORE.read().unwrap_or_else(|e| e.into_inner()).nodes[e.0 as usize].clone()
}

/// A total order on expressions that does not depend on interning order (so printing is
/// deterministic): by kind, then by contents.
fn cmp(a: SymExpr, b: SymExpr) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (na, nb) = (node(a), node(b));
    let rank = |n: &Node| match n {
        Node::Sym(_) => 0,
        Node::Mul(_) => 1,
        Node::FloorDiv(..) => 2,
        Node::Mod(..) => 3,
        Node::Min(..) => 4,
        Node::Max(..) => 5,
        Node::Lin { .. } => 6,
    };
    let seq = |x: &[SymExpr], y: &[SymExpr]| {
        for (p, q) in x.iter().zip(y) {
            let o = cmp(*p, *q);
            if o != Ordering::Equal {
                return o;
            }
        }
        x.len().cmp(&y.len())
    };
    match (&na, &nb) {
        (Node::Sym(x), Node::Sym(y)) => x.cmp(y),
        (Node::Lin { c: c1, terms: t1 }, Node::Lin { c: c2, terms: t2 }) => {
            for ((p, k), (q, l)) in t1.iter().zip(t2) {
                let o = cmp(*p, *q).then(k.cmp(l));
                if o != Ordering::Equal {
                    return o;
                }
            }
            t1.len().cmp(&t2.len()).then(c1.cmp(c2))
        }
        (Node::Mul(x), Node::Mul(y)) => seq(x, y),
        (Node::FloorDiv(a1, b1), Node::FloorDiv(a2, b2))
        | (Node::Mod(a1, b1), Node::Mod(a2, b2))
        | (Node::Min(a1, b1), Node::Min(a2, b2))
        | (Node::Max(a1, b1), Node::Max(a2, b2)) => seq(&[*a1, *b1], &[*a2, *b2]),
        _ => rank(&na).cmp(&rank(&nb)),
    }
}

/// Python's floor division (`None` for a zero divisor or overflow): how sizes divide, here and
/// in the runtime's `SymInt`.
pub fn floor_div_i(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// Python's modulo, the remainder taking the divisor's sign (`None` for a zero divisor or
/// overflow).
pub fn mod_i(a: i64, b: i64) -> Option<i64> {
    let q = floor_div_i(a, b)?;
    a.checked_sub(q.checked_mul(b)?)
}

impl SymExpr {
    /// The literal `n`.
    pub fn lit(n: i64) -> SymExpr {
        intern(Node::Lin {
            c: n,
            terms: vec![],
        })
    }

    /// The symbol `s{k}` (input dim number `k` of a graph).
    pub fn sym(k: u32) -> SymExpr {
        intern(Node::Sym(k))
    }

    /// The value when the expression is a literal.
    pub fn as_lit(self) -> Option<i64> {
        match node(self) {
            Node::Lin { c, terms } if terms.is_empty() => Some(c),
            _ => None,
        }
    }

    /// The symbol number when the expression is a bare symbol.
    pub fn as_sym(self) -> Option<u32> {
        match node(self) {
            Node::Sym(k) => Some(k),
            _ => None,
        }
    }

    /// `Some((a, b))` with `a < b` when the expression is the difference of two symbols,
    /// `s_a - s_b` or `s_b - s_a`.
    ///
    /// ```
    /// use tensorplay_ir::symint::SymExpr;
    /// assert_eq!((SymExpr::sym(3) - SymExpr::sym(1)).symbol_difference(), Some((1, 3)));
    /// assert_eq!((SymExpr::sym(3) - SymExpr::sym(1) + 1).symbol_difference(), None);
    /// ```
    pub fn symbol_difference(self) -> Option<(u32, u32)> {
        let (c, terms) = self.lin();
        match terms.as_slice() {
            [(x, k), (y, l)] if c == 0 && k + l == 0 && k.abs() == 1 => {
                let (a, b) = (x.as_sym()?, y.as_sym()?);
                Some((a.min(b), a.max(b)))
            }
            _ => None,
        }
    }

    /// `(c, [(term, k)])` with `self == c + Σ k·term`.
    fn lin(self) -> (i64, Vec<(SymExpr, i64)>) {
        match node(self) {
            Node::Lin { c, terms } => (c, terms),
            _ => (0, vec![(self, 1)]),
        }
    }

    fn from_lin(c: i64, mut terms: Vec<(SymExpr, i64)>) -> SymExpr {
        terms.sort_by(|a, b| cmp(a.0, b.0));
        let mut merged: Vec<(SymExpr, i64)> = Vec::with_capacity(terms.len());
        for (t, k) in terms {
            match merged.last_mut() {
                Some((u, l)) if *u == t => *l = l.saturating_add(k),
                _ => merged.push((t, k)),
            }
        }
        merged.retain(|&(_, k)| k != 0);
        if c == 0 && merged.len() == 1 && merged[0].1 == 1 {
            return merged[0].0;
        }
        intern(Node::Lin { c, terms: merged })
    }

    fn scale(self, k: i64) -> SymExpr {
        let (c, terms) = self.lin();
        SymExpr::from_lin(
            c.saturating_mul(k),
            terms
                .into_iter()
                .map(|(t, l)| (t, l.saturating_mul(k)))
                .collect(),
        )
    }

    /// `self + rhs`.
    pub fn plus(self, rhs: SymExpr) -> SymExpr {
        let (c1, mut t1) = self.lin();
        let (c2, t2) = rhs.lin();
        t1.extend(t2);
        SymExpr::from_lin(c1.saturating_add(c2), t1)
    }

    /// `self - rhs`.
    pub fn minus(self, rhs: SymExpr) -> SymExpr {
        self.plus(rhs.scale(-1))
    }

    /// `self * rhs`.
    pub fn times(self, rhs: SymExpr) -> SymExpr {
        if let Some(k) = self.as_lit() {
            return rhs.scale(k);
        }
        if let Some(k) = rhs.as_lit() {
            return self.scale(k);
        }
        // Pull single-term coefficients out: (2*s0)*(3*s1) = 6*(s0*s1).
        let split = |e: SymExpr| match e.lin() {
            (0, t) if t.len() == 1 => (t[0].0, t[0].1),
            _ => (e, 1),
        };
        let ((a, ka), (b, kb)) = (split(self), split(rhs));
        let mut factors = Vec::new();
        for f in [a, b] {
            match node(f) {
                Node::Mul(fs) => factors.extend(fs),
                _ => factors.push(f),
            }
        }
        factors.sort_by(|x, y| cmp(*x, *y));
        intern(Node::Mul(factors)).scale(ka.saturating_mul(kb))
    }

    /// Floor division, as sizes use it (`(n + 1) // 2`). Exact when every coefficient of the
    /// dividend is a multiple of a literal divisor.
    pub fn floor_div(self, rhs: SymExpr) -> SymExpr {
        if let (Some(a), Some(b)) = (self.as_lit(), rhs.as_lit())
            && let Some(q) = floor_div_i(a, b)
        {
            return SymExpr::lit(q);
        }
        if let Some(d) = rhs.as_lit()
            && d > 0
        {
            if d == 1 {
                return self;
            }
            let (c, terms) = self.lin();
            if terms.iter().all(|&(_, k)| k % d == 0) {
                // floor((Σ k·t + c) / d) = Σ (k/d)·t + floor(c / d) when d divides every k.
                let q = floor_div_i(c, d).unwrap_or(0);
                return SymExpr::from_lin(q, terms.into_iter().map(|(t, k)| (t, k / d)).collect());
            }
        }
        intern(Node::FloorDiv(self, rhs))
    }

    /// Remainder with the divisor's sign (Python's `%`).
    pub fn modulo(self, rhs: SymExpr) -> SymExpr {
        if let (Some(a), Some(b)) = (self.as_lit(), rhs.as_lit())
            && let Some(r) = mod_i(a, b)
        {
            return SymExpr::lit(r);
        }
        if let Some(d) = rhs.as_lit()
            && d > 0
        {
            let (c, terms) = self.lin();
            if terms.iter().all(|&(_, k)| k % d == 0) {
                return SymExpr::lit(mod_i(c, d).unwrap_or(0));
            }
        }
        intern(Node::Mod(self, rhs))
    }

    /// The smaller of two expressions (decided statically when their difference has a sign).
    pub fn min(self, rhs: SymExpr) -> SymExpr {
        match self.minus(rhs).sign() {
            Some(Ordering::Less | Ordering::Equal) => self,
            Some(Ordering::Greater) => rhs,
            None if rhs.minus(self).lower_bound().is_some_and(|b| b >= 0) => self,
            None => {
                let (a, b) = ordered(self, rhs);
                intern(Node::Min(a, b))
            }
        }
    }

    /// The larger of two expressions.
    pub fn max(self, rhs: SymExpr) -> SymExpr {
        match self.minus(rhs).sign() {
            Some(Ordering::Greater | Ordering::Equal) => self,
            Some(Ordering::Less) => rhs,
            None if rhs.minus(self).lower_bound().is_some_and(|b| b >= 0) => rhs,
            None => {
                let (a, b) = ordered(self, rhs);
                intern(Node::Max(a, b))
            }
        }
    }

    /// The sign of the expression when it is known statically: a literal's, or `Greater` /
    /// `Equal`-or-more when its lower bound shows it (`Some(Greater)` only for `> 0`; a bound of
    /// exactly 0 gives `None` unless the expression is the literal 0).
    pub fn sign(self) -> Option<Ordering> {
        if let Some(c) = self.as_lit() {
            return Some(c.cmp(&0));
        }
        match self.lower_bound() {
            Some(b) if b > 0 => Some(Ordering::Greater),
            _ => None,
        }
    }

    /// A lower bound that holds for every binding of the symbols to sizes ≥ 2, when one is
    /// known.
    ///
    /// ```
    /// use tensorplay_ir::symint::SymExpr;
    /// let n = SymExpr::sym(0);
    /// assert_eq!((n - 1).lower_bound(), Some(1));
    /// assert_eq!((n * n).lower_bound(), Some(4));
    /// assert_eq!((SymExpr::lit(3) - n).lower_bound(), None);
    /// ```
    pub fn lower_bound(self) -> Option<i64> {
        match node(self) {
            Node::Sym(_) => Some(2),
            Node::Lin { c, terms } => terms.iter().try_fold(c, |acc, &(t, k)| {
                if k > 0 {
                    acc.checked_add(k.checked_mul(t.lower_bound()?)?)
                } else {
                    None
                }
            }),
            Node::Mul(fs) => fs.iter().try_fold(1i64, |acc, f| {
                let b = f.lower_bound()?;
                if b >= 0 { acc.checked_mul(b) } else { None }
            }),
            Node::FloorDiv(a, b) => match b.as_lit() {
                Some(d) if d > 0 => floor_div_i(a.lower_bound()?, d),
                _ => None,
            },
            Node::Mod(_, b) => match b.as_lit() {
                Some(d) if d > 0 => Some(0),
                _ => None,
            },
            Node::Min(a, b) => Some(a.lower_bound()?.min(b.lower_bound()?)),
            Node::Max(a, b) => match (a.lower_bound(), b.lower_bound()) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            },
        }
    }

    /// The value under a binding of the symbols (`None`: a symbol is unbound, a division by
    /// zero, or an overflow).
    pub fn eval(self, env: &dyn Fn(u32) -> Option<i64>) -> Option<i64> {
        match node(self) {
            Node::Sym(k) => env(k),
            Node::Lin { c, terms } => terms.iter().try_fold(c, |acc, &(t, k)| {
                acc.checked_add(k.checked_mul(t.eval(env)?)?)
            }),
            Node::Mul(fs) => fs
                .iter()
                .try_fold(1i64, |acc, f| acc.checked_mul(f.eval(env)?)),
            Node::FloorDiv(a, b) => floor_div_i(a.eval(env)?, b.eval(env)?),
            Node::Mod(a, b) => mod_i(a.eval(env)?, b.eval(env)?),
            Node::Min(a, b) => Some(a.eval(env)?.min(b.eval(env)?)),
            Node::Max(a, b) => Some(a.eval(env)?.max(b.eval(env)?)),
        }
    }

    /// The expression with each symbol `s{k}` replaced by `f(k)` (kept where `f` gives
    /// `None`), simplified again: capture uses it to merge symbols it learned are equal.
    ///
    /// ```
    /// use tensorplay_ir::symint::SymExpr;
    /// let (a, b) = (SymExpr::sym(0), SymExpr::sym(2));
    /// let to_a = |k: u32| (k == 2).then_some(SymExpr::sym(0));
    /// assert_eq!((a - b).substitute(&to_a), SymExpr::lit(0));
    /// assert_eq!((b * 2).floor_div(SymExpr::lit(2)).substitute(&to_a), a);
    /// ```
    pub fn substitute(self, f: &dyn Fn(u32) -> Option<SymExpr>) -> SymExpr {
        match node(self) {
            Node::Sym(k) => f(k).unwrap_or(self),
            Node::Lin { c, terms } => terms.iter().fold(SymExpr::lit(c), |acc, &(t, k)| {
                acc.plus(t.substitute(f).scale(k))
            }),
            Node::Mul(fs) => fs
                .iter()
                .fold(SymExpr::lit(1), |acc, &x| acc.times(x.substitute(f))),
            Node::FloorDiv(a, b) => a.substitute(f).floor_div(b.substitute(f)),
            Node::Mod(a, b) => a.substitute(f).modulo(b.substitute(f)),
            Node::Min(a, b) => a.substitute(f).min(b.substitute(f)),
            Node::Max(a, b) => a.substitute(f).max(b.substitute(f)),
        }
    }

    /// Every symbol the expression mentions, ascending.
    pub fn symbols(self) -> Vec<u32> {
        fn walk(e: SymExpr, out: &mut Vec<u32>) {
            match node(e) {
                Node::Sym(k) => out.push(k),
                Node::Lin { terms, .. } => terms.iter().for_each(|&(t, _)| walk(t, out)),
                Node::Mul(fs) => fs.iter().for_each(|&f| walk(f, out)),
                Node::FloorDiv(a, b) | Node::Mod(a, b) | Node::Min(a, b) | Node::Max(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Reads the printed form back (`s0 - 1`, `2*s0 + s1`, `s0 // 2`, `min(s0, 4)`, with
    /// parentheses and unary minus); the result is simplified, so `parse(e.to_string()) == e`.
    pub fn parse(text: &str) -> Result<SymExpr> {
        let mut p = ExprParser { s: text, pos: 0 };
        let e = p.sum()?;
        p.ws();
        if p.pos != text.len() {
            return Err(p.err("unexpected text after the expression"));
        }
        Ok(e)
    }

    /// Precedence of the printed form: 0 a sum, 1 a product or quotient, 2 an atom.
    fn prec(self) -> u8 {
        match node(self) {
            Node::Lin { c, terms } => {
                if terms.is_empty() {
                    if c < 0 { 1 } else { 2 }
                } else if c == 0 && terms.len() == 1 {
                    1
                } else {
                    0
                }
            }
            Node::Sym(_) | Node::Min(..) | Node::Max(..) => 2,
            Node::Mul(_) | Node::FloorDiv(..) | Node::Mod(..) => 1,
        }
    }
}

fn ordered(a: SymExpr, b: SymExpr) -> (SymExpr, SymExpr) {
    if cmp(a, b) == Ordering::Greater {
        (b, a)
    } else {
        (a, b)
    }
}

/// Writes `e`, parenthesized when its precedence is below `min`.
fn write_at(f: &mut fmt::Formatter<'_>, e: SymExpr, min: u8) -> fmt::Result {
    if e.prec() < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

/// A factor inside a product: a product itself needs no parentheses, anything looser does, and
/// so do `//` and `%` (`2*(s0 // 3)` is not `2*s0 // 3`).
fn write_factor(f: &mut fmt::Formatter<'_>, e: SymExpr) -> fmt::Result {
    match node(e) {
        Node::FloorDiv(..) | Node::Mod(..) => write!(f, "({e})"),
        _ => write_at(f, e, 1),
    }
}

impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match node(*self) {
            Node::Sym(k) => write!(f, "s{k}"),
            Node::Lin { c, terms } => {
                for (i, (t, k)) in terms.iter().enumerate() {
                    let mag = k.unsigned_abs();
                    match (i, *k < 0) {
                        (0, true) => f.write_str("-")?,
                        (0, false) => {}
                        (_, true) => f.write_str(" - ")?,
                        (_, false) => f.write_str(" + ")?,
                    }
                    if mag != 1 {
                        write!(f, "{mag}*")?;
                        write_factor(f, *t)?;
                    } else {
                        write_at(f, *t, 1)?;
                    }
                }
                match (terms.is_empty(), c.cmp(&0)) {
                    (true, _) => write!(f, "{c}"),
                    (false, Ordering::Less) => write!(f, " - {}", c.unsigned_abs()),
                    (false, Ordering::Greater) => write!(f, " + {c}"),
                    (false, Ordering::Equal) => Ok(()),
                }
            }
            Node::Mul(fs) => {
                for (i, x) in fs.iter().enumerate() {
                    if i > 0 {
                        f.write_str("*")?;
                    }
                    write_factor(f, *x)?;
                }
                Ok(())
            }
            Node::FloorDiv(a, b) | Node::Mod(a, b) => {
                let op = if matches!(node(*self), Node::FloorDiv(..)) {
                    "//"
                } else {
                    "%"
                };
                write_at(f, a, 1)?;
                write!(f, " {op} ")?;
                write_at(f, b, 2)
            }
            Node::Min(a, b) => write!(f, "min({a}, {b})"),
            Node::Max(a, b) => write!(f, "max({a}, {b})"),
        }
    }
}

impl fmt::Debug for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SymExpr({self})")
    }
}

impl From<i64> for SymExpr {
    fn from(n: i64) -> Self {
        SymExpr::lit(n)
    }
}

macro_rules! sym_ops {
    ($($tr:ident $m:ident $f:ident),*) => {$(
        impl std::ops::$tr for SymExpr {
            type Output = SymExpr;
            fn $m(self, rhs: SymExpr) -> SymExpr {
                SymExpr::$f(self, rhs)
            }
        }
        impl std::ops::$tr<i64> for SymExpr {
            type Output = SymExpr;
            fn $m(self, rhs: i64) -> SymExpr {
                SymExpr::$f(self, SymExpr::lit(rhs))
            }
        }
    )*};
}
sym_ops!(Add add plus, Sub sub minus, Mul mul times, Rem rem modulo);

impl std::ops::Neg for SymExpr {
    type Output = SymExpr;
    fn neg(self) -> SymExpr {
        self.scale(-1)
    }
}

struct ExprParser<'a> {
    s: &'a str,
    pos: usize,
}

impl ExprParser<'_> {
    fn err(&self, msg: &str) -> Error {
        Error::compile(
            CompileKind::Graph,
            format!(
                "size expression `{}`: {msg} at column {}",
                self.s,
                self.pos + 1
            ),
        )
    }

    fn ws(&mut self) {
        while self.s[self.pos..].starts_with([' ', '\t']) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.pos..].starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn sum(&mut self) -> Result<SymExpr> {
        let mut e = self.term()?;
        loop {
            if self.eat("+") {
                e = e.plus(self.term()?);
            } else if self.eat("-") {
                e = e.minus(self.term()?);
            } else {
                return Ok(e);
            }
        }
    }

    fn term(&mut self) -> Result<SymExpr> {
        let mut e = self.unary()?;
        loop {
            if self.eat("//") {
                e = e.floor_div(self.unary()?);
            } else if self.eat("*") {
                e = e.times(self.unary()?);
            } else if self.eat("%") {
                e = e.modulo(self.unary()?);
            } else {
                return Ok(e);
            }
        }
    }

    fn unary(&mut self) -> Result<SymExpr> {
        if self.eat("-") {
            return Ok(-self.unary()?);
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<SymExpr> {
        self.ws();
        if self.eat("(") {
            let e = self.sum()?;
            if !self.eat(")") {
                return Err(self.err("expected `)`"));
            }
            return Ok(e);
        }
        for (name, is_min) in [("min(", true), ("max(", false)] {
            if self.eat(name) {
                let a = self.sum()?;
                if !self.eat(",") {
                    return Err(self.err("expected `,`"));
                }
                let b = self.sum()?;
                if !self.eat(")") {
                    return Err(self.err("expected `)`"));
                }
                return Ok(if is_min { a.min(b) } else { a.max(b) });
            }
        }
        let rest = &self.s[self.pos..];
        let (is_sym, body) = match rest.strip_prefix('s') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(self.err("expected a number, a symbol like `s0`, `(`, `min(` or `max(`"));
        }
        let text = &body[..digits];
        self.pos += digits + usize::from(is_sym);
        if is_sym {
            text.parse::<u32>()
                .map(SymExpr::sym)
                .map_err(|_| self.err("symbol number out of range"))
        } else {
            text.parse::<i64>()
                .map(SymExpr::lit)
                .map_err(|_| self.err("literal out of range"))
        }
    }
}

/// True when `text` reads as a size expression that mentions a symbol (`s0`, `2*s1 - 1`) or uses
/// `min`/`max` — what the graph parser reads as a symbolic size rather than a plain integer.
pub fn looks_symbolic(text: &str) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b's'
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
    }) || text.contains("min(")
        || text.contains("max(")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(k: u32) -> SymExpr {
        SymExpr::sym(k)
    }

    #[test]
    fn sums_cancel_and_print_canonically() {
        assert_eq!(s(0) - 1 + 1, s(0));
        assert_eq!(s(1) + s(0), s(0) + s(1));
        assert_eq!((s(0) + s(1) - s(0)).to_string(), "s1");
        assert_eq!((-s(0) + 4).to_string(), "-s0 + 4");
        assert_eq!((s(0) * 3 - s(1) * 2).to_string(), "3*s0 - 2*s1");
        assert_eq!((s(0) - s(0)).as_lit(), Some(0));
    }

    #[test]
    fn products_and_quotients() {
        assert_eq!((s(1) * s(0)).to_string(), "s0*s1");
        assert_eq!((s(0) * 2 * (s(1) * 3)).to_string(), "6*s0*s1");
        assert_eq!(((s(0) + 1) * s(1)).to_string(), "s1*(s0 + 1)");
        assert_eq!((s(0) * 4 + 2).floor_div(SymExpr::lit(2)), s(0) * 2 + 1);
        assert_eq!((s(0) * 4 + 3).floor_div(SymExpr::lit(2)), s(0) * 2 + 1);
        assert_eq!((s(0) * 4 + 3).modulo(SymExpr::lit(2)).as_lit(), Some(1));
        assert_eq!(
            (s(0) + 1).floor_div(SymExpr::lit(2)).to_string(),
            "(s0 + 1) // 2"
        );
        assert_eq!(
            (s(0).floor_div(SymExpr::lit(2)) * 2).to_string(),
            "2*(s0 // 2)"
        );
        assert_eq!(
            SymExpr::lit(-7).floor_div(SymExpr::lit(2)).as_lit(),
            Some(-4)
        );
        assert_eq!(SymExpr::lit(-7).modulo(SymExpr::lit(2)).as_lit(), Some(1));
    }

    #[test]
    fn min_max_use_the_size_lower_bound() {
        assert_eq!(s(0).min(s(0) + 1), s(0));
        assert_eq!(s(0).max(SymExpr::lit(1)), s(0));
        assert_eq!(SymExpr::lit(0).max(s(0) - 1), s(0) - 1);
        assert_eq!(s(0).min(SymExpr::lit(4)).to_string(), "min(s0, 4)");
        assert_eq!(s(1).max(s(0)).to_string(), "max(s0, s1)");
    }

    #[test]
    fn eval_binds_symbols_and_reports_failures() {
        let env = |k: u32| [Some(5), Some(3)][k as usize];
        assert_eq!((s(0) * s(1) - 1).eval(&env), Some(14));
        assert_eq!(s(0).floor_div(s(1)).eval(&env), Some(1));
        assert_eq!(s(0).modulo(s(1) - 3).eval(&env), None);
        assert_eq!(s(7).eval(&|_| None), None);
    }

    #[test]
    fn parse_reads_what_display_writes() {
        let cases = [
            s(0) - 1,
            s(0) * 2 + s(1) - 3,
            (s(0) + 1) * s(1),
            s(0).floor_div(SymExpr::lit(3)) * 2,
            (s(0) * s(1)).modulo(SymExpr::lit(4)),
            s(0).min(s(1) - 1).max(SymExpr::lit(3)),
            -s(0) + 4,
            SymExpr::lit(-3),
            (s(0) + 2).floor_div(s(1) + 1),
        ];
        for e in cases {
            assert_eq!(SymExpr::parse(&e.to_string()).unwrap(), e, "{e}");
        }
        assert!(SymExpr::parse("s0 +").is_err());
        assert!(SymExpr::parse("s0 s1").is_err());
        assert!(looks_symbolic("2*s0 - 1") && !looks_symbolic("12"));
    }
}
