//! Rules for handlers, quota pools and namespace settings.

use super::super::{HandlerDecl, QuotaMode, parse};
use super::{assert_refused, doc};

/// The parsed handler of the base command with `handler` replaced.
fn handler(value: &str) -> HandlerDecl {
    match parse(&doc(&[("handler", value)])) {
        Ok(model) => model.commands[0].handler.clone(),
        Err(error) => panic!("handler must parse: {error}"),
    }
}

#[test]
fn handler_is_required_with_known_kind() {
    assert_refused(
        &doc(&[("handler", "")]),
        "command[0].handler",
        "is required",
    );
    assert_refused(
        &doc(&[("handler", "1")]),
        "command[0].handler",
        "must be a table",
    );
    assert_refused(
        &doc(&[("handler", "{ pool = \"stock\" }")]),
        "command[0].handler.kind",
        "is required",
    );
    assert_refused(
        &doc(&[("handler", r#"{ kind = "grpc" }"#)]),
        "command[0].handler.kind",
        "must be one of quota, webhook",
    );
}

#[test]
fn quota_handler_rules() {
    let path = "command[0].handler";
    let cases = [
        (
            r#"{ kind = "quota", mode = "committed" }"#,
            "pool",
            "is required",
        ),
        (
            r#"{ kind = "quota", pool = "nope", mode = "committed" }"#,
            "pool",
            "no [[quota_pool]] with code \"nope\"",
        ),
        (
            r#"{ kind = "quota", pool = "stock" }"#,
            "mode",
            "is required",
        ),
        (
            r#"{ kind = "quota", pool = "stock", mode = "lazy" }"#,
            "mode",
            "must be one of committed, reserved",
        ),
        (
            r#"{ kind = "quota", pool = "stock", mode = "committed", reservation_seconds = 5 }"#,
            "reservation_seconds",
            "only allowed with mode = \"reserved\"",
        ),
        (
            r#"{ kind = "quota", pool = "stock", mode = "reserved", reservation_seconds = 0 }"#,
            "reservation_seconds",
            "between 1 and 86400",
        ),
        (
            r#"{ kind = "quota", pool = "stock", mode = "reserved", reservation_seconds = 86401 }"#,
            "reservation_seconds",
            "between 1 and 86400",
        ),
        (
            r#"{ kind = "quota", pool = "stock", mode = "committed", url = "http://x" }"#,
            "url",
            "unknown field",
        ),
    ];
    for (value, key, message) in cases {
        assert_refused(
            &doc(&[("handler", value)]),
            &format!("{path}.{key}"),
            message,
        );
    }
}

#[test]
fn quota_modes_parse() {
    assert_eq!(
        handler(r#"{ kind = "quota", pool = "stock", mode = "reserved" }"#),
        HandlerDecl::Quota {
            pool: "stock".into(),
            mode: QuotaMode::Reserved {
                reservation_seconds: 300
            }
        }
    );
    assert_eq!(
        handler(
            r#"{ kind = "quota", pool = "stock", mode = "reserved", reservation_seconds = 86400 }"#
        ),
        HandlerDecl::Quota {
            pool: "stock".into(),
            mode: QuotaMode::Reserved {
                reservation_seconds: 86_400
            }
        }
    );
}

#[test]
fn webhook_handler_rules() {
    let path = "command[0].handler";
    let long = format!(
        r#"{{ kind = "webhook", url = "https://h/{}" }}"#,
        "x".repeat(2040)
    );
    let cases = [
        (r#"{ kind = "webhook" }"#.to_owned(), "url", "is required"),
        (
            r#"{ kind = "webhook", url = "ftp://h/x" }"#.to_owned(),
            "url",
            "must start with http:// or https://",
        ),
        (
            r#"{ kind = "webhook", url = "https://" }"#.to_owned(),
            "url",
            "must name a host",
        ),
        (
            r#"{ kind = "webhook", url = "http://h/a b" }"#.to_owned(),
            "url",
            "spaces",
        ),
        (long, "url", "at most 2048"),
        (
            r#"{ kind = "webhook", url = "http://h", timeout_ms = 99 }"#.to_owned(),
            "timeout_ms",
            "between 100 and 300000",
        ),
        (
            r#"{ kind = "webhook", url = "http://h", timeout_ms = 300001 }"#.to_owned(),
            "timeout_ms",
            "between 100 and 300000",
        ),
        (
            r#"{ kind = "webhook", url = "http://h", pool = "stock" }"#.to_owned(),
            "pool",
            "unknown field",
        ),
    ];
    for (value, key, message) in cases {
        assert_refused(
            &doc(&[("handler", &value)]),
            &format!("{path}.{key}"),
            message,
        );
    }
}

#[test]
fn webhook_defaults() {
    assert_eq!(
        handler(r#"{ kind = "webhook", url = "https://h.example/x" }"#),
        HandlerDecl::Webhook {
            url: "https://h.example/x".into(),
            timeout_ms: 10_000
        }
    );
}

#[test]
fn quota_pool_rules() {
    let pool = |body: &str| format!("[[quota_pool]]\n{body}\n");
    assert_refused(&pool("capacity = 1"), "quota_pool[0].code", "is required");
    assert_refused(
        &pool("code = \"Bad\"\ncapacity = 1"),
        "quota_pool[0].code",
        "lowercase letter",
    );
    assert_refused(
        &pool("code = \"p\""),
        "quota_pool[0].capacity",
        "is required",
    );
    assert_refused(
        &pool("code = \"p\"\ncapacity = -1"),
        "quota_pool[0].capacity",
        "between 0 and 1000000000000",
    );
    assert_refused(
        &pool("code = \"p\"\ncapacity = 1000000000001"),
        "quota_pool[0].capacity",
        "between 0 and 1000000000000",
    );
    assert_refused(
        &pool("code = \"p\"\ncapacity = 1.0"),
        "quota_pool[0].capacity",
        "must be an integer",
    );
    assert_refused(
        &pool("code = \"p\"\ncapacity = 1\nsize = 2"),
        "quota_pool[0].size",
        "unknown field",
    );
    let twice = format!(
        "{}{}",
        pool("code = \"p\"\ncapacity = 1"),
        pool("code = \"p\"\ncapacity = 2")
    );
    assert_refused(
        &twice,
        "quota_pool[1].code",
        "duplicate quota_pool code \"p\"",
    );
    let max = parse(&pool("code = \"p\"\ncapacity = 1000000000000")).expect("max capacity");
    assert_eq!(max.quota_pools[0].capacity, 1_000_000_000_000);
}

#[test]
fn namespace_max_waiting() {
    let ns = |body: &str| format!("[namespace]\n{body}\n");
    let path = "namespace.max_waiting";
    assert_refused(&ns("max_waiting = 0"), path, "between 1 and 100000000");
    assert_refused(
        &ns("max_waiting = 100000001"),
        path,
        "between 1 and 100000000",
    );
    assert_refused(&ns("max_waiting = \"5\""), path, "must be an integer");
    assert_refused(
        &ns("max_wating = 5"),
        "namespace.max_wating",
        "unknown field",
    );
    let model = parse(&ns("max_waiting = 100000000")).expect("max");
    assert_eq!(model.namespace.max_waiting, 100_000_000);
}

#[test]
fn namespace_allowed_origins() {
    let origins = |list: &str| format!("[namespace]\nallowed_origins = {list}\n");
    let path = "namespace.allowed_origins";
    assert_refused(&origins("\"https://a\""), path, "must be an array");
    assert_refused(&origins("[1]"), &format!("{path}[0]"), "must be a string");
    let bad = [
        ("shop.example", "http:// or https://"),
        ("ftp://shop.example", "http:// or https://"),
        ("https://shop.example/", "without path"),
        ("https://shop.example/x", "without path"),
        ("https://shop.example?q", "without path"),
        ("https://u@shop.example", "credentials"),
        ("https://Shop.example", "lowercase"),
        ("https://", "must name a host"),
        ("https://:8080", "must name a host"),
        ("https://shop.example:0", "port"),
        ("https://shop.example:", "port"),
        ("https://shop.example:65536", "port"),
        ("https://shop.example:+80", "port"),
    ];
    for (origin, message) in bad {
        let list = format!("[\"https://ok.example\", \"{origin}\"]");
        assert_refused(&origins(&list), &format!("{path}[1]"), message);
    }
    let dup = origins(r#"["http://a", "http://b", "http://a"]"#);
    assert_refused(&dup, &format!("{path}[2]"), "duplicate origin \"http://a\"");
    let good = r#"["http://localhost:3000", "https://[::1]:8443", "https://shop.example"]"#;
    let model = parse(&origins(good)).expect("good origins");
    assert_eq!(model.namespace.allowed_origins.len(), 3);
}
