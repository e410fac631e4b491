//! `admit.lua` alone against a real Redis: permits, round robin, start buckets, lease expiry,
//! queue order and counters, with the `cfg` hash and the queues written by the test itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits, AdmittedHead};
use sluice_redis::AppKeys;

use crate::lua_fixture;

use sluice_testkit::eventually;

mod blocked;
mod permits;
mod queues;
mod round_robin;
mod saturation;
mod start_bucket;

/// A long lease: nothing lapses during a test unless it asks for it.
const LONG_LEASE_MS: u64 = 60_000;

/// The helpers of this file on the shared bench: commands queued the way these tests need them.
enum AdmitCalls {}

type Bench = lua_fixture::Bench<AdmitCalls>;

impl Bench {
    async fn admit_with(&self, min_generation: i64, max_heads: u32, lease_ms: u64) -> Admission {
        self.admission(limits(min_generation, max_heads, lease_ms))
            .await
    }

    async fn heads_with_lease(&self, max_heads: u32, lease_ms: u64) -> Vec<AdmittedHead> {
        self.admitted_heads(limits(1, max_heads, lease_ms)).await
    }

    async fn heads(&self, max_heads: u32) -> Vec<AdmittedHead> {
        self.heads_with_lease(max_heads, LONG_LEASE_MS).await
    }

    async fn queued(&self, command: &str) -> i64 {
        self.counter(&format!("queued:{}", self.nscmd(command)))
            .await
    }

    async fn command_leases(&self, command: &str) -> Vec<String> {
        self.zmembers(&self.keys.command_leases(self.namespace, command))
            .await
    }

    async fn queue(&self, command: &str, resource: &str) -> Vec<String> {
        self.zmembers(&self.keys.queue(self.namespace, command, resource))
            .await
    }

    /// Commands with waiting work (the first round-robin level).
    async fn ready(&self) -> Vec<String> {
        self.zmembers(&self.keys.ready()).await
    }

    /// A command's resources with waiting work (the second level).
    async fn ready_resources(&self, command: &str) -> Vec<String> {
        self.zmembers(&self.keys.resource_ready(self.namespace, command))
            .await
    }

    /// Gives one permit back the way `land.lua` does.
    async fn release(&self, command: &str, head: &AdmittedHead) {
        let client = self.redis.pool().next();
        let id = head.command_id.to_string();
        let _: i64 = client
            .zrem(self.keys.command_leases(self.namespace, command), &id)
            .await
            .expect("zrem command lease");
        let _: i64 = client
            .zrem(self.keys.resource_leases(&head.queue_suffix), &id)
            .await
            .expect("zrem resource lease");
    }
}

/// `admit.lua`'s limits in these tests: 256 queues scanned, a lookahead of 16.
fn limits(min_generation: i64, max_heads: u32, lease_ms: u64) -> AdmitLimits {
    AdmitLimits {
        min_generation,
        max_heads,
        scan_limit: 256,
        lease_ms,
        lookahead: 16,
    }
}

fn ids(heads: &[AdmittedHead]) -> Vec<CommandId> {
    heads.iter().map(|h| h.command_id).collect()
}

/// Heads per queue suffix.
fn per_suffix(heads: &[AdmittedHead]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for head in heads {
        *counts.entry(head.queue_suffix.clone()).or_insert(0) += 1;
    }
    counts
}
