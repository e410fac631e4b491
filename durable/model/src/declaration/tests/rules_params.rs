//! Rules for a command's `parameters`.

use super::super::{ParamDecl, parse};
use super::{assert_refused, doc};

/// A document whose command declares `parameters` and keys on a constant.
fn with_params(parameters: &str) -> String {
    doc(&[
        ("parameters", parameters),
        ("resource_key", r#"{ from = "constant", value = "all" }"#),
    ])
}

/// The parsed declaration of parameter `p` in `with_params(parameters)`.
fn param(parameters: &str) -> ParamDecl {
    match parse(&with_params(parameters)) {
        Ok(model) => model.commands[0].parameters["p"].clone(),
        Err(error) => panic!("parameters must parse: {error}"),
    }
}

#[test]
fn parameters_may_be_absent() {
    let model = parse(&with_params("")).expect("parses");
    assert!(model.commands[0].parameters.is_empty());
}

#[test]
fn parameters_shape() {
    assert_refused(
        &with_params("[]"),
        "command[0].parameters",
        "must be a table",
    );
    assert_refused(
        &with_params(r#"{ p = "uuid" }"#),
        "command[0].parameters.p",
        "must be a table",
    );
    let nine: Vec<String> = (0..9)
        .map(|i| format!("p{i} = {{ type = \"boolean\" }}"))
        .collect();
    let nine = format!("{{ {} }}", nine.join(", "));
    assert_refused(
        &with_params(&nine),
        "command[0].parameters",
        "at most 8 parameters",
    );
    let eight: Vec<String> = (0..8)
        .map(|i| format!("p{i} = {{ type = \"boolean\" }}"))
        .collect();
    assert!(parse(&with_params(&format!("{{ {} }}", eight.join(", ")))).is_ok());
}

#[test]
fn parameter_names() {
    for bad in ["Offer", "\"a-b\"", "_x", "\"9x\""] {
        let text = with_params(&format!("{{ {bad} = {{ type = \"uuid\" }} }}"));
        let name = bad.trim_matches('"');
        assert_refused(
            &text,
            &format!("command[0].parameters.{name}"),
            "lowercase letter",
        );
    }
    let long = "a".repeat(65);
    let text = with_params(&format!("{{ {long} = {{ type = \"uuid\" }} }}"));
    assert_refused(&text, &format!("command[0].parameters.{long}"), "1 to 64");
}

#[test]
fn parameter_type() {
    let path = "command[0].parameters.p.type";
    assert_refused(
        &with_params("{ p = { max_length = 3 } }"),
        path,
        "is required",
    );
    assert_refused(
        &with_params(r#"{ p = { type = "float" } }"#),
        path,
        "must be one of uuid, string, integer, boolean",
    );
    assert_refused(
        &with_params("{ p = { type = 1 } }"),
        path,
        "must be a string",
    );
    assert_eq!(param(r#"{ p = { type = "uuid" } }"#), ParamDecl::Uuid);
    assert_eq!(param(r#"{ p = { type = "boolean" } }"#), ParamDecl::Boolean);
}

#[test]
fn keys_not_valid_for_a_type_are_unknown() {
    let cases = [
        (
            r#"{ p = { type = "uuid", max_length = 36 } }"#,
            "max_length",
        ),
        (r#"{ p = { type = "boolean", min = 0 } }"#, "min"),
        (
            r#"{ p = { type = "integer", max_length = 3 } }"#,
            "max_length",
        ),
        (
            r#"{ p = { type = "string", max_length = 3, min = 1 } }"#,
            "min",
        ),
        (r#"{ p = { type = "integer", enum = [1] } }"#, "enum"),
    ];
    for (params, key) in cases {
        let path = format!("command[0].parameters.p.{key}");
        assert_refused(&with_params(params), &path, "unknown field");
    }
}

#[test]
fn string_max_length() {
    let path = "command[0].parameters.p.max_length";
    assert_refused(
        &with_params(r#"{ p = { type = "string" } }"#),
        path,
        "is required",
    );
    assert_refused(
        &with_params(r#"{ p = { type = "string", max_length = 0 } }"#),
        path,
        "between 1 and 4096",
    );
    assert_refused(
        &with_params(r#"{ p = { type = "string", max_length = 4097 } }"#),
        path,
        "between 1 and 4096",
    );
    assert_eq!(
        param(r#"{ p = { type = "string", max_length = 4096 } }"#),
        ParamDecl::String {
            max_length: 4096,
            allowed: None
        }
    );
}

#[test]
fn string_enum_rules() {
    let path = "command[0].parameters.p.enum";
    let cases = [
        (
            r#"{ p = { type = "string", max_length = 3, enum = [] } }"#,
            path.to_owned(),
            "must not be empty",
        ),
        (
            r#"{ p = { type = "string", max_length = 3, enum = "a" } }"#,
            path.to_owned(),
            "must be an array",
        ),
        (
            r#"{ p = { type = "string", max_length = 3, enum = ["a", 1] } }"#,
            format!("{path}[1]"),
            "must be a string",
        ),
        (
            r#"{ p = { type = "string", max_length = 3, enum = ["a", "abcd"] } }"#,
            format!("{path}[1]"),
            "at most max_length (3)",
        ),
        (
            r#"{ p = { type = "string", max_length = 3, enum = ["a", "b", "a"] } }"#,
            format!("{path}[2]"),
            "duplicate value \"a\"",
        ),
    ];
    for (params, field, message) in cases {
        assert_refused(&with_params(params), &field, message);
    }
}

#[test]
fn string_enum_length_counts_chars_and_defaults_max_length() {
    assert_eq!(
        param(r#"{ p = { type = "string", max_length = 2, enum = ["éé", "ab"] } }"#),
        ParamDecl::String {
            max_length: 2,
            allowed: Some(vec!["éé".into(), "ab".into()])
        }
    );
    assert_eq!(
        param(r#"{ p = { type = "string", enum = ["x", "ééé"] } }"#),
        ParamDecl::String {
            max_length: 3,
            allowed: Some(vec!["x".into(), "ééé".into()])
        }
    );
    assert_eq!(
        param(r#"{ p = { type = "string", enum = [""] } }"#),
        ParamDecl::String {
            max_length: 1,
            allowed: Some(vec![String::new()])
        }
    );
    let long = format!(
        r#"{{ p = {{ type = "string", enum = ["{}"] }} }}"#,
        "x".repeat(4097)
    );
    assert_refused(
        &with_params(&long),
        "command[0].parameters.p.enum[0]",
        "at most 4096",
    );
}

#[test]
fn integer_bounds() {
    assert_eq!(
        param(r#"{ p = { type = "integer" } }"#),
        ParamDecl::Integer {
            min: i64::MIN,
            max: i64::MAX
        }
    );
    assert_eq!(
        param(r#"{ p = { type = "integer", min = -5, max = -5 } }"#),
        ParamDecl::Integer { min: -5, max: -5 }
    );
    assert_refused(
        &with_params(r#"{ p = { type = "integer", min = 2, max = 1 } }"#),
        "command[0].parameters.p.max",
        "must not be less than min (2)",
    );
    assert_refused(
        &with_params(r#"{ p = { type = "integer", min = 1.5 } }"#),
        "command[0].parameters.p.min",
        "must be an integer",
    );
    assert_refused(
        &with_params(r#"{ p = { type = "integer", max = "9" } }"#),
        "command[0].parameters.p.max",
        "must be an integer",
    );
}
