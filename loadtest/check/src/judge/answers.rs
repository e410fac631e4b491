//! Every answer explicit and of the contract's shape; `apply` as the model predicts.

use std::collections::HashMap;

use super::{Evidence, Stats, Violation};

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    let records = evidence.records;
    check_applies(evidence, violations);
    stats.refused_declarations = records
        .applies
        .iter()
        .filter(|a| a.refused && !a.expected_fields.is_empty())
        .count();
    let mut ids: HashMap<u32, String> = HashMap::new();
    stats.intents = evidence
        .plan
        .ops
        .iter()
        .filter(|op| matches!(op.kind, crate::plan::OpKind::Enqueue(_)))
        .count();
    for e in &records.enqueues {
        let Some(intent) = evidence.intent(e.n) else {
            continue;
        };
        let what = format!(
            "enqueue of intent {} ({})",
            e.n,
            if e.replay { "replay" } else { "first" }
        );
        match e.status {
            None => {
                if !evidence.any_fault(e.sent_ms, e.answered_ms, 2_000) {
                    violations.push(Violation::new(
                        "unanswered",
                        format!("{what}: no answer and no fault near it: {}", e.body),
                    ));
                }
            }
            Some(202 | 200) => {
                if intent.invalid {
                    violations.push(Violation::new(
                        "invalid-accepted",
                        format!("{what}: an input outside the declared enum was accepted"),
                    ));
                }
                if e.other_input {
                    // Other content wins only when it came first: the key was taken before.
                    let taken_before = records.enqueues.iter().any(|o| {
                        o.n == e.n
                            && !o.other_input
                            && matches!(o.status, Some(200 | 202))
                            && o.answered_ms < e.sent_ms
                    });
                    if taken_before {
                        violations.push(Violation::new(
                            "conflict-accepted",
                            format!(
                                "{what}: the same key with other input was accepted: {}",
                                e.body
                            ),
                        ));
                    }
                    continue;
                }
                let Some(id) = &e.command_id else {
                    violations.push(Violation::new(
                        "answer-shape",
                        format!("{what}: no command_id: {}", e.body),
                    ));
                    continue;
                };
                let dedup = e.deduplicated.unwrap_or(false);
                if (e.status == Some(202)) == dedup {
                    violations.push(Violation::new(
                        "answer-shape",
                        format!("{what}: status {:?} with deduplicated {dedup}", e.status),
                    ));
                }
                if e.body["data"]["ticket"].as_str().is_none() {
                    violations.push(Violation::new(
                        "answer-shape",
                        format!("{what}: no ticket: {}", e.body),
                    ));
                }
                match ids.get(&e.n) {
                    Some(first) if first != id => violations.push(Violation::new(
                        "two-commands-one-key",
                        format!("{what}: command {id}, but the key already named {first}"),
                    )),
                    Some(_) => {}
                    None => {
                        ids.insert(e.n, id.clone());
                    }
                }
            }
            Some(400) if intent.invalid && e.code.as_deref() == Some("INVALID_ARGUMENT") => {}
            Some(409) if e.code.as_deref() == Some("IDEMPOTENCY_CONFLICT") => {
                // The original content after other content took the key: a conflict too.
                let other_first = records
                    .enqueues
                    .iter()
                    .any(|o| o.n == e.n && o.other_input && matches!(o.status, Some(200 | 202)));
                if !e.other_input && !other_first {
                    violations.push(Violation::new(
                        "unexpected-status",
                        format!(
                            "{what}: 409 though no other content used the key: {}",
                            e.body
                        ),
                    ));
                }
            }
            Some(429) => {
                let code_ok = matches!(
                    e.code.as_deref(),
                    Some("APPLICATION_FULL" | "QUEUE_FULL" | "RATE_LIMITED")
                );
                if !code_ok || e.retry_after.is_none() {
                    violations.push(Violation::new(
                        "refusal-not-explicit",
                        format!(
                            "{what}: 429 with code {:?}, Retry-After {:?}",
                            e.code, e.retry_after
                        ),
                    ));
                }
            }
            Some(503) => {
                if !matches!(e.code.as_deref(), Some("UNAVAILABLE" | "INTAKE_PAUSED")) {
                    violations.push(Violation::new(
                        "refusal-not-explicit",
                        format!("{what}: 503 with code {:?}", e.code),
                    ));
                }
            }
            Some(other) => violations.push(Violation::new(
                "unexpected-status",
                format!("{what}: {other} {}", e.body),
            )),
        }
        if intent.invalid && e.status.is_some_and(|s| s != 400 && s != 503) && !e.replay {
            violations.push(Violation::new(
                "invalid-not-refused",
                format!(
                    "{what}: an input outside the declared enum answered {:?}",
                    e.status
                ),
            ));
        }
    }
    for p in &records.polls {
        match p.status {
            Some(200) => {
                if p.state.is_none() {
                    violations.push(Violation::new(
                        "answer-shape",
                        format!("poll of intent {}: no status", p.n),
                    ));
                }
            }
            Some(503) | None => {}
            Some(other) => violations.push(Violation::new(
                "unexpected-status",
                format!("poll of intent {} answered {other} ({:?})", p.n, p.code),
            )),
        }
    }
    for c in &records.cancels {
        if !matches!(c.status, Some(200 | 503) | None) {
            violations.push(Violation::new(
                "unexpected-status",
                format!(
                    "cancel of intent {} answered {:?} ({:?})",
                    c.n, c.status, c.code
                ),
            ));
        }
        if c.status == Some(200) && matches!(c.state.as_deref(), Some("accepted" | "retry_wait")) {
            violations.push(Violation::new(
                "cancel-not-at-once",
                format!(
                    "cancel of intent {} answered it still waiting ({:?})",
                    c.n, c.state
                ),
            ));
        }
    }
    for c in &records.completes {
        let ok = if c.late {
            // A different outcome after the first authoritative one.
            matches!(c.status, Some(409) | Some(503) | None)
        } else {
            matches!(c.status, Some(200) | Some(409) | Some(503) | None)
        };
        if !ok {
            violations.push(Violation::new(
                "complete-answer",
                format!(
                    "{}:complete of intent {} answered {:?} ({:?})",
                    if c.late { "a late conflicting " } else { "" },
                    c.n,
                    c.status,
                    c.code
                ),
            ));
        }
    }
}

/// `apply` refuses exactly the declarations whose limit templates can render one key with other
/// numbers, naming the later field.
fn check_applies(evidence: &Evidence<'_>, violations: &mut Vec<Violation>) {
    let Some(first) = evidence.records.applies.first() else {
        return;
    };
    if first.expected_fields.is_empty() {
        return;
    }
    if !first.refused {
        violations.push(Violation::new(
            "overlapping-templates-applied",
            format!(
                "apply accepted limit templates that render one key with other numbers ({}): {}",
                first.expected_fields.join(", "),
                first.output.trim()
            ),
        ));
    } else if !first
        .expected_fields
        .iter()
        // `command[i].limits[j]` or its `.key`: the limit is named either way.
        .any(|field| first.output.contains(field.trim_end_matches(".key")))
    {
        violations.push(Violation::new(
            "refusal-names-no-field",
            format!(
                "apply refused, but named none of {}: {}",
                first.expected_fields.join(", "),
                first.output.trim()
            ),
        ));
    }
}
