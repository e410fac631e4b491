//! What SIGTERM starts for a gateway: readiness turns `503 draining` at once, the listener keeps
//! accepting for `gateway.shutdown_delay_ms` (so a load balancer following `/readyz` stops
//! sending before the port closes), then the drain proper ([`crate::http::server::run`]): the
//! port refuses, what was accepted is answered and committed. The admin listener serves
//! `/readyz` and `/metrics` until the very end, so the drain itself can be watched.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::state::Gateway;

/// Waits for `signalled` (SIGTERM), marks `gateway` draining, waits `delay`, then cancels
/// `shutdown` (the listener's).
pub async fn on_signal(
    gateway: Arc<Gateway>,
    signalled: CancellationToken,
    shutdown: CancellationToken,
    delay: Duration,
) {
    tokio::select! {
        () = signalled.cancelled() => {}
        () = shutdown.cancelled() => return,
    }
    gateway.draining.store(true, Ordering::Relaxed);
    if !delay.is_zero() {
        tracing::info!(
            delay_ms = delay.as_millis() as u64,
            "draining: readiness answers 503; still accepting until the delay is over"
        );
        tokio::time::sleep(delay).await;
    }
    shutdown.cancel();
}
