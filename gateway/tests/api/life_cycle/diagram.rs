//! The life-cycle page's state diagram and transition table (`docs/life-cycle.md`) are the
//! code's (`lifecycle::table`), so the picture a newcomer reads cannot drift from what runs.

use sluice_durable::lifecycle::table;

#[test]
fn the_life_cycle_page_shows_the_life_cycle_the_code_runs() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/life-cycle.md"
    ))
    .expect("docs/life-cycle.md");
    let diagram = table::mermaid();
    let transitions = table::markdown();
    assert!(
        page.contains(&diagram),
        "docs/life-cycle.md must contain the state diagram exactly as lifecycle::table renders it:\n\n{diagram}"
    );
    assert!(
        page.contains(&transitions),
        "docs/life-cycle.md must contain the transition table exactly as lifecycle::table renders it:\n\n{transitions}"
    );
}
