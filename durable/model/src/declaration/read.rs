//! `[[read]]` declarations: cached views of an origin, and the pure helpers that serve them
//! (checking a read's query, rendering its origin URL and its dependencies).

use std::collections::{BTreeMap, BTreeSet};

use super::input::is_uuid;
use super::model::{ParamDecl, ReadDecl, ReadScope};
use super::names::{check_code, first_duplicate};
use super::params::parse_parameters;
use super::template::{
    self, Piece, SUBJECT_PLACEHOLDER, check_key, encode_component, split_template, with_subject,
};
use super::walk::{Obj, Result, as_str, char_len, index};
use crate::field_error::FieldError;

/// Most `[[read]]` entries, to bound the work of one declaration.
const MAX_READS: usize = 256;
/// Longest origin URL template.
const MAX_ORIGIN_LEN: usize = 2048;
/// Bounds of `fresh_seconds` and `stale_seconds` (at most a day each).
const MAX_FRESH_SECONDS: u32 = 86_400;
const MAX_STALE_SECONDS: u32 = 86_400;
/// Most dependency templates per read.
const MAX_DEPENDENCIES: usize = 16;
/// Default and ceiling of `max_bytes` (256 KiB).
const MAX_BYTES: u32 = 262_144;
/// Default and ceiling of `negative_seconds`: negative answers are cached briefly.
const MAX_NEGATIVE_SECONDS: u32 = 5;
/// Default and bounds of `timeout_ms`.
const DEFAULT_TIMEOUT_MS: u32 = 2_000;
const MIN_TIMEOUT_MS: u32 = 100;
const MAX_TIMEOUT_MS: u32 = 30_000;

/// Every key a `[[read]]` table may hold.
const READ_KEYS: &[&str] = &[
    "name",
    "origin",
    "parameters",
    "scope",
    "fresh_seconds",
    "stale_seconds",
    "dependencies",
    "max_bytes",
    "negative_seconds",
    "timeout_ms",
];

/// Parses every `[[read]]`, refusing duplicate names (naming the later one).
pub(crate) fn parse_reads(root: &Obj<'_>) -> Result<Vec<ReadDecl>> {
    let tables = root.opt_table_list("read")?;
    if tables.len() > MAX_READS {
        return Err(root.error("read", format!("at most {MAX_READS} reads")));
    }
    let reads = tables.iter().map(parse_read).collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(reads.iter().map(|r| r.name.as_str())) {
        return Err(FieldError::new(
            format!("read[{i}].name"),
            format!("duplicate read name \"{dup}\""),
        ));
    }
    Ok(reads)
}

/// Parses one `[[read]]`; parameters come first because the templates refer to them.
fn parse_read(read: &Obj<'_>) -> Result<ReadDecl> {
    read.allow_only(READ_KEYS)?;
    let name = read.req_str("name")?;
    check_code(name, &read.field("name"))?;
    let parameters = parse_parameters(read)?;
    let scope = parse_scope(read)?;
    let placeholders = placeholders(read, &parameters, scope)?;
    let origin = read.req_str("origin")?;
    check_origin(origin, &placeholders).map_err(|m| read.error("origin", m))?;
    Ok(ReadDecl {
        name: name.to_owned(),
        origin: origin.to_owned(),
        scope,
        fresh_seconds: read.req_num("fresh_seconds", 1..=MAX_FRESH_SECONDS)?,
        stale_seconds: read
            .opt_num("stale_seconds", 0..=MAX_STALE_SECONDS)?
            .unwrap_or(0),
        dependencies: parse_dependencies(read, &placeholders)?,
        max_bytes: read
            .opt_num("max_bytes", 1..=MAX_BYTES)?
            .unwrap_or(MAX_BYTES),
        negative_seconds: read
            .opt_num("negative_seconds", 1..=MAX_NEGATIVE_SECONDS)?
            .unwrap_or(MAX_NEGATIVE_SECONDS),
        timeout_ms: read
            .opt_num("timeout_ms", MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS)?
            .unwrap_or(DEFAULT_TIMEOUT_MS),
        parameters,
    })
}

/// What the origin and dependency templates may name: the declared parameters and, in a
/// subject-scoped read, `{subject}` (so no parameter may take that name there).
fn placeholders(
    read: &Obj<'_>,
    parameters: &BTreeMap<String, ParamDecl>,
    scope: ReadScope,
) -> Result<BTreeMap<String, ParamDecl>> {
    match scope {
        ReadScope::Subject => with_subject(
            parameters,
            &read.field("parameters"),
            "a subject-scoped read takes the subject from the caller",
        ),
        ReadScope::Application => Ok(parameters.clone()),
    }
}

/// Parses the optional `scope`, `application` by default.
fn parse_scope(read: &Obj<'_>) -> Result<ReadScope> {
    let Some(value) = read.get("scope") else {
        return Ok(ReadScope::Application);
    };
    match as_str(value, &read.field("scope"))? {
        "application" => Ok(ReadScope::Application),
        "subject" => Ok(ReadScope::Subject),
        _ => Err(read.error("scope", "must be one of application, subject")),
    }
}

