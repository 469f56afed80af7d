//! The layering invariant of docs/ARCHITECTURE.md: inside every crate, no import circle of more
//! than two files. Cargo already refuses circles between crates; this test reads each crate's
//! `crate::`, `super::` and `self::` paths (in `use` lines and inline) and child-module paths,
//! resolves each to the file that defines the name (a re-export resolves to the child module that
//! defines it), and fails on every strongly connected set of more than two files.
//!
//! A reader of text, not of Rust's name resolution: macros, `#[path]` and glob imports are not
//! followed, and code after a `#[cfg(test)] mod` line is left out (unit tests may import
//! anything).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates' source roots, relative to the workspace root.
const CRATES: &[&str] = &[
    "ir/src",
    "math/src",
    "kernel/src",
    "cuda/src",
    "core/src",
    "runtime/src",
    "compiler/src",
    "macros/src",
    "nn/src",
    "distributed/src",
    "python/src",
    "src",
];

type ModPath = Vec<String>;

struct Crate {
    /// Module path → file.
    files: BTreeMap<ModPath, PathBuf>,
    /// File → its code without comments and unit tests.
    code: HashMap<ModPath, String>,
    /// File → the item names it defines.
    defines: HashMap<ModPath, BTreeSet<String>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn module_path(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).expect("file under its root");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code without `//` comments and without what follows the first `#[cfg(test)]` that opens
/// a module.
fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn defined_names(code: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "const ",
        "static ",
        "union ",
        "macro_rules! ",
        "mod ",
    ];
    let mut names = BTreeSet::new();
    for line in code.lines() {
        for kw in KEYWORDS {
            let mut rest = line;
            while let Some(i) = rest.find(kw) {
                let before = rest[..i].chars().last();
                let after = &rest[i + kw.len()..];
                // `&'static T` and `*const T` name a type, they define nothing.
                if before.is_none_or(|c| c.is_whitespace() || c == '{' || c == ';') {
                    let name: String = after.chars().take_while(|&c| is_ident(c)).collect();
                    if !name.is_empty() {
                        names.insert(name);
                    }
                }
                rest = after;
            }
        }
    }
    names
}

fn load(root: &Path) -> Crate {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    let mut c = Crate {
        files: BTreeMap::new(),
        code: HashMap::new(),
        defines: HashMap::new(),
    };
    for p in paths {
        let m = module_path(root, &p);
        let code = strip(&fs::read_to_string(&p).expect("readable source"));
        c.defines.insert(m.clone(), defined_names(&code));
        c.code.insert(m.clone(), code);
        c.files.insert(m, p);
    }
    c
}

impl Crate {
    /// The file a path `base::segs` names: the longest module prefix, or — for a name that
    /// module only re-exports — the child module that defines it.
    fn resolve(&self, base: &[String], segs: &[String]) -> Option<ModPath> {
        let full: Vec<String> = base.iter().chain(segs).cloned().collect();
        for n in (0..=full.len()).rev() {
            let m = &full[..n];
            if !self.files.contains_key(m) {
                continue;
            }
            if let Some(name) = full.get(n)
                && !self.defines[m].contains(name)
            {
                let definer = self
                    .files
                    .keys()
                    .filter(|k| k.len() > n && k[..n] == *m && self.defines[*k].contains(name))
                    .min_by_key(|k| k.len());
                if let Some(k) = definer {
                    return Some(k.clone());
                }
            }
            return Some(m.to_vec());
        }
        None
    }

