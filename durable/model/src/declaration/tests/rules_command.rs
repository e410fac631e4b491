//! Rules for a command's own keys: code, resource key, deadline, intake and admission.

use super::super::{SubjectRate, parse};
use super::{assert_refused, doc};

#[test]
fn code_is_required_and_shaped() {
    assert_refused(&doc(&[("code", "")]), "command[0].code", "is required");
    assert_refused(
        &doc(&[("code", "7")]),
        "command[0].code",
        "must be a string",
    );
    assert_refused(&doc(&[("code", r#""""#)]), "command[0].code", "1 to 64");
    let long = format!("\"{}\"", "a".repeat(65));
    assert_refused(&doc(&[("code", &long)]), "command[0].code", "1 to 64");
    for bad in [r#""Claim""#, r#""1x""#, r#""-x""#, r#""a.b""#, r#""a b""#] {
        assert_refused(
            &doc(&[("code", bad)]),
            "command[0].code",
            "lowercase letter",
        );
    }
    let ok = format!("\"{}\"", "a".repeat(64));
    assert!(parse(&doc(&[("code", &ok)])).is_ok());
    assert!(parse(&doc(&[("code", r#""a-b_c9""#)])).is_ok());
}

#[test]
fn duplicate_command_code_names_the_second() {
    let text = doc(&[("code", r#""claim""#)]);
    let second = text.split("[[command]]").nth(1).unwrap_or_default();
    let text = format!("{text}\n[[command]]{second}");
    assert_refused(&text, "command[1].code", "duplicate command code \"claim\"");
}

#[test]
fn unknown_command_key_is_refused() {
    assert_refused(
        &doc(&[("colour", "1")]),
        "command[0].colour",
        "unknown field",
    );
}

#[test]
fn resource_key_rules() {
    assert_refused(
        &doc(&[("resource_key", "")]),
        "command[0].resource_key",
        "is required",
    );
    assert_refused(
        &doc(&[("resource_key", r#""id""#)]),
        "command[0].resource_key",
        "must be a table",
    );
    assert_refused(
        &doc(&[("resource_key", r#"{ field = "id" }"#)]),
        "command[0].resource_key.from",
        "is required",
    );
    assert_refused(
        &doc(&[("resource_key", r#"{ from = "header" }"#)]),
        "command[0].resource_key.from",
        "must be one of input, constant",
    );
    assert_refused(
        &doc(&[("resource_key", r#"{ from = "input" }"#)]),
        "command[0].resource_key.field",
        "is required",
    );
    assert_refused(
        &doc(&[("resource_key", r#"{ from = "input", field = "nope" }"#)]),
        "command[0].resource_key.field",
        "\"nope\" is not a declared parameter",
    );
    assert_refused(
        &doc(&[(
            "resource_key",
            r#"{ from = "input", field = "id", value = "x" }"#,
        )]),
        "command[0].resource_key.value",
        "unknown field",
    );
}

#[test]
fn constant_resource_key_rules() {
    assert_refused(
        &doc(&[("resource_key", r#"{ from = "constant" }"#)]),
        "command[0].resource_key.value",
        "is required",
    );
    assert_refused(
        &doc(&[("resource_key", r#"{ from = "constant", value = "" }"#)]),
        "command[0].resource_key.value",
        "1 to 128",
    );
    let long = format!(r#"{{ from = "constant", value = "{}" }}"#, "k".repeat(129));
    assert_refused(
        &doc(&[("resource_key", &long)]),
        "command[0].resource_key.value",
        "1 to 128",
    );
    assert_refused(
        &doc(&[(
            "resource_key",
            r#"{ from = "constant", value = "all", field = "id" }"#,
        )]),
        "command[0].resource_key.field",
        "unknown field",
    );
    let ok = format!(r#"{{ from = "constant", value = "{}" }}"#, "é".repeat(128));
    assert!(parse(&doc(&[("resource_key", &ok)])).is_ok());
}

#[test]
fn deadline_rules() {
    let path = "command[0].deadline_seconds";
    assert_refused(
        &doc(&[("deadline_seconds", "0")]),
        path,
        "between 1 and 2592000",
    );
    assert_refused(
        &doc(&[("deadline_seconds", "2592001")]),
        path,
        "between 1 and 2592000",
    );
    assert_refused(
        &doc(&[("deadline_seconds", "-5")]),
        path,
        "between 1 and 2592000",
    );
    assert_refused(
        &doc(&[("deadline_seconds", "60.0")]),
        path,
        "must be an integer",
    );
    assert_refused(
        &doc(&[("deadline_seconds", r#""60""#)]),
        path,
        "must be an integer",
    );
    let model = parse(&doc(&[("deadline_seconds", "2592000")])).expect("max deadline");
    assert_eq!(model.commands[0].deadline_seconds, 2_592_000);
    let model = parse(&doc(&[])).expect("default deadline");
    assert_eq!(model.commands[0].deadline_seconds, 600);
}

#[test]
fn intake_rules() {
    assert_refused(
        &doc(&[("intake", "5")]),
        "command[0].intake",
        "must be a table",
    );
    assert_refused(
        &doc(&[("intake", "{ per_secnd = 5 }")]),
        "command[0].intake.per_secnd",
        "unknown field",
    );
    let cases = [
        ("{ per_second = 0 }", "per_second", "between 1 and 10000000"),
        (
            "{ per_second = 10000001 }",
            "per_second",
            "between 1 and 10000000",
        ),
        ("{ burst = 0 }", "burst", "between 1 and 10000000"),
        ("{ burst = 10000001 }", "burst", "between 1 and 10000000"),
        (
            "{ max_in_flight = 0 }",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        (
            "{ max_in_flight = 1000001 }",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        (
            "{ max_in_flight = -1 }",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        ("{ per_second = 1.5 }", "per_second", "must be an integer"),
        ("{ max_queue = 5 }", "max_queue", "unknown field"),
        (
            "{ per_subject_per_second = 0 }",
            "per_subject_per_second",
            "between 1 and 10000000",
        ),
        (
            "{ per_subject_burst = 3 }",
            "per_subject_burst",
            "only allowed with per_subject_per_second",
        ),
    ];
    for (value, key, message) in cases {
        assert_refused(
            &doc(&[("intake", value)]),
            &format!("command[0].intake.{key}"),
            message,
        );
    }
}

#[test]
fn intake_burst_defaults_to_per_second() {
    let model = parse(&doc(&[("intake", "{ per_second = 7 }")])).expect("parses");
    let intake = model.commands[0].intake;
    assert_eq!(
        (intake.per_second, intake.burst, intake.max_in_flight),
        (7, 7, 1000)
    );
    let model = parse(&doc(&[("intake", "{ burst = 9 }")])).expect("parses");
    let intake = model.commands[0].intake;
    assert_eq!((intake.per_second, intake.burst), (1000, 9));
}

/// A subject's own bucket is off unless declared; its burst defaults to its rate.
#[test]
fn intake_per_subject() {
    let model = parse(&doc(&[("intake", "{ per_second = 7 }")])).expect("parses");
    assert_eq!(model.commands[0].intake.per_subject, None);
    let model = parse(&doc(&[("intake", "{ per_subject_per_second = 2 }")])).expect("parses");
    assert_eq!(
        model.commands[0].intake.per_subject,
        Some(SubjectRate {
            per_second: 2,
            burst: 2
        })
    );
    let model = parse(&doc(&[(
        "intake",
        "{ per_subject_per_second = 1, per_subject_burst = 3 }",
    )]))
    .expect("parses");
    assert_eq!(
        model.commands[0].intake.per_subject,
        Some(SubjectRate {
            per_second: 1,
            burst: 3
        })
    );
}

#[test]
fn admission_rules() {
    let cases = [
        ("{ per_second = 0 }", "per_second", "between 1 and 10000000"),
        ("{ burst = 10000001 }", "burst", "between 1 and 10000000"),
        (
            "{ max_in_flight = 1000001 }",
            "max_in_flight",
            "between 1 and 1000000",
        ),
        ("{ max_queue = 0 }", "max_queue", "between 1 and 100000000"),
        (
            "{ max_queue = 100000001 }",
            "max_queue",
            "between 1 and 100000000",
        ),
        (
            "{ max_wait_seconds = 0 }",
            "max_wait_seconds",
            "between 1 and 600",
        ),
        (
            "{ max_wait_seconds = 601 }",
            "max_wait_seconds",
            "must not exceed deadline_seconds (600)",
        ),
        (
            "{ max_wait_seconds = \"1\" }",
            "max_wait_seconds",
            "must be an integer",
        ),
        ("{ max_waiting = 1 }", "max_waiting", "unknown field"),
    ];
    for (value, key, message) in cases {
        let path = format!("command[0].admission.{key}");
        assert_refused(&doc(&[("admission", value)]), &path, message);
    }
    assert_refused(
        &doc(&[("admission", "[]")]),
        "command[0].admission",
        "must be a table",
    );
}

#[test]
fn admission_max_wait_follows_deadline() {
    let text = doc(&[
        ("deadline_seconds", "30"),
        ("admission", "{ max_wait_seconds = 31 }"),
    ]);
    assert_refused(
        &text,
        "command[0].admission.max_wait_seconds",
        "must not exceed deadline_seconds (30)",
    );
    let model = parse(&doc(&[
        ("deadline_seconds", "30"),
        ("admission", "{ per_second = 3 }"),
    ]))
    .expect("parses");
    let admission = model.commands[0].admission;
    assert_eq!(admission.max_wait_seconds, 30);
    assert_eq!((admission.per_second, admission.burst), (3, 3));
    assert_eq!(
        (admission.max_in_flight, admission.max_queue),
        (16, 100_000)
    );
}
