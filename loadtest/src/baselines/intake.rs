//! Pair 1, intake decisions: `429 RATE_LIMITED` answers of the gateway against raw `intake.lua`
//! calls with the same keys and budget, one enqueue per call, to show what HTTP, auth and JSON
//! cost on top of the Redis script every decision runs. The gateway's intake batcher decides
//! concurrent enqueues together (several per call); the rounds print how many per call.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, StatusCode};
use serde_json::json;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    IntakeRequest, IntakeVerdict, Limit, Release, release, reserve as intake,
};
use sluice_redis::{AppKeys, request_key_field};
use sluice_store::secrets::sha256;
use sluice_store::tenancy::NamespaceConfig;

use super::Bench;
use super::commands::{DECIDE, OFFER, enqueue_body, next_number, post, request_key, subject};
use super::cpu::Cpu;
use super::rounds::{MakeRequest, http_round, send_once, together};
use super::side::{Comparison, Side};
use crate::bench_stack::BoxError;

/// `--rounds` alternating rounds of HTTP decisions and raw `intake.lua` calls on one bucket.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let options = bench.options;
    let path = format!("/v1/commands/{DECIDE}:enqueue");
    // The bucket starts full with its one token: the first enqueue takes it.
    let first = send_once(bench.gateway_addr, decide_request(&path, &bench.bearer)).await?;
    if first.0 != StatusCode::ACCEPTED {
        return Err(format!("the first decision was {}, not 202: {:?}", first.0, first.1).into());
    }
    let since = Instant::now();
    let budget = bench
        .namespace
        .declaration
        .command(DECIDE)
        .ok_or("the declaration lost its decide command")?
        .intake;
    let raw = RawIntake::new(bench).await?;
    let make = {
        let (path, bearer) = (path.clone(), bench.bearer.clone());
        Arc::new(move || decide_request(&path, &bearer)) as MakeRequest
    };
    let check = Some((429, "\"RATE_LIMITED\""));
    let (addr, callers) = (bench.gateway_addr, options.concurrency);
    let mut sluice = Side::new("gateway: HTTP 429 RATE_LIMITED decisions");
    let mut ceiling = Side::new(&format!(
        "raw EVALSHA intake.lua, fred pool of {}",
        options.redis_pool
    ));
    let mut accepted = 0;
    let warm = http_round(addr, callers, options.warmup(), &make, check).await?;
    accepted += warm
        .expect_only(&[202, 429], "warm-up decision")?
        .count(202);
    accepted += raw.round(callers, options.warmup()).await?.reserved;
    let batches = &bench.gateway.gateway.intake.stats();
    let (mut calls, mut entries) = (0, 0);
    for r in 0..options.rounds {
        let before = (
            batches.calls.load(Ordering::Relaxed),
            batches.entries.load(Ordering::Relaxed),
        );
        bench.perf.enable();
        let round = http_round(addr, callers, options.round(), &make, check).await;
        bench.perf.disable();
        let round = round?;
        let round_calls = batches.calls.load(Ordering::Relaxed) - before.0;
        let round_entries = batches.entries.load(Ordering::Relaxed) - before.1;
        calls += round_calls;
        entries += round_entries;
        round.expect_only(&[202, 429], "decision")?;
        accepted += round.count(202);
        sluice.push_http(&round, 429);
        let raw_round = raw.round(callers, options.round()).await?;
        accepted += raw_round.reserved;
        ceiling.push(raw_round.per_second(), raw_round.limited, raw_round.cpu);
        println!(
            "intake round {}: HTTP {:.0}/s ({} accepted as the bucket refilled; {} decisions in \
             {} intake.lua calls, {:.1} per call), raw {:.0}/s ({} reserved)",
            r + 1,
            sluice.last(),
            round.count(202),
            round_entries,
            round_calls,
            round_entries as f64 / round_calls.max(1) as f64,
            ceiling.last(),
            raw_round.reserved
        );
    }
    println!(
        "intake batches (gateway.intake_batch_max = {}): {entries} decisions in {calls} \
         intake.lua calls, {:.1} per call",
        options.intake_batch_max,
        entries as f64 / calls.max(1) as f64
    );
    // One refill a second (and the odd token of the first and last partial second).
    let refills = (since.elapsed().as_secs_f64() * f64::from(budget.per_second)).ceil() as u64
        + u64::from(budget.burst);
    if accepted > refills {
        return Err(format!(
            "{accepted} decisions were acceptances; the bucket refilled at most {refills} tokens"
        )
        .into());
    }
    let _ = fred::interfaces::ClientLike::quit(raw.pool.pool()).await;
    Ok(Comparison::new(
        "intake decisions/s (HTTP 429 RATE_LIMITED vs raw EVALSHA intake.lua)",
        sluice,
        ceiling,
        // The goal: an HTTP decision as cheap as the raw script call it makes.
        Some(1.0),
    ))
}

