//! The pure helpers that serve a read: query checking, origin and dependency rendering.

use std::collections::BTreeMap;

use super::super::{ReadDecl, parse, parse_read_params};

const ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

/// A read over every parameter type: `id` and `kind` in the path, the rest in the query.
fn decl() -> ReadDecl {
    let text = r#"
[[read]]
name = "items"
origin = "https://api.test/v1/{kind}/items/{id}?q={q}&n={n}&full={full}"
parameters = { id = { type = "uuid" }, kind = { type = "string", max_length = 16 }, q = { type = "string", max_length = 8 }, n = { type = "integer", min = -5, max = 100 }, full = { type = "boolean" } }
fresh_seconds = 1
dependencies = ["item:{id}", "kind:{kind}:{n}", "all-items"]
"#;
    match parse(text) {
        Ok(model) => model.reads[0].clone(),
        Err(error) => panic!("read must parse: {error}"),
    }
}

/// `(name, value)` query pairs.
fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A valid query for [`decl`], with each pair of `set` replacing or adding a parameter.
fn valid_with(set: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs = vec![
        ("id", ID),
        ("kind", "books"),
        ("q", "x"),
        ("n", "7"),
        ("full", "true"),
    ];
    for (key, value) in set {
        match pairs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => pairs.push((key, value)),
        }
    }
    query(&pairs)
}

/// Parameter values by name.
fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    query(pairs).into_iter().collect()
}

/// Asserts the query is refused on parameter `field` with a message containing `message`.
#[track_caller]
fn assert_query_refused(pairs: &[(String, String)], field: &str, message: &str) {
    match parse_read_params(&decl(), pairs) {
        Ok(values) => panic!("expected a refusal, got {values:?}"),
        Err(error) => {
            assert_eq!(error.field, field, "{error:?}");
            assert!(
                error.message.contains(message),
                "{error:?} lacks {message:?}"
            );
        }
    }
}

#[test]
fn valid_query_returns_values_by_name() {
    let values = parse_read_params(&decl(), &valid_with(&[("n", "-5")])).expect("valid");
    assert_eq!(
        values,
        params(&[
            ("id", ID),
            ("kind", "books"),
            ("q", "x"),
            ("n", "-5"),
            ("full", "true")
        ])
    );
    let none = parse("[[read]]\nname = \"r\"\norigin = \"http://h/\"\nfresh_seconds = 1\n")
        .expect("parses");
    assert_eq!(parse_read_params(&none.reads[0], &[]), Ok(BTreeMap::new()));
}

#[test]
fn query_names_are_checked() {
    assert_query_refused(&valid_with(&[("extra", "1")]), "extra", "unknown parameter");
    let mut twice = valid_with(&[]);
    twice.push(("q".into(), "y".into()));
    assert_query_refused(&twice, "q", "duplicate parameter");
    let missing: Vec<_> = valid_with(&[])
        .into_iter()
        .filter(|(k, _)| k != "n")
        .collect();
    assert_query_refused(&missing, "n", "is required");
    assert_query_refused(&[], "full", "is required");
}

#[test]
fn query_values_are_checked_by_type() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "id",
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "lowercase hex",
        ),
        ("id", "0f8fad5bd9cb469fa16570867728950e", "UUID"),
        ("q", "123456789", "at most 8 characters"),
        ("n", "101", "between -5 and 100"),
        ("n", "-6", "between -5 and 100"),
        ("n", "007", "plain decimal"),
        ("n", "+7", "plain decimal"),
        ("n", "-0", "plain decimal"),
        ("n", "7.0", "plain decimal"),
        ("n", "", "plain decimal"),
        ("n", "99999999999999999999", "plain decimal"),
        ("full", "True", "true or false"),
        ("full", "1", "true or false"),
        ("kind", "", "must not be empty"),
        ("kind", "..", "must not be empty"),
        ("kind", ".", "must not be empty"),
    ];
    for (name, value, message) in cases {
        assert_query_refused(&valid_with(&[(name, value)]), name, message);
    }
    assert!(parse_read_params(&decl(), &valid_with(&[("n", "0"), ("q", "")])).is_ok());
    assert!(parse_read_params(&decl(), &valid_with(&[("q", "..")])).is_ok());
    assert!(parse_read_params(&decl(), &valid_with(&[("q", "éééééééé")])).is_ok());
}

