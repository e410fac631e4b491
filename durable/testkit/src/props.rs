//! The property tests' shared configuration and strategies, for the gateway and durable crates
//! alike. Every parser that sees caller bytes has a `props` module beside its unit tests:
//! `cargo test -p sluice-durable -p sluice-gateway --lib props::` runs them all, and
//! `deploy/fuzz.sh` runs them for longer.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};

/// Cases per property: `PROPTEST_CASES` when set (`deploy/fuzz.sh` raises it), else `cases`,
/// kept small so the suite's run stays short. `PROPTEST_RNG_SEED` fixes the seed.
pub fn config(cases: u32) -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

/// Object keys: mostly a few short names, so that equal keys and near misses (case) are common,
/// and sometimes any string at all.
pub fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-cA-C_]{1,3}",
        1 => any::<String>(),
    ]
}

/// Any JSON value serde_json can hold: every number kind, any string, nested up to four deep.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            json_object(inner).prop_map(Value::Object),
        ]
    })
}

/// An object of `values` under [`json_key`]s.
pub fn json_object(
    values: impl Strategy<Value = Value>,
) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(json_key(), values, 0..8).prop_map(|m| m.into_iter().collect())
}
