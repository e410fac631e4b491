//! Rules for `[[read]]` declarations.

use std::collections::BTreeMap;

use super::super::{ParamDecl, ReadDecl, ReadScope, parse};
use super::{assert_refused, doc};

/// The keys of a small valid read, in order; tests replace, add or drop keys.
const BASE_READ: &[(&str, &str)] = &[
    ("name", r#""r""#),
    ("origin", r#""http://origin.test/items/{id}""#),
    ("parameters", r#"{ id = { type = "uuid" } }"#),
    ("fresh_seconds", "2"),
];

/// A document with one read built from [`BASE_READ`], where each `(key, value)` in `set`
/// replaces or adds a key and an empty value drops it.
fn with_read(set: &[(&str, &str)]) -> String {
    let mut keys: Vec<(&str, &str)> = BASE_READ.to_vec();
    for (key, value) in set {
        match keys.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => keys.push((key, value)),
        }
    }
    let body: Vec<String> = keys
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    format!("[[read]]\n{}\n", body.join("\n"))
}

/// The parsed read of `with_read(set)`.
fn read(set: &[(&str, &str)]) -> ReadDecl {
    match parse(&with_read(set)) {
        Ok(model) => model.reads[0].clone(),
        Err(error) => panic!("read must parse: {error}\n---\n{}", with_read(set)),
    }
}

#[test]
fn minimal_read_gets_defaults() {
    assert_eq!(
        read(&[]),
        ReadDecl {
            name: "r".into(),
            origin: "http://origin.test/items/{id}".into(),
            parameters: BTreeMap::from([("id".to_owned(), ParamDecl::Uuid)]),
            scope: ReadScope::Application,
            fresh_seconds: 2,
            stale_seconds: 0,
            dependencies: vec![],
            max_bytes: 262_144,
            negative_seconds: 5,
            timeout_ms: 2000,
        }
    );
}

#[test]
fn every_field_may_be_set() {
    let decl = read(&[
        ("name", r#""offer-page_2""#),
        (
            "origin",
            r#""https://api.test:8443/v1/{kind}/items?id={id}&full={full}""#,
        ),
        (
            "parameters",
            r#"{ id = { type = "uuid" }, kind = { type = "string", enum = ["a", "b"] }, full = { type = "boolean" } }"#,
        ),
        ("scope", r#""subject""#),
        ("fresh_seconds", "86400"),
        ("stale_seconds", "86400"),
        ("dependencies", r#"["offer:{id}", "pool:offer-stock"]"#),
        ("max_bytes", "1"),
        ("negative_seconds", "1"),
        ("timeout_ms", "30000"),
    ]);
    assert_eq!(decl.scope, ReadScope::Subject);
    assert_eq!(decl.parameters.len(), 3);
    assert_eq!(
        (decl.fresh_seconds, decl.stale_seconds, decl.max_bytes),
        (86_400, 86_400, 1)
    );
    assert_eq!((decl.negative_seconds, decl.timeout_ms), (1, 30_000));
    assert_eq!(decl.dependencies, vec!["offer:{id}", "pool:offer-stock"]);
}

#[test]
fn reads_live_beside_commands_and_may_take_no_parameters() {
    let text = format!(
        "{}\n{}",
        doc(&[]),
        with_read(&[
            ("origin", r#""http://[::1]:9000/stock""#),
            ("parameters", "")
        ])
    );
    let model = parse(&text).expect("parses");
    assert_eq!(model.commands.len(), 1);
    assert!(model.reads[0].parameters.is_empty());
    let decl = read(&[("parameters", "{}"), ("origin", r#""https://h""#)]);
    assert!(decl.parameters.is_empty());
    let escaped = r#""https://h/x%2Fy/{id}?a=1&b=(2)&c=~*""#;
    assert_eq!(
        read(&[("origin", escaped)]).origin,
        escaped.trim_matches('"')
    );
}

#[test]
fn unknown_read_key_is_refused() {
    assert_refused(&with_read(&[("ttl", "3")]), "read[0].ttl", "unknown field");
}

#[test]
fn too_many_reads_are_refused() {
    let text: String = (0..257)
        .map(|i| format!("[[read]]\nname = \"r{i}\"\norigin = \"http://h/\"\nfresh_seconds = 1\n"))
        .collect();
    assert_refused(&text, "read", "at most 256 reads");
}

#[test]
fn read_name_rules() {
    let path = "read[0].name";
    assert_refused(&with_read(&[("name", "")]), path, "is required");
    assert_refused(&with_read(&[("name", "3")]), path, "must be a string");
    assert_refused(
        &with_read(&[("name", r#""Offer""#)]),
        path,
        "lowercase letter",
    );
    assert_refused(&with_read(&[("name", r#""""#)]), path, "1 to 64");
    let long = format!("\"{}\"", "r".repeat(65));
    assert_refused(&with_read(&[("name", &long)]), path, "1 to 64");
    let two = format!("{}{}", with_read(&[]), with_read(&[]));
    assert_refused(&two, "read[1].name", "duplicate read name \"r\"");
}

#[test]
fn read_origin_rules() {
    let path = "read[0].origin";
    let cases: &[(&str, &str)] = &[
        ("", "is required"),
        ("7", "must be a string"),
        (r#""ftp://h/{id}""#, "must start with http:// or https://"),
        (r#""{id}://h/""#, "must start with http:// or https://"),
        (r#""http://""#, "must name a host"),
        (r#""http:///items/{id}""#, "must name a host"),
        (r#""http://h/a b/{id}""#, "must not contain spaces"),
        (r#""http://h/caf\u00e9/{id}""#, "non-ASCII"),
        (r#""http://h/\n{id}""#, "control"),
        (r#""http://h/{id}#top""#, "must not contain a fragment"),
        (r#""http://{id}/x""#, "only in the path and query"),
        (r#""http://h{id}.test/x""#, "only in the path and query"),
        (r#""http://h:{id}/x""#, "only in the path and query"),
        (r#""http://u:p@h/{id}""#, "must not contain credentials"),
        (r#""http://h/{id""#, "unbalanced braces"),
        (r#""http://h/}{id}""#, "unbalanced braces"),
        (
            r#""http://h/{other}""#,
            "{other} does not name a declared parameter",
        ),
        (
            r#""http://h/x?q={}""#,
            "{} does not name a declared parameter",
        ),
        (r#""http://h:99999/{id}""#, "port must be a number"),
        (r#""http://h:0/{id}""#, "port must be a number"),
        (r#""http://h:x/{id}""#, "port must be a number"),
        (r#""http://h:/{id}""#, "port must be a number"),
        (r#""http://h/a<b>/{id}""#, "'<' is not allowed in a URL"),
        (r#""http://h/a\"b/{id}""#, "'\"' is not allowed in a URL"),
        (r#""http://h/a|b/{id}""#, "'|' is not allowed in a URL"),
        (r#""http://h/a%2/{id}""#, "'%' must start a %XX escape"),
        (r#""http://h/{id}%zz""#, "'%' must start a %XX escape"),
        (r#""http://:80/{id}""#, "must be a valid URL with a host"),
    ];
    for (origin, message) in cases {
        assert_refused(&with_read(&[("origin", origin)]), path, message);
    }
    let long = format!("\"http://h/{}{{id}}\"", "a".repeat(2048));
    assert_refused(&with_read(&[("origin", &long)]), path, "at most 2048");
    let fits = format!("\"http://h/{}{{id}}\"", "a".repeat(2048 - 13));
    assert_eq!(read(&[("origin", &fits)]).origin.len(), 2048);
}

#[test]
fn read_parameters_follow_command_rules() {
    assert_refused(
        &with_read(&[("parameters", "[]")]),
        "read[0].parameters",
        "must be a table",
    );
    assert_refused(
        &with_read(&[("parameters", r#"{ id = { type = "float" } }"#)]),
        "read[0].parameters.id.type",
        "must be one of",
    );
    assert_refused(
        &with_read(&[("parameters", r#"{ id = { type = "string" } }"#)]),
        "read[0].parameters.id.max_length",
        "is required",
    );
    assert_refused(
        &with_read(&[("parameters", r#"{ Id = { type = "uuid" } }"#)]),
        "read[0].parameters.Id",
        "lowercase letter",
    );
    let nine: Vec<String> = (0..9)
        .map(|i| format!("p{i} = {{ type = \"boolean\" }}"))
        .collect();
    let nine = format!("{{ {} }}", nine.join(", "));
    assert_refused(
        &with_read(&[("parameters", &nine), ("origin", r#""http://h/""#)]),
        "read[0].parameters",
        "at most 8 parameters",
    );
}

#[test]
fn read_scope_rules() {
    let path = "read[0].scope";
    assert_refused(
        &with_read(&[("scope", r#""global""#)]),
        path,
        "application, subject",
    );
    assert_refused(&with_read(&[("scope", "1")]), path, "must be a string");
}

#[test]
fn subject_placeholder_only_in_subject_scope() {
    let subject = read(&[
        ("scope", r#""subject""#),
        ("origin", r#""http://h/users/{subject}/items/{id}""#),
        ("dependencies", r#"["user:{subject}", "item:{id}"]"#),
    ]);
    assert_eq!(subject.dependencies, vec!["user:{subject}", "item:{id}"]);
    assert_refused(
        &with_read(&[("origin", r#""http://h/users/{subject}/items/{id}""#)]),
        "read[0].origin",
        "{subject} does not name a declared parameter",
    );
    assert_refused(
        &with_read(&[("dependencies", r#"["user:{subject}"]"#)]),
        "read[0].dependencies[0]",
        "{subject} does not name a declared parameter",
    );
    let reserved = r#"{ id = { type = "uuid" }, subject = { type = "string", max_length = 9 } }"#;
    assert_refused(
        &with_read(&[("scope", r#""subject""#), ("parameters", reserved)]),
        "read[0].parameters.subject",
        "no parameter may be named subject",
    );
    let own = read(&[
        ("parameters", reserved),
        ("origin", r#""http://h/users/{subject}/items/{id}""#),
    ]);
    assert_eq!(own.parameters.len(), 2);
}

#[test]
fn read_seconds_rules() {
    let cases: &[(&str, &str, &str)] = &[
        ("fresh_seconds", "", "is required"),
        ("fresh_seconds", "0", "between 1 and 86400"),
        ("fresh_seconds", "86401", "between 1 and 86400"),
        ("fresh_seconds", "1.5", "must be an integer"),
        ("stale_seconds", "-1", "between 0 and 86400"),
        ("stale_seconds", "86401", "between 0 and 86400"),
        ("stale_seconds", r#""30""#, "must be an integer"),
        ("negative_seconds", "0", "between 1 and 5"),
        ("negative_seconds", "6", "between 1 and 5"),
    ];
    for (key, value, message) in cases {
        assert_refused(
            &with_read(&[(key, value)]),
            &format!("read[0].{key}"),
            message,
        );
    }
    assert_eq!(read(&[("stale_seconds", "0")]).stale_seconds, 0);
}

#[test]
fn read_size_and_timeout_rules() {
    let cases: &[(&str, &str, &str)] = &[
        ("max_bytes", "0", "between 1 and 262144"),
        ("max_bytes", "262145", "between 1 and 262144"),
        ("timeout_ms", "99", "between 100 and 30000"),
        ("timeout_ms", "30001", "between 100 and 30000"),
    ];
    for (key, value, message) in cases {
        assert_refused(
            &with_read(&[(key, value)]),
            &format!("read[0].{key}"),
            message,
        );
    }
    assert_eq!(read(&[("timeout_ms", "100")]).timeout_ms, 100);
}

#[test]
fn read_dependency_rules() {
    let long = format!("[\"{}\"]", "d".repeat(201));
    let cases: &[(&str, &str, &str)] = &[
        (
            r#""offer:{id}""#,
            "read[0].dependencies",
            "must be an array",
        ),
        ("[1]", "read[0].dependencies[0]", "must be a string"),
        (r#"["ok", ""]"#, "read[0].dependencies[1]", "1 to 200"),
        (&long, "read[0].dependencies[0]", "1 to 200"),
        (
            r#"["offer:{id"]"#,
            "read[0].dependencies[0]",
            "unbalanced braces",
        ),
        (
            r#"["offer:{offer}"]"#,
            "read[0].dependencies[0]",
            "{offer} does not name a declared parameter",
        ),
        (
            r#"["a", "offer:{id}", "offer:{id}"]"#,
            "read[0].dependencies[2]",
            "duplicate dependency \"offer:{id}\"",
        ),
    ];
    for (deps, path, message) in cases {
        assert_refused(&with_read(&[("dependencies", deps)]), path, message);
    }
    let many = |n: usize| {
        let items: Vec<String> = (0..n).map(|i| format!("\"d{i}:{{id}}\"")).collect();
        format!("[{}]", items.join(", "))
    };
    assert_refused(
        &with_read(&[("dependencies", &many(17))]),
        "read[0].dependencies",
        "at most 16 dependencies",
    );
    assert_eq!(read(&[("dependencies", &many(16))]).dependencies.len(), 16);
    let fits = format!("[\"{}\"]", "d".repeat(200));
    assert_eq!(read(&[("dependencies", &fits)]).dependencies[0].len(), 200);
}

#[test]
fn only_a_subject_scoped_read_may_name_the_subject() {
    let origin = r#""http://h/users/{subject}/items/{id}""#;
    let deps = r#"["orders:{subject}", "offer:{id}"]"#;
    let decl = read(&[
        ("scope", r#""subject""#),
        ("origin", origin),
        ("dependencies", deps),
    ]);
    let values = decl.template_values(
        &BTreeMap::from([("id".to_owned(), "7".to_owned())]),
        "user/42",
    );
    assert_eq!(
        decl.render_origin(&values).as_deref(),
        Ok("http://h/users/user%2F42/items/7")
    );
    assert_eq!(
        decl.render_dependencies(&values),
        vec!["orders:user%2F42", "offer:7"]
    );
    assert_refused(
        &with_read(&[("origin", origin)]),
        "read[0].origin",
        "{subject} does not name a declared parameter",
    );
    assert_refused(
        &with_read(&[("dependencies", deps)]),
        "read[0].dependencies[0]",
        "{subject} does not name a declared parameter",
    );
    assert_refused(
        &with_read(&[
            ("scope", r#""subject""#),
            (
                "parameters",
                r#"{ id = { type = "uuid" }, subject = { type = "string", max_length = 8 } }"#,
            ),
        ]),
        "read[0].parameters.subject",
        "takes the subject from the caller",
    );
}
