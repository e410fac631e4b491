//! The webhook `call`s as the backend saw them (its own records, [`super::witness`]) against
//! PostgreSQL:
//! - every call carried a valid signature (and its command id as `Idempotency-Key`);
//! - an account never had more calls and accepted tasks at once than its `max_in_flight`;
//! - a provider never received more calls in any window than its token bucket allows: at most
//!   `burst + per_second × (window + slack)` calls from the first to the last of the window
//!   (`burst` = `per_second`, the declaration's default; `slack` in [`ChaosConfig`]);
//! - no command was in flight twice at once at the backend, and none was called after its
//!   terminal row was written (`finished_at` plus the landing slack);
//! - every result the backend decided (its `200`, or the `:complete` it sent after a `202`) is
//!   exactly the row's status, result and error code; no command was decided twice with
//!   different results; every `:complete` was acknowledged; and a decided row (succeeded,
//!   rejected, failed) had a decision from the backend.
//!
//! [`ChaosConfig`]: super::config::ChaosConfig

use std::collections::HashMap;

use uuid::Uuid;

use super::checks::{Data, Judge, Row};
use super::ledger::count_by;
use super::witness::{Call, Decision, windows};

/// At most this many violations of one kind are spelled out; the rest are counted.
const SPELLED_OUT: usize = 20;

