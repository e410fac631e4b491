//! The projection figures of `GET /metrics`, read from Redis when scraped rather than counted:
//! one `metrics.lua` call per application (the list cached for [`APPLICATION_LIST_TTL`], at most
//! [`MAX_APPLICATIONS`]), within [`PROJECTION_BUDGET`]; an application that cannot be read is
//! exported as down.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use fred::prelude::Value;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sqlx::PgPool;

use sluice_metrics::{Label, label, storage_error};

use super::{APPLICATION_LIST_TTL, MAX_APPLICATIONS, PROJECTION_BUDGET};
use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::asked_keys::call_asking;

/// One application's figures as `metrics.lua` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFigures {
    /// None when the projection is missing (`meta` has no generation).
    pub generation: Option<i64>,
    pub ready: bool,
    pub unfinished: i64,
    /// Live members of the application's lease zset.
    pub application_permits: i64,
    pub commands: Vec<CommandFigures>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFigures {
    pub namespace_id: NamespaceId,
    pub command: String,
    /// `queued:<ns>:<cmd>`: waiting commands and live reservations.
    pub queued: i64,
    /// Live members of the command's lease zset.
    pub permits: i64,
}

/// Reads one application's figures with `metrics.lua` (one round trip).
pub async fn read_app_figures(
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<AppFigures, DurableError> {
    let keys = AppKeys::new(application_id);
    let script_keys = vec![
        keys.meta(),
        keys.count(),
        keys.admission_config(),
        keys.application_leases(),
    ];
    // The commands are read by the script: the first call names their lease zsets.
    let answer = call_asking("metrics.lua", script_keys, |script_keys| {
        redis.metrics(script_keys, vec![])
    })
    .await?;
    match answer {
        Value::Array(items) => parse_figures(&items),
        _ => Err(DurableError::script("metrics.lua", "not a list")),
    }
}

fn parse_figures(answer: &[Value]) -> Result<AppFigures, DurableError> {
    let bad = |detail: &str| DurableError::script("metrics.lua", detail.to_string());
    if answer.len() < 4 || !(answer.len() - 4).is_multiple_of(3) {
        return Err(bad("not four figures and command triples"));
    }
    let number = |v: &Value| v.as_i64().ok_or_else(|| bad("not a number"));
    let mut commands = Vec::with_capacity((answer.len() - 4) / 3);
    for triple in answer[4..].chunks(3) {
        let name = triple[0].as_string().ok_or_else(|| bad("command name"))?;
        let (namespace, command) = name
            .split_once(':')
            .ok_or_else(|| bad("command name is not <ns>:<cmd>"))?;
        commands.push(CommandFigures {
            namespace_id: str::parse::<NamespaceId>(namespace).map_err(|_| bad("namespace id"))?,
            command: command.to_string(),
            queued: number(&triple[1])?,
            permits: number(&triple[2])?,
        });
    }
    Ok(AppFigures {
        generation: answer[0].as_i64(),
        ready: answer[1].as_string().as_deref() == Some("1"),
        unfinished: number(&answer[2])?,
        application_permits: number(&answer[3])?,
        commands,
    })
}

/// The applications listed last, and when.
static APPLICATIONS: Mutex<Option<(Instant, Arc<Vec<ApplicationId>>)>> = Mutex::new(None);

/// Applications with a projection, at most [`MAX_APPLICATIONS`], cached for
/// [`APPLICATION_LIST_TTL`]. If PostgreSQL cannot answer, the last list is used (or none).
async fn applications(pg: &PgPool) -> Arc<Vec<ApplicationId>> {
    let cached = APPLICATIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some((at, list)) = &cached
        && at.elapsed() < APPLICATION_LIST_TTL
    {
        return list.clone();
    }
    let listed: Result<Vec<ApplicationId>, sqlx::Error> = sqlx::query_scalar!(
        r#"SELECT application_id AS "application_id: ApplicationId" FROM projections
            ORDER BY application_id LIMIT $1"#,
        MAX_APPLICATIONS
    )
    .fetch_all(pg)
    .await;
    match listed {
        Ok(list) => {
            let list = Arc::new(list);
            *APPLICATIONS.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((Instant::now(), list.clone()));
            list
        }
        Err(error) => {
            let error = DurableError::from(error);
            storage_error(&error);
            tracing::warn!(%error, "metrics: cannot list the applications; using the last list");
            cached.map(|(_, list)| list).unwrap_or_default()
        }
    }
}

/// The projection figures of one scrape, as gauge families.
pub(super) struct ProjectionGauges {
    applications: Gauge,
    up: Family<Label, Gauge>,
    generation: Family<Label, Gauge>,
    ready: Family<Label, Gauge>,
    unfinished: Family<Label, Gauge>,
    application_permits: Family<Label, Gauge>,
    queue_depth: Family<[(&'static str, String); 3], Gauge>,
    command_permits: Family<[(&'static str, String); 3], Gauge>,
}

impl ProjectionGauges {
    pub(super) fn register(self, registry: &mut Registry) {
        registry.register(
            "sluice_projection_applications",
            "Applications whose projection this scrape read (at most 1000)",
            self.applications,
        );
        registry.register(
            "sluice_projection_up",
            "1 if this scrape could read the application's projection from Redis, else 0",
            self.up,
        );
        registry.register(
            "sluice_projection_generation",
            "The projection generation in Redis (absent when the projection is missing)",
            self.generation,
        );
        registry.register(
            "sluice_projection_ready",
            "1 if the application's projection is marked ready in Redis, else 0",
            self.ready,
        );
        registry.register(
            "sluice_unfinished_commands",
            "Accepted commands not yet terminal (needs_review included), from the projection",
            self.unfinished,
        );
        registry.register(
            "sluice_queue_depth",
            "Commands waiting (and intake reservations) per command, from the projection",
            self.queue_depth,
        );
        registry.register(
            "sluice_application_permits_in_flight",
            "Live executing permits of the application (its max_concurrency), all namespaces",
            self.application_permits,
        );
        registry.register(
            "sluice_command_permits_in_flight",
            "Live executing permits of a command (its admission max_in_flight)",
            self.command_permits,
        );
    }
}

/// Reads every listed application within [`PROJECTION_BUDGET`].
pub(super) async fn projection_figures(pg: &PgPool, redis: &Projection) -> ProjectionGauges {
    let gauges = ProjectionGauges {
        applications: Gauge::default(),
        up: Family::default(),
        generation: Family::default(),
        ready: Family::default(),
        unfinished: Family::default(),
        application_permits: Family::default(),
        queue_depth: Family::default(),
        command_permits: Family::default(),
    };
    let apps = applications(pg).await;
    gauges
        .applications
        .set(i64::try_from(apps.len()).unwrap_or(i64::MAX));
    let deadline = tokio::time::Instant::now() + PROJECTION_BUDGET;
    for &application_id in apps.iter() {
        let app = application_id.to_string();
        let read = tokio::time::timeout_at(deadline, read_app_figures(redis, application_id)).await;
        let figures = match read {
            Ok(Ok(figures)) => figures,
            Ok(Err(error)) => {
                storage_error(&error);
                tracing::warn!(%application_id, %error, "metrics: projection not read");
                gauges.up.get_or_create(&label("application", app)).set(0);
                continue;
            }
            Err(_) => {
                gauges.up.get_or_create(&label("application", app)).set(0);
                continue;
            }
        };
        let app_label = label("application", app.clone());
        gauges.up.get_or_create(&app_label).set(1);
        if let Some(generation) = figures.generation {
            gauges.generation.get_or_create(&app_label).set(generation);
        }
        gauges
            .ready
            .get_or_create(&app_label)
            .set(i64::from(figures.ready));
        gauges
            .unfinished
            .get_or_create(&app_label)
            .set(figures.unfinished);
        gauges
            .application_permits
            .get_or_create(&app_label)
            .set(figures.application_permits);
        for command in figures.commands {
            let labels = [
                ("application", app.clone()),
                ("namespace", command.namespace_id.to_string()),
                ("command", command.command),
            ];
            gauges
                .queue_depth
                .get_or_create(&labels)
                .set(command.queued);
            gauges
                .command_permits
                .get_or_create(&labels)
                .set(command.permits);
        }
    }
    gauges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_parse_with_and_without_commands() {
        let ns = NamespaceId::new_v7();
        let answer = vec![
            Value::from("3"),
            Value::from("1"),
            Value::from(7),
            Value::from(2),
            Value::from(format!("{ns}:claim")),
            Value::from(5),
            Value::from(1),
        ];
        let figures = parse_figures(&answer).expect("parses");
        assert_eq!(figures.generation, Some(3));
        assert!(figures.ready);
        assert_eq!((figures.unfinished, figures.application_permits), (7, 2));
        assert_eq!(
            figures.commands,
            vec![CommandFigures {
                namespace_id: ns,
                command: "claim".into(),
                queued: 5,
                permits: 1,
            }]
        );
        let missing = vec![Value::Null, Value::Null, Value::from(0), Value::from(0)];
        let figures = parse_figures(&missing).expect("parses");
        assert_eq!(figures.generation, None);
        assert!(!figures.ready);
        assert!(parse_figures(&answer[..6]).is_err(), "a broken triple");
    }
}
