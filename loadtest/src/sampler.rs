//! Samples taken while the load runs: `GET /v1/status` for the stack's own view (permits in
//! flight, waiting and unfinished commands, the oldest unfinished), PostgreSQL for the commands
//! executing at once (a witness that shares nothing with the permits Redis holds) and, in a
//! reserved drop, the quota pool's counts, and `/proc` for the CPU and memory of the stack's
//! processes.

use sluice_durable::ids::NamespaceId;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hyper::Method;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{Outcome, exchange};
use crate::driver::HttpClient;
use crate::report::{Peaks, ProcessUsage, StatusSample};
use crate::stack::Watched;
use sluice_redis::Projection;

/// How often both samplers look.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// Polls `/v1/status` every [`INTERVAL`] until cancelled; returns the peaks.
pub fn status(
    client: HttpClient,
    base: String,
    credential: String,
    origin: Instant,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Peaks> {
    tokio::spawn(async move {
        let uri = format!("{base}/v1/status");
        let mut peaks = Peaks::default();
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return peaks,
                _ = tick.tick() => {}
            }
            let answer = exchange(&client, Method::GET, &uri, Some(&credential), None).await;
            if let Outcome::Success { data, .. } = answer.outcome {
                absorb(&mut peaks, &data, origin.elapsed());
            }
        }
    })
}

/// Counts the namespace's commands executing or running in PostgreSQL every [`INTERVAL`] until
/// cancelled; returns the peak per command. A row is `executing` from its claim to its landing,
/// both inside the time its permits are held, so with no fault the peak never exceeds what the
/// permits allow.
pub fn executing(
    pg: sqlx::PgPool,
    namespace: NamespaceId,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<std::collections::BTreeMap<String, i64>> {
    tokio::spawn(async move {
        let mut peaks = std::collections::BTreeMap::new();
        let mut tick = tokio::time::interval(INTERVAL / 5);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return peaks,
                _ = tick.tick() => {}
            }
            let counts: Result<Vec<(String, i64)>, _> = sqlx::query_as(
                "SELECT command, count(*) FROM commands
                  WHERE namespace_id = $1 AND status IN ('executing', 'running')
                  GROUP BY command",
            )
            .bind(namespace)
            .fetch_all(&pg)
            .await;
            for (command, count) in counts.unwrap_or_default() {
                let peak = peaks.entry(command).or_insert(0);
                *peak = (*peak).max(count);
            }
        }
    })
}

/// What the samples of a quota pool's row showed.
#[derive(Debug, Clone, Default)]
pub struct PoolSamples {
    pub samples: u64,
    /// The capacity of the last sample.
    pub capacity: i64,
    /// The most units held at once (`allocated + reserved`), and reserved at once.
    pub peak_held: i64,
    pub peak_reserved: i64,
    /// Samples where `allocated + reserved` exceeded `capacity`, and the first of them.
    pub over_capacity: u64,
    pub first_over: Option<(i64, i64, i64)>,
}

/// Reads the quota pool's row every [`INTERVAL`] / 5 until cancelled: one row read at once, so
/// each sample's `allocated + reserved` and `capacity` are from one instant, as a reservation
/// that expires or is confirmed moves units between them.
pub fn pool(
    pg: sqlx::PgPool,
    namespace: NamespaceId,
    pool: &'static str,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<PoolSamples> {
    tokio::spawn(async move {
        let mut seen = PoolSamples::default();
        let mut tick = tokio::time::interval(INTERVAL / 5);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return seen,
                _ = tick.tick() => {}
            }
            let row: Result<(i64, i64, i64), _> = sqlx::query_as(
                "SELECT capacity, allocated, reserved FROM quota_pools
                  WHERE namespace_id = $1 AND code = $2",
            )
            .bind(namespace)
            .bind(pool)
            .fetch_one(&pg)
            .await;
            let Ok((capacity, allocated, reserved)) = row else {
                continue;
            };
            seen.samples += 1;
            seen.capacity = capacity;
            seen.peak_held = seen.peak_held.max(allocated + reserved);
            seen.peak_reserved = seen.peak_reserved.max(reserved);
            if allocated + reserved > capacity {
                seen.over_capacity += 1;
                seen.first_over
                    .get_or_insert((allocated, reserved, capacity));
            }
        }
    })
}

fn int(value: Option<&Value>) -> i64 {
    match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Folds one status answer into the peaks.
fn absorb(peaks: &mut Peaks, status: &Value, at: Duration) {
    peaks.samples += 1;
    let now = status
        .get("generated_at")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    let application = int(status.pointer("/in_flight/application/in_flight"));
    peaks.application_in_flight = peaks.application_in_flight.max(application);
    let (mut waiting, mut unfinished) = (0, 0);
    for command in status
        .get("commands")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let code = command.get("command").and_then(Value::as_str).unwrap_or("");
        let entry = peaks.command_in_flight.entry(code.to_string()).or_default();
        entry.peak = entry.peak.max(int(command.get("in_flight")));
        entry.limit = command.get("max_in_flight").and_then(Value::as_i64);
        waiting += int(command.get("waiting"));
        for by_status in command
            .get("statuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            unfinished += int(by_status.get("count"));
            let oldest = by_status
                .get("oldest_accepted_at")
                .and_then(Value::as_str)
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            if let (Some(now), Some(oldest)) = (now, oldest) {
                let age = (now - oldest.with_timezone(&Utc)).num_milliseconds() as f64 / 1000.0;
                peaks.oldest_unfinished_seconds = peaks.oldest_unfinished_seconds.max(age);
            }
        }
    }
    for key in status
        .pointer("/in_flight/limit_keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = key.get("key").and_then(Value::as_str).unwrap_or("");
        let entry = peaks.limit_keys.entry(name.to_string()).or_default();
        entry.peak = entry.peak.max(int(key.get("in_flight")));
    }
    peaks.waiting = peaks.waiting.max(waiting);
    peaks.unfinished = peaks.unfinished.max(unfinished);
    peaks.series.push(StatusSample {
        at_ms: at.as_millis() as u64,
        application_in_flight: application,
        waiting,
        unfinished,
    });
}

