//! The README's code map is the tree: every folder it names exists, and every crate of the
//! workspace is on it, so a newcomer who follows it finds what it says.

use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The backticked folders in the first column of the README's "Code map" table.
fn mapped_folders() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Code map\n")
        .nth(1)
        .expect("README.md has a \"## Code map\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut folders = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap_or("");
        folders.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
    }
    folders
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
