//! The README's state diagram and transition table are the code's (`lifecycle::table`), so the
//! picture a newcomer reads cannot drift from what runs.

use sluice_durable::lifecycle::table;

#[test]
fn the_readme_shows_the_life_cycle_the_code_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let diagram = table::mermaid();
    let transitions = table::markdown();
    assert!(
        readme.contains(&diagram),
        "README.md must contain the state diagram exactly as lifecycle::table renders it:\n\n{diagram}"
    );
    assert!(
        readme.contains(&transitions),
        "README.md must contain the transition table exactly as lifecycle::table renders it:\n\n{transitions}"
    );
}
