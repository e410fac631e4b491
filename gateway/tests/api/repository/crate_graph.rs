//! The crate graph's rules, read from the manifests: a crate below another never depends on it.
//! The compiler then enforces the rest (a module of a lower crate cannot name a higher one).

use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The Sluice crates `manifest` (a path from the workspace root) depends on to build, tests
/// aside.
pub(crate) fn sluice_dependencies(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(manifest))
        .unwrap_or_else(|e| panic!("{manifest}: {e}"));
    let manifest: toml::Table = toml::from_str(&text).expect("a Cargo manifest");
    manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .map(|deps| {
            deps.keys()
                .filter(|name| name.starts_with("sluice-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The architecture, bottom up: each crate with the Sluice crates it may build on. PostgreSQL
/// (`sluice-store`) and Redis (`sluice-redis`) are side by side, neither above the other; only
/// `sluice-durable` holds both, so only it can keep them in step.
const LAYERS: &[(&str, &str, &[&str])] = &[
    ("durable/model", "sluice-model", &[]),
    ("durable/metrics", "sluice-metrics", &["sluice-model"]),
    ("durable/store", "sluice-store", &["sluice-model"]),
    (
        "durable/redis",
        "sluice-redis",
        &["sluice-model", "sluice-metrics"],
    ),
    (
        "durable",
        "sluice-durable",
        &[
            "sluice-model",
            "sluice-metrics",
            "sluice-store",
            "sluice-redis",
        ],
    ),
    (
        "durable/executor",
        "sluice-executor",
        &[
            "sluice-model",
            "sluice-metrics",
            "sluice-store",
            "sluice-redis",
            "sluice-durable",
        ],
    ),
];

#[test]
fn lower_crates_never_depend_on_higher_ones() {
    for (folder, name, allowed) in LAYERS {
        let built_on = sluice_dependencies(&format!("{folder}/Cargo.toml"));
        let above: Vec<&String> = built_on
            .iter()
            .filter(|dependency| !allowed.contains(&dependency.as_str()))
            .collect();
        assert_eq!(
            above,
            Vec::<&String>::new(),
            "{name} builds on crates it must not"
        );
        // The check reads what it claims to: each crate but the lowest names one it may.
        assert!(
            allowed.is_empty() || !built_on.is_empty(),
            "{name}'s manifest names no Sluice crate: the scan read nothing"
        );
    }
}

/// Every `.rs` file under `dir` (a path from the workspace root), as (path from the root, text).
fn sources(dir: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut pending = vec![Path::new(ROOT).join(dir)];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{folder:?}: {e}")) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "sql") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let relative = path
                    .strip_prefix(Path::new(ROOT))
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                found.push((relative, text));
            }
        }
    }
    found
}

/// Whether `text` holds a statement that writes the `commands` table.
fn writes_commands(text: &str) -> bool {
    let words = text
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    [
        "update commands ",
        "insert into commands ",
        "insert into commands(",
        "delete from commands ",
    ]
    .iter()
    .any(|statement| words.contains(statement))
}

/// `commands` is written by the life cycle only: no statement elsewhere in the durable crates, the
/// executor or the gateway writes it, and every query file that does (the group commit's batch
/// insert included) is run from `lifecycle/`.
#[test]
fn only_the_life_cycle_writes_commands() {
    let code: Vec<(String, String)> = [
        "durable/src",
        "durable/store/src",
        "durable/redis/src",
        "durable/metrics/src",
        "durable/executor/src",
        "gateway/src",
    ]
    .iter()
    .flat_map(|dir| sources(dir))
    .collect();
    assert!(code.len() > 50, "the scan read {} files", code.len());
    let outside: Vec<&str> = code
        .iter()
        .filter(|(path, text)| !path.starts_with("durable/src/lifecycle/") && writes_commands(text))
        .map(|(path, _)| path.as_str())
        .collect();
    assert_eq!(
        outside,
        Vec::<&str>::new(),
        "statements writing commands outside the life cycle"
    );

    let writers: Vec<String> = ["durable/queries", "durable/store/queries"]
        .iter()
        .flat_map(|dir| sources(dir))
        .filter(|(_, text)| writes_commands(text))
        .map(|(path, _)| path.rsplit('/').next().unwrap_or(&path).to_string())
        .collect();
    assert!(
        writers.len() >= 5,
        "query files writing commands: {writers:?}"
    );
    for file in &writers {
        for (path, _) in code.iter().filter(|(_, text)| text.contains(file.as_str())) {
            assert!(
                path.starts_with("durable/src/lifecycle/"),
                "{path} runs {file}, which writes commands"
            );
        }
    }
}

/// Whether `text` names `lifecycle::redis`, as a path (`lifecycle::redis::…`) or within a group
/// (`lifecycle::{AttemptId, redis}`).
fn names_lifecycle_redis(text: &str) -> bool {
    text.match_indices("lifecycle::").any(|(at, found)| {
        let rest = &text[at + found.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            group
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|name| name == "redis")
        } else {
            rest.strip_prefix("redis")
                .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        }
    })
}

