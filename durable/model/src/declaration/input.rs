//! Checking a caller's `input` against a command's parameters, and deriving keys from it.

use serde_json::{Map, Value};

use super::model::{CommandDecl, ParamDecl, ResourceKeyDecl};
use super::walk::Result;
use crate::field_error::FieldError;

impl CommandDecl {
    /// Checks `input` strictly against `parameters`: every declared parameter is required,
    /// unknown keys and `null` are refused, and each value must match its declared type.
    /// Errors name the field as `input.<name>`.
    pub fn validate_input(&self, input: &Map<String, Value>) -> Result<()> {
        if let Some(unknown) = input.keys().find(|k| !self.parameters.contains_key(*k)) {
            return Err(FieldError::new(input_path(unknown), "unknown field"));
        }
        for (name, param) in &self.parameters {
            let path = input_path(name);
            match input.get(name) {
                None => return Err(FieldError::new(path, "is required")),
                Some(Value::Null) => return Err(FieldError::new(path, "must not be null")),
                Some(value) => check_value(param, value).map_err(|m| FieldError::new(path, m))?,
            }
        }
        Ok(())
    }

    /// The resource key for a validated `input`: the parameter's value (strings as is,
    /// numbers and booleans via `to_string`), or the constant. A missing value renders empty.
    pub fn resource_key_for(&self, input: &Map<String, Value>) -> String {
        match &self.resource_key {
            ResourceKeyDecl::Input { field } => {
                input.get(field).map(render_value).unwrap_or_default()
            }
            ResourceKeyDecl::Constant { value } => value.clone(),
        }
    }
}

/// Path of an input field.
fn input_path(name: &str) -> String {
    format!("input.{name}")
}

/// Renders an input value into a key: strings without quotes, anything else as JSON text.
pub(crate) fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks one non-null value against its declaration, returning the refusal message.
fn check_value(param: &ParamDecl, value: &Value) -> std::result::Result<(), String> {
    match param {
        ParamDecl::Uuid => match value.as_str() {
            Some(s) if is_uuid(s) => Ok(()),
            _ => Err("must be a UUID string (8-4-4-4-12 lowercase hex digits)".into()),
        },
        ParamDecl::String {
            max_length,
            allowed,
        } => check_string(value, *max_length, allowed.as_deref()),
        ParamDecl::Integer { min, max } => check_integer(value, *min, *max),
        ParamDecl::Boolean if value.is_boolean() => Ok(()),
        ParamDecl::Boolean => Err("must be a boolean".into()),
    }
}

/// Checks a string value: length counted in characters, then membership in `allowed`.
fn check_string(
    value: &Value,
    max_length: u32,
    allowed: Option<&[String]>,
) -> std::result::Result<(), String> {
    let s = value.as_str().ok_or("must be a string")?;
    if s.chars().count() > max_length as usize {
        return Err(format!("must be at most {max_length} characters"));
    }
    match allowed {
        Some(values) if !values.iter().any(|v| v == s) => {
            Err(format!("must be one of {}", values.join(", ")))
        }
        _ => Ok(()),
    }
}

/// Checks an integer value: a JSON integer (never a float or string) within `min..=max`.
fn check_integer(value: &Value, min: i64, max: i64) -> std::result::Result<(), String> {
    let Value::Number(n) = value else {
        return Err("must be an integer".into());
    };
    if !(n.is_i64() || n.is_u64()) {
        return Err("must be an integer".into());
    }
    match n.as_i64() {
        Some(v) if (min..=max).contains(&v) => Ok(()),
        _ => Err(format!("must be between {min} and {max}")),
    }
}

/// Whether `s` is a canonical hyphenated UUID: 36 chars, hyphens at 8, 13, 18 and 23, lowercase
/// hex digits everywhere else. Only the lowercase form is accepted because a uuid often becomes a
/// resource key or a request identity: two spellings of one uuid must not name two queues.
pub(crate) fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}
