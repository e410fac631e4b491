//! Rules for codes and names, shared by commands, pools and parameters.

use std::collections::HashSet;

use super::walk::{Result, char_len};
use crate::field_error::FieldError;

/// Longest command, pool or parameter name.
const MAX_NAME_LEN: usize = 64;

/// Checks a command or pool code: 1..=64 chars matching `^[a-z][a-z0-9_-]*$`, so codes are
/// safe to embed in Redis keys and URLs.
pub(crate) fn check_code(code: &str, path: &str) -> Result<()> {
    check_name(code, path, true)
}

/// Checks a parameter name: 1..=64 chars matching `^[a-z][a-z0-9_]*$`, so it can appear
/// inside `{placeholder}` templates without ambiguity.
pub(crate) fn check_param_name(name: &str, path: &str) -> Result<()> {
    check_name(name, path, false)
}

/// Shared shape check: a lowercase letter, then lowercase letters, digits, `_` (and `-` when
/// `allow_hyphen`).
fn check_name(name: &str, path: &str, allow_hyphen: bool) -> Result<()> {
    if name.is_empty() || char_len(name) > MAX_NAME_LEN {
        return Err(FieldError::new(
            path,
            format!("must be 1 to {MAX_NAME_LEN} characters"),
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || (allow_hyphen && c == '-')
    });
    if first_ok && rest_ok {
        return Ok(());
    }
    let allowed = if allow_hyphen {
        "a-z, 0-9, '_' and '-'"
    } else {
        "a-z, 0-9 and '_'"
    };
    Err(FieldError::new(
        path,
        format!("must start with a lowercase letter and contain only {allowed}"),
    ))
}

/// Index and value of the first item equal to an earlier one; the error names the second.
pub(crate) fn first_duplicate<'s>(
    items: impl IntoIterator<Item = &'s str>,
) -> Option<(usize, &'s str)> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .enumerate()
        .find(|(_, item)| !seen.insert(*item))
}
