//! `admit.lua` with every key declared against the script it replaced, which derived its keys
//! from what it read (`loadtest/baselines/admit_undeclared.lua`), on identical backlogs in one
//! run, against a Redis of its own (started here, so its command statistics count only this).
//!
//! Sluice's side is the executor's admission (`lifecycle::redis::admit`): the application's
//! keys and those its last answers named, and a call again at once when a call lacked some. The
//! baseline is one call with the application's keys alone. Both drain the same backlogs:
//! - `one queue`: one command, one resource, every command behind the other (a ticket drop's
//!   shape);
//! - `many queues`: one command over many resources (per-account work);
//! - `blocked`: many resources whose heads wait on a saturated limit key, a tenth free (the
//!   rotation past blocked resources).
//!
//! Per side: script calls per admission, commands started per second of admission time, Redis
//! CPU per command started (both from `INFO commandstats`), and keys given to an admission's
//! first call. Nothing is released: the
//! backlogs are sized so that no limit but the blocked key's is reached.

use std::time::{Duration, Instant};

use clap::Parser;
use fred::prelude::*;
use fred::types::scripts::Script;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_durable::lifecycle::rebuild::open_empty;
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits, admit, own_keys, script_args};
use sluice_loadtest::bench_stack::evalsha_stats;
use sluice_redis::admission_config::write_admission_config;
use sluice_redis::{AppKeys, Projection, connect_redis};
use sluice_servers::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The script before every key was declared, with the preludes it was loaded with.
const BASELINE: &str = concat!(
    include_str!("../../../lua/lib/asked_keys.lua"),
    include_str!("../../../lua/lib/epoch.lua"),
    include_str!("../../baselines/admit_undeclared.lua")
);

#[derive(Debug, Parser)]
#[command(about = "admit.lua given every key versus deriving them, on identical backlogs")]
struct Args {
    /// Commands in each backlog.
    #[arg(long, default_value_t = 20_000)]
    commands: usize,
    /// Resources of the `many queues` and `blocked` backlogs.
    #[arg(long, default_value_t = 2_000)]
    resources: usize,
    /// Heads per call (the executor's `batch_size`).
    #[arg(long, default_value_t = 64)]
    batch: u32,
    /// Rounds per side; the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Clone, Copy)]
enum Shape {
    OneQueue,
    ManyQueues,
    Blocked,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::OneQueue => "one queue",
            Shape::ManyQueues => "many queues",
            Shape::Blocked => "blocked (9 in 10 resources)",
        }
    }
}

/// One side's drain of one backlog.
#[derive(Clone, Copy, Default)]
struct Drain {
    started: u64,
    /// Admissions (the executor's `admit`, or one baseline call) and `EVALSHA` calls they made.
    admissions: u64,
    calls: u64,
    seconds: f64,
    redis_usec: u64,
    keys_sent: u64,
}

impl Drain {
    fn per_second(&self) -> f64 {
        self.started as f64 / self.seconds.max(1e-9)
    }

    fn redis_us_per_start(&self) -> f64 {
        self.redis_usec as f64 / self.started.max(1) as f64
    }

