//! Rules for a command's `limits`.

use super::super::{LimitDecl, parse};
use super::{assert_refused, doc};

/// A document whose command declares parameters `a` and `b` and the given `limits`.
fn with_limits(limits: &str) -> String {
    doc(&[
        (
            "parameters",
            r#"{ a = { type = "string", max_length = 8 }, b = { type = "integer" } }"#,
        ),
        ("resource_key", r#"{ from = "input", field = "a" }"#),
        ("limits", limits),
    ])
}

/// The parsed limits of `with_limits(limits)`.
fn limits(limits: &str) -> Vec<LimitDecl> {
    match parse(&with_limits(limits)) {
        Ok(model) => model.commands[0].limits.clone(),
        Err(error) => panic!("limits must parse: {error}"),
    }
}

#[test]
fn limits_shape() {
    assert_refused(
        &with_limits("{ key = \"x\" }"),
        "command[0].limits",
        "must be an array",
    );
    assert_refused(
        &with_limits("[1]"),
        "command[0].limits[0]",
        "must be a table",
    );
    let nine: Vec<String> = (0..9)
        .map(|i| format!("{{ key = \"k{i}\", per_second = 1 }}"))
        .collect();
    let nine = format!("[{}]", nine.join(", "));
    assert_refused(&with_limits(&nine), "command[0].limits", "at most 8 limits");
    assert_refused(
        &with_limits("[{ key = \"k\", per_second = 1, per_minute = 2 }]"),
        "command[0].limits[0].per_minute",
        "unknown field",
    );
}

#[test]
fn limit_key_rules() {
    let path = "command[0].limits[1].key";
    let long = format!("\"{}\"", "k".repeat(201));
    let cases = [
        ("per_second = 1".to_owned(), "is required"),
        ("key = 3, per_second = 1".to_owned(), "must be a string"),
        ("key = \"\", per_second = 1".to_owned(), "1 to 200"),
        (format!("key = {long}, per_second = 1"), "1 to 200"),
        (
            "key = \"x:{a\", per_second = 1".to_owned(),
            "unbalanced braces",
        ),
        (
            "key = \"x:a}\", per_second = 1".to_owned(),
            "unbalanced braces",
        ),
        (
            "key = \"x:{{a}}\", per_second = 1".to_owned(),
            "unbalanced braces",
        ),
        (
            "key = \"x:{a}:{c}\", per_second = 1".to_owned(),
            "placeholder {c} does not name a declared parameter",
        ),
        (
            "key = \"x:{}\", per_second = 1".to_owned(),
            "placeholder {} does not name",
        ),
        (
            "key = \"ok:{a}\", per_second = 1".to_owned(),
            "duplicate limit key \"ok:{a}\"",
        ),
        (
            "key = \"x:{a}{b}\", per_second = 1".to_owned(),
            "must be separated from the one before it",
        ),
        (
            "key = \"x:{a}-v.{b}\", per_second = 1".to_owned(),
            "must be separated from the one before it",
        ),
        (
            "key = \"x%:{a}\", per_second = 1".to_owned(),
            "'%' is reserved",
        ),
    ];
    for (second, message) in cases {
        let list = format!("[{{ key = \"ok:{{a}}\", per_second = 1 }}, {{ {second} }}]");
        assert_refused(&with_limits(&list), path, message);
    }
    let ok = format!("[{{ key = \"{}\", max_in_flight = 1 }}]", "k".repeat(200));
    assert_eq!(limits(&ok).len(), 1);
}

#[test]
fn limit_needs_rate_or_concurrency() {
    assert_refused(
        &with_limits("[{ key = \"k\" }]"),
        "command[0].limits[0]",
        "must set per_second or max_in_flight",
    );
    assert_refused(
        &with_limits("[{ key = \"k\", burst = 3, max_in_flight = 1 }]"),
        "command[0].limits[0].burst",
        "only allowed with per_second",
    );
}

#[test]
fn limit_ranges() {
    let cases = [
        ("per_second = 0", "per_second", "between 1 and 10000000"),
        (
            "per_second = 10000001",
            "per_second",
            "between 1 and 10000000",
        ),
        (
            "per_second = 1, burst = 0",
            "burst",
            "between 1 and 10000000",
        ),
        (
            "max_in_flight = 0",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        (
            "max_in_flight = 1000001",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        ("max_in_flight = 2.0", "max_in_flight", "must be an integer"),
    ];
    for (body, key, message) in cases {
        let list = format!("[{{ key = \"k\", {body} }}]");
        assert_refused(
            &with_limits(&list),
            &format!("command[0].limits[0].{key}"),
            message,
        );
    }
}

#[test]
fn limit_defaults_and_values() {
    assert_eq!(
        limits(
            "[{ key = \"a:{a}:{b}\", per_second = 4, burst = 9, max_in_flight = 2 }, { key = \"global\", per_second = 3 }]"
        ),
        vec![
            LimitDecl {
                key: "a:{a}:{b}".into(),
                per_second: Some(4),
                burst: Some(9),
                max_in_flight: Some(2)
            },
            LimitDecl {
                key: "global".into(),
                per_second: Some(3),
                burst: Some(3),
                max_in_flight: None
            },
        ]
    );
}

/// `{subject}` names the caller's subject in a limit key (one person's budget), and no
/// parameter may then take that name.
#[test]
fn a_limit_key_may_name_the_subject() {
    let parsed = limits(
        "[{ key = \"subject:{subject}\", max_in_flight = 1 }, { key = \"{a}:{subject}\", per_second = 2 }]",
    );
    assert_eq!(parsed[0].key, "subject:{subject}");
    assert_eq!(parsed[1].key, "{a}:{subject}");
    let clash = doc(&[
        (
            "parameters",
            r#"{ subject = { type = "string", max_length = 8 } }"#,
        ),
        ("resource_key", r#"{ from = "input", field = "subject" }"#),
        ("limits", r#"[{ key = "s:{subject}", per_second = 1 }]"#),
    ]);
    assert_refused(
        &clash,
        "command[0].parameters.subject",
        "no parameter may be named subject",
    );
}
