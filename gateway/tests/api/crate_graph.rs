//! The crate graph's rules, read from the manifests: a crate below another never depends on it.
//! The compiler then enforces the rest (a module of a lower crate cannot name a higher one).

use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The Sluice crates `manifest` (a path from the workspace root) depends on to build, tests
/// aside.
fn sluice_dependencies(manifest: &str) -> Vec<String> {
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

#[test]
fn the_model_crate_depends_on_no_other_sluice_crate() {
    assert_eq!(
        sluice_dependencies("durable/model/Cargo.toml"),
        Vec::<String>::new(),
        "sluice-model is below every other crate"
    );
    // The check reads what it claims to: the crate above it does name it.
    assert!(
        sluice_dependencies("durable/Cargo.toml").contains(&"sluice-model".to_string()),
        "sluice-durable builds on sluice-model"
    );
}
