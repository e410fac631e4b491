//! The README's code map is the tree: every folder it names exists, every crate of the workspace
//! is on it, and what its row says of a crate (its package name, the crates it builds on) is what
//! the crate's manifest says, so a newcomer who follows it finds what it says.

use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The `backticked` spans of a Markdown text.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The rows of the README's "Code map" table: (the backticked folders of the first column, the
/// third column's text).
fn map_rows() -> Vec<(Vec<String>, String)> {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Code map\n")
        .nth(1)
        .expect("README.md has a \"## Code map\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let columns: Vec<&str> = row.split('|').collect();
            let first = columns.get(1).copied().unwrap_or("");
            let folders = backticked(first).map(str::to_string).collect();
            (folders, columns.get(3..).unwrap_or(&[]).join("|"))
        })
        .collect()
}

/// The backticked folders in the first column of the README's "Code map" table.
fn mapped_folders() -> Vec<String> {
    map_rows()
        .into_iter()
        .flat_map(|(folders, _)| folders)
        .collect()
}

/// The workspace's crates: (folder from the root, its manifest).
fn workspace_crates() -> Vec<(String, toml::Table)> {
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("Cargo.toml");
    let workspace: toml::Table = toml::from_str(&manifest).expect("the workspace manifest");
    workspace["workspace"]["members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .filter_map(|m| m.as_str())
        .map(|member| {
            let path = Path::new(ROOT).join(member).join("Cargo.toml");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{member}: {e}"));
            (
                member.to_string(),
                toml::from_str(&text).expect("a crate manifest"),
            )
        })
        .collect()
}

/// What a row says a crate builds on: the backticked `sluice-…` names between "builds on" and
/// the first colon after it (none for "builds on no other crate"), or `None` when it says
/// nothing.
fn said_to_build_on(text: &str) -> Option<std::collections::BTreeSet<String>> {
    let claim = text.split("builds on ").nth(1)?;
    let claim = claim.split(':').next().unwrap_or(claim);
    Some(
        backticked(claim)
            .filter(|name| name.starts_with("sluice-"))
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn a_rows_claim_of_what_a_crate_builds_on_is_read_as_written() {
    let names = |text: &str| said_to_build_on(text).map(|set| set.into_iter().collect::<Vec<_>>());
    assert_eq!(
        names("`sluice-a`, builds on `sluice-b` and `sluice-c`: the `sluice-d` side"),
        Some(vec!["sluice-b".to_string(), "sluice-c".to_string()])
    );
    assert_eq!(
        names("`sluice-a`, builds on no other crate: x"),
        Some(vec![])
    );
    assert_eq!(names("`sluice-a`: x"), None);
}

/// Each crate's row names its package and exactly the Sluice crates its manifest builds on (its
/// `[dependencies]`; the tests' own are not the architecture).
#[test]
fn the_code_map_says_of_each_crate_what_its_manifest_says() {
    let rows = map_rows();
    let crates = workspace_crates();
    assert!(crates.len() >= 8, "crates: {}", crates.len());
    for (member, manifest) in &crates {
        let package = manifest["package"]["name"]
            .as_str()
            .expect("a package name");
        let own = [format!("{member}/"), format!("{member}/src/")];
        let (_, text) = rows
            .iter()
            .find(|(folders, _)| folders.first().is_some_and(|f| own.contains(f)))
            .unwrap_or_else(|| {
                panic!("no code-map row starts with `{member}/` or `{member}/src/`")
            });
        assert!(
            text.contains(&format!("`{package}`")),
            "the row of `{member}/` does not name its package `{package}`: {text}"
        );
        let built_on: std::collections::BTreeSet<String> =
            crate::repository::crate_graph::sluice_dependencies(&format!("{member}/Cargo.toml"))
                .into_iter()
                .collect();
        let said = said_to_build_on(text)
            .unwrap_or_else(|| panic!("the row of `{member}/` does not say what it builds on"));
        assert_eq!(
            said, built_on,
            "the code map's row of `{package}` says it builds on {said:?}, its manifest {built_on:?}"
        );
    }
}

#[test]
fn the_readmes_code_map_names_the_folders_of_the_tree_and_every_crate() {
    let folders = mapped_folders();
    assert!(
        folders.len() >= 5,
        "the code map names its folders: {folders:?}"
    );
    for folder in &folders {
        assert!(
            Path::new(ROOT).join(folder).is_dir(),
            "the README's code map names `{folder}`, which is not a folder"
        );
    }
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("Cargo.toml");
    let members: toml::Table = toml::from_str(&manifest).expect("the workspace manifest");
    let members = members["workspace"]["members"]
        .as_array()
        .expect("workspace members");
    for member in members.iter().filter_map(|m| m.as_str()) {
        let prefix = format!("{member}/");
        // A crate is on the map when one of its folders is (its own row, or a folder in it;
        // a nested crate needs its own row, not its parent's).
        let nested: Vec<&str> = members
            .iter()
            .filter_map(|m| m.as_str())
            .filter(|m| m.starts_with(&prefix))
            .collect();
        assert!(
            folders.iter().any(|f| f.starts_with(&prefix)
                && !nested.iter().any(|n| f.starts_with(&format!("{n}/")))),
            "the workspace crate `{member}` is not on the README's code map"
        );
    }
}

/// The gateway tests' row lists their capabilities: every folder and file of `gateway/tests/api`
/// but the binary's root (`main.rs`) is named there, and everything named there exists.
#[test]
fn the_tests_row_names_every_capability_of_the_gateways_tests() {
    const TESTS: &str = "gateway/tests/api/";
    let rows = map_rows();
    let (_, text) = rows
        .iter()
        .find(|(folders, _)| folders.iter().any(|f| f == TESTS))
        .expect("the code map has a row for gateway/tests/api/");
    let named: std::collections::BTreeSet<String> = backticked(text)
        .filter(|name| name.ends_with('/') || name.ends_with(".rs"))
        .map(str::to_string)
        .collect();
    let on_disk: std::collections::BTreeSet<String> =
        std::fs::read_dir(Path::new(ROOT).join(TESTS))
            .expect("gateway/tests/api")
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let is_dir = entry.file_type().ok()?.is_dir();
                match (is_dir, name.as_str()) {
                    (true, _) => Some(format!("{name}/")),
                    (false, "main.rs") => None,
                    (false, file) if file.ends_with(".rs") => Some(name),
                    _ => None,
                }
            })
            .collect();
    assert!(
        on_disk.len() >= 10,
        "the tests' folders were read: {on_disk:?}"
    );
    assert_eq!(
        named, on_disk,
        "the README's row for {TESTS} names (left) what the folder holds (right)"
    );
}
