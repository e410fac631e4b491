//! The bearer-credential lookup that authenticates a backend's request.

use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{CredentialId, NamespaceId};
use crate::secrets;

/// A credential as authentication needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialRecord {
    pub id: CredentialId,
    pub namespace_id: NamespaceId,
    pub scopes: Vec<String>,
}

/// Looks a bearer secret up by its hash; revoked credentials are not found.
pub async fn credential_by_secret(
    pg: &PgPool,
    secret: &str,
) -> Result<Option<CredentialRecord>, DurableError> {
    Ok(sqlx::query_as!(
        CredentialRecord,
        r#"SELECT id AS "id: CredentialId", namespace_id AS "namespace_id: NamespaceId", scopes
             FROM credentials WHERE secret_sha256 = $1 AND revoked_at IS NULL"#,
        &secrets::credential_hash(secret)[..],
    )
    .fetch_optional(pg)
    .await?)
}
