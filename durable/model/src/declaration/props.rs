//! Properties of the declaration parser and of what a parsed declaration does with caller input.
//!
//! A declaration is an operator's TOML, but the parser must still refuse by value whatever it
//! is sent (`sluice apply` forwards any file): arbitrary text, and the reference example with
//! its tree mutated (a value replaced, a key dropped or added), which reaches every rule. What a
//! declaration accepts is then fed a caller's arbitrary `input`, subject and read query: the
//! checks never panic, accepted input renders keys, and two different inputs never render the
//! same limit key.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value};
use toml::Table;

use super::tests::example::EXAMPLE;
use super::*;
use sluice_testkit::props::json_value;

/// Keys and words of the declaration format, so that mutations mostly stay close to it.
const WORDS: &[&str] = &[
    "namespace",
    "command",
    "quota_pool",
    "read",
    "code",
    "parameters",
    "resource_key",
    "deadline_seconds",
    "intake",
    "admission",
    "handler",
    "limits",
    "per_second",
    "burst",
    "max_in_flight",
    "max_queue",
    "max_wait_seconds",
    "per_subject",
    "kind",
    "pool",
    "mode",
    "url",
    "timeout_ms",
    "type",
    "enum",
    "max_length",
    "min",
    "max",
    "from",
    "field",
    "value",
    "key",
    "capacity",
    "name",
    "origin",
    "scope",
    "fresh_seconds",
    "stale_seconds",
    "dependencies",
    "max_waiting",
    "allowed_origins",
    "quota",
    "webhook",
    "uuid",
    "string",
    "integer",
    "boolean",
    "input",
    "constant",
    "committed",
    "reserved",
    "application",
    "subject",
    "offer",
    "id",
    "{id}",
    "{subject}",
    "offer:{id}",
    "http://127.0.0.1:9000/x/{id}",
    "https://shop.example",
    "offer-stock",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}

/// TOML values: words, edge-of-range and any integers, floats, booleans, arrays and tables.
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        word().prop_map(toml::Value::String),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(i64::MAX),
            Just(i64::MIN),
            Just(u32::MAX as i64),
            Just(u32::MAX as i64 + 1),
            0..100_000i64,
            any::<i64>(),
        ]
        .prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            proptest::collection::btree_map(word(), inner, 0..4)
                .prop_map(|m| toml::Value::Table(m.into_iter().collect())),
        ]
    })
}

/// One change to a TOML tree, at the node its index picks among all nodes.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(prop::sample::Index, toml::Value),
    Remove(prop::sample::Index),
    Insert(prop::sample::Index, String, toml::Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), toml_value()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Remove),
        2 => (any::<prop::sample::Index>(), word(), toml_value())
            .prop_map(|(i, k, v)| Mutation::Insert(i, k, v)),
    ]
}

/// A step from a table or array to one of its children.
#[derive(Clone)]
enum Step {
    Key(String),
    Item(usize),
}

/// Paths to every node under `value` (not `value` itself).
fn paths(value: &toml::Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    let children: Vec<(Step, &toml::Value)> = match value {
        toml::Value::Table(table) => table
            .iter()
            .map(|(k, v)| (Step::Key(k.clone()), v))
            .collect(),
        toml::Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (Step::Item(i), v))
            .collect(),
        _ => Vec::new(),
    };
    for (step, child) in children {
        prefix.push(step);
        out.push(prefix.clone());
        paths(child, prefix, out);
        prefix.pop();
    }
}

fn node<'a>(root: &'a mut toml::Value, path: &[Step]) -> Option<&'a mut toml::Value> {
    path.iter()
        .try_fold(root, |value, step| match (value, step) {
            (toml::Value::Table(table), Step::Key(key)) => table.get_mut(key),
            (toml::Value::Array(items), Step::Item(i)) => items.get_mut(*i),
            _ => None,
        })
}

fn apply(root: &mut toml::Value, mutation: &Mutation) {
    let mut all = Vec::new();
    paths(root, &mut Vec::new(), &mut all);
    let pick = |index: &prop::sample::Index| all.get(index.index(all.len().max(1))).cloned();
    match mutation {
        Mutation::Replace(index, value) => {
            if let Some(target) = pick(index).and_then(|path| node(root, &path)) {
                *target = value.clone();
            }
        }
        Mutation::Remove(index) => {
            let Some(path) = pick(index) else { return };
            let Some((last, parent)) = path.split_last() else {
                return;
            };
            match (node(root, parent), last) {
                (Some(toml::Value::Table(table)), Step::Key(key)) => {
                    table.remove(key);
                }
                (Some(toml::Value::Array(items)), Step::Item(i)) if *i < items.len() => {
                    items.remove(*i);
                }
                _ => {}
            }
        }
        Mutation::Insert(index, key, value) => {
            let target = match pick(index) {
                Some(path) => node(root, &path),
                None => Some(root),
            };
            match target {
                Some(toml::Value::Table(table)) => {
                    table.insert(key.clone(), value.clone());
                }
                Some(toml::Value::Array(items)) => items.push(value.clone()),
                _ => {}
            }
        }
    }
}

