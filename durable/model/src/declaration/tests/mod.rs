//! Tests of the declaration parser, validation rules and input checks.

pub(super) mod example;
mod input;
mod read_helpers;
mod rules_command;
mod rules_handler;
mod rules_limits;
mod rules_params;
mod rules_read;
mod rules_room;
mod rules_waiting_page;

use super::parse;
use crate::field_error::FieldError;

/// The keys of a small valid command, in order; tests replace, add or drop keys.
const BASE_COMMAND: &[(&str, &str)] = &[
    ("code", r#""c""#),
    ("parameters", r#"{ id = { type = "uuid" } }"#),
    ("resource_key", r#"{ from = "input", field = "id" }"#),
    (
        "handler",
        r#"{ kind = "quota", pool = "stock", mode = "committed" }"#,
    ),
];

/// A valid document with a pool `stock` and one command built from [`BASE_COMMAND`], where
/// each `(key, value)` in `set` replaces or adds a key and an empty value drops it.
fn doc(set: &[(&str, &str)]) -> String {
    let mut keys: Vec<(&str, &str)> = BASE_COMMAND.to_vec();
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
    format!(
        "[[quota_pool]]\ncode = \"stock\"\ncapacity = 10\n\n[[command]]\n{}\n",
        body.join("\n")
    )
}

/// Parses `text`, expecting a refusal.
fn refused(text: &str) -> FieldError {
    match parse(text) {
        Ok(model) => panic!("expected a refusal, parsed {model:?}\n---\n{text}"),
        Err(error) => error,
    }
}

/// Asserts `text` is refused on exactly `field`, with a message containing `message`.
#[track_caller]
fn assert_refused(text: &str, field: &str, message: &str) {
    let error = refused(text);
    assert_eq!(error.field, field, "wrong field for {error:?}\n---\n{text}");
    assert!(
        error.message.contains(message),
        "message {:?} lacks {message:?}",
        error.message
    );
}

#[test]
fn base_document_parses() {
    let model = parse(&doc(&[])).expect("base document parses");
    assert_eq!(model.commands.len(), 1);
}

#[test]
fn toml_syntax_error_names_toml_with_line() {
    let error = refused("[namespace]\nmax_waiting = = 3\n");
    assert_eq!(error.field, "toml");
    assert!(
        error.message.starts_with("line 2, column "),
        "{}",
        error.message
    );
}

#[test]
fn toml_duplicate_key_is_a_syntax_error() {
    let error = refused("[namespace]\nmax_waiting = 1\nmax_waiting = 2\n");
    assert_eq!(error.field, "toml");
    assert!(error.message.contains("line 3"), "{}", error.message);
}

#[test]
fn empty_document_uses_defaults() {
    let model = parse("").expect("empty document parses");
    assert_eq!(model.namespace.max_waiting, 1_000_000);
    assert!(model.namespace.allowed_origins.is_empty());
    assert!(model.commands.is_empty());
    assert!(model.quota_pools.is_empty());
    assert!(model.reads.is_empty());
}

#[test]
fn pools_without_commands_are_allowed() {
    let model = parse("[[quota_pool]]\ncode = \"p\"\ncapacity = 0\n").expect("parses");
    assert!(model.commands.is_empty());
    assert_eq!(model.quota_pools[0].capacity, 0);
}

#[test]
fn reads_wrong_types_are_refused() {
    assert_refused("read = 3", "read", "must be an array");
    assert_refused("read = [1]", "read[0]", "must be a table");
}

#[test]
fn unknown_top_level_key_is_refused() {
    assert_refused(
        &format!("colour = 1\n{}", doc(&[])),
        "colour",
        "unknown field",
    );
}

#[test]
fn top_level_wrong_types_are_refused() {
    assert_refused("namespace = 3", "namespace", "must be a table");
    assert_refused("command = 3", "command", "must be an array");
    assert_refused("command = [1]", "command[0]", "must be a table");
    assert_refused("quota_pool = \"x\"", "quota_pool", "must be an array");
}

#[test]
fn too_many_commands_are_refused() {
    let mut text = String::from("[[quota_pool]]\ncode = \"stock\"\ncapacity = 1\n");
    for i in 0..257 {
        text.push_str(&format!(
            "[[command]]\ncode = \"c{i}\"\nresource_key = {{ from = \"constant\", value = \"k\" }}\nhandler = {{ kind = \"quota\", pool = \"stock\", mode = \"committed\" }}\n"
        ));
    }
    assert_refused(&text, "command", "at most 256 commands");
}

#[test]
fn too_many_pools_are_refused() {
    let text: String = (0..257)
        .map(|i| format!("[[quota_pool]]\ncode = \"p{i}\"\ncapacity = 1\n"))
        .collect();
    assert_refused(&text, "quota_pool", "at most 256 quota pools");
    let ok: String = (0..256)
        .map(|i| format!("[[quota_pool]]\ncode = \"p{i}\"\ncapacity = 1\n"))
        .collect();
    assert_eq!(parse(&ok).map(|d| d.quota_pools.len()), Ok(256));
}