    /// Every file `module`'s code names.
    fn imports(&self, module: &ModPath) -> BTreeSet<ModPath> {
        let code = &self.code[module];
        let mut out = BTreeSet::new();
        for (start, _) in code.match_indices(|c: char| c.is_ascii_lowercase()) {
            if code[..start]
                .chars()
                .last()
                .is_some_and(|c| is_ident(c) || c == ':')
            {
                continue;
            }
            let line_start = code[..start].rfind('\n').map_or(0, |i| i + 1);
            let reexport = is_reexport(&code[line_start..]);
            let tail = &code[start..];
            let path: String = tail
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            let segs: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if segs.len() < 2 && !tail[path.len()..].trim_start().starts_with('{') {
                continue;
            }
            let mut heads = vec![segs.clone()];
            // `use a::b::{c, d::e}`: each item of the group.
            if let Some(group) = tail[path.len()..].trim_start().strip_prefix('{')
                && let Some(end) = group.find('}')
            {
                for item in group[..end].split(',') {
                    let item: Vec<String> = item
                        .trim()
                        .split("::")
                        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
                        .filter(|s| !s.is_empty() && s != "self" && !s.starts_with('{'))
                        .collect();
                    if !item.is_empty() {
                        heads.push(segs.iter().cloned().chain(item).collect());
                    }
                }
            }
            for segs in heads {
                let (base, rest): (ModPath, &[String]) = match segs[0].as_str() {
                    "crate" => (Vec::new(), &segs[1..]),
                    "super" => {
                        let mut base = module.clone();
                        let mut rest = &segs[..];
                        while rest.first().is_some_and(|s| s == "super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        (base, rest)
                    }
                    "self" => (module.clone(), &segs[1..]),
                    child => {
                        let mut m = module.clone();
                        m.push(child.to_string());
                        if !self.files.contains_key(&m) {
                            continue;
                        }
                        (module.clone(), &segs[..])
                    }
                };
                if let Some(target) = self.resolve(&base, rest)
                    && target != *module
                    && !target.is_empty()
                    && !(reexport && target.starts_with(module))
                {
                    out.insert(target);
                }
            }
        }
        out
    }
}

/// A `pub use` line: a module re-exporting its children's items is their facade, not their
/// user, so such a line draws no arrow to the module's own descendants.
fn is_reexport(line: &str) -> bool {
    let line = line.trim_start();
    let rest = line
        .strip_prefix("pub use ")
        .or_else(|| line.strip_prefix("pub(crate) use "))
        .or_else(|| line.strip_prefix("pub(super) use "));
    rest.is_some()
}

/// Strongly connected sets of `graph` (Tarjan).
fn components(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: HashMap<ModPath, usize>,
        low: HashMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit(s: &mut State<'_>, v: &ModPath) {
        s.index.insert(v.clone(), s.next);
        s.low.insert(v.clone(), s.next);
        s.next += 1;
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = w == *v;
                comp.push(w);
                if done {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = State {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// Every circle of more than two files, each with the arrows between its files (`a -> b`).
fn circles_of(root: &Path) -> Vec<Vec<String>> {
    let c = load(root);
    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> =
        c.files.keys().map(|m| (m.clone(), c.imports(m))).collect();
    let name = |m: &ModPath| {
        let p = &c.files[m];
        p.strip_prefix(root).unwrap_or(p).display().to_string()
    };
    components(&graph)
        .into_iter()
        .filter(|comp| comp.len() > 2)
        .map(|comp| {
            let members: BTreeSet<&ModPath> = comp.iter().collect();
            let mut arrows: Vec<String> = comp
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| (from, to))
                })
                .map(|(from, to)| format!("{} -> {}", name(from), name(to)))
                .collect();
            arrows.sort();
            arrows
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_circle_of_more_than_two_files() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = Vec::new();
    for krate in CRATES {
        for arrows in circles_of(&workspace.join(krate)) {
            report.push(format!("{krate}: {}", arrows.join(", ")));
        }
    }
    assert!(
        report.is_empty(),
        "import circles of more than two files (docs/ARCHITECTURE.md, \"Inside a crate\"):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_reader_sees_a_circle_it_is_shown() {
    // Three files that import each other in a loop, through `super::`, `crate::` and a re-export.
    let dir = std::env::temp_dir().join(format!("tp-layering-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("a")).expect("temp dir");
    let write = |p: &str, s: &str| fs::write(dir.join(p), s).expect("temp file");
    write("lib.rs", "mod a;\npub use a::b::Thing;\n");
    write("a/mod.rs", "pub mod b;\npub mod c;\npub fn helper() {}\n");
    write(
        "a/b.rs",
        "use super::c::Other;\npub struct Thing;\nfn f(_: Other) {}\n",
    );
    write(
        "a/c.rs",
        "pub struct Other;\nfn g() { crate::a::helper() }\n",
    );
    assert!(circles_of(&dir).is_empty(), "no circle yet");
    write(
        "a/mod.rs",
        "pub mod b;\npub mod c;\npub fn helper() { let _ = crate::Thing; }\n",
    );
    let found = circles_of(&dir);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0],
        [
            "a/b.rs -> a/c.rs",
            "a/c.rs -> a/mod.rs",
            "a/mod.rs -> a/b.rs"
        ],
        "{found:?}"
    );
}
