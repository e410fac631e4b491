//! Applications, namespaces and their identities: bootstrap, the lookups that authenticate a
//! request, the namespace configuration a gateway caches, and applying declarations.

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::declaration::{self, Declaration};
use crate::field_error::FieldError;
use crate::ids::{ApplicationId, CredentialId, NamespaceId};
use crate::secrets;

/// Scopes a namespace credential may hold.
pub const NAMESPACE_SCOPES: [&str; 10] = [
    "commands:enqueue",
    "commands:read",
    "commands:cancel",
    "commands:complete",
    "reads:read",
    "reads:invalidate",
    "quotas:manage",
    "control:manage",
    "status:read",
    "declarations:manage",
];

/// Scopes over the whole application. Granted only explicitly: nothing implies them.
pub const APPLICATION_SCOPES: [&str; 2] =
    ["application:resources:read", "application:resources:manage"];

#[derive(Debug, Clone)]
pub struct BootstrapRequest {
    pub application: String,
    pub namespace: String,
    /// Join this existing application instead of creating one.
    pub application_id: Option<ApplicationId>,
    /// Empty means every namespace scope.
    pub scopes: Vec<String>,
    pub resource_access: bool,
}

/// What `sluice bootstrap` writes to its output file: the only time secrets are shown. Its
/// `Debug` redacts them.
#[derive(Clone, Serialize, serde::Deserialize)]
pub struct BootstrapOutput {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub namespace: String,
    pub credential: String,
    pub scopes: Vec<String>,
    pub subject_key: SubjectKeyOutput,
    pub webhook_secret: String,
}

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

impl std::fmt::Debug for BootstrapOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapOutput")
            .field("application_id", &self.application_id)
            .field("namespace_id", &self.namespace_id)
            .field("namespace", &self.namespace)
            .field("credential", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("subject_key", &self.subject_key)
            .field("webhook_secret", &"<redacted>")
            .finish()
    }
}

fn validate_bootstrap(req: &BootstrapRequest) -> Result<Vec<String>, FieldError> {
    if req.application.is_empty() || req.application.chars().count() > 128 {
        return Err(FieldError::new(
            "application",
            "must be 1 to 128 characters",
        ));
    }
    let valid_namespace = req.namespace.len() <= 64
        && req.namespace.starts_with(|c: char| c.is_ascii_lowercase())
        && req
            .namespace
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid_namespace {
        return Err(FieldError::new(
            "namespace",
            "must match ^[a-z][a-z0-9_-]{0,63}$",
        ));
    }
    let mut scopes = if req.scopes.is_empty() {
        NAMESPACE_SCOPES.iter().map(|s| s.to_string()).collect()
    } else {
        req.scopes.clone()
    };
    if req.resource_access {
        scopes.extend(APPLICATION_SCOPES.iter().map(|s| s.to_string()));
    }
    for scope in &scopes {
        if !NAMESPACE_SCOPES.contains(&scope.as_str())
            && !APPLICATION_SCOPES.contains(&scope.as_str())
        {
            return Err(FieldError::new("scope", format!("unknown scope {scope:?}")));
        }
    }
    scopes.sort();
    scopes.dedup();
    Ok(scopes)
}

/// Creates (or joins) an application, a namespace in it, a credential, a subject key and a
/// webhook secret, all in one transaction.
pub async fn bootstrap(
    pg: &PgPool,
    req: &BootstrapRequest,
) -> Result<BootstrapOutput, DurableError> {
    let scopes = validate_bootstrap(req)?;
    let mut tx = pg.begin().await?;
    let application_id = match req.application_id {
        Some(id) => {
            let found: Option<String> = sqlx::query_scalar!(
                "SELECT name FROM applications WHERE id = $1 FOR UPDATE",
                id as _
            )
            .fetch_optional(&mut *tx)
            .await?;
            let name =
                found.ok_or_else(|| DurableError::NotFound(format!("no application {id}")))?;
            // The name must agree: a mistyped id never silently joins someone else's application.
            if name != req.application {
                return Err(FieldError::new(
                    "application",
                    format!(
                        "application {id} is named {name:?}, not {:?}",
                        req.application
                    ),
                )
                .into());
            }
            id
        }
        None => {
            let id = ApplicationId::new_v7();
            sqlx::query!(
                "INSERT INTO applications (id, name) VALUES ($1, $2)",
                id as _,
                &req.application
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query!(
                "INSERT INTO projections (application_id) VALUES ($1)",
                id as _
            )
            .execute(&mut *tx)
            .await?;
            id
        }
    };
    let namespace_id = NamespaceId::new_v7();
    let webhook_secret = secrets::encode_secret(&secrets::random_bytes::<32>());
    let inserted = sqlx::query!(
        "INSERT INTO namespaces (id, application_id, name, webhook_secret) VALUES ($1, $2, $3, $4)
         ON CONFLICT (application_id, name) DO NOTHING",
        namespace_id as _,
        application_id as _,
        &req.namespace,
        &webhook_secret
    )
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(DurableError::StateConflict(format!(
            "namespace {:?} already exists in application {application_id}",
            req.namespace
        )));
    }
    let credential = secrets::new_credential_secret();
    sqlx::query!(
        "INSERT INTO credentials (id, namespace_id, secret_sha256, scopes, label)
         VALUES ($1, $2, $3, $4, 'bootstrap')",
        Uuid::now_v7(),
        namespace_id as _,
        secrets::credential_hash(&credential).to_vec(),
        &scopes
    )
    .execute(&mut *tx)
    .await?;
    let subject_key = insert_subject_key(&mut tx, namespace_id).await?;
    audit(
        &mut tx,
        application_id,
        Some(namespace_id),
        "cli",
        "namespace.bootstrap",
        serde_json::json!({ "namespace": req.namespace, "scopes": scopes }),
    )
    .await?;
    tx.commit().await?;
    Ok(BootstrapOutput {
        application_id,
        namespace_id,
        namespace: req.namespace.clone(),
        credential,
        scopes,
        subject_key,
        webhook_secret,
    })
}

pub async fn audit(
    conn: &mut sqlx::PgConnection,
    application_id: ApplicationId,
    namespace_id: Option<NamespaceId>,
    actor: &str,
    action: &str,
    details: serde_json::Value,
) -> Result<(), DurableError> {
    sqlx::query!(
        "INSERT INTO audit (application_id, namespace_id, actor, action, details)
         VALUES ($1, $2, $3, $4, $5)",
        application_id as _,
        namespace_id as _,
        actor,
        action,
        details
    )
    .execute(conn)
    .await?;
    Ok(())
}

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
async fn insert_subject_key(
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
