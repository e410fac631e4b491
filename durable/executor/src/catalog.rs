//! What the executor serves: every application with a projection, the generation it must see in
//! Redis, and the admission specs of the commands it can run (only those get a `cfg` entry, so
//! `admit.lua` leaves the others waiting). Each load also refreshes the application's pauses and
//! shared budgets in Redis.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use sqlx::PgPool;

use crate::webhook::WebhookSecrets;
use sluice_durable::DurableError;
use sluice_durable::declaration::{CommandDecl, Declaration, HandlerDecl};
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::admission_config::{admission_spec, limit_specs, write_admission_config};

/// One application as the executor sees it.
#[derive(Debug, Clone)]
pub struct Application {
    pub id: ApplicationId,
    pub generation: i64,
    /// Commands by (namespace, code).
    pub commands: HashMap<(NamespaceId, String), CommandDecl>,
    /// Namespaces by id: what a webhook request names and signs with.
    pub namespaces: HashMap<NamespaceId, NamespaceInfo>,
}

/// What a webhook request needs of its namespace (the secrets' `Debug` redacts them).
#[derive(Debug, Clone)]
pub struct NamespaceInfo {
    pub name: String,
    pub webhook_secrets: WebhookSecrets,
}

/// Whether this executor has a handler for the command (every kind a declaration can name has
/// one; a command without is left waiting, never claimed).
pub fn runnable(decl: &CommandDecl) -> bool {
    matches!(
        decl.handler,
        HandlerDecl::Quota { .. } | HandlerDecl::Webhook { .. }
    )
}

/// Loads every application and its newest declarations, and writes the admission specs, the
/// pauses and the shared budgets.
pub async fn load(pg: &PgPool, redis: &Projection) -> Result<Vec<Application>, DurableError> {
    let rows = sqlx::query!(
        r#"SELECT p.application_id AS "application_id: ApplicationId", p.generation,
                  n.id AS "namespace_id: NamespaceId", n.name, n.webhook_secret,
                  n.webhook_secret_previous,
                  d.document AS "document?"
             FROM projections p
             JOIN namespaces n ON n.application_id = p.application_id
             LEFT JOIN LATERAL (
                  SELECT document FROM declarations
                   WHERE namespace_id = n.id ORDER BY revision DESC LIMIT 1) d ON true"#,
    )
    .fetch_all(pg)
    .await?;
    let mut apps: HashMap<ApplicationId, Application> = HashMap::new();
    for row in rows {
        let id = row.application_id;
        let app = apps.entry(id).or_insert_with(|| Application {
            id,
            generation: 0,
            commands: HashMap::new(),
            namespaces: HashMap::new(),
        });
        app.generation = row.generation;
        let namespace_id = row.namespace_id;
        app.namespaces.insert(
            namespace_id,
            NamespaceInfo {
                name: row.name,
                webhook_secrets: WebhookSecrets {
                    current: row.webhook_secret,
                    previous: row.webhook_secret_previous,
                },
            },
        );
        let Some(document) = row.document else {
            continue;
        };
        let fingerprint = fingerprint(&document);
        let declaration: Declaration = match serde_json::from_value(document) {
            Ok(declaration) => declaration,
            Err(error) => {
                tracing::error!(%namespace_id, %error, "stored declaration does not load; its commands wait");
                continue;
            }
        };
        warn_of_shared_keys(namespace_id, fingerprint, &declaration);
        for command in declaration.commands {
            app.commands
                .insert((namespace_id, command.code.clone()), command);
        }
    }
    let apps: Vec<Application> = apps.into_values().collect();
    for app in &apps {
        let mut specs = Vec::new();
        for ((ns, code), decl) in app.commands.iter().filter(|(_, decl)| runnable(decl)) {
            specs.push((format!("{ns}:{code}"), admission_spec(decl)));
            specs.extend(limit_specs(*ns, decl));
        }
        write_admission_config(redis, &AppKeys::new(app.id), specs).await?;
        // The pauses and shared budgets too: a control or configure call whose own Redis write
        // failed converges here.
        sluice_durable::converge::refresh(pg, redis, app.id).await?;
    }
    Ok(apps)
}

/// The stored declaration each namespace was last checked at, by fingerprint: the check runs
/// once per stored document, not on every refresh.
static CHECKED: Mutex<Option<HashMap<NamespaceId, u64>>> = Mutex::new(None);

fn fingerprint(document: &serde_json::Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    document.to_string().hash(&mut hasher);
    hasher.finish()
}

/// `apply` refuses limit templates that can render one key with other numbers, but a
/// declaration stored before that rule keeps running as stored: the template `admit.lua` reads
/// first in a call sets the shared key's numbers. Said once per stored document, so that an
/// operator knows the next apply must resolve it.
fn warn_of_shared_keys(namespace_id: NamespaceId, fingerprint: u64, declaration: &Declaration) {
    let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
    if checked
        .get_or_insert_with(HashMap::new)
        .insert(namespace_id, fingerprint)
        == Some(fingerprint)
    {
        return;
    }
    drop(checked);
    if let Some(conflict) = declaration.limit_key_conflict() {
        tracing::warn!(
            %namespace_id,
            field = %conflict.field,
            "stored declaration: {}; it runs as stored (whichever template admit.lua reads first \
             sets the shared key's numbers) and the next apply refuses it until resolved",
            conflict.message
        );
    }
}
