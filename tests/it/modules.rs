//! The workspace's layers, read from its manifests and sources: the crates
//! depend one way (core ← assistant ← tools ← the server), the core names
//! no scenario, and no source file imports in a circle.
//!
//! A file's imports are the module files its `use` trees and inline paths
//! (`crate::a::b`, `super::c`, `megamind_core::d`) name, each resolved to the
//! deepest module with a file of its own. A module may use its own children
//! (they are its parts), so edges from a file to its descendants are not
//! counted; test modules (`#[cfg(test)] mod tests { .. }`, `tests.rs`) are
//! left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The library crates of the workspace: directory, crate name, the crates it may depend on.
const CRATES: &[(&str, &str, &[&str])] = &[
    ("crates/core", "megamind_core", &[]),
    ("crates/assistant", "megamind_assistant", &["megamind-core"]),
    ("crates/tools", "megamind_tools", &["megamind-core", "megamind-assistant"]),
    (".", "megamind_scenario", &["megamind-core", "megamind-assistant", "megamind-tools"]),
];

/// Words in the core's code that would name a scenario, a scenario's route
/// or a scenario's type. The scenarios' names and route prefixes are added
/// from the modules the server hosts.
const SCENARIO_WORDS: &[&str] = &["Assistant", "TSkill", "Demo", "jsonseq", "skills", "assistant.proto"];

/// Module file graph: node (`crate::a::b`) -> the nodes it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crates_depend_one_way() {
    for (dir, _, allowed) in CRATES {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).expect("manifest");
        let manifest: toml::Table = manifest.parse().expect("TOML");
        let deps = manifest.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
        let ours: BTreeSet<&str> =
            deps.keys().map(String::as_str).filter(|name| name.starts_with("megamind-")).collect();
        let allowed: BTreeSet<&str> = allowed.iter().copied().collect();
        assert_eq!(ours, allowed, "{dir} depends on the workspace's crates it may");
    }
}

