//! The Redis client: fail fast instead of queueing while disconnected, so a request answers
//! `503 UNAVAILABLE` in milliseconds when Redis is gone and recovers by itself when it returns.

use std::time::Duration;

use fred::prelude::*;

use super::Projection;
use crate::DurableError;

/// Connects the pool and wraps it with the scripts: the one handle every caller of Redis gets.
/// `url` is read by [`RedisUrl::parse`](super::RedisUrl::parse): one node or a cluster's,
/// plaintext or TLS.
pub async fn connect_redis(url: &str, pool_size: usize) -> Result<Projection, DurableError> {
    let parsed = super::RedisUrl::parse(url)?;
    let config = parsed.config()?;
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
    super::supervise::init_watched(&pool)
        .await
        .map_err(|error| explained(&parsed, error))?;
    Ok(Projection::new(pool))
}

/// A first connection's failure said as what an operator changes: which side of TLS refused
/// and why (fred reports rustls's and the socket's errors by their debug names), with fred's
/// own words kept at the end. Anything else is passed on as it is.
fn explained(url: &super::RedisUrl, error: Error) -> DurableError {
    let details = error.details().to_string();
    let has = |needle: &str| details.contains(needle);
    let why = match url.tls() {
        Some(_) if has("UnknownIssuer") || has("BadSignature") => {
            "the server's certificate is not signed by an authority this connection trusts \
             (sslrootcert in the URL, else the system's store)"
        }
        Some(_) if has("NotValidForName") => {
            "the server's certificate does not name the host the URL names"
        }
        Some(_) if has("Expired") || has("NotValidYet") => {
            "the server's certificate is outside its validity period"
        }
        Some(_) if has("CertificateRequired") || has("HandshakeFailure") => {
            "the server asks for a client certificate this connection did not present (give \
             sslcert and sslkey in the URL)"
        }
        Some(_) if has("CorruptMessage") || has("InvalidContentType") => {
            "the server does not answer TLS on this port (a plaintext port is redis://)"
        }
        // A plaintext Redis reads a TLS hello as an unfinished command and waits for the rest.
        Some(_) if *error.kind() == ErrorKind::Timeout => {
            "no answer to the TLS handshake within 2 s: the server does not answer TLS on this \
             port (a plaintext port is redis://), or nothing reachable listens there"
        }
        None if has("ConnectionReset") || has("UnexpectedEof") => {
            "the server closed a plaintext connection at once, as a server that serves TLS \
             only does (is the URL meant to be rediss://?)"
        }
        _ => return DurableError::Redis(error),
    };
    let over = if url.tls().is_some() {
        "TLS"
    } else {
        "plaintext TCP"
    };
    DurableError::Misconfigured(format!(
        "Redis at {} over {over}: {why} [{details}]",
        url.address()
    ))
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
