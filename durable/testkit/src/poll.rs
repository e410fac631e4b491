//! Waiting for a condition with a deadline, instead of sleeping for a guessed time.

use std::future::Future;
use std::time::Duration;

/// Polls `check` (every 20 ms) until it is true or `within` passes; returns whether it became
/// true.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
