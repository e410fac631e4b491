//! The overlap decision against brute force, and against the real rendering.
//!
//! Templates whose placeholders have finite languages (small enums, booleans, short integer
//! ranges) can be rendered with every input: two templates then collide exactly when the two
//! sets of keys meet, and the decision must say so, with a shortest key of the meeting. Free
//! text and the subject cannot be enumerated: every key rendered from an arbitrary value must
//! at least be in their language, or a collision could be missed.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::*;

/// A placeholder with finitely many values: an enum over a tiny alphabet (`:` and `é` are
/// escaped, `-` and digits meet the integers'), a boolean, or a short integer range.
fn finite_param() -> impl Strategy<Value = ParamDecl> {
    prop_oneof![
        proptest::collection::btree_set("[a1:-]{0,1}|é", 1..4).prop_map(|values| {
            ParamDecl::String {
                max_length: 2,
                allowed: Some(values.into_iter().collect()),
            }
        }),
        Just(ParamDecl::Boolean),
        (-12i64..12, 0i64..16).prop_map(|(min, len)| ParamDecl::Integer {
            min,
            max: min + len
        }),
    ]
}

/// Every value a finite placeholder accepts, as an input value.
fn values(param: &ParamDecl) -> Vec<Value> {
    match param {
        ParamDecl::String {
            allowed: Some(values),
            ..
        } => values.iter().map(|v| Value::from(v.as_str())).collect(),
        ParamDecl::Boolean => vec![Value::from(true), Value::from(false)],
        ParamDecl::Integer { min, max } => (*min..=*max).map(Value::from).collect(),
        ParamDecl::String { .. } | ParamDecl::Uuid => Vec::new(),
    }
}

/// One piece of a template: text over a tiny alphabet, or a finite placeholder.
#[derive(Debug, Clone)]
enum Spec {
    Text(String),
    Param(ParamDecl),
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        "[a1:-]{1,2}".prop_map(Spec::Text),
        "[a1:-]".prop_map(Spec::Text),
        finite_param().prop_map(Spec::Param),
    ]
}

/// A template of up to four pieces, each placeholder named once, with its parameters.
fn template(specs: &[Spec]) -> (String, BTreeMap<String, ParamDecl>) {
    let mut text = String::new();
    let mut parameters = BTreeMap::new();
    for (i, spec) in specs.iter().enumerate() {
        match spec {
            Spec::Text(literal) => text.push_str(literal),
            Spec::Param(param) => {
                text.push_str(&format!("{{p{i}}}"));
                parameters.insert(format!("p{i}"), param.clone());
            }
        }
    }
    (text, parameters)
}

/// Two templates: independent ones, or the second cut from a key the first renders, each cut
/// piece kept as text or replaced by a placeholder that may or may not render it, so that
/// many pairs collide and many nearly do.
fn two_templates() -> impl Strategy<Value = [(String, BTreeMap<String, ParamDecl>); 2]> {
    let cut = (1usize..=3, any::<bool>(), finite_param());
    prop_oneof![
        1 => (
            proptest::collection::vec(spec(), 0..=4),
            proptest::collection::vec(spec(), 0..=4),
        )
            .prop_map(|(first, second)| [template(&first), template(&second)]),
        3 => (
            proptest::collection::vec(spec(), 1..=4),
            any::<prop::sample::Index>(),
            proptest::collection::vec(cut, 1..=6),
        )
            .prop_map(|(first, pick, cuts)| {
                let (text, parameters) = template(&first);
                let keys: Vec<String> = every_key(&text, &parameters).into_iter().collect();
                let key: Vec<char> = keys
                    .get(pick.index(keys.len().max(1)))
                    .map(|k| k.chars().collect())
                    .unwrap_or_default();
                let mut second = Vec::new();
                let mut at = 0;
                for (len, as_param, param) in cuts {
                    if at == key.len() {
                        break;
                    }
                    let end = (at + len).min(key.len());
                    let piece: String = key[at..end].iter().collect();
                    at = end;
                    second.push(match as_param {
                        true => Spec::Param(param),
                        false => Spec::Text(piece),
                    });
                }
                second.push(Spec::Text(key[at..].iter().collect()));
                [(text, parameters), template(&second)]
            }),
    ]
}

