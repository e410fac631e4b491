//! Executor settings, with units in the names.

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Heads taken by one `admit.lua` call.
    pub batch_size: u32,
    /// Resources one `admit.lua` call looks at.
    pub scan_limit: u32,
    /// Batches processed at once by this executor.
    pub parallel_batches: usize,
    /// How long a permit and a row's lease last without renewal. A crashed executor's work is
    /// retried after this; a live one renews every third of it.
    pub lease_ms: u64,
    /// The wake-up when no `NOTIFY` arrives (`LISTEN` is only a hint).
    pub tick_ms: u64,
    /// How often the sweepers run.
    pub sweep_interval_ms: u64,
    /// How long terminal commands are kept before pruning. Not a setting of its own: the
    /// configuration's one `retention_seconds` sets it and the tickets' validity together.
    #[serde(skip)]
    pub retention_seconds: i64,
    /// How webhooks are called (trust, proxies). Not a table of its own: the configuration's
    /// `outbound_ca_file` and the process's proxy variables make it.
    #[serde(skip)]
    pub outbound: sluice_durable::http_client::Outbound,
    /// How often declarations are re-read into the admission specs.
    pub catalog_refresh_ms: u64,
    /// Quota commands of one pool that are ready together share one transaction. Off: one
    /// transaction per command (the baseline of the benchmark).
    pub batch_quota: bool,
    /// Commands of one resource looked at when its head waits only on its own limit keys.
    pub lookahead: u32,
    /// First webhook retry delay; doubles per attempt (with jitter) up to `retry_max_ms`.
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    /// The reconciler leaves waiting rows changed less than this ago alone (their gateway or
    /// executor may still be projecting them).
    pub reconcile_grace_ms: u64,
    /// How long the Redis side of a transition is made again while the projection is not
    /// trusted (a rebuild usually takes well under a second); the sweepers repair what is left.
    pub projection_patience_ms: u64,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            batch_size: 64,
            scan_limit: 256,
            parallel_batches: 4,
            lease_ms: 30_000,
            tick_ms: 100,
            sweep_interval_ms: 1_000,
            retention_seconds: sluice_store::outbox::DEFAULT_RETENTION_SECONDS,
            outbound: sluice_durable::http_client::Outbound::default(),
            catalog_refresh_ms: 2_000,
            batch_quota: true,
            lookahead: 16,
            retry_base_ms: 500,
            retry_max_ms: 30_000,
            reconcile_grace_ms: 10_000,
            projection_patience_ms: 10_000,
        }
    }
}

impl ExecutorConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.scan_limit == 0 || self.parallel_batches == 0 {
            return Err("batch_size, scan_limit and parallel_batches must be at least 1".into());
        }
        if self.lease_ms < 1_000 {
            return Err("lease_ms must be at least 1000".into());
        }
        if self.lookahead == 0 {
            return Err("lookahead must be at least 1".into());
        }
        if self.retry_base_ms == 0 || self.retry_max_ms < self.retry_base_ms {
            return Err(
                "retry_base_ms must be at least 1 and retry_max_ms at least retry_base_ms".into(),
            );
        }
        if self.tick_ms == 0 || self.sweep_interval_ms == 0 {
            return Err("tick_ms and sweep_interval_ms must be at least 1".into());
        }
        Ok(())
    }
}
