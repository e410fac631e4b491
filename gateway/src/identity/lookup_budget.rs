//! What an unknown identity may cost: lookups of credentials and subject keys that this process
//! has not seen valid share one per-process budget (`gateway.unknown_lookups_per_second`).
//!
//! A flood of random bearers or random `kid`s would otherwise cost one PostgreSQL query each:
//! the caches merge only identical secrets, and a random one never repeats. Identities found
//! valid are remembered for a while and looked up again without the budget (so a revocation
//! still takes effect within the cache period, and valid callers never wait on a flood);
//! identities found unknown are remembered too and refused without a query. Both memories are
//! bounded. An identity that is neither waits for the budget: beyond it the answer is `401`
//! without I/O, with `Retry-After`.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use moka::future::Cache;

/// How long an identity found valid skips the budget.
const KNOWN_FOR: Duration = Duration::from_secs(600);
/// How long an identity found unknown is refused without a query.
const UNKNOWN_FOR: Duration = Duration::from_secs(60);
/// Identities remembered either way, at most (about 100 bytes each).
const REMEMBERED: u64 = 100_000;

/// A lookup's key: a SHA-256 of the secret or of the key id (never the secret itself).
pub type IdentityKey = [u8; 32];

pub struct LookupBudget {
    rate: DefaultDirectRateLimiter,
    known: Cache<IdentityKey, ()>,
    unknown: Cache<IdentityKey, ()>,
}

/// Whether a lookup may go to PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Known valid, or within the budget.
    Allowed,
    /// Found unknown recently: refuse without a query.
    KnownUnknown,
    /// Never seen, and the budget is spent: refuse without a query, for now.
    OverBudget,
}

impl LookupBudget {
    pub fn new(per_second: u32) -> Self {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        Self {
            rate: RateLimiter::direct(Quota::per_second(per_second)),
            known: Cache::builder()
                .time_to_live(KNOWN_FOR)
                .max_capacity(REMEMBERED)
                .build(),
            unknown: Cache::builder()
                .time_to_live(UNKNOWN_FOR)
                .max_capacity(REMEMBERED)
                .build(),
        }
    }

    /// Whether a lookup of `key` may go to PostgreSQL now; spends the budget for a `key` not
    /// remembered.
    pub fn check(&self, key: &IdentityKey) -> Lookup {
        if self.known.contains_key(key) {
            Lookup::Allowed
        } else if self.unknown.contains_key(key) {
            Lookup::KnownUnknown
        } else if self.rate.check().is_ok() {
            Lookup::Allowed
        } else {
            Lookup::OverBudget
        }
    }

    /// What the lookup found.
    pub async fn record(&self, key: IdentityKey, found: bool) {
        if found {
            self.unknown.invalidate(&key).await;
            self.known.insert(key, ()).await;
        } else {
            self.known.invalidate(&key).await;
            self.unknown.insert(key, ()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> IdentityKey {
        [n; 32]
    }

    #[tokio::test]
    async fn unknown_identities_share_the_budget_and_known_ones_skip_it() {
        let budget = LookupBudget::new(3);
        budget.record(key(0), true).await;
        let allowed = (1..=20)
            .filter(|n| budget.check(&key(*n)) == Lookup::Allowed)
            .count();
        assert_eq!(allowed, 3, "the burst is the per-second budget");
        assert_eq!(budget.check(&key(21)), Lookup::OverBudget);
        // A valid identity is looked up again whatever the flood spent.
        assert_eq!(budget.check(&key(0)), Lookup::Allowed);
        budget.record(key(1), false).await;
        assert_eq!(budget.check(&key(1)), Lookup::KnownUnknown);
        // Revoked: the next lookup found it gone; it is unknown from then on.
        budget.record(key(0), false).await;
        assert_eq!(budget.check(&key(0)), Lookup::KnownUnknown);
    }
}