/// Every key the template renders, through `LimitDecl::render_key`.
fn every_key(template: &str, parameters: &BTreeMap<String, ParamDecl>) -> BTreeSet<String> {
    let limit = LimitDecl {
        key: template.to_owned(),
        per_second: None,
        burst: None,
        max_in_flight: Some(1),
    };
    let mut inputs = vec![Map::new()];
    for (name, param) in parameters {
        inputs = inputs
            .into_iter()
            .flat_map(|input| {
                values(param).into_iter().map(move |value| {
                    let mut input = input.clone();
                    input.insert(name.clone(), value);
                    input
                })
            })
            .collect();
    }
    inputs
        .iter()
        .map(|input| limit.render_key(input, "unused"))
        .collect()
}

/// A free-text placeholder, or the subject, and a value it accepts.
fn free_value() -> impl Strategy<Value = (Option<u32>, String)> {
    prop_oneof![
        (0u32..6, any::<String>()).prop_map(|(max, value)| {
            let value: String = value.chars().take(max as usize).collect();
            (Some(max), value)
        }),
        "\\PC{1,128}".prop_map(|subject| (None, subject)),
    ]
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn the_decision_is_exact_on_finite_templates(
        [(a, a_params), (b, b_params)] in two_templates(),
    ) {
        let a_keys = every_key(&a, &a_params);
        let b_keys = every_key(&b, &b_params);
        let common: BTreeSet<&String> = a_keys.intersection(&b_keys).collect();
        let decided = shared_key(
            &KeyLanguage::of_limit(&a, &a_params),
            &KeyLanguage::of_limit(&b, &b_params),
        );
        eprintln!("CASE {} {a:?} {b:?} {decided:?}", decided.is_some());
        match decided {
            Some(key) => {
                prop_assert!(a_keys.contains(&key), "{a} does not render {key:?}");
                prop_assert!(b_keys.contains(&key), "{b} does not render {key:?}");
                let shortest = common.iter().map(|k| k.len()).min();
                prop_assert_eq!(Some(key.len()), shortest, "not a shortest key");
            }
            None => prop_assert!(common.is_empty(), "{} and {} both render {:?}", a, b, common),
        }
    }

    #[test]
    fn free_text_renders_into_its_language(
        prefix in "[a1:]{0,2}",
        (max_length, value) in free_value(),
    ) {
        let (template, parameters, input, subject) = match max_length {
            Some(max_length) => (
                format!("{prefix}{{s}}"),
                BTreeMap::from([(
                    "s".to_owned(),
                    ParamDecl::String { max_length, allowed: None },
                )]),
                Map::from_iter([("s".to_owned(), Value::from(value.as_str()))]),
                String::from("unused"),
            ),
            None => (format!("{prefix}{{subject}}"), BTreeMap::new(), Map::new(), value),
        };
        let limit = LimitDecl {
            key: template.clone(),
            per_second: Some(1),
            burst: Some(1),
            max_in_flight: None,
        };
        let key = limit.render_key(&input, &subject);
        let found = shared_key(
            &KeyLanguage::of_limit(&template, &parameters),
            &KeyLanguage::literal(&key),
        );
        prop_assert_eq!(found.as_deref(), Some(key.as_str()));
    }
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(128))]

    /// Integer ranges of many lengths, against the values around and inside them (and their
    /// other spellings, which `serde_json` never writes).
    #[test]
    fn integer_ranges_are_exact(
        min in prop_oneof![-200_000i64..200_000, Just(i64::MIN), Just(i64::MAX - 5_000)],
        len in 0i64..5_000,
        inside in any::<prop::sample::Index>(),
    ) {
        let max = min.saturating_add(len);
        let parameters = BTreeMap::from([("n".to_owned(), ParamDecl::Integer { min, max })]);
        let language = KeyLanguage::of_limit("{n}", &parameters);
        let renders = |key: &str| {
            shared_key(&language, &KeyLanguage::literal(key)).as_deref() == Some(key)
        };
        let picked = min.saturating_add(i64::try_from(inside.index(usize::try_from(len).unwrap_or(0) + 1)).unwrap_or(0));
        for n in [min.saturating_sub(1), min, picked, max, max.saturating_add(1)]
            .into_iter()
            .chain((-12..=12).filter_map(|k| min.checked_add(k)))
            .chain((-12..=12).filter_map(|k| max.checked_add(k)))
        {
            prop_assert_eq!(renders(&n.to_string()), (min..=max).contains(&n), "{} in {}..={}", n, min, max);
            prop_assert!(!renders(&format!("0{n}")), "0{} has a leading zero", n);
            prop_assert!(!renders(&format!("+{n}")), "+{} has a sign", n);
        }
    }
}
