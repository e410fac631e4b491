//! Applications, namespaces and their identities, one job per module:
//!
//! - [`bootstrap`]: creating (or joining) an application with a namespace, a credential, a
//!   subject key and a webhook secret, in one transaction.
//! - [`credentials`]: the bearer-credential lookup that authenticates a backend's request.
//! - [`subject_keys`]: the HS256 keys that sign subject tokens: lookup, create, revoke.
//! - [`namespaces`]: what a gateway caches of a namespace, and the origins CORS allows.
//! - [`apply`]: applying a declaration as a new revision (its quota pools and rooms with it).
//!
//! Every change is recorded in `audit` within the transaction that makes it ([`audit`]).

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};

pub mod apply;
pub mod bootstrap;
pub mod credentials;
pub mod namespaces;
pub mod subject_keys;

pub use apply::apply_declaration;
pub use bootstrap::{BootstrapOutput, BootstrapRequest, bootstrap};
pub use credentials::{CredentialRecord, credential_by_secret};
pub use namespaces::{NamespaceConfig, all_allowed_origins, namespace_config};
pub use subject_keys::{SubjectKeyOutput, create_subject_key, revoke_subject_key, subject_key};

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

/// Records who changed what, in the transaction of the change.
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
