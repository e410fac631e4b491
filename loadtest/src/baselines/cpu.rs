//! The CPU an answer cost, split between this process, Redis and PostgreSQL: a side can win on
//! rate by burning more of the shared machine, and the split shows where it went.
//!
//! Not `crate::sampler`'s `/proc` reader: that one follows given pids and counts their own ticks
//! only, while a round here must also count the backends PostgreSQL forks and reaps mid-round
//! and pgbench once it exited, both of which only the reaped-children fields keep. It does share
//! `sampler`'s way of finding a server's processes by name.

use crate::sampler::pids_named;

/// CPU seconds used so far by this process (the client, the gateway and the baseline servers
/// all run in it; pgbench, its child, is counted once it exited), by Redis and by PostgreSQL
/// (every process of those names). Each process's reaped children are included, so the CPU of a
/// backend that exits mid-round moves to the postmaster's count instead of vanishing.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cpu {
    pub(super) here: f64,
    pub(super) redis: f64,
    pub(super) postgres: f64,
}

impl Cpu {
    pub(super) fn read() -> Self {
        let named = |name| pids_named(name).into_iter().filter_map(process_cpu).sum();
        Self {
            here: process_cpu(std::process::id()).unwrap_or(0.0),
            redis: named("redis-server"),
            postgres: named("postgres"),
        }
    }

    /// The CPU used between `before` and `self`.
    pub(super) fn since(self, before: Self) -> Self {
        Self {
            here: self.here - before.here,
            redis: self.redis - before.redis,
            postgres: self.postgres - before.postgres,
        }
    }

    pub(super) fn plus(self, other: Self) -> Self {
        Self {
            here: self.here + other.here,
            redis: self.redis + other.redis,
            postgres: self.postgres + other.postgres,
        }
    }
}

/// A process's CPU seconds (user + system, its own and its reaped children's: `utime stime
/// cutime cstime`, fields 14 to 17 of `/proc/<pid>/stat`), in clock ticks of 1/100 s (Linux's
/// `USER_HZ` on every common architecture).
fn process_cpu(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields count from after its closing parenthesis.
    let (_, tail) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let mut ticks = 0.0;
    for field in fields.get(11..15)? {
        ticks += field.parse::<f64>().ok()?;
    }
    Some(ticks / 100.0)
}
