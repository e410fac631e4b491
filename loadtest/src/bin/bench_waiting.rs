//! The cost in Redis of the pull behind waiting polls answered from memory (`waiting.lua`), with
//! its runs (each queue's first sequences, so that a gateway tells exact positions) against the
//! pull before them, which read each queue's count, head and tail for interpolation
//! (`loadtest/baselines/waiting_interpolated.lua`), on the same queue in one run, against a
//! Redis of its own (started here, so its command statistics count only this).
//!
//! One queue per pull, as deep as asked, in three shapes:
//! - `contiguous`: one queue took every sequence (a drop on one offer): one run;
//! - `interleaved`: two queues took turns (every other sequence): runs of one;
//! - `holes`: two queues took turns for 400 sequences, 280 of the measured queue's first
//!   waiters behind its front 8 left, and the rest of it joined alone (what made interpolated
//!   positions wrong by hundreds).
//!
//! Per size and shape: Redis CPU per pull (`INFO commandstats`, `EVALSHA`) of each side, median
//! of the rounds (the sides alternate), the ratio, and how many entries the runs covered in how
//! many runs. Then the cost of the runs' entry cap on the deepest queue (how `RUNS_ENTRIES` was
//! chosen).

use clap::Parser;
use fred::prelude::*;
use fred::types::scripts::Script;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_gateway::polls::waiting_view::{RUNS_ENTRIES, RUNS_READS};
use sluice_loadtest::bench_stack::evalsha_stats;
use sluice_redis::waiting::{RunLimits, pull};
use sluice_redis::{AppKeys, Projection, connect_redis};
use sluice_servers::RedisServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The pull before the runs.
const BASELINE: &str = include_str!("../../baselines/waiting_interpolated.lua");

#[derive(Debug, Parser)]
#[command(about = "waiting.lua with runs versus the interpolating pull before them, per queue")]
struct Args {
    /// Queue depths measured.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,50000")]
    sizes: Vec<u64>,
    /// Pulls per side per round.
    #[arg(long, default_value_t = 200)]
    pulls: u64,
    /// Rounds per side (alternating); the median is reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Contiguous,
    Interleaved,
    Holes,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Contiguous => "contiguous",
            Shape::Interleaved => "interleaved",
            Shape::Holes => "holes",
        }
    }

    /// The measured queue's sequences, `size` of them.
    fn seqs(self, size: u64) -> Vec<u64> {
        match self {
            Shape::Contiguous => (1..=size).collect(),
            Shape::Interleaved => (0..size).map(|i| 2 * i + 1).collect(),
            Shape::Holes => {
                let mut seqs: Vec<u64> = (0..200).map(|i| 2 * i + 1).collect();
                seqs.drain(8..(8 + 280).min(seqs.len()));
                let kept = seqs.len() as u64;
                seqs.extend((0..size.saturating_sub(kept)).map(|i| 401 + i));
                seqs.truncate(size as usize);
                seqs
            }
        }
    }
}

struct Setup {
    keys: AppKeys,
    suffix: String,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.sizes.is_empty() || args.pulls == 0 || args.rounds == 0 {
        return Err("--sizes, --pulls and --rounds must be given and at least 1".into());
    }
    let server = RedisServer::start();
    let redis = connect_redis(&server.url(), 1).await?;
    let baseline = Script::from_lua(BASELINE);
    let limits = RunLimits {
        entries: RUNS_ENTRIES,
        reads: RUNS_READS,
    };
    println!(
        "waiting.lua, one queue per pull, {} pulls per side per round, median of {} rounds \
         (Redis {} of its own); runs: at most {} entries within {} reads",
        args.pulls,
        args.rounds,
        server.url(),
        limits.entries,
        limits.reads
    );
    println!();
    println!(
        "| queue | entries | runs: covered / runs | Redis µs per pull, runs | before (interpolated) \
         | runs / before |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for shape in [Shape::Contiguous, Shape::Interleaved, Shape::Holes] {
        for &size in &args.sizes {
            let setup = fill(&redis, &shape.seqs(size)).await?;
            let m = measure(&redis, &setup, &args, limits, &baseline).await?;
            print_row(shape, size, &m);
            flush(&redis).await?;
        }
    }

    let deepest = *args.sizes.iter().max().unwrap_or(&50_000);
    println!();
    println!("The runs' entry cap on queues of {deepest} (reads allowed: {RUNS_READS}):");
    println!();
    println!(
        "| queue | entry cap | covered / runs | Redis µs per pull, runs | before | runs / before |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for shape in [Shape::Contiguous, Shape::Interleaved] {
        let setup = fill(&redis, &shape.seqs(deepest)).await?;
        for entries in [4_096, 16_384, 65_536] {
            let limits = RunLimits {
                entries,
                reads: RUNS_READS,
            };
            let m = measure(&redis, &setup, &args, limits, &baseline).await?;
            print_row(shape, entries, &m);
        }
        flush(&redis).await?;
    }
    Ok(())
}

