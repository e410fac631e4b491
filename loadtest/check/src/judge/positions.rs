//! Told positions. The documented bound: a position is the command's rank in its resource queue
//! at the answer's `observed_at` (exact, whether Redis or a gateway's memory answered). The
//! recorder's samples on either side of that instant bound the true rank; and between two answers
//! (ordered by `observed_at`) a position grows only when a command came to stand ahead of it.

use std::collections::{HashMap, HashSet};

use super::{Evidence, Stats, Violation};
use crate::recorder::{RankAt, arrival_ahead, rank_at};

/// A command's time in its queue: id, sequence, accepted at, left at (first start or end; None
/// while it never left).
struct Life<'a>(&'a str, i64, i64, Option<i64>);

struct Told {
    n: u32,
    id: String,
    queue: usize,
    seq: i64,
    position: u64,
    observed_ms: i64,
    source: &'static str,
}

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    let queue_of: HashMap<&str, (usize, i64)> = evidence
        .rows
        .iter()
        .filter_map(|r| {
            evidence
                .queue_index
                .get(&(r.command.clone(), r.resource_key.clone()))
                .map(|q| (r.id.as_str(), (*q, r.queue_seq)))
        })
        .collect();
    // When each command left its queue for the first time (it started, or ended waiting).
    let left_at: HashMap<&str, Option<i64>> = evidence
        .rows
        .iter()
        .map(|r| (r.id.as_str(), r.started_ms.or(r.finished_ms)))
        .collect();
    // Per queue, every command's time in it: from its acceptance to its first start or end.
    let mut lives: HashMap<usize, Vec<Life<'_>>> = HashMap::new();
    for r in &evidence.rows {
        if let Some(q) = evidence
            .queue_index
            .get(&(r.command.clone(), r.resource_key.clone()))
        {
            lives.entry(*q).or_default().push(Life(
                r.id.as_str(),
                r.queue_seq,
                r.accepted_ms,
                // A command that ran again (a retry, a rescue) came back to the queue later.
                if r.attempts > 1 {
                    r.finished_ms
                } else {
                    r.started_ms.or(r.finished_ms)
                },
            ));
        }
    }
    let mut told = Vec::new();
    for e in &evidence.records.enqueues {
        if let (Some(id), Some(position), Some(observed_ms)) =
            (&e.command_id, e.position, e.observed_ms)
            && e.status == Some(202)
            && let Some((q, seq)) = queue_of.get(id.as_str())
        {
            told.push(Told {
                n: e.n,
                id: id.clone(),
                queue: *q,
                seq: *seq,
                position,
                observed_ms,
                source: "enqueue",
            });
        }
    }
    for p in &evidence.records.polls {
        if let (Some(position), Some(observed_ms)) = (p.position, p.observed_ms)
            && matches!(p.state.as_deref(), Some("accepted" | "retry_wait"))
            && let Some((q, seq)) = queue_of.get(p.command_id.as_str())
        {
            told.push(Told {
                n: p.n,
                id: p.command_id.clone(),
                queue: *q,
                seq: *seq,
                position,
                observed_ms,
                source: "poll",
            });
        }
    }
    let mut wrong = 0;
    for t in &told {
        // `observed_at` has millisecond resolution: the instant lies within that millisecond.
        // Commands of its queue ahead of it whose time in the queue overlaps a gap between two
        // samples and that neither sample saw.
        let unseen = |from_us: i64, to_us: i64, seen: &HashSet<&str>| {
            lives.get(&t.queue).map_or(0, |list| {
                list.iter()
                    .filter(|Life(id, seq, from, to)| {
                        *seq < t.seq
                            && !seen.contains(id)
                            && *from <= to_us / 1000 + 1
                            && to.is_none_or(|to| to * 1000 >= from_us - 1000)
                    })
                    .count() as u64
            })
        };
        let early = rank_at(
            &evidence.spans,
            t.queue,
            &t.id,
            t.seq,
            t.observed_ms * 1000,
            unseen,
        );
        let late = rank_at(
            &evidence.spans,
            t.queue,
            &t.id,
            t.seq,
            t.observed_ms * 1000 + 999,
            unseen,
        );
        // While claims fail (PostgreSQL away from an executor), admitted heads are given back to
        // their queues at once: a command can leave and come back between two samples, so those
        // ahead in both samples bound the rank from above only.
        let churn = evidence.churn_near(t.observed_ms);
        let bounds = match (early, late) {
            (RankAt::Within { low: a, high: b }, RankAt::Within { low: c, high: d }) => {
                Some((if churn { 0 } else { a.min(c) }, b.max(d)))
            }
            (RankAt::Within { low, high }, _) | (_, RankAt::Within { low, high }) => {
                Some((if churn { 0 } else { low }, high))
            }
            (RankAt::Absent, RankAt::Absent) if churn => {
                stats.positions_unjudged += 1;
                continue;
            }
            (RankAt::Absent, RankAt::Absent) => {
                // In its queue only between two samples: it may have arrived and started (or
                // ended) within them; judged wrong only when it was not left by then. It also
                // leaves when an executor admits it and dies (or stops) before its claim, which
                // PostgreSQL never records: near such a fault, not judged.
                let left = left_at.get(t.id.as_str()).copied().flatten();
                if left.is_some_and(|l| (l - t.observed_ms).abs() <= 250)
                    || evidence.strand_excuse(t.observed_ms, t.observed_ms)
                {
                    stats.positions_unjudged += 1;
                    continue;
                }
                stats.positions_judged += 1;
                wrong += 1;
                if wrong <= 20 {
                    violations.push(Violation::new(
                        "position-not-the-truth",
                        format!(
                            "intent {} ({}): told waiting at position {} at {}, but it was not in its queue then",
                            t.n, t.source, t.position, t.observed_ms
                        ),
                    ));
                }
                continue;
            }
            _ => None,
        };
        let Some((low, high)) = bounds else {
            stats.positions_unjudged += 1;
            continue;
        };
        stats.positions_judged += 1;
        if low == high {
            stats.positions_exact += 1;
        }
        if t.position < low || t.position > high {
            wrong += 1;
            if wrong <= 20 {
                violations.push(Violation::new(
                    "position-not-the-truth",
                    format!(
                        "intent {} ({}): told position {} at {}, its rank then was {}",
                        t.n,
                        t.source,
                        t.position,
                        t.observed_ms,
                        if low == high {
                            low.to_string()
                        } else {
                            format!("{low}..={high}")
                        }
                    ),
                ));
            }
        }
    }
    if wrong > 20 {
        violations.push(Violation::new(
            "position-not-the-truth",
            format!("{} more positions off their rank", wrong - 20),
        ));
    }

    // A position that grows with nothing arriving ahead.
    let mut by_command: HashMap<&str, Vec<&Told>> = HashMap::new();
    for t in &told {
        by_command.entry(t.id.as_str()).or_default().push(t);
    }
    let mut grew = 0;
    for (id, mut list) in by_command {
        list.sort_by_key(|t| t.observed_ms);
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            stats.position_pairs += 1;
            if b.position <= a.position || b.observed_ms <= a.observed_ms {
                continue;
            }
            match arrival_ahead(
                &evidence.spans,
                a.queue,
                id,
                a.seq,
                a.observed_ms * 1000,
                b.observed_ms * 1000 + 999,
            ) {
                // A command ahead may have come and gone between two samples unseen.
                Some(false) if unseen_arrival(&evidence.spans, &lives, a, b) => {}
                // A head given back between two samples stands ahead again.
                Some(false)
                    if evidence.churn_near(a.observed_ms) || evidence.churn_near(b.observed_ms) => {
                }
                Some(false) => {
                    grew += 1;
                    if grew <= 20 {
                        violations.push(Violation::new(
                            "position-grew",
                            format!(
                                "intent {}: position {} at {} ({}), then {} at {} ({}), with nobody arriving ahead",
                                a.n, a.position, a.observed_ms, a.source, b.position, b.observed_ms, b.source
                            ),
                        ));
                    }
                }
                Some(true) | None => {}
            }
        }
    }
}

/// Whether a command of `a`'s queue, ahead of it, was there (by PostgreSQL's account of its time
/// in the queue) at some instant between the two answers without any sample seeing it.
fn unseen_arrival(
    spans: &[crate::recorder::Span],
    lives: &HashMap<usize, Vec<Life<'_>>>,
    a: &Told,
    b: &Told,
) -> bool {
    let (from, to) = (a.observed_ms, b.observed_ms + 1);
    let seen =
        crate::recorder::seen_between(spans, a.queue, from * 1000 - 250_000, to * 1000 + 250_000);
    lives.get(&a.queue).is_some_and(|list| {
        list.iter().any(|Life(id, seq, accepted, left)| {
            *seq < a.seq && !seen.contains(*id) && *accepted <= to && left.is_none_or(|l| l >= from)
        })
    })
}
