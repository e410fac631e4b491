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
    // `{a}:{subject}` renders `subject:x` too (a = "subject"): one budget, so the same numbers.
    let parsed = limits(
        "[{ key = \"subject:{subject}\", max_in_flight = 1 }, { key = \"{a}:{subject}\", max_in_flight = 1 }]",
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

/// Two commands, `region` keyed by a region and `account` by an account, with the given
/// parameters and limits.
fn two_commands(region: (&str, &str), account: (&str, &str)) -> String {
    let command = |code: &str, (parameters, limits): (&str, &str)| {
        format!(
            "[[command]]\ncode = \"{code}\"\nparameters = {parameters}\n\
             resource_key = {{ from = \"constant\", value = \"r\" }}\n\
             handler = {{ kind = \"quota\", pool = \"stock\", mode = \"committed\" }}\n\
             limits = {limits}\n\n"
        )
    };
    format!(
        "[[quota_pool]]\ncode = \"stock\"\ncapacity = 10\n\n{}{}",
        command("region", region),
        command("account", account)
    )
}

const REGION: &str = r#"{ region = { type = "string", max_length = 16 } }"#;
const ACCOUNT: &str = r#"{ account = { type = "string", max_length = 64 } }"#;

/// A rendered key is one budget: `{region}` at 10 and `{account}` at 1 both render `eu`, so
/// the later one is refused, naming the earlier, a shortest shared key and the way out.
#[test]
fn templates_that_render_one_key_need_the_same_numbers() {
    let text = two_commands(
        (REGION, r#"[{ key = "{region}", max_in_flight = 10 }]"#),
        (ACCOUNT, r#"[{ key = "{account}", max_in_flight = 1 }]"#),
    );
    let error = super::refused(&text);
    assert_eq!(error.field, "command[1].limits[0].key", "{error}");
    for part in [
        "\"{account}\" can render the same key as \"{region}\" (command[0].limits[0].key)",
        "\"\" for one",
        "\"region:{region}\" and \"account:{account}\"",
        "or declare the same numbers",
    ] {
        assert!(error.message.contains(part), "{part}: {error}");
    }
    // The way out: distinct literal text.
    let apart = two_commands(
        (
            REGION,
            r#"[{ key = "region:{region}", max_in_flight = 10 }]"#,
        ),
        (
            ACCOUNT,
            r#"[{ key = "account:{account}", max_in_flight = 1 }]"#,
        ),
    );
    assert!(parse(&apart).is_ok());
    // One account named through two parameters: one shared budget, by design.
    let shared = two_commands(
        (
            r#"{ customer = { type = "string", max_length = 64 } }"#,
            r#"[{ key = "account:{customer}", max_in_flight = 1 }]"#,
        ),
        (
            ACCOUNT,
            r#"[{ key = "account:{account}", max_in_flight = 1 }]"#,
        ),
    );
    assert!(parse(&shared).is_ok());
    // Enums that never meet, and an integer that never spells a word.
    let disjoint = two_commands(
        (
            r#"{ region = { type = "string", enum = ["eu", "us"] } }"#,
            r#"[{ key = "{region}", max_in_flight = 10 }]"#,
        ),
        (
            r#"{ account = { type = "string", enum = ["acme", "zeta"] }, n = { type = "integer" } }"#,
            r#"[{ key = "{account}", max_in_flight = 1 }, { key = "{n}", max_in_flight = 2 }]"#,
        ),
    );
    assert!(parse(&disjoint).is_ok());
}

/// Two limits of one command are held by the same commands, but by other inputs too: `{a}`
/// and `{b}` render one key when a = b.
#[test]
fn two_limits_of_one_command_may_not_render_one_key_with_other_numbers() {
    assert_refused(
        &doc(&[
            (
                "parameters",
                r#"{ a = { type = "string", max_length = 8 }, b = { type = "string", max_length = 8 } }"#,
            ),
            ("resource_key", r#"{ from = "input", field = "a" }"#),
            (
                "limits",
                r#"[{ key = "x:{a}", per_second = 5 }, { key = "x:{b}", per_second = 5, burst = 9 }]"#,
            ),
        ]),
        "command[0].limits[1].key",
        "can render the same key as \"x:{a}\" (command[0].limits[0].key), \"x:\" for one",
    );
}

/// A declaration stored before the rule loads as it was; `limit_key_conflict` names what the
/// next apply will refuse, for the executor to warn of.
#[test]
fn a_stored_declaration_reports_its_conflict() {
    let apart = two_commands(
        (
            REGION,
            r#"[{ key = "region:{region}", max_in_flight = 10 }]"#,
        ),
        (
            ACCOUNT,
            r#"[{ key = "account:{account}", max_in_flight = 1 }]"#,
        ),
    );
    let mut stored = match parse(&apart) {
        Ok(declaration) => declaration,
        Err(error) => panic!("apart: {error}"),
    };
    assert_eq!(stored.limit_key_conflict(), None);
    stored.commands[0].limits[0].key = "{region}".into();
    stored.commands[1].limits[0].key = "{account}".into();
    let conflict = stored.limit_key_conflict().map(|e| e.field);
    assert_eq!(conflict.as_deref(), Some("command[1].limits[0].key"));
}
