//! Who is calling: a scoped namespace credential (backends, operators) or a browser's subject
//! token. Both end as a [`Caller`] bound to exactly one namespace.

use sluice_durable::ids::NamespaceId;
use sluice_store::tenancy::CredentialRecord;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hyper::HeaderMap;
use hyper::header::AUTHORIZATION;

use crate::http::error::ApiError;
use crate::identity::subject_token;
use crate::state::Gateway;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A backend's bearer credential: the cached record itself, shared, so an authenticated
    /// request copies no scope strings.
    Credential(Arc<CredentialRecord>),
    /// A browser acting for one subject; it may touch only that subject's objects.
    Subject { subject: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub namespace_id: NamespaceId,
    pub principal: Principal,
}

impl Caller {
    /// Who did it, as audit rows name them.
    pub fn actor(&self) -> String {
        match &self.principal {
            Principal::Credential(record) => format!("credential:{}", record.id),
            Principal::Subject { subject } => format!("subject:{subject}"),
        }
    }

    fn has_scope(&self, scope: &str) -> bool {
        matches!(&self.principal, Principal::Credential(record) if record.scopes.iter().any(|s| s == scope))
    }

    /// Credential-only endpoints.
    pub fn require_scope(&self, scope: &str) -> Result<(), ApiError> {
        match &self.principal {
            Principal::Credential(_) if self.has_scope(scope) => Ok(()),
            Principal::Credential(_) => Err(ApiError::permission_denied(format!(
                "the credential lacks the scope {scope}"
            ))),
            Principal::Subject { .. } => Err(ApiError::permission_denied(format!(
                "a subject token cannot do this; it needs a credential with {scope}"
            ))),
        }
    }

    /// Endpoints open to the owning subject or to a credential with `scope`.
    pub fn require_owner_or_scope(&self, owner: &str, scope: &str) -> Result<(), ApiError> {
        match &self.principal {
            Principal::Subject { subject } if subject == owner => Ok(()),
            Principal::Subject { .. } => {
                Err(ApiError::permission_denied("it belongs to another subject"))
            }
            Principal::Credential(_) => self.require_scope(scope),
        }
    }

    pub fn subject(&self) -> Option<&str> {
        match &self.principal {
            Principal::Subject { subject } => Some(subject),
            Principal::Credential(_) => None,
        }
    }
}

pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Authenticates the `Authorization: Bearer …` header.
pub async fn authenticate(gateway: &Gateway, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let header = headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated("missing Authorization header"))?;
    let bearer = header
        .to_str()
        .ok()
        .and_then(|h| {
            // The scheme name is case-insensitive (RFC 7235).
            let (scheme, rest) = h.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest)
        })
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            ApiError::unauthenticated("Authorization must be \"Bearer <credential or token>\"")
        })?;
    if subject_token::looks_like_jwt(bearer) {
        authenticate_subject(gateway, bearer).await
    } else {
        authenticate_credential(gateway, bearer).await
    }
}

async fn authenticate_credential(gateway: &Gateway, secret: &str) -> Result<Caller, ApiError> {
    // A bearer that cannot be a credential costs no lookup.
    if !sluice_store::secrets::is_credential_format(secret) {
        return Err(ApiError::unauthenticated("the credential is not valid"));
    }
    let record = gateway
        .credential(secret)
        .await?
        .ok_or_else(|| ApiError::unauthenticated("the credential is not valid"))?;
    Ok(Caller {
        namespace_id: record.namespace_id,
        principal: Principal::Credential(record),
    })
}

/// The HS256 key of a subject key is its secret exactly as shown (`sluice bootstrap`,
/// `sluice subject-key create`): the bytes of that base64url text, which is what every JWT
/// library does with a string secret, and the same rule as the webhook secret. Tokens signed
/// with the decoded bytes (what this gateway required before the rule was written down) are
/// still accepted, so no backend minting them breaks; both keys carry the same 256 random bits.
pub fn verify_with_subject_key(
    token: &str,
    stored: &[u8],
    now_unix: i64,
) -> Result<subject_token::SubjectClaims, subject_token::SubjectTokenError> {
    let shown = sluice_store::secrets::encode_secret(stored);
    match subject_token::verify(token, shown.as_bytes(), now_unix) {
        Err(subject_token::SubjectTokenError::BadSignature) => {
            subject_token::verify(token, stored, now_unix)
        }
        verdict => verdict,
    }
}

async fn authenticate_subject(gateway: &Gateway, token: &str) -> Result<Caller, ApiError> {
    let invalid = |e: subject_token::SubjectTokenError| {
        ApiError::unauthenticated(format!("the subject token is not valid: {e}"))
    };
    let kid = subject_token::peek_kid(token).map_err(invalid)?;
    if !sluice_store::secrets::is_key_id_format(&kid) {
        return Err(ApiError::unauthenticated(
            "the subject token is not valid: unknown key id",
        ));
    }
    let (namespace_id, secret) = gateway.subject_key(&kid).await?.ok_or_else(|| {
        ApiError::unauthenticated("the subject token is not valid: unknown key id")
    })?;
    let claims = verify_with_subject_key(token, &secret, now_unix()).map_err(invalid)?;
    Ok(Caller {
        namespace_id,
        principal: Principal::Subject {
            subject: claims.subject,
        },
    })
}
