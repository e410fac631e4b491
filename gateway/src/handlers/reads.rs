//! `GET /v1/reads/{name}` and `POST /v1/reads/{name}:invalidate`: declared reads served
//! through the read-through cache ([`crate::reads`]).
//!
//! A subject token reads for its own subject; a credential needs `reads:read`, and for a
//! subject-scoped read names the subject with `?subject=`. Subject-scoped values are keyed by
//! the subject, so one subject never sees another's.

use crate::handlers::answers::to_data;
use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sluice_durable::declaration::{ReadDecl, ReadScope, parse_read_params};
use sluice_redis::AppKeys;
use sluice_redis::cache::{self, EntryKeys};
use sluice_store::outbox::rfc3339;

use super::{Handled, require_json};
use crate::http::error::ApiError;
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::http::url::parse_query;
use crate::identity::auth::{Caller, Principal};
use crate::reads::ReadCall;
use crate::state::Gateway;

/// Dependencies one invalidate call may bump.
const MAX_INVALIDATED: usize = 100;
/// Longest dependency, in characters.
const MAX_DEPENDENCY_CHARS: usize = 200;

pub async fn read(gateway: &Gateway, caller: &Caller, name: &str, query: Option<&str>) -> Handled {
    if matches!(caller.principal, Principal::Credential(_)) {
        caller.require_scope("reads:read")?;
    }
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let decl = namespace
        .declaration
        .reads
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| {
            ApiError::not_found(format!("no read {name:?} is declared in this namespace"))
        })?;
    let mut allowed: Vec<&str> = decl.parameters.keys().map(String::as_str).collect();
    let credential = matches!(caller.principal, Principal::Credential(_));
    if decl.scope == ReadScope::Subject && credential {
        allowed.push("subject");
    }
    let mut pairs = parse_query(query, &allowed)?;
    let subject = match (&decl.scope, &caller.principal) {
        (ReadScope::Application, _) => String::new(),
        (ReadScope::Subject, Principal::Subject { subject }) => subject.clone(),
        (ReadScope::Subject, Principal::Credential(_)) => {
            let at = pairs
                .iter()
                .position(|(n, _)| n == "subject")
                .ok_or_else(|| {
                    ApiError::invalid(
                        "subject",
                        "a subject-scoped read needs ?subject= with a credential",
                    )
                })?;
            let (_, subject) = pairs.remove(at);
            crate::http::strict_json::validate_subject(&subject, "subject")?;
            subject
        }
    };
    let params = parse_read_params(decl, &pairs)?;
    // A subject-scoped read's origin and dependencies may name `{subject}`.
    let values = decl.template_values(&params, &subject);
    let url = decl
        .render_origin(&values)
        .map_err(|why| ApiError::invalid("origin", why))?;
    let dependencies = decl.render_dependencies(&values);
    let app = AppKeys::new(namespace.application_id);
    let keys = EntryKeys::new(
        &app,
        caller.namespace_id,
        &decl.name,
        &digest(decl, &params, &subject),
        &dependencies,
    );
    let call = ReadCall::of(
        decl,
        namespace.application_id,
        caller.namespace_id,
        keys,
        url,
    );
    let view = gateway.reads.get(&gateway.redis, call).await?;
    let items: Value = serde_json::from_str(&view.entry.body)
        .map_err(|_| ApiError::unavailable("a cached value is unreadable; retry"))?;
    let time = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).map(rfc3339);
    Ok((
        StatusCode::OK,
        to_data(&ReadAnswer {
            items,
            generated_at: time(view.entry.generated_ms),
            fresh_until: time(view.entry.fresh_until_ms),
            stale_until: time(view.entry.stale_until_ms),
            version: version(view.entry.generated_ms, &view.entry.versions),
            freshness: if view.stale { "stale" } else { "fresh" },
        })?,
    ))
}

/// `GET /v1/reads/{name}`: the value and how fresh it is.
#[derive(Serialize)]
struct ReadAnswer {
    items: Value,
    generated_at: Option<String>,
    fresh_until: Option<String>,
    stale_until: Option<String>,
    version: String,
    freshness: &'static str,
}

/// `POST /v1/reads:invalidate`: each dependency's new version.
#[derive(Serialize)]
struct Invalidated<'a> {
    dependencies: Vec<DependencyVersion<'a>>,
}

#[derive(Serialize)]
struct DependencyVersion<'a> {
    dependency: &'a str,
    version: String,
}

/// An opaque version of a served value: its generation time and the dependency versions it was
/// filled under (`<ms>` or `<ms>.<v1>.<v2>…`); a refill or an invalidation changes it.
fn version(generated_ms: i64, versions: &str) -> String {
    if versions.is_empty() {
        generated_ms.to_string()
    } else {
        format!("{generated_ms}.{}", versions.replace(',', "."))
    }
}

/// The entry's key digest: the read, its canonical parameters and (subject scope) the subject,
/// each length-prefixed so that no two different calls share a key.
fn digest(
    decl: &ReadDecl,
    params: &std::collections::BTreeMap<String, String>,
    subject: &str,
) -> String {
    let mut hash = Sha256::new();
    let mut part = |text: &str| {
        hash.update((text.len() as u64).to_be_bytes());
        hash.update(text.as_bytes());
    };
    part(&decl.name);
    for (name, value) in params {
        part(name);
        part(value);
    }
    part(subject);
    hex::encode(hash.finalize())
}

/// `{"dependencies": ["offer:42", …]}`: bumps their versions, so every cached value filled
/// under an older version is a miss from now on.
pub async fn invalidate(
    gateway: &Gateway,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    caller.require_scope("reads:invalidate")?;
    require_json(headers)?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    if !namespace.declaration.reads.iter().any(|r| r.name == name) {
        return Err(ApiError::not_found(format!(
            "no read {name:?} is declared in this namespace"
        )));
    }
    let mut reader = ObjectReader::new(parse_object(body)?, "");
    let list = reader.required_array("dependencies")?;
    reader.finish()?;
    if list.is_empty() || list.len() > MAX_INVALIDATED {
        return Err(ApiError::invalid(
            "dependencies",
            format!("must list 1 to {MAX_INVALIDATED} dependencies"),
        ));
    }
    let mut dependencies = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let field = format!("dependencies[{i}]");
        let text = value
            .as_str()
            .ok_or_else(|| ApiError::invalid(&field, "must be a string"))?;
        if text.is_empty()
            || text.chars().count() > MAX_DEPENDENCY_CHARS
            || text.chars().any(char::is_control)
        {
            return Err(ApiError::invalid(
                field,
                format!("must be 1 to {MAX_DEPENDENCY_CHARS} characters, no control characters"),
            ));
        }
        dependencies.push(text.to_string());
    }
    let versions = cache::invalidate(
        &gateway.redis,
        namespace.application_id,
        caller.namespace_id,
        &dependencies,
    )
    .await?;
    gateway
        .reads
        .forget_namespace(namespace.application_id, caller.namespace_id);
    Ok((
        StatusCode::OK,
        to_data(&Invalidated {
            dependencies: dependencies
                .iter()
                .zip(versions)
                .map(|(dependency, version)| DependencyVersion {
                    dependency,
                    version: version.to_string(),
                })
                .collect(),
        })?,
    ))
}
