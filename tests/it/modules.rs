//! The crate's module graph, read from its sources: top-level modules form
//! no cycle, and no core module refers to a scenario.
//!
//! A reference is a `crate::<top>` path in code (not in comments): each item
//! of a `use crate::{a, b::c}` group, and every inline `crate::x::` path.
//! `super::` paths stay inside their module and are not counted.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The module that hosts the built-in scenarios.
const SCENARIOS: &str = "scenarios";

/// Modules allowed to know the scenarios besides `scenarios` itself: the
/// composition root that builds them and hands them to the server.
const COMPOSITION_ROOTS: &[&str] = &["cli"];

/// References that break the rules today and are on their way out; each is
/// ignored by both checks. Empty this list as they are removed.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

/// Top-level module -> the top-level modules it refers to (itself excluded).
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = without_exceptions(module_graph());
    if let Some(cycle) = find_cycle(&graph) {
        panic!("module cycle: {}\ngraph: {graph:#?}", cycle.join(" -> "));
    }
}

#[test]
fn no_core_module_refers_to_a_scenario() {
    let graph = without_exceptions(module_graph());
    let offenders: Vec<_> = graph
        .iter()
        .filter(|(module, uses)| {
            module.as_str() != SCENARIOS && !COMPOSITION_ROOTS.contains(&module.as_str()) && uses.contains(SCENARIOS)
        })
        .map(|(module, _)| module.as_str())
        .collect();
    assert!(offenders.is_empty(), "core modules referring to crate::{SCENARIOS}: {offenders:?}");
}

#[test]
fn references_are_read_from_groups_and_inline_paths_but_not_comments() {
    let source = "//! see [`crate::x`]\nuse crate::{a, b::{c, d::e}, f::*};\n/// crate::y\nfn g() { crate::h::i(); \
                  $crate::j; }\n";
    assert_eq!(references(source), BTreeSet::from(["a", "b", "f", "h"].map(String::from)));
    let cyclic = Graph::from([
        ("a".into(), BTreeSet::from(["b".into()])),
        ("b".into(), BTreeSet::from(["c".into()])),
        ("c".into(), BTreeSet::from(["a".into()])),
    ]);
    assert_eq!(find_cycle(&cyclic), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

fn without_exceptions(mut graph: Graph) -> Graph {
    for (from, to) in KNOWN_EXCEPTIONS {
        if let Some(uses) = graph.get_mut(*from) {
            uses.remove(*to);
        }
    }
    graph
}

/// Every top-level module of `src/` and what it refers to.
fn module_graph() -> Graph {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(module) = top_level_module(relative) else { continue };
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(references(&source).into_iter().filter(|used| *used != module));
    }
    assert!(graph.contains_key("dispatch") && graph.contains_key(SCENARIOS), "modules found: {graph:?}");
    graph
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// `dispatch.rs` and `dispatch/**` belong to `dispatch`; the crate root and
/// the binary belong to none.
fn top_level_module(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The top-level modules `source` names through `crate::`.
fn references(source: &str) -> BTreeSet<String> {
    let code: String =
        source.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c == '$' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        match after.strip_prefix('{') {
            Some(group) => found.extend(group_heads(group)),
            None => found.extend(identifier(after)),
        }
    }
    found
}

/// The first segment of each item of a `{...}` group (`group` starts after its `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut expecting) = (1, true);
    let mut chars = group.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => expecting = true,
            c if depth == 1 && expecting && (c.is_alphabetic() || c == '_') => {
                let head = identifier(&group[at..]).expect("starts with a letter");
                for _ in 1..head.chars().count() {
                    chars.next();
                }
                heads.push(head);
                expecting = false;
            }
            _ => {}
        }
    }
    heads
}

fn identifier(text: &str) -> Option<String> {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// A cycle of `graph` as a path that returns to its start, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(node: &str, graph: &Graph, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}
