//! A command's `limits`: extra rate or concurrency limits keyed by a template over the input.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::budget::{BURST_RANGE, MAX_IN_FLIGHT_RANGE, PER_SECOND_RANGE};
use super::input::render_value;
use super::model::{CommandDecl, LimitDecl, ParamDecl};
use super::names::first_duplicate;
use super::walk::{Obj, Result, char_len};
use crate::field_error::FieldError;

/// Most limits per command; each costs a Redis round of work per command.
const MAX_LIMITS: usize = 8;
/// Longest key template.
const MAX_KEY_LEN: usize = 200;

/// One piece of a key template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// Literal text, copied as is.
    Text(&'a str),
    /// A `{name}` placeholder, replaced by the input value of parameter `name`.
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

impl LimitDecl {
    /// Renders the key template for a validated `input`: each `{name}` becomes the value of
    /// parameter `name` (strings as is, numbers and booleans via `to_string`). A placeholder
    /// with no value renders empty; a template with unbalanced braces (impossible after
    /// [`parse`](super::parse)) renders verbatim.
    pub fn render_key(&self, input: &Map<String, Value>) -> String {
        let Some(pieces) = split_template(&self.key) else {
            return self.key.clone();
        };
        let mut key = String::with_capacity(self.key.len());
        for piece in pieces {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Param(name) => {
                    key.push_str(&input.get(name).map(render_value).unwrap_or_default())
                }
            }
        }
        key
    }
}

/// The limit keys an input renders to, `[[template, key], …]`: what a command's row and status
/// hash carry from acceptance on. The template names the declared numbers; the key names the
/// shared budget.
pub fn render_limit_keys(limits: &[LimitDecl], input: &Map<String, Value>) -> Vec<[String; 2]> {
    limits
        .iter()
        .map(|limit| [limit.key.clone(), limit.render_key(input)])
        .collect()
}

/// A limit template names one budget shared by every command of the namespace that names it, so
/// every command that names it must declare the same numbers.
pub(crate) fn check_shared_limits(commands: &[CommandDecl]) -> Result<()> {
    let mut first: BTreeMap<&str, &LimitDecl> = BTreeMap::new();
    for (c, command) in commands.iter().enumerate() {
        for (l, limit) in command.limits.iter().enumerate() {
            match first.get(limit.key.as_str()) {
                Some(seen) if *seen != limit => {
                    return Err(FieldError::new(
                        format!("command[{c}].limits[{l}]"),
                        format!(
                            "limit key \"{}\" is declared by another command with other numbers; \
                             a limit key is one budget shared by every command that names it",
                            limit.key
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    first.insert(&limit.key, limit);
                }
            }
        }
    }
    Ok(())
}

/// Parses the optional `limits` array; two limits of one command may not share a template.
pub(crate) fn parse_limits(
    cmd: &Obj<'_>,
    parameters: &BTreeMap<String, ParamDecl>,
) -> Result<Vec<LimitDecl>> {
    let tables = cmd.opt_table_list("limits")?;
    if tables.len() > MAX_LIMITS {
        return Err(cmd.error("limits", format!("at most {MAX_LIMITS} limits")));
    }
    let limits = tables
        .iter()
        .map(|t| parse_limit(t, parameters))
        .collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(limits.iter().map(|l| l.key.as_str())) {
        return Err(FieldError::new(
            format!("{}[{i}].key", cmd.field("limits")),
            format!("duplicate limit key \"{dup}\""),
        ));
    }
    Ok(limits)
}

/// Parses one limit: it must limit something, and `burst` only refines `per_second`.
fn parse_limit(limit: &Obj<'_>, parameters: &BTreeMap<String, ParamDecl>) -> Result<LimitDecl> {
    limit.allow_only(&["key", "per_second", "burst", "max_in_flight"])?;
    let key = limit.req_str("key")?;
    check_key(key, &limit.field("key"), parameters)?;
    let per_second = limit.opt_num("per_second", PER_SECOND_RANGE)?;
    let burst = limit.opt_num("burst", BURST_RANGE)?;
    let max_in_flight = limit.opt_num("max_in_flight", MAX_IN_FLIGHT_RANGE)?;
    if per_second.is_none() && burst.is_some() {
        return Err(limit.error("burst", "only allowed with per_second"));
    }
    if per_second.is_none() && max_in_flight.is_none() {
        return Err(limit.own_error("must set per_second or max_in_flight"));
    }
    Ok(LimitDecl {
        key: key.to_owned(),
        per_second,
        burst: burst.or(per_second),
        max_in_flight,
    })
}

/// Checks a key template: 1..=200 chars, balanced braces, every placeholder declared. Read
/// dependencies are templates of the same kind.
pub(crate) fn check_key(
    key: &str,
    path: &str,
    parameters: &BTreeMap<String, ParamDecl>,
) -> Result<()> {
    if key.is_empty() || char_len(key) > MAX_KEY_LEN {
        return Err(FieldError::new(
            path,
            format!("must be 1 to {MAX_KEY_LEN} characters"),
        ));
    }
    let pieces = split_template(key).ok_or_else(|| FieldError::new(path, "unbalanced braces"))?;
    for piece in pieces {
        if let Piece::Param(name) = piece
            && !parameters.contains_key(name)
        {
            return Err(FieldError::new(
                path,
                format!("placeholder {{{name}}} does not name a declared parameter"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Piece, split_template};

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
}