/// An enqueue of [`DECIDE`] with a fresh request key, always for the same offer.
fn decide_request(path: &str, bearer: &str) -> Request<Full<Bytes>> {
    post(path, bearer, enqueue_body(next_number(), OFFER))
}

/// The raw ceiling of pair 1: what the gateway's handler sends to Redis for one decision, built
/// the same way (`enqueue.rs`: `Attempt::intake`), without HTTP, auth or JSON.
#[derive(Clone)]
struct RawIntake {
    pool: sluice_redis::Projection,
    namespace: Arc<NamespaceConfig>,
    digest_hex: Arc<str>,
    reservation_ttl_ms: u64,
}

/// One raw round: refusals (the decisions counted) and acceptances (given back at once).
struct RawRound {
    limited: u64,
    reserved: u64,
    elapsed: Duration,
    cpu: Cpu,
}

impl RawRound {
    fn per_second(&self) -> f64 {
        self.limited as f64 / self.elapsed.as_secs_f64()
    }
}

impl RawIntake {
    async fn new(bench: &Bench<'_>) -> Result<Self, BoxError> {
        let options = bench.options;
        let pool =
            sluice_redis::connect_redis(&options.servers.redis_url, options.redis_pool).await?;
        // The gateway's content digest: the command, a NUL and the input in canonical JSON.
        let input = json!({ "offer": OFFER }).to_string();
        let mut content = Vec::with_capacity(DECIDE.len() + 1 + input.len());
        content.extend_from_slice(DECIDE.as_bytes());
        content.push(0);
        content.extend_from_slice(input.as_bytes());
        Ok(Self {
            pool,
            namespace: bench.namespace.clone(),
            digest_hex: lower_hex(&sha256(&content)).into(),
            reservation_ttl_ms: bench.gateway.gateway.config.reservation_ttl_ms,
        })
    }

    /// `concurrency` tasks calling `intake.lua` for `duration`, each with a fresh request key.
    async fn round(&self, concurrency: usize, duration: Duration) -> Result<RawRound, BoxError> {
        let workers = (0..concurrency)
            .map(|_| {
                let raw = self.clone();
                move |deadline| async move { raw.decide_until(deadline).await }
            })
            .collect();
        let (mut limited, mut reserved) = (0, 0);
        let (elapsed, cpu) = together(workers, duration, |(l, r)| {
            limited += l;
            reserved += r;
        })
        .await?;
        Ok(RawRound {
            limited,
            reserved,
            elapsed,
            cpu,
        })
    }

    /// Decides until `deadline`: (refused, reserved and released).
    async fn decide_until(&self, deadline: Instant) -> Result<(u64, u64), BoxError> {
        let decl = self
            .namespace
            .declaration
            .command(DECIDE)
            .ok_or("the declaration lost its decide command")?;
        let keys = AppKeys::new(self.namespace.application_id);
        let (mut limited, mut reserved) = (0, 0);
        while Instant::now() < deadline {
            let n = next_number();
            let field = request_key_field(&subject(n), &request_key(n));
            let command_id = CommandId::new_v7();
            let request = IntakeRequest {
                keys: &keys,
                min_generation: self.namespace.generation,
                namespace_id: self.namespace.namespace_id,
                command: &decl.code,
                subject: &subject(n),
                request_key_field: &field,
                content_sha256_hex: &self.digest_hex,
                command_id,
                max_unfinished: self.namespace.max_unfinished,
                max_waiting: self.namespace.declaration.namespace.max_waiting,
                max_queue: decl.admission.max_queue,
                intake: &decl.intake,
                reservation_ttl_ms: self.reservation_ttl_ms,
            };
            match intake(&self.pool, &request).await? {
                IntakeVerdict::Limited(Limit::RateLimited { .. }) => limited += 1,
                IntakeVerdict::Reserved { .. } => {
                    self.release(&keys, command_id, &field).await?;
                    reserved += 1;
                }
                other => return Err(format!("raw intake.lua answered {other:?}").into()),
            }
        }
        Ok((limited, reserved))
    }

    /// A refill's token became a reservation: give it back, as a refused commit would.
    async fn release(
        &self,
        keys: &AppKeys,
        command_id: CommandId,
        field: &str,
    ) -> Result<(), BoxError> {
        let give = Release {
            command_id,
            namespace_id: self.namespace.namespace_id,
            command: DECIDE,
            request_key_field: field,
            existing: None,
        };
        release(&self.pool, keys, &give).await?;
        Ok(())
    }
}

/// The digest as the gateway sends it to the script (the crate does not depend on `hex`).
fn lower_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
