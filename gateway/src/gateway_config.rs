//! Gateway settings: one struct with units in the field names and defaults that suit a single
//! machine. It is the `[gateway]` table of the configuration ([`crate::settings`]); tests build
//! it directly.

use sluice_store::batching::GroupCommitConfig;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Request bodies above this are `413 PAYLOAD_TOO_LARGE`.
    pub max_body_bytes: usize,
    /// A command's `input` above this (encoded) is `400 INVALID_ARGUMENT`.
    pub max_input_bytes: usize,
    /// A request's headers must arrive within this (HTTP/1), or the connection is closed: a
    /// client that sends half a header holds its connection no longer.
    pub header_read_timeout_ms: u64,
    /// A request's body must arrive within this, or the answer is `400` naming `body`.
    pub body_read_timeout_ms: u64,
    /// Connections open at once, at most; one more is closed as soon as it is accepted (the
    /// connections in hand keep being served).
    pub max_connections: usize,
    /// HTTP/2 streams in progress on one connection, at most.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 pings an idle connection this often; one unanswered for as long closes it.
    pub http2_keep_alive_interval_ms: u64,
    /// After SIGTERM, how long the listener keeps accepting while both readiness endpoints
    /// answer `503 draining`, before the drain: the time a load balancer that follows
    /// `/readyz` needs to stop sending new connections. 0 (the default) where the platform
    /// takes the process out before SIGTERM (the Helm chart's `preStop` sleep).
    pub shutdown_delay_ms: u64,
    /// How long a reservation outlives a gateway that died mid-enqueue. Must exceed the slowest
    /// commit a healthy PostgreSQL takes, or a slow commit's reservation is counted twice.
    pub reservation_ttl_ms: u64,
    /// How long a replay waits for the first call of its key to commit before answering
    /// `503 UNAVAILABLE` (outcome unknown, retry).
    pub replay_wait_ms: u64,
    /// How long a request waits for a missing projection to be rebuilt before answering `503`
    /// (the rebuild itself goes on: the next request finds it open).
    pub rebuild_wait_ms: u64,
    /// How long namespace configuration and credentials are cached. Applies, revocations and
    /// new keys take effect within this time.
    pub config_cache_ttl_ms: u64,
    /// Tickets stay valid this long after the command's deadline: as long as the executor keeps
    /// the row, so both follow the configuration's one `retention_seconds`.
    #[serde(skip)]
    pub ticket_retention_seconds: i64,
    /// How read origins are called (trust, proxies). Not a table of its own: the
    /// configuration's `outbound_ca_file` and the process's proxy variables make it.
    #[serde(skip)]
    pub outbound: sluice_durable::http_client::Outbound,
    /// Ticket polls and result look-ups that fall back to PostgreSQL (Redis down or the command
    /// not projected): at most this many per second per process...
    pub fallback_per_second: u32,
    /// ...and at most this many at once.
    pub fallback_concurrency: usize,
    /// Command reads that only PostgreSQL answers (`GET /v1/commands/{id}`, `…/requests/{key}`,
    /// `…/mine`, `:cancel`): at most this many per second per process...
    pub command_reads_per_second: u32,
    /// ...this many at once...
    pub command_reads_concurrency: usize,
    /// ...and this many per second for one subject (a burst of twice that), so that one person
    /// cannot spend the process's budget: past it `429 RATE_LIMITED`, past the process's
    /// `503 UNAVAILABLE`, both with `Retry-After` ([`crate::identity::pg_budget`]).
    pub command_reads_per_subject_per_second: u32,
    /// Lookups of credentials and subject keys this process has not seen valid, per second at
    /// most: what a flood of random bearers or `kid`s can cost PostgreSQL ([`crate::identity::lookup_budget`]).
    pub unknown_lookups_per_second: u32,
    /// Waiting polls of commands deep in their queue answered from the gateway's memory
    /// ([`crate::polls::waiting_view`]), with tickets that state their queue (version 3). Off: every
    /// poll asks Redis and tickets are version 2, as before; a rolling upgrade keeps it off
    /// until every gateway and executor runs scripts that keep the gone record and the started
    /// sequences (and verifies version 3 tickets).
    pub polls_from_memory: bool,
    pub group_commit: GroupCommitConfig,
    /// Enqueues of one application decided per `intake.lua` call at most (the intake batcher,
    /// `sluice_durable::lifecycle::intake_batcher`); 1 turns batching off (one call per enqueue).
    pub intake_batch_max: usize,
    /// The read-through cache.
    pub cache: crate::reads::CacheConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024,
            max_input_bytes: 8 * 1024,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            max_connections: 10_000,
            http2_max_concurrent_streams: 100,
            http2_keep_alive_interval_ms: 20_000,
            shutdown_delay_ms: 0,
            reservation_ttl_ms: 30_000,
            replay_wait_ms: 5_000,
            rebuild_wait_ms: 3_000,
            config_cache_ttl_ms: 1_000,
            ticket_retention_seconds: sluice_store::outbox::DEFAULT_RETENTION_SECONDS,
            outbound: sluice_durable::http_client::Outbound::default(),
            fallback_per_second: 4,
            fallback_concurrency: 4,
            command_reads_per_second: 500,
            command_reads_concurrency: 16,
            command_reads_per_subject_per_second: 5,
            unknown_lookups_per_second: 10,
            polls_from_memory: true,
            group_commit: GroupCommitConfig::default(),
            intake_batch_max: sluice_durable::lifecycle::intake_batcher::DEFAULT_MAX_ENTRIES,
            cache: crate::reads::CacheConfig::default(),
        }
    }
}

impl GatewayConfig {
    /// Refuses settings that would break the gateway's guarantees, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_body_bytes < 1024 {
            return Err("max_body_bytes must be at least 1024".into());
        }
        if self.reservation_ttl_ms < 1_000 {
            return Err("reservation_ttl_ms must be at least 1000 (a slow commit would otherwise be counted twice)".into());
        }
        if self.header_read_timeout_ms == 0 || self.body_read_timeout_ms == 0 {
            return Err(
                "header_read_timeout_ms and body_read_timeout_ms must be at least 1".into(),
            );
        }
        if self.max_connections == 0 || self.http2_max_concurrent_streams == 0 {
            return Err(
                "max_connections and http2_max_concurrent_streams must be at least 1".into(),
            );
        }
        if self.http2_keep_alive_interval_ms < 1_000 {
            return Err("http2_keep_alive_interval_ms must be at least 1000".into());
        }
        if self.unknown_lookups_per_second == 0 {
            return Err("unknown_lookups_per_second must be at least 1".into());
        }
        if self.command_reads_per_second == 0
            || self.command_reads_concurrency == 0
            || self.command_reads_per_subject_per_second == 0
        {
            return Err("command_reads_per_second, command_reads_concurrency and command_reads_per_subject_per_second must be at least 1".into());
        }
        if self.fallback_per_second == 0 || self.fallback_concurrency == 0 {
            return Err("fallback_per_second and fallback_concurrency must be at least 1".into());
        }
        if self.group_commit.max_batch == 0 || self.group_commit.committers == 0 {
            return Err("group commit max_batch and committers must be at least 1".into());
        }
        if self.intake_batch_max == 0 {
            return Err("intake_batch_max must be at least 1".into());
        }
        if self.cache.origin_per_process == 0 || self.cache.origin_per_application < 1 {
            return Err("origin_per_process and origin_per_application must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(GatewayConfig::default().validate(), Ok(()));
        let bad = GatewayConfig {
            reservation_ttl_ms: 10,
            ..GatewayConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("reservation_ttl_ms"));
    }
}
