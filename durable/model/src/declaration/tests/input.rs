//! Checking caller input, and deriving resource and limit keys from it.

use serde_json::{Map, Value, json};

use super::super::{CommandDecl, ResourceKeyDecl};
use super::example::example;
use crate::field_error::FieldError;

/// The `ocr` command of the example.
fn ocr() -> CommandDecl {
    match example().command("ocr") {
        Some(command) => command.clone(),
        None => panic!("ocr declared"),
    }
}

/// The `claim` command of the example.
fn claim() -> CommandDecl {
    match example().command("claim") {
        Some(command) => command.clone(),
        None => panic!("claim declared"),
    }
}

/// A JSON object as an input map.
fn obj(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// A valid `ocr` input with `key` set to `value` (or removed when `value` is absent).
fn ocr_input(key: &str, value: Option<Value>) -> Map<String, Value> {
    let mut input = obj(json!({
        "provider": "gitee", "account": "acc-1", "url": "https://x/y.pdf", "pages": 3, "urgent": false
    }));
    match value {
        Some(v) => input.insert(key.to_owned(), v),
        None => input.remove(key),
    };
    input
}

/// Asserts `ocr` refuses `input` on `field` with a message containing `message`.
#[track_caller]
fn assert_input_refused(
    command: &CommandDecl,
    input: &Map<String, Value>,
    field: &str,
    message: &str,
) {
    let error: FieldError = match command.validate_input(input) {
        Ok(()) => panic!("expected refusal of {input:?}"),
        Err(error) => error,
    };
    assert_eq!(error.field, field, "{error:?}");
    assert!(
        error.message.contains(message),
        "{:?} lacks {message:?}",
        error.message
    );
}

#[test]
fn valid_input_passes() {
    assert_eq!(
        ocr().validate_input(&ocr_input("urgent", Some(json!(true)))),
        Ok(())
    );
    let uuid = obj(json!({ "offer": "123e4567-e89b-12d3-a456-426614174000" }));
    assert_eq!(claim().validate_input(&uuid), Ok(()));
}

#[test]
fn missing_unknown_and_null() {
    let cmd = ocr();
    assert_input_refused(
        &cmd,
        &ocr_input("pages", None),
        "input.pages",
        "is required",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("colour", Some(json!(1))),
        "input.colour",
        "unknown field",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("urgent", Some(Value::Null)),
        "input.urgent",
        "must not be null",
    );
}

#[test]
fn uuid_shape() {
    let cmd = claim();
    let bad = [
        json!("123e4567e89b12d3a456426614174000"),
        json!("{123e4567-e89b-12d3-a456-426614174000}"),
        json!("123e4567-e89b-12d3-a456-42661417400g"),
        json!("123e4567-e89b-12d3-a456_426614174000"),
        json!("123e4567-e89b-12d3-a456-4266141740000"),
        json!("123E4567-E89B-12D3-A456-426614174000"),
        json!(""),
        json!(12),
    ];
    for value in bad {
        assert_input_refused(
            &cmd,
            &obj(json!({ "offer": value })),
            "input.offer",
            "must be a UUID",
        );
    }
}

#[test]
fn string_type_enum_and_length() {
    let cmd = ocr();
    assert_input_refused(
        &cmd,
        &ocr_input("account", Some(json!(5))),
        "input.account",
        "must be a string",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("provider", Some(json!("aws"))),
        "input.provider",
        "must be one of gitee, baidu",
    );
    let at_limit = "é".repeat(64);
    assert_eq!(
        cmd.validate_input(&ocr_input("account", Some(json!(at_limit)))),
        Ok(())
    );
    let over = "é".repeat(65);
    assert_input_refused(
        &cmd,
        &ocr_input("account", Some(json!(over))),
        "input.account",
        "at most 64 characters",
    );
}

#[test]
fn integer_and_boolean() {
    let cmd = ocr();
    let path = "input.pages";
    assert_input_refused(
        &cmd,
        &ocr_input("pages", Some(json!(0))),
        path,
        "between 1 and 500",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("pages", Some(json!(501))),
        path,
        "between 1 and 500",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("pages", Some(json!(u64::MAX))),
        path,
        "between 1 and 500",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("pages", Some(json!(3.0))),
        path,
        "must be an integer",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("pages", Some(json!("3"))),
        path,
        "must be an integer",
    );
    assert_eq!(
        cmd.validate_input(&ocr_input("pages", Some(json!(500)))),
        Ok(())
    );
    assert_input_refused(
        &cmd,
        &ocr_input("urgent", Some(json!("true"))),
        "input.urgent",
        "must be a boolean",
    );
    assert_input_refused(
        &cmd,
        &ocr_input("urgent", Some(json!(1))),
        "input.urgent",
        "must be a boolean",
    );
}

#[test]
fn resource_key_for_input_and_constant() {
    let mut cmd = ocr();
    let input = ocr_input("account", Some(json!("acc-7")));
    assert_eq!(cmd.resource_key_for(&input), "acc-7");
    cmd.resource_key = ResourceKeyDecl::Input {
        field: "pages".into(),
    };
    assert_eq!(cmd.resource_key_for(&input), "3");
    cmd.resource_key = ResourceKeyDecl::Input {
        field: "urgent".into(),
    };
    assert_eq!(cmd.resource_key_for(&input), "false");
    cmd.resource_key = ResourceKeyDecl::Constant {
        value: "all".into(),
    };
    assert_eq!(cmd.resource_key_for(&input), "all");
}

#[test]
fn render_key_substitutes_placeholders() {
    let cmd = ocr();
    let input = ocr_input("account", Some(json!("acc-7")));
    assert_eq!(cmd.limits[0].render_key(&input, "u"), "provider:gitee");
    assert_eq!(cmd.limits[1].render_key(&input, "u"), "account:gitee:acc-7");
    let mut limit = cmd.limits[0].clone();
    limit.key = "{pages}/{urgent}/{missing}!".into();
    assert_eq!(limit.render_key(&input, "u"), "3/false/!");
    limit.key = "plain".into();
    assert_eq!(limit.render_key(&input, "u"), "plain");
    limit.key = "broken{".into();
    assert_eq!(limit.render_key(&input, "u"), "broken{");
    limit.key = "subject:{subject}".into();
    assert_eq!(
        limit.render_key(&input, "user:42"),
        "subject:user%3A42",
        "the caller's subject, escaped"
    );
    let separated = ocr_input("account", Some(json!("b:c")));
    limit.key = "{provider}:{account}".into();
    assert_eq!(limit.render_key(&separated, "u"), "gitee:b%3Ac");
}
