//! The overlap decision on the cases it exists for, and its edges.

use std::collections::BTreeMap;

use super::*;
use crate::declaration::model::{AdmissionBudget, HandlerDecl, IntakeBudget, ResourceKeyDecl};

fn string(max_length: u32) -> ParamDecl {
    ParamDecl::String {
        max_length,
        allowed: None,
    }
}

fn one_of(values: &[&str]) -> ParamDecl {
    ParamDecl::String {
        max_length: 64,
        allowed: Some(values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn integer(min: i64, max: i64) -> ParamDecl {
    ParamDecl::Integer { min, max }
}

fn params(list: &[(&str, ParamDecl)]) -> BTreeMap<String, ParamDecl> {
    list.iter()
        .map(|(name, param)| ((*name).to_owned(), param.clone()))
        .collect()
}

/// A shortest key `a` (with `a_params`) and `b` (with `b_params`) both render, if any.
fn shared(
    a: &str,
    a_params: &[(&str, ParamDecl)],
    b: &str,
    b_params: &[(&str, ParamDecl)],
) -> Option<String> {
    let a = KeyLanguage::of_limit(a, &params(a_params));
    let b = KeyLanguage::of_limit(b, &params(b_params));
    let there = shared_key(&a, &b);
    assert_eq!(shared_key(&b, &a), there, "the decision is symmetric");
    there
}

/// Whether `template` (with `list`) can render exactly `key`.
fn renders(template: &str, list: &[(&str, ParamDecl)], key: &str) -> bool {
    let language = KeyLanguage::of_limit(template, &params(list));
    shared_key(&language, &KeyLanguage::literal(key)).as_deref() == Some(key)
}

const UUID: &str = "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10";

/// The user's case: two free-text parameters render the same keys (the empty one first).
#[test]
fn two_strings_overlap() {
    let region = [("region", string(16))];
    let account = [("account", string(64))];
    assert_eq!(
        shared("{region}", &region, "{account}", &account).as_deref(),
        Some("")
    );
    assert_eq!(
        shared("r:{region}", &region, "r:{account}", &account).as_deref(),
        Some("r:")
    );
    assert!(renders("{account}", &account, "eu"));
    assert_eq!(
        shared("region:{region}", &region, "account:{account}", &account),
        None,
        "distinct literal text separates them"
    );
}

#[test]
fn prefixes_separate() {
    let p = [("p", string(16))];
    let pa = [("p", string(16)), ("a", string(16))];
    assert_eq!(shared("provider:{p}", &p, "account:{p}:{a}", &pa), None);
    assert_eq!(
        shared("p:{p}", &p, "p:{p}:{a}", &pa),
        None,
        "':' is never in a value"
    );
    assert_eq!(
        shared("p:{p}", &p, "p:{p}-{a}", &pa).as_deref(),
        Some("p:-"),
        "'-' is: p = \"-\" renders it too"
    );
}

#[test]
fn enums() {
    let eu_us = [("r", one_of(&["eu", "us"]))];
    let us_ap = [("a", one_of(&["us", "ap"]))];
    let ap_sa = [("a", one_of(&["ap", "sa"]))];
    assert_eq!(shared("{r}", &eu_us, "{a}", &us_ap).as_deref(), Some("us"));
    assert_eq!(shared("{r}", &eu_us, "{a}", &ap_sa), None);
    // Enum values are escaped like any value.
    let colon = [("a", one_of(&["x:y"]))];
    assert_eq!(shared("{a}", &colon, "x:y", &[]), None);
    assert_eq!(
        shared("{a}", &colon, "{s}", &[("s", string(3))]).as_deref(),
        Some("x%3Ay")
    );
    assert_eq!(
        shared("{a}", &colon, "{s}", &[("s", string(2))]),
        None,
        "\"x%3Ay\" is three characters"
    );
    let empty = [("e", one_of(&["", "x"]))];
    assert_eq!(shared("k:{e}", &empty, "k:", &[]).as_deref(), Some("k:"));
}

#[test]
fn integers_against_enums_and_integers() {
    let small = [("n", integer(0, 10))];
    assert_eq!(
        shared("{n}", &small, "{a}", &[("a", one_of(&["7", "x"]))]).as_deref(),
        Some("7")
    );
    assert_eq!(
        shared("{n}", &small, "{a}", &[("a", one_of(&["11", "x"]))]),
        None
    );
    assert_eq!(
        shared(
            "{n}",
            &small,
            "{a}",
            &[("a", one_of(&["07", "-0", "+3", "1.0"]))]
        ),
        None,
        "serde_json writes no leading zero, no sign on a non-negative, no fraction"
    );
    let signed = [("n", integer(-5, 5))];
    assert_eq!(
        shared("{n}", &signed, "{a}", &[("a", one_of(&["-3"]))]).as_deref(),
        Some("-3")
    );
    assert_eq!(
        shared("{n}", &small, "{a}", &[("a", one_of(&["-3"]))]),
        None
    );
    assert_eq!(
        shared(
            "{n}",
            &[("n", integer(0, 99))],
            "{m}",
            &[("m", integer(100, 200))]
        ),
        None
    );
    assert_eq!(
        shared(
            "{n}",
            &[("n", integer(-10, -1))],
            "{m}",
            &[("m", integer(0, 10))]
        ),
        None
    );
    let near = shared(
        "{n}",
        &[("n", integer(-1000, 1000))],
        "{m}",
        &[("m", integer(995, 2000))],
    );
    let near: Option<i64> = near.and_then(|key| key.parse().ok());
    assert!(
        near.is_some_and(|n| (995..=999).contains(&n)),
        "{near:?}: a shortest"
    );
    let full = [("n", integer(i64::MIN, i64::MAX))];
    assert_eq!(shared("{n}", &full, "{n}", &full).map(|k| k.len()), Some(1));
    for key in [
        "-9223372036854775808",
        "9223372036854775807",
        "0",
        "-1",
        "10",
    ] {
        assert!(renders("{n}", &full, key), "{key}");
    }
    for key in [
        "-9223372036854775809",
        "9223372036854775808",
        "-0",
        "01",
        "",
    ] {
        assert!(!renders("{n}", &full, key), "{key}");
    }
    assert!(renders("{n}", &[("n", integer(-7, -7))], "-7"));
    assert!(!renders("{n}", &[("n", integer(-7, -7))], "-8"));
}

#[test]
fn uuids_against_strings() {
    let id = [("id", ParamDecl::Uuid)];
    assert!(renders("{id}", &id, UUID));
    assert!(
        !renders("{id}", &id, &UUID.to_uppercase()),
        "only the lowercase form is valid"
    );
    assert_eq!(
        shared("{id}", &id, "{s}", &[("s", string(36))]).map(|k| k.len()),
        Some(36)
    );
    assert_eq!(shared("{id}", &id, "{s}", &[("s", string(35))]), None);
    assert_eq!(
        shared(
            "{id}",
            &id,
            "{a}",
            &[("a", one_of(&[&UUID.to_uppercase()]))]
        ),
        None
    );
    assert_eq!(
        shared("{id}", &id, "{a}", &[("a", one_of(&[UUID, "x"]))]).as_deref(),
        Some(UUID)
    );
    assert_eq!(
        shared("{id}", &id, "{n}", &[("n", integer(0, i64::MAX))]),
        None
    );
    assert_eq!(
        shared("{b}", &[("b", ParamDecl::Boolean)], "{id}", &id),
        None
    );
}

#[test]
fn booleans() {
    let flag = [("b", ParamDecl::Boolean)];
    assert_eq!(
        shared("{b}", &flag, "{a}", &[("a", one_of(&["true", "yes"]))]).as_deref(),
        Some("true")
    );
    assert_eq!(
        shared("{b}", &flag, "{a}", &[("a", one_of(&["yes", "1"]))]),
        None
    );
    assert_eq!(
        shared("{b}", &flag, "{s}", &[("s", string(4))]).as_deref(),
        Some("true")
    );
    assert_eq!(shared("{b}", &flag, "{s}", &[("s", string(3))]), None);
}

/// Free text counts characters, each escaped to one to four `%XX`.
#[test]
fn string_lengths_count_characters() {
    let two = [("s", string(2))];
    assert!(renders("{s}", &two, ""));
    assert!(renders("{s}", &two, "ab"));
    assert!(!renders("{s}", &two, "abc"));
    assert!(renders("{s}", &two, "%C3%A9%F0%9F%98%80"), "é😀");
    assert!(!renders("{s}", &two, "%C3%A9%F0%9F%98%80a"));
    assert!(renders("{s}", &two, "%3A%25"), ":%");
    assert!(!renders("{s}", &two, "%41"), "'A' is never escaped");
    assert!(!renders("{s}", &two, "%3a"), "escapes are uppercase");
    assert!(
        !renders("{s}", &two, "%C3"),
        "a lead byte needs its continuation"
    );
    assert!(!renders("{s}", &two, "a:"), "':' is always escaped");
}

#[test]
fn the_subject_is_one_to_128_characters() {
    let id = [("id", string(8))];
    assert_eq!(
        shared("user:{subject}", &[], "user:{id}", &id).as_deref(),
        Some("user:a")
    );
    assert_eq!(shared("s:{subject}", &[], "s:", &[]), None, "never empty");
    assert!(renders("{subject}", &[], &"a".repeat(128)));
    assert!(!renders("{subject}", &[], &"a".repeat(129)));
    assert!(renders("{subject}", &[], "user%3A42"));
    // A declaration stored before `{subject}` existed may name a parameter so; its value wins.
    assert!(renders("{subject}", &[("subject", one_of(&["x"]))], "x"));
    assert!(!renders("{subject}", &[("subject", one_of(&["x"]))], "y"));
}

/// Where the languages add keys no input renders, documented on `KeyLanguage::of_limit`.
#[test]
fn approximations_only_add_keys() {
    let x_or_y = [("a", one_of(&["x", "y"]))];
    assert!(renders("{a}:{a}", &x_or_y, "x:x"));
    assert!(
        renders("{a}:{a}", &x_or_y, "x:y"),
        "two occurrences read independently"
    );
    assert!(
        renders("k:{gone}", &[], "k:"),
        "an undeclared placeholder renders empty"
    );
    assert!(
        renders("broken{", &[], "broken{"),
        "unbalanced braces render verbatim"
    );
}

fn command(code: &str, parameters: &[(&str, ParamDecl)], limits: &[(&str, u32)]) -> CommandDecl {
    CommandDecl {
        code: code.to_owned(),
        parameters: params(parameters),
        resource_key: ResourceKeyDecl::Constant { value: "r".into() },
        deadline_seconds: 60,
        intake: IntakeBudget {
            per_second: 1,
            burst: 1,
            max_in_flight: 1,
            per_subject: None,
        },
        admission: AdmissionBudget {
            per_second: 1,
            burst: 1,
            max_in_flight: 1,
            max_queue: 1,
            max_wait_seconds: 1,
            max_in_flight_per_resource: None,
        },
        handler: HandlerDecl::Quota {
            pool: "p".into(),
            mode: crate::declaration::QuotaMode::Committed,
        },
        limits: limits
            .iter()
            .map(|(key, n)| LimitDecl {
                key: (*key).to_owned(),
                per_second: None,
                burst: None,
                max_in_flight: Some(*n),
            })
            .collect(),
        waiting_page: None,
    }
}

#[test]
fn overlapping_limits_need_the_same_numbers() {
    let region = command("a", &[("region", string(16))], &[("{region}", 10)]);
    let account = command("b", &[("account", string(64))], &[("{account}", 1)]);
    let error = match check_limit_keys(&[region.clone(), account]) {
        Err(error) => error,
        Ok(()) => panic!("must be refused"),
    };
    assert_eq!(error.field, "command[1].limits[0].key");
    for part in [
        "command[0].limits[0].key",
        "\"{region}\"",
        "\"\" for one",
        "region:{region}",
    ] {
        assert!(error.message.contains(part), "{part}: {}", error.message);
    }
    // One account named through two parameters: one budget, by design.
    let customer = command("c", &[("customer", string(64))], &[("{customer}", 10)]);
    assert_eq!(check_limit_keys(&[region.clone(), customer]), Ok(()));
    // Other numbers with text that keeps the keys apart.
    let apart = command("d", &[("account", string(64))], &[("account:{account}", 1)]);
    assert_eq!(check_limit_keys(&[region, apart]), Ok(()));
    // Two limits of one command.
    let both = command(
        "e",
        &[("a", string(8)), ("b", string(8))],
        &[("{a}", 1), ("{b}", 2)],
    );
    assert_eq!(
        check_limit_keys(&[both]).map_err(|e| e.field),
        Err("command[0].limits[1].key".to_owned())
    );
    // The burst compares as admit.lua reads it: unset is per_second.
    let rate = |burst| {
        let mut c = command("f", &[("a", string(8))], &[("{a}", 1)]);
        c.limits[0] = LimitDecl {
            key: "{a}".into(),
            per_second: Some(5),
            burst,
            max_in_flight: None,
        };
        c
    };
    let mut other = rate(Some(5));
    other.limits[0].key = "x{a}".into();
    assert_eq!(check_limit_keys(&[rate(None), other.clone()]), Ok(()));
    assert!(check_limit_keys(&[rate(Some(6)), other]).is_err());
}

/// Past its budget a check refuses (it cannot tell the templates apart), never accepts.
#[test]
fn a_check_past_its_budget_refuses() {
    let free = [("a", string(4096)), ("b", string(4096))];
    let commands = [
        command("x", &free, &[("{a}:x{b}", 1)]),
        command("y", &free, &[("{a}:y{b}", 2)]),
    ];
    assert_eq!(
        check_limit_keys(&commands),
        Ok(()),
        "x and y keep them apart"
    );
    let error = match check_limit_keys_within(&commands, 10_000) {
        Err(error) => error,
        Ok(()) => panic!("must be refused"),
    };
    assert_eq!(error.field, "command[1].limits[0].key");
    assert!(
        error
            .message
            .contains("more work than a declaration may ask for"),
        "{error}"
    );
}