#[test]
fn string_enum_is_checked() {
    let text = "[[read]]\nname = \"r\"\norigin = \"http://h/{p}\"\nparameters = { p = { type = \"string\", enum = [\"gitee\", \"baidu\"] } }\nfresh_seconds = 1\n";
    let model = parse(text).expect("parses");
    let refused = parse_read_params(&model.reads[0], &query(&[("p", "other")]));
    assert_eq!(
        refused.map_err(|e| (e.field, e.message)),
        Err(("p".to_owned(), "must be one of gitee, baidu".to_owned()))
    );
    assert!(parse_read_params(&model.reads[0], &query(&[("p", "baidu")])).is_ok());
}

#[test]
fn origin_renders_plain_values() {
    let values = parse_read_params(&decl(), &valid_with(&[])).expect("valid");
    assert_eq!(
        decl().render_origin(&values),
        Ok(format!(
            "https://api.test/v1/books/items/{ID}?q=x&n=7&full=true"
        ))
    );
}

#[test]
fn origin_percent_encodes_path_values() {
    let values = params(&[
        ("id", ID),
        ("kind", "a/b?c d#e%f"),
        ("q", "x"),
        ("n", "1"),
        ("full", "false"),
    ]);
    assert_eq!(
        decl().render_origin(&values),
        Ok(format!(
            "https://api.test/v1/a%2Fb%3Fc%20d%23e%25f/items/{ID}?q=x&n=1&full=false"
        ))
    );
}

#[test]
fn origin_percent_encodes_query_values() {
    let values = params(&[
        ("id", ID),
        ("kind", "k"),
        ("q", "a&b=c+d e/?"),
        ("n", "-1"),
        ("full", "true"),
    ]);
    assert_eq!(
        decl().render_origin(&values),
        Ok(format!(
            "https://api.test/v1/k/items/{ID}?q=a%26b%3Dc%2Bd%20e%2F%3F&n=-1&full=true"
        ))
    );
}

#[test]
fn origin_percent_encodes_non_ascii_and_keeps_unreserved() {
    let values = params(&[
        ("id", ID),
        ("kind", "café-日本"),
        ("q", "A-z_0.9~"),
        ("n", "1"),
        ("full", "true"),
    ]);
    assert_eq!(
        decl().render_origin(&values),
        Ok(format!(
            "https://api.test/v1/caf%C3%A9-%E6%97%A5%E6%9C%AC/items/{ID}?q=A-z_0.9~&n=1&full=true"
        ))
    );
}

#[test]
fn origin_rendering_refuses_missing_and_dot_segments() {
    let mut values = params(&[("id", ID), ("q", "x"), ("n", "1"), ("full", "true")]);
    let missing = decl().render_origin(&values);
    assert!(
        missing.as_ref().is_err_and(|e| e.contains("\"kind\"")),
        "{missing:?}"
    );
    for bad in ["", ".", ".."] {
        values.insert("kind".into(), bad.into());
        assert!(decl().render_origin(&values).is_err(), "{bad:?}");
    }
    values.insert("kind".into(), "k".into());
    values.insert("q".into(), "..".into());
    assert!(decl().render_origin(&values).is_ok());
}

#[test]
fn dependencies_render_escaped_values() {
    let values = params(&[
        ("id", ID),
        ("kind", "a/b c"),
        ("q", "x"),
        ("n", "-3"),
        ("full", "true"),
    ]);
    assert_eq!(
        decl().render_dependencies(&values),
        vec![
            format!("item:{ID}"),
            "kind:a%2Fb%20c:-3".to_owned(),
            "all-items".to_owned()
        ]
    );
    assert_eq!(
        decl().render_dependencies(&BTreeMap::new()),
        vec!["item:", "kind::", "all-items"]
    );
}

#[test]
fn template_values_add_the_subject_only_in_subject_scope() {
    let text = "[[read]]\nname = \"mine\"\nscope = \"subject\"\norigin = \"http://h/u/{subject}/i/{id}?s={subject}\"\nparameters = { id = { type = \"integer\" } }\nfresh_seconds = 1\ndependencies = [\"user:{subject}\"]\n";
    let model = parse(text).expect("parses");
    let mine = &model.reads[0];
    let checked = parse_read_params(mine, &query(&[("id", "12")])).expect("valid");
    let values = mine.template_values(&checked, "a b/é");
    assert_eq!(values, params(&[("id", "12"), ("subject", "a b/é")]));
    assert_eq!(
        mine.render_origin(&values),
        Ok("http://h/u/a%20b%2F%C3%A9/i/12?s=a%20b%2F%C3%A9".to_owned())
    );
    assert_eq!(
        mine.render_dependencies(&values),
        vec!["user:a%20b%2F%C3%A9"]
    );
    assert!(
        mine.render_origin(&mine.template_values(&checked, ".."))
            .is_err()
    );
    let shared = decl();
    let values = params(&[("id", ID)]);
    assert_eq!(shared.template_values(&values, "someone"), values);
}
