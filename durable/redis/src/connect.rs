//! The Redis client: fail fast instead of queueing while disconnected, so a request answers
//! `503 UNAVAILABLE` in milliseconds when Redis is gone and recovers by itself when it returns.

use std::time::Duration;

use fred::prelude::*;

use super::Projection;
use crate::DurableError;

/// Connects the pool and wraps it with the scripts: the one handle every caller of Redis gets.
pub async fn connect_redis(url: &str, pool_size: usize) -> Result<Projection, DurableError> {
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
    super::supervise::init_watched(&pool).await?;
    Ok(Projection::new(pool))
}

/// Refuses a Redis that may evict keys: an evicted bucket refills to its burst, an evicted lease
/// frees a permit that is still in use, an evicted counter forgets accepted work. Only
/// `noeviction` (or no `maxmemory` at all, which never evicts) keeps every limit. Read from
/// `INFO memory`, which managed services that rename `CONFIG` still answer.
pub async fn check_eviction_policy(redis: &Projection) -> Result<(), DurableError> {
    let info: String = redis
        .pool()
        .next()
        .info(Some(fred::types::InfoKind::Memory))
        .await?;
    eviction_verdict(&info)
}

/// The verdict on the text of `INFO memory`.
pub fn eviction_verdict(info: &str) -> Result<(), DurableError> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let maxmemory = field("maxmemory")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let policy = field("maxmemory_policy").unwrap_or("noeviction");
    if maxmemory == 0 || policy == "noeviction" {
        return Ok(());
    }
    Err(DurableError::Misconfigured(format!(
        "Redis may evict keys (maxmemory {maxmemory} with maxmemory-policy {policy}); an evicted \
         admission key is a broken limit. Set `maxmemory-policy noeviction` (redis.conf, or \
         CONFIG SET maxmemory-policy noeviction), or remove maxmemory"
    )))
}

#[cfg(test)]
mod tests {
    use super::eviction_verdict;

    #[test]
    fn only_a_redis_that_never_evicts_is_accepted() {
        let info = |maxmemory: u64, policy: &str| {
            format!(
                "# Memory\r\nused_memory:1000\r\nmaxmemory:{maxmemory}\r\nmaxmemory_human:0B\r\nmaxmemory_policy:{policy}\r\n"
            )
        };
        assert!(
            eviction_verdict(&info(0, "allkeys-lru")).is_ok(),
            "no maxmemory never evicts"
        );
        assert!(eviction_verdict(&info(1 << 30, "noeviction")).is_ok());
        for policy in [
            "allkeys-lru",
            "volatile-lru",
            "allkeys-random",
            "volatile-ttl",
            "allkeys-lfu",
        ] {
            let error = eviction_verdict(&info(1 << 30, policy)).expect_err(policy);
            assert!(
                error.to_string().contains("maxmemory-policy noeviction"),
                "{error}"
            );
            assert!(error.to_string().contains(policy), "{error}");
        }
    }
}
