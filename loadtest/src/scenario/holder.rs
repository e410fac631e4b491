//! The winner of a reserved drop after its result: thinks a moment, as a person would before
//! paying, then confirms its unit, releases it, or lets it lapse, with its subject token, the
//! only credential the API accepts for that.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::Method;
use rand::Rng;
use serde_json::Value;
use uuid::Uuid;

use super::Options;
use super::journey::Context;
use crate::api::Outcome;
use crate::holders::{Answer, Choice, Held, HolderLog};

/// Endpoint names in the report.
pub const CONFIRM: &str = "confirm allocation";
pub const RELEASE: &str = "release allocation";

/// The fractional part of the golden ratio: `k × φ mod 1` spreads the winners' choices evenly
/// over [0, 1) in the order they win, so even a handful of winners takes every choice with a
/// share above zero, and the counts stay within a few of the shares at any size.
const GOLDEN: f64 = 0.618_033_988_749_894_9;

/// Which winners confirm, release or let lapse, and what they were answered.
pub(super) struct Holding {
    confirm_share: f64,
    release_share: f64,
    think: Duration,
    winners: AtomicU64,
    pub(super) log: Arc<HolderLog>,
}

impl Holding {
    pub(super) fn new(options: &Options) -> Self {
        Self {
            confirm_share: options.confirm_share,
            release_share: options.release_share,
            think: Duration::from_millis(options.think_ms),
            winners: AtomicU64::new(0),
            log: Arc::new(HolderLog::default()),
        }
    }

    /// The next winner's choice.
    fn choose(&self) -> Choice {
        let k = self.winners.fetch_add(1, Ordering::Relaxed);
        let u = (k as f64 * GOLDEN).fract();
        if u < self.confirm_share {
            Choice::Confirm
        } else if u < self.confirm_share + self.release_share {
            Choice::Release
        } else {
            Choice::Lapse
        }
    }

    /// What a winner does with the `result` of its command, its journey having begun at
    /// `arrived` (its patience counts from there, as for every other step).
    pub(super) async fn hold(
        &self,
        context: &Context,
        token: &str,
        arrived: Instant,
        result: Value,
    ) {
        let Some(allocation) = result
            .get("allocation_id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<Uuid>().ok())
        else {
            self.log.without_allocation();
            return;
        };
        let choice = self.choose();
        let (verb, endpoint) = match choice {
            Choice::Confirm => ("confirm", CONFIRM),
            Choice::Release => ("release", RELEASE),
            Choice::Lapse => {
                self.log.held(Held {
                    allocation,
                    choice,
                    answer: None,
                    lost_attempt: false,
                });
                return;
            }
        };
        let think = rand::rng().random_range(0..=self.think.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(think)).await;
        let path = format!("/v1/allocations/{allocation}:{verb}");
        let mut lost_attempt = false;
        let mut retry = 0;
        let answer = loop {
            let answer = context
                .call(endpoint, Method::POST, &path, Some(token), None)
                .await;
            let advice = match answer.outcome {
                Outcome::Success { data, .. } => break decided(&data),
                Outcome::Refused {
                    status: 409, state, ..
                } => break Answer::Conflict { state },
                // The API's own words: a write answered UNAVAILABLE may have been applied.
                Outcome::Refused {
                    code, retry_after, ..
                } if code == "UNAVAILABLE" => {
                    lost_attempt = true;
                    retry_after
                }
                Outcome::Refused {
                    retryable: true,
                    retry_after,
                    ..
                } => retry_after,
                Outcome::Refused { code, .. } => break Answer::Unanswered(code),
                Outcome::Unknown { .. } => {
                    lost_attempt = true;
                    None
                }
            };
            // Both actions are idempotent for their holder: a repeat is a 200 no-op.
            if !context.wait_to_retry(arrived, advice, retry).await {
                break Answer::Unanswered("no answer".into());
            }
            retry += 1;
        };
        self.log.held(Held {
            allocation,
            choice,
            answer: Some(answer),
            lost_attempt,
        });
    }
}

/// A `200` to a confirm or release: the state it shows and whether this call changed it.
fn decided(data: &Value) -> Answer {
    Answer::Decided {
        changed: data
            .get("changed")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        state: data
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    }
}