#[test]
fn the_core_names_no_scenario_route_or_type() {
    let mut words: Vec<String> = SCENARIO_WORDS.iter().map(|w| (*w).to_owned()).collect();
    let modules = megamind_scenario::scenarios::modules();
    let registry = prometheus::Registry::new();
    let built = megamind_core::scenario::module::build_all(&modules, &Default::default(), &registry).expect("built");
    for module in &modules {
        words.push(format!("\"{}\"", module.name()));
    }
    for (path, _) in &built.routes {
        let first = path.trim_start_matches('/').split('/').next().unwrap_or_default();
        words.push(format!("/{first}/"));
    }
    assert!(words.iter().any(|w| w == "/llm/"), "the assistant's routes are among the words: {words:?}");
    let core = root().join("crates/core");
    let mut files = vec![core.join("build.rs")];
    collect_rust_files(&core.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&core).unwrap().to_string_lossy().into_owned();
        if is_test_file(&file) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).expect("source"));
        for (n, line) in code.lines().enumerate() {
            for word in words.iter().filter(|word| line.contains(word.as_str())) {
                found.push(format!("{relative}:{}: {word}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the core names a scenario:\n{}", found.join("\n"));
}

#[test]
fn no_file_imports_in_a_circle() {
    let mut files = Vec::new();
    for (dir, name, _) in CRATES {
        files.extend(module_files(&root().join(dir).join("src"), name));
    }
    let modules: BTreeSet<String> = files.iter().map(|(module, ..)| module.clone()).collect();
    let mut graph = Graph::new();
    for (module, name, file) in &files {
        let code = code_of(&std::fs::read_to_string(file).expect("source"));
        let uses = imports(&code, module, name, &modules)
            .into_iter()
            .filter(|used| used != module && !used.starts_with(&format!("{module}::")))
            .collect();
        graph.insert(module.clone(), uses);
    }
    assert!(graph.contains_key("megamind_core::dispatch"), "nodes: {:?}", graph.keys().collect::<Vec<_>>());
    assert!(graph.len() > 100, "every file is read: {}", graph.len());
    let mut cycles = Vec::new();
    while let Some(cycle) = find_cycle(&graph) {
        // Cut the circle found to find the others as well.
        graph.get_mut(&cycle[0]).expect("a node").remove(&cycle[1]);
        cycles.push(cycle.join(" -> "));
    }
    assert!(cycles.is_empty(), "files importing in a circle:\n{}", cycles.join("\n"));
}

#[test]
fn imports_are_resolved_to_module_files_and_circles_found() {
    let modules =
        BTreeSet::from(["c", "c::a", "c::a::b", "c::d", "megamind_core", "megamind_core::codec"].map(String::from));
    let source = "//! [`crate::x`]\nuse crate::{a::{b::{Thing, Other}, self}, d};\nuse super::Up;\n\
                  fn f() { crate::a::b::call(); megamind_core::codec::decode(); }\n\
                  #[cfg(test)]\nmod tests {\n    use crate::d::Test;\n}\n";
    let code = code_of(source);
    assert!(!code.contains("Test"), "test modules are left out: {code}");
    let found = imports(&code, "c::a::b", "c", &modules);
    assert_eq!(found, BTreeSet::from(["c::a::b", "c::a", "c::d", "megamind_core::codec"].map(String::from)));
    let cyclic = Graph::from([
        ("a".into(), BTreeSet::from(["b".into()])),
        ("b".into(), BTreeSet::from(["c".into()])),
        ("c".into(), BTreeSet::from(["a".into()])),
    ]);
    assert_eq!(find_cycle(&cyclic), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

/// Every file module of the crate at `src` (named `name`): its path, its crate, its file.
fn module_files(src: &Path, name: &'static str) -> Vec<(String, &'static str, PathBuf)> {
    let mut files = Vec::new();
    collect_rust_files(src, &mut files);
    files
        .into_iter()
        .filter(|file| !is_test_file(file))
        .filter_map(|file| Some((module_path(name, file.strip_prefix(src).ok()?)?, name, file)))
        .collect()
}

/// `a/b.rs` of crate `c` is `c::a::b`; `lib.rs` and `main.rs` are `c`.
fn module_path(name: &str, relative: &Path) -> Option<String> {
    let mut parts = vec![name.to_owned()];
    for part in relative.with_extension("").components() {
        let part = part.as_os_str().to_str()?;
        if !matches!(part, "lib" | "main") {
            parts.push(part.to_owned());
        }
    }
    Some(parts.join("::"))
}

fn is_test_file(file: &Path) -> bool {
    file.file_name().is_some_and(|name| name == "tests.rs") || file.components().any(|c| c.as_os_str() == "tests")
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

/// `source` without comment lines and without `#[cfg(test)]` modules.
fn code_of(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            // The item it gates: one line ending in `;`, or up to its closing brace.
            let indent = &line[..line.len() - trimmed.len()];
            let closing = format!("{indent}}}");
            if let Some(gated) = lines.next()
                && !gated.trim_end().ends_with(';')
            {
                lines.by_ref().find(|line| line.trim_end() == closing);
            }
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The module files `code`, the source of `module` in crate `name`, imports.
fn imports(code: &str, module: &str, name: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut paths = Vec::new();
    let mut offset = 0;
    for line in code.lines() {
        let trimmed = line.trim_start();
        let item = trimmed
            .strip_prefix("pub ")
            .or_else(|| Some(trimmed.split_once(") ")?.1).filter(|_| trimmed.starts_with("pub(")));
        let statement = item.unwrap_or(trimmed).strip_prefix("use ");
        if let Some(start) = statement.map(|rest| offset + line.len() - rest.len()) {
            let end = code[start..].find(';').map_or(code.len(), |end| start + end);
            expand(&code[start..end].split_whitespace().collect::<String>(), "", &mut paths);
        }
        offset += line.len() + 1;
    }
    for root in ["crate::", "super::", "self::", "megamind_"] {
        let mut rest = code;
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().next_back();
            let path: String =
                rest[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            rest = &rest[at + root.len()..];
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') && !path.ends_with("::")
            {
                paths.push(path);
            }
        }
    }
    paths.iter().filter_map(|path| resolve(path, module, name, modules)).collect()
}

/// Every path of a `use` tree (`a::{b, c::{d}}`), prefixed by `prefix`.
fn expand(tree: &str, prefix: &str, paths: &mut Vec<String>) {
    let tree = tree.split(" as ").next().unwrap_or(tree);
    match tree.find('{') {
        None => paths.push(format!("{prefix}{tree}")),
        Some(open) => {
            let head = format!("{prefix}{}", &tree[..open]);
            let close = tree.rfind('}').filter(|close| *close > open).unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&inner[start..i], &head, paths);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            if start < inner.len() {
                expand(&inner[start..], &head, paths);
            }
        }
    }
}

/// The deepest module file `path` names, seen from `module` of crate `name`.
fn resolve(path: &str, module: &str, name: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = match segments.first()? {
        &"crate" => vec![name.to_owned()],
        &"self" => module.split("::").map(String::from).collect(),
        &"super" => {
            let mut base: Vec<String> = module.split("::").map(String::from).collect();
            while segments.first() == Some(&"super") {
                base.pop();
                segments.remove(0);
            }
            segments.insert(0, "super");
            base
        }
        first if modules.contains(*first) => vec![(*first).to_owned()],
        // A child of this module, or an external crate.
        first => {
            if !modules.contains(&format!("{module}::{first}")) {
                return None;
            }
            segments.insert(0, "self");
            module.split("::").map(String::from).collect()
        }
    };
    let mut found = base.join("::");
    for segment in &segments[1..] {
        base.push((*segment).to_owned());
        let candidate = base.join("::");
        if !modules.contains(&candidate) {
            break;
        }
        found = candidate;
    }
    Some(found)
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
