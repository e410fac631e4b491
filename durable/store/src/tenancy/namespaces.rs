//! What a gateway caches of a namespace to decide its enqueues, and the browser origins CORS
//! preflights allow.

use sqlx::PgPool;

use crate::DurableError;
use crate::declaration::Declaration;
use crate::ids::{ApplicationId, NamespaceId};

/// Everything a gateway needs to decide an enqueue of a namespace, cached for a short while.
#[derive(Debug, Clone)]
pub struct NamespaceConfig {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub namespace: String,
    pub max_unfinished: i64,
    /// PostgreSQL's projection generation: Redis must be at least this new.
    pub generation: i64,
    pub declaration_revision: i64,
    pub declaration: Declaration,
}

pub async fn namespace_config(
    pg: &PgPool,
    namespace_id: NamespaceId,
) -> Result<Option<NamespaceConfig>, DurableError> {
    let row = sqlx::query!(
        r#"SELECT n.id AS "id: NamespaceId", n.name,
                  n.application_id AS "application_id: ApplicationId", a.max_unfinished,
                  coalesce(p.generation, 0) AS "generation!",
                  coalesce(d.revision, 0) AS "revision!", d.document AS "document?"
             FROM namespaces n
             JOIN applications a ON a.id = n.application_id
             LEFT JOIN projections p ON p.application_id = n.application_id
             LEFT JOIN LATERAL (
                  SELECT revision, document FROM declarations
                   WHERE namespace_id = n.id ORDER BY revision DESC LIMIT 1) d ON true
            WHERE n.id = $1"#,
        namespace_id as _,
    )
    .fetch_optional(pg)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let declaration = match row.document {
        Some(doc) => serde_json::from_value(doc).map_err(|e| {
            DurableError::StateConflict(format!("stored declaration does not load: {e}"))
        })?,
        None => Declaration::default(),
    };
    Ok(Some(NamespaceConfig {
        application_id: row.application_id,
        namespace_id: row.id,
        namespace: row.name,
        max_unfinished: row.max_unfinished,
        generation: row.generation,
        declaration_revision: row.revision,
        declaration,
    }))
}

/// Every browser origin that some namespace allows, for CORS preflights (which carry no
/// credential, so the namespace is not known yet; the real request is checked per namespace).
pub async fn all_allowed_origins(pg: &PgPool) -> Result<Vec<String>, DurableError> {
    Ok(sqlx::query_scalar!(r#"SELECT DISTINCT origin AS "origin!"
           FROM namespaces n
           JOIN LATERAL (
                SELECT document FROM declarations
                 WHERE namespace_id = n.id ORDER BY revision DESC LIMIT 1) d ON true
           CROSS JOIN LATERAL jsonb_array_elements_text(d.document -> 'namespace' -> 'allowed_origins') AS origin"#)
    .fetch_all(pg)
    .await?)
}