#[test]
fn a_grouped_import_of_the_redis_side_is_found() {
    assert!(names_lifecycle_redis(
        "use sluice_durable::lifecycle::redis::Limit;"
    ));
    assert!(names_lifecycle_redis(
        "use sluice_durable::lifecycle::{AttemptId, held, redis};"
    ));
    assert!(!names_lifecycle_redis(
        "use sluice_durable::lifecycle::{AttemptId, held};"
    ));
    assert!(!names_lifecycle_redis(
        "use sluice_durable::lifecycle::redistribute;"
    ));
}

/// The Redis side of every transition (`lifecycle::redis`) is reached through the life cycle's
/// transitions only: neither the gateway nor the executor names it.
#[test]
fn the_gateway_and_the_executor_never_call_the_life_cycles_redis_side() {
    let code: Vec<(String, String)> = ["gateway/src", "durable/executor/src"]
        .iter()
        .flat_map(|dir| sources(dir))
        .collect();
    assert!(code.len() > 20, "the scan read {} files", code.len());
    let callers: Vec<&str> = code
        .iter()
        .filter(|(_, text)| names_lifecycle_redis(text))
        .map(|(path, _)| path.as_str())
        .collect();
    assert_eq!(callers, Vec::<&str>::new(), "files naming lifecycle::redis");
}

/// The modules of the life cycle import one another without a circle (a circle would make
/// two of them one unit in all but name): each module's `super::…` and `crate::lifecycle::…`
/// imports of its siblings, searched for a cycle.
#[test]
fn the_life_cycles_modules_import_one_another_without_a_circle() {
    let folder = "durable/src/lifecycle";
    let files: Vec<(String, String)> = sources(folder)
        .into_iter()
        .filter(|(path, _)| path.ends_with(".rs"))
        .collect();
    // A module is a file directly in the folder, or a folder of its own (its files together).
    let module_of = |path: &str| -> Option<String> {
        let rest = path.strip_prefix(&format!("{folder}/"))?;
        let first = rest.split('/').next()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (name != "mod").then(|| name.to_string())
    };
    let modules: std::collections::BTreeSet<String> = files
        .iter()
        .filter_map(|(path, _)| module_of(path))
        .collect();
    assert!(modules.len() >= 10, "modules: {modules:?}");
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    for (path, text) in &files {
        let Some(from) = module_of(path) else {
            continue;
        };
        let nested = path.matches('/').count() > folder.matches('/').count() + 1;
        for to in &modules {
            let mut prefixes = vec![
                format!("crate::lifecycle::{to}::"),
                format!("crate::lifecycle::{{{to}"),
            ];
            // `super::` names a sibling from a file directly in the folder only.
            if !nested {
                prefixes.push(format!("super::{to}::"));
                prefixes.push(format!("super::{{{to}"));
                prefixes.push(format!("super::{to};"));
            }
            if to != &from && prefixes.iter().any(|p| text.contains(p.as_str())) {
                edges.entry(from.clone()).or_default().insert(to.clone());
            }
        }
    }
    assert!(
        edges.values().map(|to| to.len()).sum::<usize>() >= 10,
        "the scan found too few imports to judge: {edges:?}"
    );
    // Depth-first search for a back edge.
    fn visit(
        node: &str,
        edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    for module in &modules {
        let circle = visit(module, &edges, &mut Vec::new(), &mut done);
        assert_eq!(
            circle, None,
            "a circle of imports among the life cycle's modules"
        );
    }
}
