//! Reading the printed text form back into a graph: [`Graph::parse`].
//!
//! The parser accepts exactly what `Display for Graph` writes (see `graph/print.rs`), so that
//! `parse(print(g))` prints as `print(g)` and validates. Two facts are not in the text:
//!
//! - **An op's class.** The `ir` crate cannot see the runtime's op registry, so the caller supplies
//!   a resolver (`name -> Option<OpClass>`; the runtime's is `registry().find(name)?.class()`).
//!   A hand-written line may state the class itself in its comment (`# class: mutating`), which
//!   wins over the resolver; the printer never writes it.
//! - **Input names that are not identifiers** (`%my input`) cannot be read back; capture and the
//!   builder examples use identifiers.
//!
//! Errors name the line and column (1-based) and show the line with a caret.
//!
//! The submodules, bottom up: `line` is the cursor over one line and its tokens; `meta`, `args`
//! and `constant` read tensor types, op arguments and constant literals with it; `comment` reads
//! a line's trailing comment; `build` assembles nodes from the lines. This file walks the lines.

mod args;
mod build;
mod comment;
mod constant;
mod line;
mod meta;

use build::Parser;
use comment::{parse_comment, split_comment};
use line::Line;

use super::Graph;
use crate::error::{CompileKind, Error, Result};
use crate::op_class::OpClass;

impl Graph {
    /// Reads a graph in the printed text form (`g.to_string()`), validating it.
    ///
    /// `class_of` gives the class of each op by qualified name (the text does not carry it); a
    /// line's `# class: mutating` comment overrides it. Round trip: for a valid graph `g`,
    /// `Graph::parse(&g.to_string(), ..)` prints exactly as `g` does. Empty lists and an absent
    /// optional tensor print with a type tag where `[]`/`None` would be ambiguous: `[]:float`,
    /// `[]:bool`, `[]:Tensor`, `None:Tensor` (`[]` is an empty int list, `None` an absent
    /// non-tensor value); a present optional tensor prints `Some(%3)`. Errors give the line and column.
    ///
    /// ```
    /// use tensorplay_ir::graph::Graph;
    /// use tensorplay_ir::OpClass;
    /// let text = "graph(%x: f32[s0, 4]) {\n  %0 = tp::relu(%x) : f32[s0, 4]\n  return (%0)\n}\n";
    /// let g = Graph::parse(text, |_| Some(OpClass::Elementwise))?;
    /// assert_eq!(g.to_string(), text);
    /// let bad = Graph::parse("graph(%x: f32[4]) {\n  return (%y)\n}\n", |_| None).unwrap_err();
    /// assert!(bad.to_string().contains("line 2, column 11: `%y` is not defined"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn parse(text: &str, class_of: impl Fn(&str) -> Option<OpClass>) -> Result<Graph> {
        let mut parser = Parser::new(&class_of);
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| Line::new(l, i + 1))
            .filter(|l| !l.text.trim().is_empty());
        let Some(mut head) = lines.next() else {
            return Err(Error::compile(CompileKind::Graph, "graph text is empty"));
        };
        parser.header(&mut head)?;
        let mut closed = false;
        let mut has_return = false;
        let mut last = head.number;
        for line in lines {
            last = line.number;
            if closed {
                let l = Line::new(line.text, line.number);
                return Err(l.error_at(
                    line.text.len() - line.text.trim_start().len(),
                    "text after the closing `}`",
                ));
            }
            let (code, comment) = split_comment(line.text);
            let mut l = Line::new(code, line.number);
            let full = Line::new(line.text, line.number);
            if l.eat("}") {
                l.expect_end()?;
                if comment.is_some() {
                    return Err(full.error("the closing `}` takes no comment"));
                }
                closed = true;
                continue;
            }
            if has_return {
                return Err(l.error("a node after `return`; `return` is the last line of the body"));
            }
            let comment = parse_comment(&full, comment)?;
            if l.eat("return") {
                parser.return_line(&mut l, comment)?;
                has_return = true;
            } else {
                parser.node_line(&mut l, comment)?;
            }
        }
        if !closed {
            return Err(Error::compile(
                CompileKind::Graph,
                format!("graph text line {last}: the graph is not closed with `}}`"),
            ));
        }
        if !has_return {
            return Err(Error::compile(
                CompileKind::Graph,
                "graph text: the body has no `return (...)` line",
            ));
        }
        parser.graph.validate().map_err(|e| {
            Error::compile(
                CompileKind::Graph,
                format!("the parsed graph is invalid: {e}"),
            )
        })?;
        Ok(parser.graph)
    }
}
