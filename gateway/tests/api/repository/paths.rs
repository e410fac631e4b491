//! Every path of the repository that a comment, a script or a document names is there: a file
//! moved or renamed leaves no reader following a name to nothing. (Migrations are left out: they
//! are never edited once released, so what they name is of their day.)

use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The top folders a named path starts from.
const TOPS: [&str; 8] = [
    "gateway/",
    "durable/",
    "lua/",
    "loadtest/",
    "deploy/",
    "docs/",
    "examples/",
    "fuzz/",
];

/// What a named file ends with (a folder or a pattern is not judged).
const EXTENSIONS: [&str; 15] = [
    ".rs", ".lua", ".sql", ".sh", ".md", ".mjs", ".js", ".toml", ".py", ".json", ".html", ".css",
    ".yml", ".yaml", ".ts",
];

/// Folders not read: built, fetched or vendored files, the checked-query cache, and the
/// migrations (see the module's documentation).
fn skipped(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| {
            matches!(
                name,
                "target" | "node_modules" | "vendor" | ".git" | ".sqlx" | "migrations"
            )
        })
}

/// The files of the tree below `dir` (those that are not UTF-8 text are read as empty).
fn files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if skipped(&path) {
            continue;
        }
        if path.is_dir() {
            files(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// The repository paths named in `text`: a top folder at the start of a word (not inside
/// another path such as `target/loadtest/…`), then path characters, ending in a file extension.
fn named_paths(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let is_path_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-');
    let mut named = Vec::new();
    for top in TOPS {
        for (at, _) in text.match_indices(top) {
            if at > 0 && (is_path_char(bytes[at - 1]) || bytes[at - 1] == b'$') {
                continue;
            }
            let end = bytes[at..]
                .iter()
                .position(|&b| !is_path_char(b))
                .map_or(bytes.len(), |n| at + n);
            let path = text[at..end].trim_end_matches('.');
            if EXTENSIONS.iter().any(|ext| path.ends_with(ext)) {
                named.push(path.to_string());
            }
        }
    }
    named
}

#[test]
fn a_path_is_read_whole_and_only_from_a_word_start() {
    assert_eq!(
        named_paths(
            "see gateway/src/polls/waiting_view.rs. And target/loadtest/x.json, $out/docs/a.md"
        ),
        vec!["gateway/src/polls/waiting_view.rs".to_string()]
    );
    assert_eq!(
        named_paths("`lua/fenced/` and durable/queries/"),
        Vec::<String>::new()
    );
}

#[test]
fn every_path_the_repository_names_exists() {
    let root = Path::new(ROOT);
    let mut found = Vec::new();
    files(root, &mut found);
    assert!(
        found.len() > 300,
        "the tree was read: {} files",
        found.len()
    );
    let mut judged = 0;
    let mut missing = Vec::new();
    for file in &found {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for path in named_paths(&text) {
            judged += 1;
            if !root.join(&path).exists() {
                let shown = file
                    .strip_prefix(root)
                    .unwrap_or(file)
                    .display()
                    .to_string();
                missing.push(format!("{shown} names {path}"));
            }
        }
    }
    assert!(judged > 200, "paths were found and judged: {judged}");
    assert!(
        missing.is_empty(),
        "paths named but not in the repository:\n{}",
        missing.join("\n")
    );
}
