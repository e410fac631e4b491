//! Creating (or joining) an application with a namespace, a credential, a subject key and a
//! webhook secret, all in one transaction: the only time the secrets are shown.

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::subject_keys::{SubjectKeyOutput, insert_subject_key};
use super::{APPLICATION_SCOPES, NAMESPACE_SCOPES, audit};
use crate::DurableError;
use crate::field_error::FieldError;
use crate::ids::{ApplicationId, NamespaceId};
use crate::secrets;

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
