//! The Redis client: fail fast instead of queueing while disconnected, so a request answers
//! `503 UNAVAILABLE` in milliseconds when Redis is gone and recovers by itself when it returns.

use std::time::Duration;

use fred::prelude::*;

use crate::DurableError;

pub async fn connect_redis(url: &str, pool_size: usize) -> Result<Pool, DurableError> {
    // A comma-separated list names cluster nodes: `redis://a:7000,redis://b:7001`.
    let config = match url.split_once(',') {
        Some((first, rest)) => {
            let others = rest
                .split(',')
                .map(|node| format!("node={}", node.trim().trim_start_matches("redis://")))
                .collect::<Vec<_>>()
                .join("&");
            Config::from_url_clustered(&format!("{}?{others}", first.trim()))?
        }
        None => Config::from_url(url)?,
    };
    let config = Config {
        fail_fast: true,
        ..config
    };
    let pool = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.internal_command_timeout = Duration::from_secs(2);
            c.max_command_attempts = 1;
        })
        .with_performance_config(|p| {
            p.default_command_timeout = Duration::from_secs(2);
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
        .build_pool(pool_size.max(1))?;
    pool.init().await?;
    Ok(pool)
}