fn example_tree() -> toml::Value {
    match EXAMPLE.parse::<Table>() {
        Ok(table) => toml::Value::Table(table),
        Err(e) => panic!("the example is TOML: {e}"),
    }
}

/// Documents: arbitrary text, and the example's tree with up to four mutations.
fn document() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => any::<String>(),
        6 => proptest::collection::vec(mutation(), 1..=4).prop_filter_map("serializable", |mutations| {
            let mut tree = example_tree();
            for mutation in &mutations {
                apply(&mut tree, mutation);
            }
            match tree {
                toml::Value::Table(table) => toml::to_string(&table).ok(),
                _ => None,
            }
        }),
    ]
}

/// A caller's `input`: mostly the parameter names of the example's commands with any value
/// (or a well-formed one), sometimes other names.
fn input() -> impl Strategy<Value = Map<String, Value>> {
    let name = prop_oneof![
        4 => proptest::sample::select(&["offer", "provider", "account", "url", "pages", "urgent", "id"][..])
            .prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    let value = prop_oneof![
        json_value(),
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}".prop_map(Value::from),
        proptest::sample::select(&["gitee", "baidu"][..]).prop_map(Value::from),
        (0..600i64).prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
    ];
    proptest::collection::btree_map(name, value, 0..7).prop_map(|m| m.into_iter().collect())
}

/// A read's query as the gateway hands it over: decoded pairs in request order.
fn query() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        3 => Just("id".to_owned()),
        1 => any::<String>(),
    ];
    let value = prop_oneof![
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        any::<String>(),
        Just(".".to_owned()),
        Just(String::new()),
    ];
    proptest::collection::vec((name, value), 0..3)
}

/// Everything a parsed declaration does with one caller's bytes; none of it may panic.
fn serve(
    declaration: &Declaration,
    input: &Map<String, Value>,
    subject: &str,
    query: &[(String, String)],
) {
    for command in &declaration.commands {
        if command.validate_input(input).is_ok() {
            let _ = command.resource_key_for(input);
            let _ = render_limit_keys(&command.limits, input, subject);
        }
    }
    for read in &declaration.reads {
        if let Ok(params) = parse_read_params(read, query) {
            let values = read.template_values(&params, subject);
            let _ = read.render_origin(&values);
            let _ = read.render_dependencies(&values);
        }
    }
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(128))]

    #[test]
    fn parse_is_total_and_what_it_accepts_round_trips(
        text in document(),
        input in input(),
        subject in any::<String>(),
        query in query(),
    ) {
        match parse(&text) {
            Ok(declaration) => {
                // Stored as JSON and read back: it must come back unchanged.
                let stored = serde_json::to_string(&declaration)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let loaded: Declaration = serde_json::from_str(&stored)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&loaded, &declaration);
                serve(&declaration, &input, &subject, &query);
            }
            Err(error) => {
                prop_assert!(!error.field.is_empty());
                prop_assert!(!error.message.is_empty());
            }
        }
    }

    #[test]
    fn caller_input_is_checked_by_value(input in input(), subject in any::<String>(), query in query()) {
        let declaration = match parse(EXAMPLE) {
            Ok(declaration) => declaration,
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        serve(&declaration, &input, &subject, &query);
        let claim = declaration.command("claim").cloned().unwrap_or_else(|| panic!("claim"));
        let offer_ok = input.len() == 1
            && input.get("offer").and_then(Value::as_str).is_some_and(input::is_uuid);
        prop_assert_eq!(claim.validate_input(&input).is_ok(), offer_ok);
        if offer_ok {
            prop_assert_eq!(Some(claim.resource_key_for(&input)), input["offer"].as_str().map(str::to_owned));
        }
        let read = declaration.read("offer").cloned().unwrap_or_else(|| panic!("offer"));
        let query_ok = query.len() == 1 && query[0].0 == "id" && input::is_uuid(&query[0].1);
        let expected: Option<BTreeMap<String, String>> =
            query_ok.then(|| query.iter().cloned().collect());
        prop_assert_eq!(parse_read_params(&read, &query).ok(), expected);
    }

    #[test]
    fn different_inputs_never_share_a_limit_key(
        first in ("[a-z:{}%]{0,4}", any::<String>()),
        second in ("[a-z:{}%]{0,4}", any::<String>()),
        subject in any::<String>(),
    ) {
        prop_assume!(first != second);
        let declaration = match parse(EXAMPLE) {
            Ok(declaration) => declaration,
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let ocr = declaration.command("ocr").cloned().unwrap_or_else(|| panic!("ocr"));
        let input = |(provider, account): &(String, String)| -> Map<String, Value> {
            [("provider", provider), ("account", account)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Value::from(v.as_str())))
                .collect()
        };
        let one = render_limit_keys(&ocr.limits, &input(&first), &subject);
        let two = render_limit_keys(&ocr.limits, &input(&second), &subject);
        // `account:{provider}:{account}`: `a:b` + `c` and `a` + `b:c` are two budgets.
        prop_assert_ne!(&one[1][1], &two[1][1]);
    }
}
