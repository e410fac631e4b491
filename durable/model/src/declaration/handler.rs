//! A command's required `handler`: a quota pool or a webhook.

use super::model::{HandlerDecl, QuotaMode, QuotaPoolDecl};
use super::walk::{Obj, Result, char_len};

/// Default and bounds of `reservation_seconds` (at most a day).
const DEFAULT_RESERVATION_SECONDS: u32 = 300;
const MAX_RESERVATION_SECONDS: u32 = 86_400;
/// Default and bounds of a webhook's `timeout_ms`.
const DEFAULT_TIMEOUT_MS: u32 = 10_000;
const MIN_TIMEOUT_MS: u32 = 100;
const MAX_TIMEOUT_MS: u32 = 300_000;
/// Longest webhook URL.
const MAX_URL_LEN: usize = 2048;

/// Parses `handler`, dispatching on `kind`; each kind allows only its own keys.
pub(crate) fn parse_handler(cmd: &Obj<'_>, pools: &[QuotaPoolDecl]) -> Result<HandlerDecl> {
    let handler = cmd.req_table("handler")?;
    match handler.req_str("kind")? {
        "quota" => parse_quota(&handler, pools),
        "webhook" => parse_webhook(&handler),
        _ => Err(handler.error("kind", "must be one of quota, webhook")),
    }
}

/// Parses a quota handler; its pool must be declared in the same document.
fn parse_quota(handler: &Obj<'_>, pools: &[QuotaPoolDecl]) -> Result<HandlerDecl> {
    handler.allow_only(&["kind", "pool", "mode", "reservation_seconds"])?;
    let pool = handler.req_str("pool")?;
    if !pools.iter().any(|p| p.code == pool) {
        return Err(handler.error(
            "pool",
            format!("no [[quota_pool]] with code \"{pool}\" is declared"),
        ));
    }
    Ok(HandlerDecl::Quota {
        pool: pool.to_owned(),
        mode: parse_mode(handler)?,
    })
}

/// Parses `mode`; `reservation_seconds` only means something for reserved units.
fn parse_mode(handler: &Obj<'_>) -> Result<QuotaMode> {
    match handler.req_str("mode")? {
        "committed" if handler.has("reservation_seconds") => Err(handler.error(
            "reservation_seconds",
            "only allowed with mode = \"reserved\"",
        )),
        "committed" => Ok(QuotaMode::Committed),
        "reserved" => Ok(QuotaMode::Reserved {
            reservation_seconds: handler
                .opt_num("reservation_seconds", 1..=MAX_RESERVATION_SECONDS)?
                .unwrap_or(DEFAULT_RESERVATION_SECONDS),
        }),
        _ => Err(handler.error("mode", "must be one of committed, reserved")),
    }
}

/// Parses a webhook handler.
fn parse_webhook(handler: &Obj<'_>) -> Result<HandlerDecl> {
    handler.allow_only(&["kind", "url", "timeout_ms"])?;
    let url = handler.req_str("url")?;
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        None => return Err(handler.error("url", "must start with http:// or https://")),
        Some("") => return Err(handler.error("url", "must name a host")),
        Some(_) if char_len(url) > MAX_URL_LEN => {
            return Err(handler.error("url", format!("must be at most {MAX_URL_LEN} characters")));
        }
        Some(_) if url.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            return Err(handler.error("url", "must not contain spaces or control characters"));
        }
        Some(_) => {}
    }
    Ok(HandlerDecl::Webhook {
        url: url.to_owned(),
        timeout_ms: handler
            .opt_num("timeout_ms", MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS)?
            .unwrap_or(DEFAULT_TIMEOUT_MS),
    })
}