/// Parses the optional `dependencies`: unique key templates over declared parameters.
fn parse_dependencies(
    read: &Obj<'_>,
    parameters: &BTreeMap<String, ParamDecl>,
) -> Result<Vec<String>> {
    let items = read.opt_array("dependencies")?.unwrap_or_default();
    let path = read.field("dependencies");
    if items.len() > MAX_DEPENDENCIES {
        return Err(FieldError::new(
            path,
            format!("at most {MAX_DEPENDENCIES} dependencies"),
        ));
    }
    let mut dependencies = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = index(&path, i);
        let template = as_str(item, &item_path)?;
        check_key(template, &item_path, parameters)?;
        dependencies.push(template.to_owned());
    }
    if let Some((i, dup)) = first_duplicate(dependencies.iter().map(String::as_str)) {
        return Err(FieldError::new(
            index(&path, i),
            format!("duplicate dependency \"{dup}\""),
        ));
    }
    Ok(dependencies)
}

/// Checks an origin template: `http(s)://host[:port]` with no placeholder, credentials or
/// fragment, then a path and query whose placeholders each name a declared parameter. The
/// template, filled with a sample value, must be a URL the HTTP client accepts.
fn check_origin(
    origin: &str,
    parameters: &BTreeMap<String, ParamDecl>,
) -> std::result::Result<(), String> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    if char_len(origin) > MAX_ORIGIN_LEN {
        return Err(format!("must be at most {MAX_ORIGIN_LEN} characters"));
    }
    if !origin.chars().all(|c| c.is_ascii_graphic()) {
        return Err("must not contain spaces, control or non-ASCII characters".into());
    }
    if origin.contains('#') {
        return Err("must not contain a fragment".into());
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("must name a host".into());
    }
    if authority.contains(['{', '}']) {
        return Err("placeholders are allowed only in the path and query".into());
    }
    if authority.contains('@') {
        return Err("must not contain credentials".into());
    }
    let pieces = split_template(origin).ok_or("unbalanced braces")?;
    let mut sample = String::with_capacity(origin.len());
    for piece in pieces {
        match piece {
            Piece::Text(text) => {
                check_url_text(text)?;
                sample.push_str(text);
            }
            Piece::Param(name) if parameters.contains_key(name) => sample.push('x'),
            Piece::Param(name) => {
                return Err(format!(
                    "placeholder {{{name}}} does not name a declared parameter"
                ));
            }
        }
    }
    if !valid_port(authority) {
        return Err("port must be a number from 1 to 65535".into());
    }
    match sample.parse::<hyper::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err("must be a valid URL with a host".into()),
    }
}

/// Checks literal template text against RFC 3986: only unreserved and reserved characters, and
/// `%` only as the start of a `%XX` escape.
fn check_url_text(text: &str) -> std::result::Result<(), String> {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let allowed = b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b);
        if !allowed {
            return Err(format!("'{}' is not allowed in a URL", char::from(b)));
        }
        let escape = bytes.get(i + 1..i + 3);
        if b == b'%' && !escape.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
            return Err("'%' must start a %XX escape".into());
        }
    }
    Ok(())
}

/// Whether the authority's port, if it has one, is a decimal number from 1 to 65535. An IPv6
/// host is bracketed (`[::1]:8080`), so only a colon after its `]` starts a port.
fn valid_port(authority: &str) -> bool {
    let after_host = match authority.rfind(']') {
        Some(close) => &authority[close + 1..],
        None => authority,
    };
    match after_host.rsplit_once(':') {
        None => true,
        Some((_, port)) => {
            port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok_and(|p| p != 0)
        }
    }
}

impl ReadDecl {
    /// The values this read's templates render with: checked `params` (see
    /// [`parse_read_params`]) and, for a subject-scoped read, the caller's `subject` as
    /// `{subject}`.
    pub fn template_values(
        &self,
        params: &BTreeMap<String, String>,
        subject: &str,
    ) -> BTreeMap<String, String> {
        let mut values = params.clone();
        if self.scope == ReadScope::Subject {
            values.insert(SUBJECT_PLACEHOLDER.to_owned(), subject.to_owned());
        }
        values
    }

