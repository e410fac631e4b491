//! The HS256 keys a namespace's backend signs subject tokens with: the lookup a gateway makes for
//! an unknown `kid`, and rotation (create, then revoke the old key).

use serde::Serialize;
use sqlx::PgPool;

use super::audit;
use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use crate::secrets;

/// A subject key as it is shown once. The HS256 key is `secret` exactly as shown (its ASCII
/// bytes; see [`secrets::encode_secret`]). Its `Debug` redacts the secret.
#[derive(Clone, Serialize, serde::Deserialize)]
pub struct SubjectKeyOutput {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for SubjectKeyOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectKeyOutput")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// A live subject key: the namespace it belongs to and its HS256 secret.
pub async fn subject_key(
    pg: &PgPool,
    kid: &str,
) -> Result<Option<(NamespaceId, Vec<u8>)>, DurableError> {
    Ok(sqlx::query!(
        r#"SELECT namespace_id AS "namespace_id: NamespaceId", secret FROM subject_keys
            WHERE kid = $1 AND revoked_at IS NULL"#,
        kid,
    )
    .fetch_optional(pg)
    .await?
    .map(|row| (row.namespace_id, row.secret)))
}

/// Adds a subject key to a namespace (rotation: the old keys stay valid until revoked).
pub async fn create_subject_key(
    pg: &PgPool,
    namespace_id: NamespaceId,
    actor: &str,
) -> Result<SubjectKeyOutput, DurableError> {
    let mut tx = pg.begin().await?;
    let application_id: ApplicationId = sqlx::query_scalar!(
        r#"SELECT application_id AS "application_id: ApplicationId" FROM namespaces WHERE id = $1"#,
        namespace_id as _
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| DurableError::NotFound("no such namespace".into()))?;
    let key = insert_subject_key(&mut tx, namespace_id).await?;
    audit(
        &mut tx,
        application_id,
        Some(namespace_id),
        actor,
        "subject_key.create",
        serde_json::json!({ "kid": key.id }),
    )
    .await?;
    tx.commit().await?;
    Ok(key)
}

/// A fresh random subject key for a namespace; the only time its secret is visible.
pub(super) async fn insert_subject_key(
    conn: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
) -> Result<SubjectKeyOutput, DurableError> {
    let kid = secrets::new_key_id();
    let key = secrets::random_bytes::<32>();
    sqlx::query!(
        "INSERT INTO subject_keys (kid, namespace_id, secret) VALUES ($1, $2, $3)",
        &kid,
        namespace_id as _,
        key.to_vec()
    )
    .execute(conn)
    .await?;
    Ok(SubjectKeyOutput {
        id: kid,
        secret: secrets::encode_secret(&key),
    })
}

/// Revokes a subject key of a namespace; tokens signed with it stop working within the
/// gateways' cache period.
pub async fn revoke_subject_key(
    pg: &PgPool,
    namespace_id: NamespaceId,
    kid: &str,
    actor: &str,
) -> Result<(), DurableError> {
    let mut tx = pg.begin().await?;
    let application_id: Option<ApplicationId> = sqlx::query_scalar!(r#"UPDATE subject_keys k SET revoked_at = now() FROM namespaces n
          WHERE k.kid = $1 AND k.namespace_id = $2 AND n.id = k.namespace_id AND k.revoked_at IS NULL
          RETURNING n.application_id AS "application_id: ApplicationId""#, kid, namespace_id as _)
    .fetch_optional(&mut *tx)
    .await?;
    let application_id = application_id.ok_or_else(|| {
        DurableError::NotFound(format!("no live subject key {kid:?} in this namespace"))
    })?;
    audit(
        &mut tx,
        application_id,
        Some(namespace_id),
        actor,
        "subject_key.revoke",
        serde_json::json!({ "kid": kid }),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
