//! `[namespace]` settings and `[[quota_pool]]` declarations.

use super::model::{NamespaceSettings, QuotaPoolDecl};
use super::names::{check_code, first_duplicate};
use super::walk::{Obj, Result, as_str, index};
use crate::field_error::FieldError;

/// Default for `namespace.max_waiting`.
pub(crate) const DEFAULT_MAX_WAITING: u64 = 1_000_000;
/// Most `[[quota_pool]]` entries, to bound the work of one declaration.
const MAX_POOLS: usize = 256;
/// Largest pool capacity.
pub const MAX_CAPACITY: u64 = 1_000_000_000_000;

/// Parses `[namespace]`; the table itself is optional and every key has a default.
pub(crate) fn parse_namespace(root: &Obj<'_>) -> Result<NamespaceSettings> {
    let Some(ns) = root.opt_table("namespace")? else {
        return Ok(NamespaceSettings::default());
    };
    ns.allow_only(&["max_waiting", "allowed_origins"])?;
    Ok(NamespaceSettings {
        max_waiting: ns
            .opt_num("max_waiting", 1..=100_000_000)?
            .unwrap_or(DEFAULT_MAX_WAITING),
        allowed_origins: parse_origins(&ns)?,
    })
}

/// Parses `allowed_origins`: each an http(s) origin, unique.
fn parse_origins(ns: &Obj<'_>) -> Result<Vec<String>> {
    let items = ns.opt_array("allowed_origins")?.unwrap_or_default();
    let path = ns.field("allowed_origins");
    let mut origins = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = index(&path, i);
        let origin = as_str(item, &item_path)?;
        check_origin(origin).map_err(|m| FieldError::new(item_path, m))?;
        origins.push(origin.to_owned());
    }
    if let Some((i, dup)) = first_duplicate(origins.iter().map(String::as_str)) {
        return Err(FieldError::new(
            index(&path, i),
            format!("duplicate origin \"{dup}\""),
        ));
    }
    Ok(origins)
}

/// Checks the shape a browser sends in `Origin`: `http(s)://host[:port]`, lowercase, with no
/// path, query, fragment or credentials, so a declared origin can be compared byte for byte.
fn check_origin(origin: &str) -> std::result::Result<(), String> {
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    if rest.contains(['/', '?', '#', '@']) || rest.chars().any(char::is_whitespace) {
        return Err("must be an origin without path, query, fragment or credentials".into());
    }
    if rest.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("must be lowercase, as browsers send it".into());
    }
    let (host, port) = split_port(rest);
    if host.is_empty() || host == "[]" {
        return Err("must name a host".into());
    }
    match port {
        Some(p) if !valid_port(p) => Err("port must be a number from 1 to 65535".into()),
        _ => Ok(()),
    }
}

/// Whether `port` is a plain decimal 1..=65535 (no sign, no spaces).
fn valid_port(port: &str) -> bool {
    !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|n| n != 0)
}

/// Splits `host[:port]`, keeping the colons of a bracketed IPv6 host in the host.
fn split_port(rest: &str) -> (&str, Option<&str>) {
    let host_end = if rest.starts_with('[') {
        rest.find(']').map_or(rest.len(), |i| i + 1)
    } else {
        rest.find(':').unwrap_or(rest.len())
    };
    let (host, tail) = rest.split_at(host_end);
    (host, tail.strip_prefix(':'))
}

/// Parses every `[[quota_pool]]`, refusing duplicate codes (naming the later one).
pub(crate) fn parse_pools(root: &Obj<'_>) -> Result<Vec<QuotaPoolDecl>> {
    let tables = root.opt_table_list("quota_pool")?;
    if tables.len() > MAX_POOLS {
        return Err(root.error("quota_pool", format!("at most {MAX_POOLS} quota pools")));
    }
    let pools = tables.iter().map(parse_pool).collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(pools.iter().map(|p| p.code.as_str())) {
        return Err(FieldError::new(
            format!("quota_pool[{i}].code"),
            format!("duplicate quota_pool code \"{dup}\""),
        ));
    }
    Ok(pools)
}

/// Parses one `[[quota_pool]]`.
fn parse_pool(pool: &Obj<'_>) -> Result<QuotaPoolDecl> {
    pool.allow_only(&["code", "capacity"])?;
    let code = pool.req_str("code")?;
    check_code(code, &pool.field("code"))?;
    Ok(QuotaPoolDecl {
        code: code.to_owned(),
        capacity: pool.req_num("capacity", 0..=MAX_CAPACITY)?,
    })
}