/// One row of either table: the queue's shape, the figure the table varies, and the pulls.
fn print_row(shape: Shape, varied: u64, m: &Measured) {
    println!(
        "| {} | {varied} | {} / {} | {:.1} | {:.1} | {:.2}× |",
        shape.name(),
        m.covered,
        m.runs,
        m.with_runs,
        m.before,
        m.with_runs / m.before.max(1e-9)
    );
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A new application whose one queue holds `seqs` (members made up: the pull reads scores),
/// with a start on record so it is a queue a gateway would pull.
async fn fill(redis: &Projection, seqs: &[u64]) -> Result<Setup, BoxError> {
    let keys = AppKeys::new(ApplicationId::new_v7());
    let namespace = NamespaceId::new_v7();
    let suffix = AppKeys::queue_suffix(namespace, "work", "r");
    let queue = keys.queue_by_suffix(&suffix);
    let client = redis.pool().next();
    for chunk in seqs.chunks(1_000) {
        let entries: Vec<(f64, String)> = chunk
            .iter()
            .map(|s| (*s as f64, format!("{}", uuid::Uuid::now_v7())))
            .collect();
        let _: i64 = client
            .zadd(&queue, None, None, false, false, entries)
            .await?;
    }
    let last = seqs.last().copied().unwrap_or(0);
    let _: () = client.set(keys.seq(), last, None, None, false).await?;
    let _: i64 = client.hset(keys.started(), (suffix.as_str(), 0)).await?;
    let _: i64 = client
        .hset(keys.meta(), [("ready", "1"), ("generation", "1")])
        .await?;
    Ok(Setup { keys, suffix })
}

async fn flush(redis: &Projection) -> Result<(), BoxError> {
    let _: () = redis.pool().next().flushall(false).await?;
    Ok(())
}

/// One shape and size measured: Redis µs per pull with runs and before them (medians of the
/// rounds, alternating), and what the runs cover.
struct Measured {
    with_runs: f64,
    before: f64,
    covered: u64,
    runs: usize,
}

async fn measure(
    redis: &Projection,
    setup: &Setup,
    args: &Args,
    limits: RunLimits,
    baseline: &Script,
) -> Result<Measured, BoxError> {
    let (mut runs, mut old) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        runs.push(time_runs(redis, setup, args, limits).await?);
        old.push(time_baseline(redis, setup, args, baseline).await?);
    }
    let suffixes = std::slice::from_ref(&setup.suffix);
    let view = pull(redis, &setup.keys, suffixes, 0, 1024, limits).await?;
    let queue = &view.queues[0];
    Ok(Measured {
        with_runs: median(&mut runs),
        before: median(&mut old),
        covered: queue.runs.iter().map(|(_, length)| length).sum(),
        runs: queue.runs.len(),
    })
}

/// Redis µs per pull of `waiting.lua` with runs, over `args.pulls` pulls.
async fn time_runs(
    redis: &Projection,
    setup: &Setup,
    args: &Args,
    limits: RunLimits,
) -> Result<f64, BoxError> {
    let suffixes = [setup.suffix.clone()];
    let before = evalsha_stats(redis).await?;
    for _ in 0..args.pulls {
        pull(redis, &setup.keys, &suffixes, 0, 1024, limits).await?;
    }
    let after = evalsha_stats(redis).await?;
    Ok((after.1 - before.1) as f64 / (after.0 - before.0).max(1) as f64)
}

/// Redis µs per pull of the baseline (the same keys; its arguments before the runs).
async fn time_baseline(
    redis: &Projection,
    setup: &Setup,
    args: &Args,
    script: &Script,
) -> Result<f64, BoxError> {
    let keys = &setup.keys;
    let script_keys = vec![
        keys.meta(),
        keys.seq(),
        keys.started(),
        keys.starts(),
        keys.gone(),
        keys.queue_by_suffix(&setup.suffix),
    ];
    let script_args: Vec<Value> = vec![0.into(), 1024.into(), setup.suffix.as_str().into()];
    let before = evalsha_stats(redis).await?;
    for _ in 0..args.pulls {
        let _: Value = script
            .evalsha_with_reload(
                redis.pool().next(),
                script_keys.clone(),
                script_args.clone(),
            )
            .await?;
    }
    let after = evalsha_stats(redis).await?;
    Ok((after.1 - before.1) as f64 / (after.0 - before.0).max(1) as f64)
}
