//! The benchmarks' declarations are valid, with the commands the benchmarks call: the baselines'
//! (its own commands before the shared sale) and the shared sale alone.

fn codes(text: &str) -> Vec<String> {
    sluice_durable::declaration::parse(text)
        .expect("a valid declaration")
        .commands
        .into_iter()
        .map(|c| c.code)
        .collect()
}

#[test]
fn the_benchmark_declarations_parse() {
    assert_eq!(
        codes(sluice_loadtest::baselines::DECLARATION),
        ["decide", "hold", "claim"]
    );
    assert_eq!(
        codes(sluice_loadtest::bench_stack::CLAIM_DECLARATION),
        ["claim"]
    );
}
