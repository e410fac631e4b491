//! Applying a declaration as a new revision: parsed and validated first, then one transaction
//! (the revision, its quota pools, its rooms, the audit), so nothing is ever half-applied.

use sqlx::PgPool;

use super::audit;
use crate::DurableError;
use crate::declaration::{self, Declaration};
use crate::field_error::FieldError;
use crate::ids::{ApplicationId, NamespaceId};

/// Applies a TOML declaration as a new revision: parse and validate everything first, then one
/// transaction (revision, quota pools, rooms, audit), so nothing is ever half-applied.
/// `expected_revision`, when given, must equal the revision in force (compare-and-set).
pub async fn apply_declaration(
    pg: &PgPool,
    namespace_id: NamespaceId,
    source: &str,
    actor: &str,
    expected_revision: Option<i64>,
) -> Result<i64, DurableError> {
    let declaration = declaration::parse(source)?;
    let mut tx = pg.begin().await?;
    let application_id: Option<ApplicationId> = sqlx::query_scalar!(
        r#"SELECT application_id AS "application_id: ApplicationId" FROM namespaces
            WHERE id = $1 FOR UPDATE"#,
        namespace_id as _
    )
    .fetch_optional(&mut *tx)
    .await?;
    let application_id =
        application_id.ok_or_else(|| DurableError::NotFound("no such namespace".into()))?;
    let current: i64 = sqlx::query_scalar!(
        r#"SELECT coalesce(max(revision), 0) AS "current!" FROM declarations WHERE namespace_id = $1"#,
        namespace_id as _
    )
    .fetch_one(&mut *tx)
    .await?;
    if let Some(expected) = expected_revision.filter(|e| *e != current) {
        return Err(DurableError::StateConflict(format!(
            "expected revision {expected}, the namespace is at revision {current}"
        )));
    }
    let previous = previous_pool_capacities(&mut tx, namespace_id, current).await?;
    apply_quota_pools(&mut tx, namespace_id, &declaration, &previous).await?;
    crate::rooms::declare::apply(&mut tx, namespace_id, &declaration).await?;
    let revision = current + 1;
    let document = serde_json::to_value(&declaration)
        .map_err(|e| DurableError::StateConflict(format!("declaration does not serialise: {e}")))?;
    sqlx::query!(
        "INSERT INTO declarations (namespace_id, revision, document, source, applied_by)
         VALUES ($1, $2, $3, $4, $5)",
        namespace_id as _,
        revision,
        &document,
        source,
        actor
    )
    .execute(&mut *tx)
    .await?;
    audit(
        &mut tx,
        application_id,
        Some(namespace_id),
        actor,
        "declarations.apply",
        serde_json::json!({
            "revision": revision,
            "commands": declaration.commands.iter().map(|c| &c.code).collect::<Vec<_>>(),
            "quota_pools": declaration.quota_pools.iter().map(|p| &p.code).collect::<Vec<_>>(),
            "rooms": declaration.rooms.iter().map(|r| &r.code).collect::<Vec<_>>(),
        }),
    )
    .await?;
    tx.commit().await?;
    Ok(revision)
}

/// The capacities the declaration in force (`revision`) declares, by pool code.
async fn previous_pool_capacities(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    revision: i64,
) -> Result<std::collections::HashMap<String, u64>, DurableError> {
    let document: Option<serde_json::Value> = sqlx::query_scalar!(
        "SELECT document FROM declarations WHERE namespace_id = $1 AND revision = $2",
        namespace_id as _,
        revision
    )
    .fetch_optional(&mut *tx)
    .await?;
    // A document an older version stored that no longer loads declares nothing here: every
    // declared capacity is then applied, as on a first apply.
    let previous: Option<Declaration> = document.and_then(|d| serde_json::from_value(d).ok());
    Ok(previous
        .map(|d| {
            d.quota_pools
                .into_iter()
                .map(|p| (p.code, p.capacity))
                .collect()
        })
        .unwrap_or_default())
}

/// Creates declared pools and sets the capacities the document changed: a pool whose declared
/// capacity is what the declaration in force declared keeps its capacity, so re-applying a
/// document never undoes an operator's `:configure`. A capacity below what is already allocated
/// or reserved is refused (the pool's row is locked while checking, as every change of its
/// counts does).
async fn apply_quota_pools(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    declaration: &Declaration,
    previous: &std::collections::HashMap<String, u64>,
) -> Result<(), DurableError> {
    for (index, pool) in declaration.quota_pools.iter().enumerate() {
        let capacity = i64::try_from(pool.capacity).map_err(|_| {
            FieldError::new(format!("quota_pool[{index}].capacity"), "is too large")
        })?;
        let unchanged = previous.get(&pool.code) == Some(&pool.capacity);
        let used: Option<i64> = sqlx::query_scalar!(
            r#"SELECT allocated + reserved AS "used!" FROM quota_pools
                WHERE namespace_id = $1 AND code = $2 FOR UPDATE"#,
            namespace_id as _,
            &pool.code
        )
        .fetch_optional(&mut *tx)
        .await?;
        if unchanged && used.is_some() {
            continue;
        }
        if let Some(used) = used.filter(|used| *used > capacity) {
            return Err(FieldError::new(
                format!("quota_pool[{index}].capacity"),
                format!("{capacity} is below the {used} units already allocated or reserved"),
            )
            .into());
        }
        sqlx::query!(
            "INSERT INTO quota_pools (namespace_id, code, capacity) VALUES ($1, $2, $3)
             ON CONFLICT (namespace_id, code) DO UPDATE
                SET capacity = EXCLUDED.capacity, revision = quota_pools.revision + 1
              WHERE quota_pools.capacity <> EXCLUDED.capacity",
            namespace_id as _,
            &pool.code,
            capacity
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
