//! Webhook secret rotation: a namespace's new secret signs beside the old one until the old one
//! is retired, so a backend moves from one to the other without refusing a request.
//!
//! 1. `rotate`: a new secret is made current (shown once), the current one becomes previous;
//!    every request is signed with both from the executors' next catalog refresh
//!    (`executor.catalog_refresh_ms`) on. A rotation while one is in progress is refused, so no
//!    secret a backend may still rely on is dropped by accident.
//! 2. The backend learns the new secret and checks any `v1` of the header against it.
//! 3. `retire`: the previous secret stops being sent.
//!
//! Both steps are audited; neither shows the old secret again.

use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use crate::secrets;
use crate::tenancy::audit;

/// Makes a fresh secret current and keeps the current one as previous; returns the new secret
/// (the only time it is shown).
pub async fn rotate(
    pg: &PgPool,
    namespace_id: NamespaceId,
    actor: &str,
) -> Result<String, DurableError> {
    let secret = secrets::encode_secret(&secrets::random_bytes::<32>());
    let mut tx = pg.begin().await?;
    let row = sqlx::query!(
        r#"SELECT application_id AS "application_id: ApplicationId",
                  webhook_secret_previous IS NOT NULL AS "rotating!"
             FROM namespaces WHERE id = $1 FOR UPDATE"#,
        namespace_id as _,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| DurableError::NotFound("no such namespace".into()))?;
    if row.rotating {
        return Err(DurableError::StateConflict(
            "a rotation is in progress: once every backend checks the new secret, retire the previous one (sluice webhook-secret retire), then rotate again".into(),
        ));
    }
    sqlx::query!(
        "UPDATE namespaces SET webhook_secret_previous = webhook_secret, webhook_secret = $2
          WHERE id = $1",
        namespace_id as _,
        &secret,
    )
    .execute(&mut *tx)
    .await?;
    audit(
        &mut tx,
        row.application_id,
        Some(namespace_id),
        actor,
        "webhook_secret.rotate",
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    Ok(secret)
}

/// Stops sending the previous secret. Refused when no rotation is in progress.
pub async fn retire(
    pg: &PgPool,
    namespace_id: NamespaceId,
    actor: &str,
) -> Result<(), DurableError> {
    let mut tx = pg.begin().await?;
    let application_id: Option<ApplicationId> = sqlx::query_scalar!(
        r#"UPDATE namespaces SET webhook_secret_previous = NULL
            WHERE id = $1 AND webhook_secret_previous IS NOT NULL
            RETURNING application_id AS "application_id: ApplicationId""#,
        namespace_id as _,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let application_id = application_id.ok_or_else(|| {
        DurableError::StateConflict("no rotation is in progress: nothing to retire".into())
    })?;
    audit(
        &mut tx,
        application_id,
        Some(namespace_id),
        actor,
        "webhook_secret.retire",
        serde_json::json!({}),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
