//! A command's `limits`: extra rate or concurrency limits keyed by a template over the input.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::budget::{BURST_RANGE, MAX_IN_FLIGHT_RANGE, PER_SECOND_RANGE};
use super::input::render_value;
use super::model::{CommandDecl, LimitDecl, ParamDecl};
use super::names::first_duplicate;
use super::template::{self, SUBJECT_PLACEHOLDER, check_key, with_subject};
use super::walk::{Obj, Result};
use crate::field_error::FieldError;

/// Most limits per command; each costs a Redis round of work per command.
const MAX_LIMITS: usize = 8;
impl LimitDecl {
    /// Renders the key template for a validated `input` and the caller's `subject` (see
    /// [`super::template`]: values escaped): each `{name}` becomes the value of parameter `name`
    /// (strings as is, numbers and booleans via `to_string`), `{subject}` the subject. A
    /// placeholder with no value renders empty.
    pub fn render_key(&self, input: &Map<String, Value>, subject: &str) -> String {
        let values: Vec<(&str, String)> = input
            .iter()
            .map(|(name, value)| (name.as_str(), render_value(value)))
            .collect();
        template::render(&self.key, |name| {
            match values.iter().find(|(n, _)| *n == name) {
                Some((_, value)) => Some(value.as_str()),
                // Declarations stored before `{subject}` existed may name a parameter `subject`;
                // its value wins, as it did then.
                None if name == SUBJECT_PLACEHOLDER => Some(subject),
                None => None,
            }
        })
    }
}

/// The limit keys an input renders to, `[[template, key], …]`: what a command's row and status
/// hash carry from acceptance on. The template names the declared numbers; the key names the
/// shared budget.
pub fn render_limit_keys(
    limits: &[LimitDecl],
    input: &Map<String, Value>,
    subject: &str,
) -> Vec<[String; 2]> {
    limits
        .iter()
        .map(|limit| [limit.key.clone(), limit.render_key(input, subject)])
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
    let placeholders = limit_placeholders(cmd, &tables, parameters)?;
    let limits = tables
        .iter()
        .map(|t| parse_limit(t, &placeholders))
        .collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(limits.iter().map(|l| l.key.as_str())) {
        return Err(FieldError::new(
            format!("{}[{i}].key", cmd.field("limits")),
            format!("duplicate limit key \"{dup}\""),
        ));
    }
    Ok(limits)
}

/// What a limit key may name: the declared parameters and `{subject}`, the caller's subject. A
/// command whose limits name `{subject}` may not also declare a parameter of that name.
fn limit_placeholders(
    cmd: &Obj<'_>,
    tables: &[Obj<'_>],
    parameters: &BTreeMap<String, ParamDecl>,
) -> Result<BTreeMap<String, ParamDecl>> {
    let subject = format!("{{{SUBJECT_PLACEHOLDER}}}");
    let names_subject = tables.iter().any(|t| {
        t.get("key")
            .and_then(|k| k.as_str())
            .is_some_and(|k| k.contains(&subject))
    });
    if names_subject {
        with_subject(
            parameters,
            &cmd.field("parameters"),
            "a limit key names {subject}, the caller's subject",
        )
    } else {
        Ok(parameters.clone())
    }
}

/// Parses one limit: it must limit something, and `burst` only refines `per_second`.
fn parse_limit(limit: &Obj<'_>, placeholders: &BTreeMap<String, ParamDecl>) -> Result<LimitDecl> {
    limit.allow_only(&["key", "per_second", "burst", "max_in_flight"])?;
    let key = limit.req_str("key")?;
    check_key(key, &limit.field("key"), placeholders)?;
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
