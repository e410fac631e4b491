//! The queue recorder: the witness of told positions. Every few milliseconds one script of the
//! checker's own reads, at one Redis instant (`TIME` inside the script), every resource queue of
//! the run (the zsets `admit.lua` takes heads from) and the projection's generation. A told
//! position with `observed_at` T is judged against the queue as the samples on either side of T
//! saw it: the command's true rank at T lies between what those two samples allow.
//!
//! Consecutive identical samples are kept as one span (first and last time seen), so a quiet
//! queue costs no memory.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use tokio_util::sync::CancellationToken;

/// What one sample read: per queue its members in rank order with their scores (queue
/// sequences), and the generation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Content {
    pub queues: Vec<Vec<(String, i64)>>,
    pub generation: Option<String>,
}

/// A run of identical samples.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Span {
    /// Redis time of the first and last sample of the span, microseconds.
    pub first_us: i64,
    pub last_us: i64,
    pub content: Content,
}

const SAMPLE: &str = r"
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000000 + tonumber(t[2]), redis.call('HGET', KEYS[1], 'generation') or false}
for i = 2, #KEYS do
  out[#out + 1] = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
end
return out
";

pub struct Recorder {
    /// The queue keys, in the order of [`Content::queues`].
    pub queues: Vec<String>,
    spans: Mutex<Vec<Span>>,
    stop: CancellationToken,
}

impl Recorder {
    /// Starts sampling `queues` (and `meta`'s generation) every `every` on `redis_url`.
    pub async fn start(
        redis_url: &str,
        meta: String,
        queues: Vec<String>,
        every: Duration,
    ) -> Result<Arc<Recorder>, String> {
        let config = Config::from_url(redis_url).map_err(|e| e.to_string())?;
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(1);
            })
            .with_performance_config(|p| {
                p.default_command_timeout = Duration::from_millis(500);
            })
            .set_policy(ReconnectPolicy::new_constant(0, 50))
            .build()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let recorder = Arc::new(Recorder {
            queues,
            spans: Mutex::default(),
            stop: CancellationToken::new(),
        });
        let sampling = Arc::clone(&recorder);
        let mut keys = vec![meta];
        keys.extend(recorder.queues.iter().cloned());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = sampling.stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let answer: Result<Vec<Value>, _> = client
                    .eval(SAMPLE, keys.clone(), Vec::<String>::new())
                    .await;
                if let Ok(answer) = answer
                    && let Some((at_us, content)) = parse(answer)
                {
                    sampling.add(at_us, content);
                }
            }
            let _ = client.quit().await;
        });
        Ok(recorder)
    }

    pub fn stop(&self) {
        self.stop.cancel();
    }

    fn add(&self, at_us: i64, content: Content) {
        let mut spans = self.spans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = spans.last_mut()
            && last.content == content
        {
            last.last_us = at_us;
            return;
        }
        spans.push(Span {
            first_us: at_us,
            last_us: at_us,
            content,
        });
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn parse(answer: Vec<Value>) -> Option<(i64, Content)> {
    let mut items = answer.into_iter();
    let at_us = items.next()?.as_i64()?;
    let generation = items.next()?.as_string();
    let queues = items
        .map(|v| match v {
            Value::Array(flat) => flat
                .chunks_exact(2)
                .filter_map(|pair| {
                    let member = pair[0].as_string()?;
                    let score = pair[1].as_string()?.parse::<f64>().ok()? as i64;
                    Some((member, score))
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    Some((at_us, Content { queues, generation }))
}

/// What the samples say of a command's rank at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankAt {
    /// Between these two ranks (equal when a sample saw the queue at that instant, or nothing
    /// ahead changed between the samples around it).
    Within { low: u64, high: u64 },
    /// Not in its queue in the samples around the instant.
    Absent,
    /// No samples around the instant (Redis was down, the recorder lagged).
    Unknown,
}

/// The largest gap between two samples that still judges an instant between them.
pub const MAX_GAP_US: i64 = 250_000;

/// The members of a span's queue standing ahead of sequence `seq`, and whether `member` is in it.
fn ahead_of<'a>(
    span: &'a Span,
    queue: usize,
    member: &str,
    seq: i64,
) -> Option<(HashSet<&'a str>, bool)> {
    let q = span.content.queues.get(queue)?;
    let ahead = q
        .iter()
        .filter(|(m, score)| *score < seq && m != member)
        .map(|(m, _)| m.as_str())
        .collect();
    Some((ahead, q.iter().any(|(m, _)| m == member)))
}

/// The rank at `at_us` of `member` (queue sequence `seq`) in queue `queue`: those ahead of it in
/// both samples around the instant stood ahead then; those in only one may have.
///
/// Between two samples a command may have arrived ahead and left again unseen: `unseen(from_us,
/// to_us, seen)` counts those that could have (the caller knows the commands' lives), and they
/// widen the upper bound.
pub fn rank_at(
    spans: &[Span],
    queue: usize,
    member: &str,
    seq: i64,
    at_us: i64,
    unseen: impl Fn(i64, i64, &HashSet<&str>) -> u64,
) -> RankAt {
    // The last span that began at or before the instant.
    let i = spans.partition_point(|s| s.first_us <= at_us);
    if i == 0 {
        return RankAt::Unknown;
    }
    let before = &spans[i - 1];
    let Some((ahead_before, in_before)) = ahead_of(before, queue, member, seq) else {
        return RankAt::Unknown;
    };
    if at_us <= before.last_us {
        // Seen unchanged before the instant and after it; but a span's samples are some
        // milliseconds apart, and a command may have come and gone between two of them.
        return if in_before {
            let r = ahead_before.len() as u64;
            let hidden = unseen(
                at_us - MAX_GAP_US / 2,
                at_us + MAX_GAP_US / 2,
                &ahead_before,
            );
            RankAt::Within {
                low: r,
                high: r + hidden,
            }
        } else {
            RankAt::Absent
        };
    }
    let Some(after) = spans.get(i) else {
        return RankAt::Unknown;
    };
    if after.first_us - before.last_us > MAX_GAP_US {
        return RankAt::Unknown;
    }
    let Some((ahead_after, in_after)) = ahead_of(after, queue, member, seq) else {
        return RankAt::Unknown;
    };
    if !in_before && !in_after {
        return RankAt::Absent;
    }
    let seen: HashSet<&str> = ahead_before.union(&ahead_after).copied().collect();
    RankAt::Within {
        low: ahead_before.intersection(&ahead_after).count() as u64,
        high: seen.len() as u64 + unseen(before.last_us, after.first_us, &seen),
    }
}

/// Whether, between `from_us` and `to_us`, a command came to stand ahead of sequence `seq` that
/// was not there just before (a requeue at an old place, a rebuild restoring one, an earlier
/// acceptance projected late): what lets a position grow. A command ahead that left (it started)
/// and stands ahead again (its lease lapsed and it was requeued at its old place) came back:
/// each sample is compared with the one before it, not with the first. `None` when the samples
/// do not cover the interval.
pub fn arrival_ahead(
    spans: &[Span],
    queue: usize,
    member: &str,
    seq: i64,
    from_us: i64,
    to_us: i64,
) -> Option<bool> {
    let base = spans
        .partition_point(|s| s.first_us <= from_us)
        .checked_sub(1)?;
    let (mut before, _) = ahead_of(&spans[base], queue, member, seq)?;
    let mut last = spans[base].last_us;
    // Up to and including the first sample after `to_us`: an arrival just before `to_us` shows
    // there first (one just after it excuses a growth it did not cause: lenient, never wrong).
    for span in &spans[base + 1..] {
        if span.first_us - last > MAX_GAP_US {
            return None;
        }
        last = span.last_us;
        let (ahead, _) = ahead_of(span, queue, member, seq)?;
        if ahead.iter().any(|m| !before.contains(m)) {
            return Some(true);
        }
        before = ahead;
        if span.first_us > to_us {
            return Some(false);
        }
    }
    None
}

/// Every member any sample of `queue` saw between `from_us` and `to_us`.
pub fn seen_between(spans: &[Span], queue: usize, from_us: i64, to_us: i64) -> HashSet<String> {
    spans
        .iter()
        .filter(|s| s.last_us >= from_us && s.first_us <= to_us)
        .filter_map(|s| s.content.queues.get(queue))
        .flat_map(|q| q.iter().map(|(m, _)| m.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first_us: i64, last_us: i64, queue: &[(&str, i64)]) -> Span {
        Span {
            first_us,
            last_us,
            content: Content {
                queues: vec![queue.iter().map(|(m, s)| (m.to_string(), *s)).collect()],
                generation: Some("1".into()),
            },
        }
    }

    #[test]
    fn ranks_between_samples_allow_what_changed_between_them() {
        let spans = vec![
            span(0, 100, &[("a", 1), ("b", 2), ("c", 3), ("d", 4)]),
            span(200, 300, &[("b", 2), ("d", 4)]),
        ];
        assert_eq!(
            rank_at(&spans, 0, "d", 4, 50, |_, _, _| 0),
            RankAt::Within { low: 3, high: 3 }
        );
        assert_eq!(
            rank_at(&spans, 0, "d", 4, 150, |_, _, _| 0),
            RankAt::Within { low: 1, high: 3 }
        );
        assert_eq!(
            rank_at(&spans, 0, "d", 4, 250, |_, _, _| 0),
            RankAt::Within { low: 1, high: 1 }
        );
        assert_eq!(
            rank_at(&spans, 0, "c", 3, 150, |_, _, _| 0),
            RankAt::Within { low: 1, high: 2 }
        );
        assert_eq!(rank_at(&spans, 0, "x", 9, 150, |_, _, _| 0), RankAt::Absent);
        assert_eq!(
            rank_at(&spans, 0, "d", 4, 400, |_, _, _| 0),
            RankAt::Unknown
        );
        assert_eq!(rank_at(&spans, 0, "d", 4, -5, |_, _, _| 0), RankAt::Unknown);
        // Arrived between the samples: those ahead by sequence in either sample bound it.
        let late = vec![
            span(0, 100, &[("a", 1), ("b", 2)]),
            span(200, 300, &[("b", 2), ("e", 5)]),
        ];
        assert_eq!(
            rank_at(&late, 0, "e", 5, 150, |_, _, _| 0),
            RankAt::Within { low: 1, high: 2 }
        );
    }

    #[test]
    fn an_arrival_ahead_is_seen() {
        let spans = vec![
            span(0, 100, &[("b", 2), ("d", 4)]),
            span(200, 300, &[("a", 1), ("b", 2), ("d", 4)]),
        ];
        assert_eq!(arrival_ahead(&spans, 0, "d", 4, 50, 250), Some(true));
        assert_eq!(
            arrival_ahead(&spans, 0, "d", 4, 10, 90),
            Some(true),
            "the next sample shows it"
        );
        assert_eq!(arrival_ahead(&spans, 0, "d", 4, 10, 250), Some(true));
        let quiet = vec![
            span(0, 100, &[("b", 2), ("d", 4)]),
            span(200, 300, &[("b", 2), ("d", 4), ("e", 5)]),
        ];
        assert_eq!(arrival_ahead(&quiet, 0, "d", 4, 10, 150), Some(false));
        assert_eq!(
            arrival_ahead(&quiet, 0, "d", 4, 10, 350),
            None,
            "no sample after"
        );
        assert_eq!(arrival_ahead(&spans, 0, "b", 2, 50, 250), Some(true));
        let behind = vec![
            span(0, 100, &[("b", 2)]),
            span(200, 300, &[("b", 2), ("c", 3)]),
        ];
        assert_eq!(arrival_ahead(&behind, 0, "b", 2, 50, 150), Some(false));
        // Ahead, gone (it started), ahead again (requeued at its old place): it came back.
        let requeued = vec![
            span(0, 100, &[("a", 1), ("d", 4)]),
            span(200, 300, &[("d", 4)]),
            span(400, 500, &[("a", 1), ("d", 4)]),
        ];
        assert_eq!(arrival_ahead(&requeued, 0, "d", 4, 250, 450), Some(true));
        assert_eq!(arrival_ahead(&requeued, 0, "d", 4, 50, 450), Some(true));
        assert_eq!(arrival_ahead(&requeued, 0, "d", 4, 50, 150), Some(false));
        let gap = vec![
            span(0, 100, &[("b", 2), ("d", 4)]),
            span(900_000, 900_100, &[("d", 4)]),
        ];
        assert_eq!(arrival_ahead(&gap, 0, "d", 4, 50, 900_050), None);
    }
}
