//! Key templates (`provider:{provider}`, `offer:{id}`): limit keys and read dependencies.
//!
//! A rendered key names a shared counter, so two different inputs must never render the same
//! key. Values are therefore escaped: every byte outside RFC 3986's unreserved set
//! (`A-Z a-z 0-9 - . _ ~`) is percent-encoded, and a template must separate two placeholders
//! with at least one character a value can never contain after escaping (`:` for example) and
//! may not use `%` itself. Then `{a}:{b}` with `a:b` and `c` renders `a%3Ab:c`, and with `a` and
//! `b:c` renders `a:b%3Ac`: the first separator in the key ends the first value, so a key reads
//! back to exactly one list of values. Values made of unreserved characters (UUIDs, plain names,
//! numbers) render as they are.

use std::collections::BTreeMap;

use super::model::ParamDecl;
use super::walk::{Result, char_len};
use crate::field_error::FieldError;

/// Longest key template.
const MAX_KEY_LEN: usize = 200;

/// One piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// Literal text, copied as is.
    Text(&'a str),
    /// A `{name}` placeholder, replaced by the (escaped) value of `name`.
    Param(&'a str),
}

/// Splits a template into text and placeholders; `None` when its braces are unbalanced
/// (a stray `}`, a `{` inside a placeholder, or a `{` never closed).
pub(crate) fn split_template(template: &str) -> Option<Vec<Piece<'_>>> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        let (text, tail) = rest.split_at(open);
        let inner = tail.strip_prefix('{')?;
        let close = inner.find(['{', '}'])?;
        let (name, after) = inner.split_at(close);
        rest = after.strip_prefix('}')?;
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        pieces.push(Piece::Param(name));
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Some(pieces)
}

/// Whether `byte` is in RFC 3986's unreserved set: the bytes an escaped value is made of
/// (with `%` and hex digits).
pub(crate) const fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// Appends `value` percent-encoded: unreserved ASCII as is, every other UTF-8 byte as `%XX`.
pub(crate) fn encode_component(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for byte in value.bytes() {
        if is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
}

/// Renders `template`, each `{name}` replaced by `value_of(name)` escaped (empty when it has
/// none). A template with unbalanced braces (impossible after [`check_key`]) renders verbatim.
pub(crate) fn render<'v>(template: &str, value_of: impl Fn(&str) -> Option<&'v str>) -> String {
    let Some(pieces) = split_template(template) else {
        return template.to_owned();
    };
    let mut out = String::with_capacity(template.len() + 16);
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Param(name) => encode_component(value_of(name).unwrap_or_default(), &mut out),
        }
    }
    out
}

/// The placeholder that names the caller's subject, where a template may use it (a limit key, a
/// subject-scoped read).
pub(crate) const SUBJECT_PLACEHOLDER: &str = "subject";

/// `parameters` and `{subject}`; refused (at `{parameters_path}.subject`, saying `why`) when a
/// parameter already has that name, since a placeholder must name one value.
pub(crate) fn with_subject(
    parameters: &BTreeMap<String, ParamDecl>,
    parameters_path: &str,
    why: &str,
) -> Result<BTreeMap<String, ParamDecl>> {
    if parameters.contains_key(SUBJECT_PLACEHOLDER) {
        return Err(FieldError::new(
            format!("{parameters_path}.{SUBJECT_PLACEHOLDER}"),
            format!("{why}; no parameter may be named subject"),
        ));
    }
    let mut names = parameters.clone();
    names.insert(
        SUBJECT_PLACEHOLDER.to_owned(),
        ParamDecl::String {
            max_length: 128,
            allowed: None,
        },
    );
    Ok(names)
}

/// Checks a key template: 1..=200 chars, balanced braces, every placeholder one of
/// `placeholders`, no `%`, and a separator between any two placeholders (see the module).
pub(crate) fn check_key(
    key: &str,
    path: &str,
    placeholders: &BTreeMap<String, ParamDecl>,
) -> Result<()> {
    if key.is_empty() || char_len(key) > MAX_KEY_LEN {
        return Err(FieldError::new(
            path,
            format!("must be 1 to {MAX_KEY_LEN} characters"),
        ));
    }
    let pieces = split_template(key).ok_or_else(|| FieldError::new(path, "unbalanced braces"))?;
    let mut after_placeholder = false;
    for piece in pieces {
        match piece {
            Piece::Param(name) if !placeholders.contains_key(name) => {
                return Err(FieldError::new(
                    path,
                    format!("placeholder {{{name}}} does not name a declared parameter"),
                ));
            }
            Piece::Param(name) if after_placeholder => {
                return Err(FieldError::new(
                    path,
                    format!(
                        "placeholder {{{name}}} must be separated from the one before it by a \
                         character other than a letter, a digit, '-', '.', '_' or '~' (':' for \
                         example), so that two inputs never render the same key"
                    ),
                ));
            }
            Piece::Param(_) => after_placeholder = true,
            Piece::Text(text) if text.contains('%') => {
                return Err(FieldError::new(
                    path,
                    "'%' is reserved: values are rendered percent-encoded",
                ));
            }
            Piece::Text(text) => after_placeholder &= text.bytes().all(is_unreserved),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(
            split_template("a:{x}:{y}"),
            Some(vec![
                Piece::Text("a:"),
                Piece::Param("x"),
                Piece::Text(":"),
                Piece::Param("y"),
            ])
        );
        assert_eq!(
            split_template("{x}{y}"),
            Some(vec![Piece::Param("x"), Piece::Param("y")])
        );
        assert_eq!(split_template(""), Some(vec![]));
    }

    #[test]
    fn refuses_unbalanced_braces() {
        for bad in ["{x", "x}", "{{x}}", "{x{y}}", "a}{b", "{"] {
            assert_eq!(split_template(bad), None, "{bad}");
        }
    }

    fn declared(names: &[&str]) -> BTreeMap<String, ParamDecl> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), ParamDecl::Boolean))
            .collect()
    }

    #[test]
    fn placeholders_need_a_separator_and_percent_is_reserved() {
        let params = declared(&["x", "y"]);
        for good in ["a:{x}:{y}", "{x}/{y}", "{x}-a:{y}", "{x}", "k:{x}"] {
            assert!(check_key(good, "key", &params).is_ok(), "{good}");
        }
        for bad in ["{x}{y}", "{x}-{y}", "{x}ab.{y}", "a%{x}", "{x}:{z}"] {
            assert!(check_key(bad, "key", &params).is_err(), "{bad}");
        }
    }

    /// The property the escaping exists for: different values never render the same key.
    #[test]
    fn different_values_never_share_a_key() {
        let values = [
            "a", "b", "a:b", "b:c", "c", "", "%3A", "a%3Ab", ":", "é", "a b",
        ];
        for template in ["{x}:{y}", "p:{x}/{y}:s", "{x}-a:{y}"] {
            let mut seen: BTreeMap<String, (&str, &str)> = BTreeMap::new();
            for x in values {
                for y in values {
                    let key = render(template, |name| Some(if name == "x" { x } else { y }));
                    if let Some(before) = seen.insert(key.clone(), (x, y)) {
                        panic!("{template}: {before:?} and {:?} both render {key}", (x, y));
                    }
                }
            }
        }
        assert_eq!(
            render("{x}:{y}", |n| Some(if n == "x" { "a:b" } else { "c" })),
            "a%3Ab:c"
        );
        assert_eq!(
            render("offer:{x}", |_| Some(
                "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10"
            )),
            "offer:0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10",
            "unreserved values render as they are"
        );
    }
}