pub(super) fn check(judge: &mut Judge<'_>, data: &Data) {
    let run = judge.run;
    let seen = &run.witnessed;
    let config = &run.config;
    let by_id = data.by_id();

    let unsigned: Vec<&Call> = seen.calls.iter().filter(|c| !c.signed).collect();
    for call in unsigned.iter().take(SPELLED_OUT) {
        let phase = judge.phases.of(call.at);
        judge.violation(
            phase,
            format!(
                "a call of command {} at {:.3} s carried no valid signature or idempotency key",
                call.command_id,
                call.at.as_secs_f64()
            ),
        );
    }

    // Accounts: calls and accepted tasks at once.
    let limit = config.account_max_in_flight as usize;
    let over: Vec<_> = seen.levels.iter().filter(|l| l.level > limit).collect();
    for level in over.iter().take(SPELLED_OUT) {
        let phase = judge.phases.of(level.at);
        judge.violation(
            phase,
            format!(
                "{} had {} calls and tasks at once at {:.3} s (max_in_flight {limit}): \
                 commands {:?}",
                level.account,
                level.level,
                level.at.as_secs_f64(),
                level.commands
            ),
        );
    }
    if over.len() > SPELLED_OUT {
        judge.violation_of_run(format!(
            "{} moments in all with an account over its max_in_flight",
            over.len()
        ));
    }

    // Providers: starts per window.
    let rate = f64::from(config.provider_per_second);
    let mut per_provider: HashMap<&str, Vec<&Call>> = HashMap::new();
    for call in &seen.calls {
        per_provider.entry(&call.provider).or_default().push(call);
    }
    let mut worst_excess = f64::NEG_INFINITY;
    for (provider, calls) in &mut per_provider {
        calls.sort_by_key(|c| c.at);
        let times: Vec<_> = calls.iter().map(|c| c.at).collect();
        // The worst window per phase of its first call: the calls that came too close
        // together start it, and every later window that contains them would repeat it.
        let mut worst: HashMap<Option<usize>, super::witness::Window> = HashMap::new();
        for window in windows(&times, rate, rate, config.rate_slack) {
            worst_excess = worst_excess.max(window.excess);
            if window.excess > 0.0 {
                let phase = judge.phases.of(times[window.from]);
                let entry = worst.entry(phase).or_insert(window);
                if window.excess > entry.excess {
                    *entry = window;
                }
            }
        }
        let mut worst: Vec<_> = worst.into_iter().collect();
        worst.sort_by_key(|(phase, _)| *phase);
        for (phase, window) in worst {
            let first = times[window.from];
            let shown: Vec<String> = calls[window.from..=window.to]
                .iter()
                .take(40)
                .map(|c| {
                    format!(
                        "+{}ms {} (attempt {})",
                        (c.at - first).as_millis(),
                        c.command_id,
                        c.attempt
                    )
                })
                .collect();
            judge.violation(
                phase,
                format!(
                    "provider {provider} received {} calls within {:.3} s (from {:.3} s): its \
                     bucket allows {:.1} ({} per second, burst {}, slack {:?}); calls {shown:?}",
                    window.count,
                    window.span.as_secs_f64(),
                    first.as_secs_f64(),
                    window.count as f64 - window.excess,
                    config.provider_per_second,
                    config.provider_per_second,
                    config.rate_slack
                ),
            );
        }
    }

    // One call of a command at a time, and none after its terminal row.
    for (i, j) in seen.overlaps.iter().take(SPELLED_OUT) {
        let (a, b) = (&seen.calls[*i], &seen.calls[*j]);
        let phase = judge.phases.of(b.at);
        judge.violation(
            phase,
            format!(
                "command {} was delivered twice at once: a call at {:.3} s (attempt {}) was \
                 still in flight when another arrived at {:.3} s (attempt {})",
                a.command_id,
                a.at.as_secs_f64(),
                a.attempt,
                b.at.as_secs_f64(),
                b.attempt
            ),
        );
    }
    let mut late = 0;
    for call in &seen.calls {
        let Some(finished) = by_id.get(&call.command_id).and_then(|r| r.finished_at) else {
            continue;
        };
        let slack = chrono::Duration::from_std(config.landing_slack).expect("a small slack");
        if call.wall > finished + slack {
            late += 1;
            if late <= SPELLED_OUT {
                let phase = judge.phases.of(call.at);
                let row = by_id[&call.command_id];
                judge.violation(
                    phase,
                    format!(
                        "command {} was called at {:.3} s (attempt {}), {} ms after its row \
                         ended {} at {finished}",
                        call.command_id,
                        call.at.as_secs_f64(),
                        call.attempt,
                        (call.wall - finished).num_milliseconds(),
                        row.status
                    ),
                );
            }
        }
    }
    if late > SPELLED_OUT {
        judge.violation_of_run(format!(
            "{late} calls in all came after their command ended"
        ));
    }

    // Decisions against the rows.
    let mut decided: HashMap<Uuid, Vec<(std::time::Duration, &Decision)>> = HashMap::new();
    for (id, at, decision) in &seen.decisions {
        decided.entry(*id).or_default().push((*at, decision));
    }
    let mut mismatches = 0;
    for (id, decisions) in &decided {
        let first_at = decisions
            .iter()
            .map(|(at, _)| *at)
            .min()
            .unwrap_or_default();
        let phase = judge.phases.of(first_at);
        let distinct = decisions
            .iter()
            .filter(|(_, d)| *d != decisions[0].1)
            .count();
        if distinct > 0 {
            judge.violation(
                phase,
                format!(
                    "command {id} was decided {} times by the backend with different results: \
                     {:?}",
                    decisions.len(),
                    decisions.iter().map(|(_, d)| brief(d)).collect::<Vec<_>>()
                ),
            );
        }
        for (_, decision) in decisions {
            let row = by_id.get(id);
            if row.is_some_and(|r| matches(decision, r)) {
                continue;
            }
            mismatches += 1;
            if mismatches <= SPELLED_OUT {
                judge.violation(
                    phase,
                    format!(
                        "command {id}: the backend decided {} but PostgreSQL holds {}",
                        brief(decision),
                        row.map_or("no row".into(), |r| format!(
                            "{} {} {}",
                            r.status,
                            r.error_code,
                            r.result.as_ref().map_or("null".into(), |v| v.to_string())
                        ))
                    ),
                );
            }
        }
    }
    if mismatches > SPELLED_OUT {
        judge.violation_of_run(format!(
            "{mismatches} backend decisions in all differ from PostgreSQL"
        ));
    }
    for row in data.rows.iter().filter(|r| r.command == "call") {
        let decided_here = matches!(row.status.as_str(), "succeeded" | "rejected" | "failed");
        if decided_here && !decided.contains_key(&row.id) {
            let phase = data
                .intents
                .iter()
                .find(|i| i.command_id == Some(row.id))
                .and_then(|i| judge.phases.of(i.started()));
            judge.violation(
                phase,
                format!(
                    "command {} ended {} {} without a decision of the backend",
                    row.id, row.status, row.error_code
                ),
            );
        }
    }
    for complete in &seen.completes {
        if complete.status != Some(200) {
            let phase = judge.phases.of(complete.sent);
            judge.violation(
                phase,
                format!(
                    "the backend's :complete of command {} ({}) was not acknowledged: {:?}",
                    complete.command_id,
                    brief(&complete.decision),
                    complete.answers
                ),
            );
        }
    }

    let redelivered = seen
        .calls
        .iter()
        .filter(|c| {
            decided
                .get(&c.command_id)
                .is_some_and(|d| d.iter().any(|(at, _)| *at < c.at))
        })
        .count();
    let peak = seen.levels.iter().map(|l| l.level).max().unwrap_or(0);
    if peak == 0 {
        judge.violation_of_run("the backend saw no call: the delivery checks are void");
    }
    judge.note(format!(
        "backend: {} calls ({:?}), {} decisions, {} :complete sent, {redelivered} calls of a \
         command it had already decided (answered with that decision); peak {peak} calls and \
         tasks of one account at once (max_in_flight {limit}); the busiest provider window came \
         to {:+.2} calls against its bucket ({} per second, slack {:?})",
        seen.calls.len(),
        count_by(
            seen.calls
                .iter()
                .map(|c| c.answer.map_or("dropped".into(), |s| s.to_string()))
        ),
        seen.decisions.len(),
        seen.completes.len(),
        worst_excess,
        config.provider_per_second,
        config.rate_slack
    ));
}

/// Whether the row holds exactly `decision`.
fn matches(decision: &Decision, row: &Row) -> bool {
    row.status == decision.outcome
        && row.result.as_ref() == Some(&decision.result)
        && decision.error_code.as_deref().unwrap_or("") == row.error_code
}

fn brief(decision: &Decision) -> String {
    format!(
        "{} {} {}{}",
        decision.outcome,
        decision.error_code.as_deref().unwrap_or(""),
        decision.result,
        if decision.by_complete {
            " (by :complete)"
        } else {
            ""
        }
    )
}