/// Sets the declared limit of each limit-key template's rendered keys (`/v1/status` names the
/// keys, the declaration their limits).
pub fn apply_limit_key_limits(peaks: &mut Peaks, limit_of: impl Fn(&str) -> Option<i64>) {
    for (key, peak) in &mut peaks.limit_keys {
        peak.limit = limit_of(key);
    }
}

/// CPU ticks and peak RSS of one process, from `/proc/<pid>/stat` and `/proc/<pid>/status`.
fn read_proc(pid: u32) -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields count from after its closing parenthesis.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Some((utime + stime, hwm_kib / 1024.0))
}

/// Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`, 100 on Linux in practice).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Cumulative CPU ticks and memory of a process, or of every process with one command name.
enum Probe {
    Pid(u32),
    /// Processes come and go (PostgreSQL forks a backend per connection): CPU is the sum of
    /// each process's ticks since it was first seen (a new one counts whole, since it began
    /// during the run); memory is the summed resident set of those alive.
    Command {
        name: &'static str,
        seen: std::collections::HashMap<u32, u64>,
        consumed: u64,
    },
}

impl Probe {
    fn read(&mut self) -> Option<(u64, f64)> {
        match self {
            Probe::Pid(pid) => read_proc(*pid),
            Probe::Command {
                name,
                seen,
                consumed,
            } => {
                let mut rss_mib = 0.0;
                let mut alive = std::collections::HashMap::new();
                for pid in pids_named(name) {
                    let Some((ticks, _)) = read_proc(pid) else {
                        continue;
                    };
                    *consumed += ticks.saturating_sub(seen.get(&pid).copied().unwrap_or(0));
                    alive.insert(pid, ticks);
                    rss_mib += resident_mib(pid);
                }
                *seen = alive;
                Some((*consumed, rss_mib))
            }
        }
    }
}

/// Pids whose `/proc/<pid>/comm` is `name`.
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

/// The resident memory of a process (`VmRSS`), in MiB; 0 when it cannot be read.
pub fn resident_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Samples every watched process (and every PostgreSQL process of the machine) every
/// [`INTERVAL`] until cancelled.
pub fn processes(
    watched: Vec<Watched>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Vec<ProcessUsage>> {
    tokio::spawn(async move {
        let ticks_per_second = clock_ticks();
        let mut usage: Vec<ProcessUsage> = watched
            .iter()
            .map(|w| ProcessUsage {
                name: w.name.clone(),
                pid: w.pid,
                ..ProcessUsage::default()
            })
            .collect();
        let mut probes: Vec<Probe> = watched.iter().map(|w| Probe::Pid(w.pid)).collect();
        usage.push(ProcessUsage {
            name: "postgres (every process of the machine)".into(),
            ..ProcessUsage::default()
        });
        probes.push(Probe::Command {
            name: "postgres",
            seen: std::collections::HashMap::new(),
            consumed: 0,
        });
        let started = Instant::now();
        let first: Vec<Option<(u64, f64)>> = probes.iter_mut().map(Probe::read).collect();
        let mut last = first.clone();
        let mut last_at = Instant::now();
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = tick.tick() => false,
            };
            let now = Instant::now();
            let interval = now.duration_since(last_at).as_secs_f64();
            for (i, probe) in probes.iter_mut().enumerate() {
                let Some((ticks, rss)) = probe.read() else {
                    continue;
                };
                let u = &mut usage[i];
                u.samples += 1;
                u.rss_peak_mib = u.rss_peak_mib.max(rss);
                if let Some((before, _)) = last[i]
                    && interval > 0.05
                {
                    let percent =
                        (ticks.saturating_sub(before)) as f64 / ticks_per_second / interval * 100.0;
                    u.cpu_peak_percent = u.cpu_peak_percent.max(percent);
                }
                if let Some((at_start, _)) = first[i] {
                    let wall = started.elapsed().as_secs_f64().max(0.001);
                    u.cpu_average_percent =
                        (ticks.saturating_sub(at_start)) as f64 / ticks_per_second / wall * 100.0;
                }
                last[i] = Some((ticks, rss));
            }
            last_at = now;
            if stopping {
                return usage;
            }
        }
    })
}

/// The Redis server's pid from `INFO server`, to sample it beside the stack.
pub async fn redis_pid(redis: &Projection) -> Option<u32> {
    use fred::interfaces::ClientLike;
    let command =
        fred::types::CustomCommand::new_static("INFO", fred::types::ClusterHash::Random, false);
    let info: String = redis
        .pool()
        .next()
        .custom(command, vec!["server".to_string()])
        .await
        .ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}
