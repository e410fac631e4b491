//! A command's `parameters`: the typed, all-required shape of a caller's input.

use std::collections::BTreeMap;

use super::model::ParamDecl;
use super::names::{check_param_name, first_duplicate};
use super::walk::{Obj, Result, as_str, as_table, char_len, index};
use crate::field_error::FieldError;

/// Most parameters per command; inputs are meant to be small keys, not payloads.
const MAX_PARAMETERS: usize = 8;
/// Longest `max_length` a string parameter may declare.
const MAX_STRING_LENGTH: u32 = 4096;

/// Parses the optional `parameters` table (absent means the command takes no input).
pub(crate) fn parse_parameters(cmd: &Obj<'_>) -> Result<BTreeMap<String, ParamDecl>> {
    let Some(params) = cmd.opt_table("parameters")? else {
        return Ok(BTreeMap::new());
    };
    let raw = params.table();
    if raw.len() > MAX_PARAMETERS {
        return Err(params.own_error(format!("at most {MAX_PARAMETERS} parameters")));
    }
    let mut parsed = BTreeMap::new();
    for (name, value) in raw {
        let path = params.field(name);
        check_param_name(name, &path)?;
        parsed.insert(name.clone(), parse_param(&as_table(value, path)?)?);
    }
    Ok(parsed)
}

/// Parses one parameter, dispatching on `type`; each type allows only its own keys.
fn parse_param(param: &Obj<'_>) -> Result<ParamDecl> {
    match param.req_str("type")? {
        "uuid" => {
            param.allow_only(&["type"])?;
            Ok(ParamDecl::Uuid)
        }
        "boolean" => {
            param.allow_only(&["type"])?;
            Ok(ParamDecl::Boolean)
        }
        "string" => parse_string(param),
        "integer" => parse_integer(param),
        _ => Err(param.error("type", "must be one of uuid, string, integer, boolean")),
    }
}

/// Parses a string parameter. Every string input must be bounded, so `max_length` is required
/// unless `enum` is given, in which case it defaults to the longest allowed value.
fn parse_string(param: &Obj<'_>) -> Result<ParamDecl> {
    param.allow_only(&["type", "max_length", "enum"])?;
    let declared = param.opt_num("max_length", 1..=MAX_STRING_LENGTH)?;
    let allowed = parse_enum(param, declared)?;
    let max_length = match (declared, &allowed) {
        (Some(n), _) => n,
        (None, Some(values)) => longest(values),
        (None, None) => {
            return Err(param.error("max_length", "is required for a string without enum"));
        }
    };
    Ok(ParamDecl::String {
        max_length,
        allowed,
    })
}

/// Length in characters of the longest value, at least 1 so it is a valid `max_length`.
fn longest(values: &[String]) -> u32 {
    let chars = values.iter().map(|v| char_len(v)).max().unwrap_or(0).max(1);
    u32::try_from(chars).unwrap_or(MAX_STRING_LENGTH)
}

/// Parses the optional `enum`: non-empty, unique strings that each fit `max_length` (or the
/// 4096-character ceiling when `max_length` is not declared).
fn parse_enum(param: &Obj<'_>, max_length: Option<u32>) -> Result<Option<Vec<String>>> {
    let Some(items) = param.opt_array("enum")? else {
        return Ok(None);
    };
    let path = param.field("enum");
    if items.is_empty() {
        return Err(FieldError::new(path, "must not be empty"));
    }
    let limit = max_length.unwrap_or(MAX_STRING_LENGTH);
    let mut values = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let value = as_str(item, &index(&path, i))?;
        if char_len(value) > limit as usize {
            let message = match max_length {
                Some(n) => format!("must be at most max_length ({n}) characters"),
                None => format!("must be at most {MAX_STRING_LENGTH} characters"),
            };
            return Err(FieldError::new(index(&path, i), message));
        }
        values.push(value.to_owned());
    }
    if let Some((i, dup)) = first_duplicate(values.iter().map(String::as_str)) {
        return Err(FieldError::new(
            index(&path, i),
            format!("duplicate value \"{dup}\""),
        ));
    }
    Ok(Some(values))
}

/// Parses an integer parameter; bounds default to the full `i64` range.
fn parse_integer(param: &Obj<'_>) -> Result<ParamDecl> {
    param.allow_only(&["type", "min", "max"])?;
    let min = param.opt_int("min")?.unwrap_or(i64::MIN);
    let max = param.opt_int("max")?.unwrap_or(i64::MAX);
    if min > max {
        return Err(param.error("max", format!("must not be less than min ({min})")));
    }
    Ok(ParamDecl::Integer { min, max })
}