    /// Renders the origin URL for `params` (see [`Self::template_values`]): each `{name}`
    /// becomes the percent-encoded value of parameter `name`. Every byte outside RFC 3986's
    /// unreserved set (`A-Z a-z 0-9 - . _ ~`) is encoded, UTF-8 first, which is a correct
    /// path-segment encoding before the `?` (a `/` or `?` in a value cannot split the path) and a
    /// correct query-value encoding after it (`&`, `=`, `+` and `#` cannot split the query).
    /// Refuses a placeholder without a value, and a path value that would be an empty or dot
    /// segment (`""`, `.`, `..`), which would name another resource.
    pub fn render_origin(
        &self,
        params: &BTreeMap<String, String>,
    ) -> std::result::Result<String, String> {
        let pieces = split_template(&self.origin).ok_or("origin has unbalanced braces")?;
        let mut url = String::with_capacity(self.origin.len());
        let mut in_query = false;
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    url.push_str(text);
                    in_query |= text.contains('?');
                }
                Piece::Param(name) => {
                    let value = params
                        .get(name)
                        .ok_or_else(|| format!("parameter \"{name}\" has no value"))?;
                    if !in_query && is_dot_or_empty(value) {
                        return Err(format!(
                            "parameter \"{name}\" may not be \"{value}\" in the origin path"
                        ));
                    }
                    encode_component(value, &mut url);
                }
            }
        }
        Ok(url)
    }

    /// Renders every dependency template with the values of `params`, escaped as limit keys
    /// are ([`super::template`]: a value made of letters, digits, `-`, `.`, `_` and `~` renders as
    /// it is), so that two reads' values never name the same dependency by accident. A
    /// placeholder without a value renders empty.
    pub fn render_dependencies(&self, params: &BTreeMap<String, String>) -> Vec<String> {
        self.dependencies
            .iter()
            .map(|t| template::render(t, |name| params.get(name).map(String::as_str)))
            .collect()
    }

    /// Names of the parameters whose placeholders sit in the origin's path (before its `?`).
    fn path_parameters(&self) -> BTreeSet<&str> {
        let mut names = BTreeSet::new();
        for piece in split_template(&self.origin).unwrap_or_default() {
            match piece {
                Piece::Text(text) if text.contains('?') => break,
                Piece::Text(_) => {}
                Piece::Param(name) => {
                    names.insert(name);
                }
            }
        }
        names
    }
}

/// Whether `value` would be an empty, `.` or `..` path segment.
fn is_dot_or_empty(value: &str) -> bool {
    matches!(value, "" | "." | "..")
}

/// Checks a read's query against its declared parameters and returns their canonical values.
///
/// `query` holds the decoded `(name, value)` pairs in request order. Every declared parameter is
/// required; unknown and repeated names are refused. Values must be canonical so that one
/// parameter set has one spelling (and one cache key): a uuid in lowercase hyphenated form, an
/// integer in plain decimal (no sign `+`, no leading zero, no `-0`) within its bounds, a boolean
/// as `true` or `false`, a string within its length and `enum`. A parameter filling a path
/// placeholder may not be empty, `.` or `..`. Errors name the parameter itself as the field.
pub fn parse_read_params(
    decl: &ReadDecl,
    query: &[(String, String)],
) -> std::result::Result<BTreeMap<String, String>, FieldError> {
    let in_path = decl.path_parameters();
    let mut values = BTreeMap::new();
    for (name, value) in query {
        let Some(param) = decl.parameters.get(name) else {
            return Err(FieldError::new(name, "unknown parameter"));
        };
        if values.contains_key(name) {
            return Err(FieldError::new(name, "duplicate parameter"));
        }
        check_query_value(param, value).map_err(|m| FieldError::new(name, m))?;
        if in_path.contains(name.as_str()) && is_dot_or_empty(value) {
            return Err(FieldError::new(name, "must not be empty, \".\" or \"..\""));
        }
        values.insert(name.clone(), value.clone());
    }
    if let Some(missing) = decl.parameters.keys().find(|n| !values.contains_key(*n)) {
        return Err(FieldError::new(missing, "is required"));
    }
    Ok(values)
}

/// Checks one query value against its declaration, returning the refusal message.
fn check_query_value(param: &ParamDecl, value: &str) -> std::result::Result<(), String> {
    match param {
        ParamDecl::Uuid if is_uuid(value) => Ok(()),
        ParamDecl::Uuid => Err("must be a UUID (8-4-4-4-12 lowercase hex digits)".into()),
        ParamDecl::String {
            max_length,
            allowed,
        } => {
            if char_len(value) > *max_length as usize {
                return Err(format!("must be at most {max_length} characters"));
            }
            match allowed {
                Some(values) if !values.iter().any(|v| v == value) => {
                    Err(format!("must be one of {}", values.join(", ")))
                }
                _ => Ok(()),
            }
        }
        ParamDecl::Integer { min, max } => {
            let n = canonical_integer(value).ok_or("must be an integer in plain decimal")?;
            if (*min..=*max).contains(&n) {
                Ok(())
            } else {
                Err(format!("must be between {min} and {max}"))
            }
        }
        ParamDecl::Boolean if matches!(value, "true" | "false") => Ok(()),
        ParamDecl::Boolean => Err("must be true or false".into()),
    }
}

/// The value of a canonical decimal integer: an optional `-`, then digits without a leading
/// zero (except `0` itself); `-0` and anything outside `i64` are refused.
fn canonical_integer(value: &str) -> Option<i64> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && value != "-0";
    if canonical { value.parse().ok() } else { None }
}