    fn calls_per_admission(&self) -> f64 {
        self.calls as f64 / self.admissions.max(1) as f64
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.commands == 0 || args.resources == 0 || args.batch == 0 || args.rounds == 0 {
        return Err("--commands, --resources, --batch and --rounds must be at least 1".into());
    }
    let server = RedisServer::start();
    let redis = connect_redis(&server.url(), 2).await?;
    let baseline = Script::from_lua(BASELINE);
    println!(
        "admit.lua, {} commands per backlog, {} resources, {} heads per call, median of {} \
         rounds (Redis {} of its own)",
        args.commands,
        args.resources,
        args.batch,
        args.rounds,
        server.url()
    );
    println!();
    println!(
        "| backlog | side | calls per admission | started/s | Redis µs per start | keys per call |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for shape in [Shape::OneQueue, Shape::ManyQueues, Shape::Blocked] {
        let mut sluice = Vec::new();
        let mut old = Vec::new();
        for _ in 0..args.rounds {
            // Alternating, each on a new application with the same backlog.
            sluice.push(drain(&redis, &args, shape, None).await?);
            old.push(drain(&redis, &args, shape, Some(&baseline)).await?);
        }
        let (s, o) = (median(&mut sluice), median(&mut old));
        for (side, d) in [("Sluice", s), ("baseline", o)] {
            println!(
                "| {} | {} | {:.2} | {:.0} | {:.1} | {:.0} |",
                shape.name(),
                side,
                d.calls_per_admission(),
                d.per_second(),
                d.redis_us_per_start(),
                d.keys_sent as f64 / d.admissions.max(1) as f64
            );
        }
        println!(
            "| {} | Sluice / baseline | | {:.2}x time | {:.2}x Redis CPU | |",
            shape.name(),
            s.seconds / o.seconds.max(1e-9),
            s.redis_us_per_start() / o.redis_us_per_start().max(1e-9)
        );
    }
    Ok(())
}

fn median(drains: &mut [Drain]) -> Drain {
    drains.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    drains[drains.len() / 2]
}

/// Builds the backlog on a new application and admits until every startable command started.
async fn drain(
    redis: &Projection,
    args: &Args,
    shape: Shape,
    baseline: Option<&Script>,
) -> Result<Drain, BoxError> {
    let keys = AppKeys::new(ApplicationId::new_v7());
    let namespace = NamespaceId::new_v7();
    let startable = load(redis, &keys, namespace, args, shape).await?;
    let limits = AdmitLimits {
        min_generation: 1,
        max_heads: args.batch,
        scan_limit: 256,
        lease_ms: 600_000,
        lookahead: 16,
    };
    let before = evalsha_stats(redis).await?;
    let mut drain = Drain::default();
    let mut idle = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while drain.started < startable as u64 {
        if Instant::now() > deadline {
            return Err(format!("{}: drain stalled at {}", shape.name(), drain.started).into());
        }
        drain.admissions += 1;
        let started = match baseline {
            Some(script) => {
                let fixed = own_keys(&keys)[..9].to_vec();
                drain.keys_sent += fixed.len() as u64;
                let args = script_args(&limits, limits.max_heads);
                let at = Instant::now();
                let answer: Vec<Value> = script
                    .evalsha_with_reload(redis.pool().next(), fixed, args)
                    .await?;
                drain.seconds += at.elapsed().as_secs_f64();
                (answer.len().saturating_sub(3) / 4) as u64
            }
            None => {
                // The keys the first call of this admission is given.
                drain.keys_sent += 11 + redis.admission_keys().keys(&keys.meta()).len() as u64;
                let at = Instant::now();
                let admission = admit(redis, &keys, limits).await?;
                drain.seconds += at.elapsed().as_secs_f64();
                match admission {
                    Admission::Heads { heads, .. } => heads.len() as u64,
                    Admission::NotReady => return Err("the projection is not ready".into()),
                }
            }
        };
        drain.started += started;
        idle = if started == 0 { idle + 1 } else { 0 };
        if idle > 10_000 {
            return Err(format!("{}: nothing starts", shape.name()).into());
        }
    }
    let after = evalsha_stats(redis).await?;
    drain.calls = after.0 - before.0;
    drain.redis_usec = after.1 - before.1;
    cleanup(redis, &keys).await?;
    Ok(drain)
}

/// The backlog of `shape` as `accept.lua` leaves it (queue entries, ready sets, status hashes,
/// counters); returns how many commands can start.
async fn load(
    redis: &Projection,
    keys: &AppKeys,
    namespace: NamespaceId,
    args: &Args,
    shape: Shape,
) -> Result<usize, BoxError> {
    open_empty(redis, keys, 1).await?;
    let nscmd = format!("{namespace}:work");
    let template = "account:{account}";
    write_admission_config(
        redis,
        keys,
        vec![
            (nscmd.clone(), "1000000000 1000000000 1000000000 0".into()),
            (
                AppKeys::limit_config_field(namespace, template),
                "1 0 0".into(),
            ),
        ],
    )
    .await?;
    let resources = match shape {
        Shape::OneQueue => 1,
        _ => args.resources,
    };
    let pipeline = redis.pool().next().pipeline();
    let mut startable = 0;
    for i in 0..args.commands {
        let r = i % resources;
        let resource = format!("r{r}");
        let id = uuid::Uuid::now_v7().to_string();
        let blocked = matches!(shape, Shape::Blocked) && r % 10 != 0;
        let mut fields = vec![("status".to_string(), "accepted".to_string())];
        if blocked {
            fields.push((
                "lim".to_string(),
                format!("[[\"{template}\",\"account:full\"]]"),
            ));
        } else {
            startable += 1;
        }
        let seq = (i + 1) as f64;
        let _: () = pipeline
            .zadd(
                keys.queue(namespace, "work", &resource),
                None,
                None,
                false,
                false,
                (seq, id.clone()),
            )
            .await?;
        let _: () = pipeline
            .zadd(
                keys.resource_ready(namespace, "work"),
                Some(SetOptions::NX),
                None,
                false,
                false,
                (0.0, AppKeys::queue_suffix(namespace, "work", &resource)),
            )
            .await?;
        let _: () = pipeline
            .hset(format!("{}{id}", keys.command_prefix()), fields)
            .await?;
        if i % 1_000 == 999 {
            let _: Vec<Value> = pipeline.all().await?;
        }
    }
    let _: () = pipeline
        .zadd(
            keys.ready(),
            Some(SetOptions::NX),
            None,
            false,
            false,
            (0.0, nscmd.clone()),
        )
        .await?;
    let _: () = pipeline
        .hincrby(
            keys.count(),
            format!("waiting:{namespace}"),
            args.commands as i64,
        )
        .await?;
    let _: () = pipeline
        .hincrby(
            keys.count(),
            format!("queued:{nscmd}"),
            args.commands as i64,
        )
        .await?;
    // The blocked resources' key is held for good by someone else.
    let _: () = pipeline
        .zadd(
            keys.limit_leases(namespace, "account:full"),
            None,
            None,
            false,
            false,
            (4_102_444_800_000.0, "holder"),
        )
        .await?;
    let _: Vec<Value> = pipeline.all().await?;
    Ok(startable)
}

/// Removes the application's keys (the server is this run's, but rounds must not add up).
async fn cleanup(redis: &Projection, keys: &AppKeys) -> Result<(), BoxError> {
    let _: () = redis.pool().next().flushall(false).await?;
    redis.admission_keys().forget(&keys.meta());
    Ok(())
}
