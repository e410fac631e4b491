//! The Redis side of a transition whose PostgreSQL side has committed, made again until the
//! projection takes it.
//!
//! A script answers `NOT_READY` while a rebuild runs or after it detected a Redis that lost
//! writes. Whether that rebuild's snapshot saw the PostgreSQL side is unknown, so the Redis side
//! is made again once the projection is trusted: every life-cycle script is idempotent for
//! that (a landing counts a command out once, a requeue is fenced by its attempt). Meanwhile a
//! rebuild is asked for (one process rebuilds, the others find it ready), so a Redis that lost
//! writes does not wait for some other caller to notice.

use std::future::Future;
use std::time::Duration;

use super::Stores;
use crate::DurableError;
use crate::ids::ApplicationId;
use crate::lifecycle::rebuild;

/// Runs `side` until it answers `Some` (taken) or `patience` runs out (`Ok(None)`: given up; the
/// sweepers repair what is left). `side` answers `None` for `NOT_READY`.
pub async fn until_ready<T, F, Fut>(
    stores: Stores<'_>,
    application_id: ApplicationId,
    patience: Duration,
    mut side: F,
) -> Result<Option<T>, DurableError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, DurableError>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(done) = side().await? {
            return Ok(Some(done));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        // Within the patience left: a rebuild under way holds its lock until it is done.
        let rebuild = rebuild::ensure_ready(stores.pg, stores.redis, application_id);
        if let Ok(Err(error)) = tokio::time::timeout_at(deadline, rebuild).await {
            tracing::debug!(%application_id, %error, "projection not rebuilt yet");
        }
        let now = tokio::time::Instant::now();
        if now < deadline {
            tokio::time::sleep(pause.min(deadline - now)).await;
        }
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
