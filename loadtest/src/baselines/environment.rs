//! What a run measured on: the machine (CPUs, model, load) and the servers' versions and
//! durability settings, because a ratio from a 2-core laptop with `fsync off` says little about
//! a server with `fsync on`.
//!
//! Not `crate::machine::describe`: that one keeps only the 1-minute load average (as a number)
//! and an empty model, while this report prints all three load averages (a load that was rising
//! or falling over the run shows) and `unknown`; its JSON and lines keep their format.

use crate::bench_stack::{BoxError, Tenant};

/// The machine a run measured, read at its start and at its end.
#[derive(Debug, Clone)]
pub(super) struct Machine {
    pub(super) cpus: usize,
    pub(super) model: String,
    /// The 1, 5 and 15 minute load averages, as `/proc/loadavg` writes them.
    pub(super) load_average: String,
}

impl Machine {
    pub(super) fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map_or("unknown".to_string(), |(_, model)| model.trim().to_string());
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            model,
            load_average,
        }
    }
}

/// The servers' versions and the durability settings that decide the commit rate.
pub(super) struct Versions {
    pub(super) postgres: String,
    pub(super) fsync: String,
    pub(super) synchronous_commit: String,
    pub(super) redis: String,
}

impl Versions {
    pub(super) async fn read(tenant: &Tenant) -> Result<Self, BoxError> {
        let show = |setting: &'static str| async move {
            sqlx::query_scalar::<_, String>(setting)
                .fetch_one(&tenant.pg)
                .await
        };
        let info: String = fred::interfaces::ClientLike::custom(
            tenant.redis.pool().next(),
            fred::types::CustomCommand::new_static("INFO", None, false),
            vec!["server"],
        )
        .await?;
        Ok(Self {
            postgres: show("SHOW server_version").await?,
            fsync: show("SHOW fsync").await?,
            synchronous_commit: show("SHOW synchronous_commit").await?,
            redis: info
                .lines()
                .find_map(|line| line.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
                .to_string(),
        })
    }
}
