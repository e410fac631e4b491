//! The size and pace of a chaos run, and the declaration it applies: a quota `claim` (a pool
//! smaller than the number of subjects) and a webhook `call` with two limit keys.

use std::time::Duration;

use super::backend::Behaviour;
use super::load::LoadConfig;
use super::schedule::{FaultKind, Timing};

/// How many faults a run injects.
#[derive(Debug, Clone, Copy)]
pub(super) enum Length {
    /// Exactly this many.
    Faults(usize),
    /// Until this much time has passed since the first fault (at least one round of every
    /// kind).
    Minutes(f64),
}

#[derive(Debug, Clone)]
pub(super) struct ChaosConfig {
    pub(super) seed: u64,
    pub(super) length: Length,
    pub(super) timing: Timing,
    pub(super) load: LoadConfig,
    /// Claim and call subjects added at once just before a fault, so it meets a backlog.
    pub(super) burst: u64,
    pub(super) call_burst: u64,
    pub(super) capacity: i64,
    pub(super) admission_per_second: u32,
    pub(super) max_in_flight: i64,
    /// The `call` command's limit keys.
    pub(super) provider_per_second: u32,
    pub(super) account_max_in_flight: u32,
    pub(super) behaviour: Behaviour,
    /// The longest the executor may take from taking a provider token to the request reaching
    /// the backend (one claim transaction and a connection): calls whose tokens were taken
    /// apart may arrive this much closer together. Used by the provider-rate check.
    pub(super) rate_slack: Duration,
    /// The longest between a command's terminal row being written (`finished_at`, the
    /// transaction's start) and its commit: a call that arrives later than this after
    /// `finished_at` came from a process that no longer held the command.
    pub(super) landing_slack: Duration,
    pub(super) warmup: Duration,
    pub(super) recovery_limit: Duration,
    pub(super) drain_limit: Duration,
}

/// The executors' lease: the shortest that stays clear of false lapses on two busy cores.
const LEASE: Duration = Duration::from_millis(1500);

impl ChaosConfig {
    /// Small enough for CI on two cores (debug build): one round of the eight kinds.
    pub(super) fn ci(seed: u64) -> ChaosConfig {
        ChaosConfig {
            seed,
            length: Length::Faults(FaultKind::ALL.len()),
            timing: Timing {
                gap: (Duration::from_millis(800), Duration::from_millis(2000)),
                down: (Duration::from_millis(500), Duration::from_millis(1500)),
                rollback_age: (Duration::from_secs(2), Duration::from_secs(3)),
                lease: LEASE,
            },
            load: LoadConfig {
                subjects_per_second: 25,
                calls_per_second: 8,
                providers: 3,
                accounts: 3,
                cancel_every: 9,
                max_concurrency: 48,
                second_every: 4,
                replay_every: 10,
                max_attempts: 6,
                pollers: 2,
                polls_per_second: 20,
                offers: 4,
            },
            burst: 80,
            call_burst: 24,
            capacity: 700,
            admission_per_second: 50,
            max_in_flight: 4,
            provider_per_second: 5,
            account_max_in_flight: 2,
            behaviour: behaviour(),
            rate_slack: Duration::from_millis(250),
            landing_slack: Duration::from_millis(500),
            warmup: Duration::from_secs(2),
            recovery_limit: Duration::from_secs(30),
            drain_limit: Duration::from_secs(60),
        }
    }

    /// The longer run of `deploy/chaos/run.sh` (release build): `minutes` of faults.
    pub(super) fn table(seed: u64, minutes: f64) -> ChaosConfig {
        ChaosConfig {
            seed,
            length: Length::Minutes(minutes),
            timing: Timing {
                gap: (Duration::from_secs(2), Duration::from_secs(6)),
                down: (Duration::from_millis(500), Duration::from_secs(3)),
                rollback_age: (Duration::from_secs(2), Duration::from_secs(5)),
                lease: LEASE,
            },
            load: LoadConfig {
                subjects_per_second: 80,
                calls_per_second: 16,
                providers: 4,
                accounts: 3,
                cancel_every: 9,
                max_concurrency: 128,
                second_every: 4,
                replay_every: 10,
                max_attempts: 6,
                pollers: 4,
                polls_per_second: 100,
                offers: 8,
            },
            burst: 300,
            call_burst: 40,
            capacity: 4000,
            admission_per_second: 200,
            max_in_flight: 4,
            provider_per_second: 6,
            account_max_in_flight: 2,
            behaviour: behaviour(),
            rate_slack: Duration::from_millis(250),
            landing_slack: Duration::from_millis(500),
            warmup: Duration::from_secs(3),
            recovery_limit: Duration::from_secs(60),
            drain_limit: Duration::from_secs(180),
        }
    }

    pub(super) fn declaration(&self, backend_url: &str) -> String {
        format!(
            r#"
[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
deadline_seconds = 600
intake = {{ per_second = 1000000, burst = 1000000, max_in_flight = 100000 }}
admission = {{ per_second = {rate}, burst = {burst}, max_in_flight = {max}, max_queue = 1000000 }}
handler = {{ kind = "quota", pool = "stock", mode = "committed" }}

[[command]]
code = "call"
parameters = {{ provider = {{ type = "string", max_length = 16 }}, account = {{ type = "string", max_length = 16 }}, n = {{ type = "string", max_length = 20 }} }}
resource_key = {{ from = "input", field = "account" }}
deadline_seconds = 600
intake = {{ per_second = 1000000, burst = 1000000, max_in_flight = 100000 }}
admission = {{ per_second = 100000, burst = 100000, max_in_flight = 1000, max_queue = 1000000 }}
handler = {{ kind = "webhook", url = "{backend_url}", timeout_ms = 3000 }}
limits = [ {{ key = "provider:{{provider}}", per_second = {provider} }}, {{ key = "account:{{provider}}:{{account}}", max_in_flight = {account} }} ]

[[quota_pool]]
code = "stock"
capacity = {capacity}
"#,
            rate = self.admission_per_second,
            burst = (self.admission_per_second / 5).max(1),
            max = self.max_in_flight,
            capacity = self.capacity,
            provider = self.provider_per_second,
            account = self.account_max_in_flight,
        )
    }
}

/// A provider that mostly decides at once, sometimes later by `:complete`, sometimes asks for
/// a retry; never slower than 100 ms (the lease is 1.5 s, the attempt timeout 3 s).
fn behaviour() -> Behaviour {
    Behaviour {
        answer_ms: (2, 100),
        complete_ms: (20, 400),
        accepted: 0.15,
        too_many: 0.06,
        unavailable: 0.04,
        rejected: 0.15,
    }
}
