//! The crate's modules are layers imported one way (see `src/lib.rs`): no module imports a
//! module that imports it back, directly or through others. Checked on the sources: each file
//! is a module, its edges are the crate's modules its paths name (`crate::…`, `super::…`,
//! `self::…` and a `mod.rs`'s own children, `use` groups expanded), comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/train/eager.rs` is `train::eager`, `src/train/mod.rs` is `train`, `src/lib.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
        m.pop();
    }
    m
}

/// The code without comments and string literals' contents.
fn code(text: &str) -> String {
    let mut out = String::new();
    let b: Vec<char> = text.chars().collect();
    let (mut i, mut block) = (0, 0);
    while i < b.len() {
        let next = b.get(i + 1).copied();
        if block > 0 {
            match (b[i], next) {
                ('*', Some('/')) => (block, i) = (block - 1, i + 2),
                ('/', Some('*')) => (block, i) = (block + 1, i + 2),
                _ => i += 1,
            }
            continue;
        }
        match (b[i], next) {
            ('/', Some('/')) => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => (block, i) = (1, i + 2),
            ('"', _) => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
                i += 1;
            }
            // A char literal ('"' in particular), not a lifetime.
            ('\'', _) if b.get(i + 2) == Some(&'\'') || next == Some('\\') => {
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The paths of a use tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_string()];
    };
    let (prefix, body) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap()]);
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in body.chars() {
        match c {
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => {
                depth += (c == '{') as i32 - (c == '}') as i32;
                cur.push(c);
            }
        }
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(&format!("{prefix}{}", p.trim())))
        .collect()
}

/// The crate's module a path names from `at` (the longest known prefix), if any.
fn resolve(modules: &BTreeSet<Module>, at: &Module, path: &str) -> Option<Module> {
    let segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut cur = at.clone();
    let mut rest = &segs[..];
    match segs[0] {
        "crate" => {
            cur.clear();
            rest = &segs[1..];
        }
        "super" | "self" => {
            while let Some(&s) = rest.first().filter(|s| **s == "super" || **s == "self") {
                if s == "super" {
                    cur.pop();
                }
                rest = &rest[1..];
            }
        }
        // A child of this module (`mod.rs`'s `pub use child::…`).
        first if modules.contains(&[at.clone(), vec![first.to_string()]].concat()) => {}
        _ => return None,
    }
    let full: Module = cur
        .into_iter()
        .chain(rest.iter().map(|s| s.to_string()))
        .collect();
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// Each file's imports of the crate's other modules.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut paths = Vec::new();
    files(src, &mut paths);
    let modules: BTreeSet<Module> = paths.iter().map(|p| module_of(src, p)).collect();
    let mut g = BTreeMap::new();
    for p in &paths {
        let m = module_of(src, p);
        let text = code(&std::fs::read_to_string(p).unwrap());
        let mut edges = BTreeSet::new();
        for line in text.lines() {
            // `use super::*` inside an inline `mod tests` names this file's module.
            if line.starts_with(' ') && line.contains("super::") {
                continue;
            }
            let mut rest = line;
            while let Some(i) = ["crate::", "super::", "self::"]
                .iter()
                .filter_map(|k| rest.find(k))
                .min()
            {
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(tail.len());
                edges.extend(resolve(&modules, &m, &tail[..end]));
                rest = &tail[end..];
            }
        }
        // Top-level `use` statements (an inline module's `use super::…` names this file).
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(start) = line
                .strip_prefix("pub use ")
                .or_else(|| line.strip_prefix("use "))
            else {
                continue;
            };
            let mut stmt = start.to_string();
            while !stmt.contains(';') {
                stmt.push_str(lines.next().unwrap_or(";"));
            }
            for path in expand(stmt.split(';').next().unwrap()) {
                edges.extend(resolve(&modules, &m, &path));
            }
        }
        edges.remove(&m);
        // The root only declares the layers and re-exports.
        if !m.is_empty() {
            edges.remove(&Module::new());
            g.insert(m, edges);
        }
    }
    g
}

/// A cycle through `from` if there is one.
fn cycle(g: &BTreeMap<Module, BTreeSet<Module>>, from: &Module) -> Option<Vec<Module>> {
    let mut stack = vec![(from.clone(), vec![from.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((m, path)) = stack.pop() {
        for next in g.get(&m).into_iter().flatten() {
            if next == from {
                return Some(path.clone());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    assert!(
        g.len() > 40,
        "{} modules: the walk missed the sources",
        g.len()
    );
    // The checker sees an import (so an empty graph would not pass).
    let eager: Module = vec!["train".into(), "eager".into()];
    assert!(g[&eager].contains(&vec!["train".into(), "sync".into()]));
    let cycles: Vec<String> = g
        .keys()
        .filter_map(|m| cycle(&g, m))
        .map(|c| {
            c.iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
    // And the layers (the top-level folders) are one way too.
    let mut layers: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, edges) in &g {
        for e in edges.iter().filter(|e| e[0] != m[0]) {
            layers
                .entry(vec![m[0].clone()])
                .or_default()
                .insert(vec![e[0].clone()]);
        }
    }
    let back: Vec<_> = layers.keys().filter_map(|l| cycle(&layers, l)).collect();
    assert!(back.is_empty(), "layers importing each other: {back:?}");
}
