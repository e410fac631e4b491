//! Limit keys against a real Redis: `admit.lua` takes every permit and start token of a command's
//! limit keys or none, lets the next of the first `lookahead` commands pass a head held back only
//! by its own keys, and records the leases it took in `held`; `land.lua` and `requeue.lua` release
//! exactly those; `start_tokens.lua` takes a token from every bucket or none.
//! The `cfg` hash, queues and status hashes are written by the test itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use fred::prelude::*;
use serde_json::{Map, Value as Json, json};
use sluice_durable::declaration::{parse, render_limit_keys};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    AdmitLimits, AdmittedHead, RateKey, Requeue, Requeued, Retake, requeue, take_start_tokens,
};
use sluice_redis::admission_config::{admission_spec, limit_specs, write_admission_config};
use tokio::sync::mpsc;

use crate::lua_fixture;

mod all_or_none;
mod declared;
mod held;
mod lookahead;
mod rates;
mod start_tokens;

/// Permissive numbers for a command: its own limits never stand in the way.
const OPEN: &str = "100000 1000000 1000000 0";
/// A long lease: nothing lapses during a test.
const LEASE_MS: u64 = 60_000;
const LOOKAHEAD: u32 = 16;

/// The helpers of this file on the shared bench: the limit keys these tests write and read.
enum LimitKeys {}

type Bench = lua_fixture::Bench<LimitKeys>;

impl Bench {
    async fn push(&self, command: &str, resource: &str, lim: &[(&str, &str)]) -> CommandId {
        self.queue_limited(command, resource, lim).await
    }

    async fn admit_with(&self, max_heads: u32, lookahead: u32) -> Vec<AdmittedHead> {
        self.admitted_heads(AdmitLimits {
            min_generation: 1,
            max_heads,
            scan_limit: 256,
            lease_ms: LEASE_MS,
            lookahead,
        })
        .await
    }

    async fn admit(&self, max_heads: u32) -> Vec<AdmittedHead> {
        self.admit_with(max_heads, LOOKAHEAD).await
    }

    /// `land.lua` for the command `id` of `command` in `resource`: whether it counted the command
    /// out.
    async fn finish(&self, command: &str, resource: &str, id: CommandId, status: &str) -> bool {
        self.land(command, resource, id, status)
            .await
            .expect("the projection is ready")
    }

    /// Redis time in milliseconds, the clock every script uses.
    async fn now_ms(&self) -> i64 {
        self.redis.pool().next()
            .eval(
                "local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)",
                Vec::<String>::new(),
                Vec::<String>::new(),
            )
            .await
            .expect("TIME")
    }

    fn limit_leases(&self, key: &str) -> String {
        self.keys.limit_leases(self.namespace, key)
    }

    fn limit_bucket(&self, key: &str) -> String {
        self.keys.limit_bucket(self.namespace, key)
    }

    fn command_leases(&self, command: &str) -> String {
        self.keys.command_leases(self.namespace, command)
    }

    async fn members(&self, key: &str) -> HashSet<String> {
        self.zmembers(key).await.into_iter().collect()
    }

    /// Members of a lease zset whose expiry is still ahead of Redis time.
    async fn live(&self, key: &str) -> i64 {
        let now = self.now_ms().await;
        self.redis
            .pool()
            .next()
            .zcount(key, now as f64 + 0.5, f64::INFINITY)
            .await
            .expect("zcount")
    }

    async fn queue(&self, command: &str, resource: &str) -> Vec<CommandId> {
        self.zmembers(&self.keys.queue(self.namespace, command, resource))
            .await
            .iter()
            .map(|m| m.parse::<CommandId>().expect("uuid"))
            .collect()
    }

    /// The lease zsets a command's status hash says it holds, or None without `held`.
    async fn held(&self, id: CommandId) -> Option<Vec<String>> {
        self.field(id, "held")
            .await
            .map(|text| serde_json::from_str(&text).expect("held is a JSON list of strings"))
    }

    async fn exists(&self, key: &str) -> bool {
        let n: i64 = self.redis.pool().next().exists(key).await.expect("exists");
        n == 1
    }

    async fn unfinished(&self) -> i64 {
        self.counter("unfinished").await
    }

    /// Tokens and refill time of a bucket, as a script left them.
    async fn bucket(&self, key: &str) -> (f64, i64) {
        let b = self.hash(key).await;
        let tokens = b["tokens"].parse::<f64>().expect("tokens");
        let ts = b["ts"].parse::<i64>().expect("ts");
        (tokens, ts)
    }
}

fn ids(heads: &[AdmittedHead]) -> Vec<CommandId> {
    heads.iter().map(|h| h.command_id).collect()
}

fn set(keys: &[String]) -> HashSet<String> {
    keys.iter().cloned().collect()
}

/// A token bucket refilled from `ts` to `now` at `rate` per second, capped at `burst`.
fn refilled(tokens: f64, ts: i64, now: i64, rate: f64, burst: f64) -> f64 {
    if now > ts {
        burst.min(tokens + (now - ts) as f64 * rate / 1000.0)
    } else {
        tokens
    }
}
