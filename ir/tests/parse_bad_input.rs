//! Bad input to the graph parser is an error, never a panic: arbitrary text (non-ASCII included)
//! and mutations of a valid graph's text.

use proptest::prelude::*;
use tensorplay_ir::OpClass;
use tensorplay_ir::graph::Graph;

const VALID: &str = "graph(%x: f32[4, 8]) {
  %0 = tp::slice(%x, 0, 1, 3, 1) : f32[2, 8]
  %1 = tp::mul(%0, %0) : f32[2, 8]
  return (%1)
}
";

fn classes(name: &str) -> Option<OpClass> {
    match name {
        "tp::slice" => Some(OpClass::View),
        "tp::mul" => Some(OpClass::Elementwise),
        _ => None,
    }
}

#[test]
fn a_multibyte_character_after_a_number_is_an_error() {
    for text in [
        "graph(%x: f32[4]) {\n  %0 = tp::slice(%x, 0,é 1) : f32[1]\n  return (%0)\n}\n",
        "graph(%x: f32[4]) {\n  %0 = tp::mul(%x, nané) : f32[4]\n  return (%0)\n}\n",
        "graph(%x: f32[4]) {\n  %0 = tp::mul(%x, -inf€) : f32[4]\n  return (%0)\n}\n",
        "graph(%x: f32[é]) {\n  return (%x)\n}\n",
    ] {
        assert!(Graph::parse(text, classes).is_err(), "{text}");
    }
    assert!(Graph::parse(VALID, classes).is_ok());
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = Graph::parse(&text, classes);
    }

    #[test]
    fn a_valid_graph_with_one_character_replaced_never_panics(
        at in 0usize..VALID.len(),
        c in prop::char::any(),
    ) {
        let mut text: Vec<char> = VALID.chars().collect();
        let at = at.min(text.len() - 1);
        text[at] = c;
        let text: String = text.into_iter().collect();
        let _ = Graph::parse(&text, classes);
    }

    #[test]
    fn a_valid_graph_with_a_character_inserted_never_panics(
        at in 0usize..VALID.len(),
        c in prop::char::any(),
    ) {
        let mut text: Vec<char> = VALID.chars().collect();
        text.insert(at.min(text.len()), c);
        let text: String = text.into_iter().collect();
        let _ = Graph::parse(&text, classes);
    }
}
