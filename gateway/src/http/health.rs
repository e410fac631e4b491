//! Readiness, in two depths.
//!
//! - [`public_readiness`], `GET /readyz` on the public port: answered from memory (is a Redis
//!   connection up), so a flood of probes costs nothing and says nothing about the servers
//!   behind. A PostgreSQL outage or a projection being rebuilt is answered per request (`503
//!   UNAVAILABLE`, retryable), which is what a client needs to know.
//! - [`readiness`], `GET /readyz` on the admin listener: ready only when PostgreSQL answers, Redis
//!   answers, and every application's projection in Redis is ready at PostgreSQL's generation. A
//!   projection that is missing (Redis restarted empty, flushed) is rebuilt from here, within the
//!   gateway's rebuild wait: an orchestrator that withholds traffic from a not-ready gateway would
//!   otherwise wait forever for a rebuild that only traffic triggers.

use fred::prelude::*;
use hyper::StatusCode;

use crate::http::response::{HttpResponse, plain};
use crate::state::Gateway;
use sluice_durable::ids::ApplicationId;
use sluice_redis::AppKeys;

/// Applications checked per probe, at most (the busiest deployments of one gateway hold far
/// fewer; a probe must stay cheap).
const MAX_APPLICATIONS: i64 = 1_000;
/// Projections rebuilt per probe, at most; the next probe goes on.
const MAX_REBUILDS: usize = 4;

/// The public readiness: no query, no script, no rebuild, and no server's error text.
pub fn public_readiness(gateway: &Gateway) -> HttpResponse {
    if gateway.draining.load(std::sync::atomic::Ordering::Relaxed) {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
    }
    let redis_up = gateway
        .redis
        .pool()
        .clients()
        .iter()
        .any(|client| client.is_connected());
    if redis_up {
        plain(StatusCode::OK, "ready\n")
    } else {
        plain(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// The detailed readiness of the admin listener.
pub async fn readiness(gateway: &Gateway) -> HttpResponse {
    let unavailable = |why: String| plain(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
    if gateway.draining.load(std::sync::atomic::Ordering::Relaxed) {
        return unavailable("draining: SIGTERM received, finishing what was accepted".into());
    }
    let projections: Vec<(ApplicationId, i64)> = match sqlx::query!(
        r#"SELECT application_id AS "application_id: ApplicationId", generation FROM projections
            ORDER BY application_id LIMIT $1"#,
        MAX_APPLICATIONS,
    )
    .fetch_all(&gateway.pg)
    .await
    {
        Ok(rows) => rows
            .into_iter()
            .map(|row| (row.application_id, row.generation))
            .collect(),
        Err(error) => return unavailable(format!("PostgreSQL unavailable: {error}")),
    };
    // Fails at once while no connection is up, instead of waiting out the command timeout.
    let client = gateway.redis.pool().next_connected();
    if !client.is_connected() {
        return unavailable("Redis unavailable: no connection is up".into());
    }
    let stale = match stale_projections(client, &projections).await {
        Ok(stale) => stale,
        Err(error) => return unavailable(format!("Redis unavailable: {error}")),
    };
    let mut not_ready = Vec::new();
    for application_id in stale.iter().take(MAX_REBUILDS) {
        if !gateway.ensure_projection(*application_id).await {
            not_ready.push(*application_id);
        }
    }
    not_ready.extend(stale.iter().skip(MAX_REBUILDS));
    if not_ready.is_empty() {
        plain(StatusCode::OK, "ready\n")
    } else {
        let first: Vec<String> = not_ready
            .iter()
            .take(5)
            .map(ApplicationId::to_string)
            .collect();
        unavailable(format!(
            "{} application projection(s) being rebuilt: {}",
            not_ready.len(),
            first.join(", ")
        ))
    }
}

/// The applications whose projection is not ready at PostgreSQL's generation, in one pipeline.
async fn stale_projections(
    client: &Client,
    projections: &[(ApplicationId, i64)],
) -> Result<Vec<ApplicationId>, Error> {
    if projections.is_empty() {
        let _: String = client.ping(None).await?;
        return Ok(Vec::new());
    }
    let pipeline = client.pipeline();
    for (application_id, _) in projections {
        let _: () = pipeline
            .hmget(
                AppKeys::new(*application_id).meta(),
                vec!["ready", "generation"],
            )
            .await?;
    }
    let answers: Vec<(Option<String>, Option<i64>)> = pipeline.all().await?;
    Ok(projections
        .iter()
        .zip(answers)
        .filter(|((_, generation), (ready, stored))| {
            ready.as_deref() != Some("1") || stored.unwrap_or(-1) < *generation
        })
        .map(|((application_id, _), _)| *application_id)
        .collect())
}
