//! No limit exceeded. Concurrency is counted on the backend's own intervals (inside Sluice's
//! permits, see [`crate::backend`]); start rates on PostgreSQL's first starts (each spent a token
//! of every bucket it needed, so their times may never outrun a bucket).

use std::collections::BTreeMap;

use super::{Evidence, Stats, Violation};
use crate::model::{self, KeyUse};

/// One interval of work with what it holds.
struct Work {
    from: i64,
    to: i64,
    label: String,
}

/// The most intervals open at once, and one instant where that happened.
fn peak(works: &[&Work]) -> (usize, i64, Vec<String>) {
    let mut events: Vec<(i64, i32, usize)> = Vec::new();
    for (i, w) in works.iter().enumerate() {
        events.push((w.from, 1, i));
        events.push((w.to, -1, i));
    }
    // Ends before starts at the same instant: a slot handed over is not two at once.
    events.sort_by_key(|(t, d, _)| (*t, *d));
    let (mut open, mut best, mut at) = (0i64, 0i64, 0i64);
    let mut current: Vec<usize> = Vec::new();
    let mut best_set = Vec::new();
    for (t, d, i) in events {
        open += i64::from(d);
        if d > 0 {
            current.push(i);
        } else {
            current.retain(|x| *x != i);
        }
        if open > best {
            best = open;
            at = t;
            best_set = current.iter().map(|i| works[*i].label.clone()).collect();
        }
    }
    (best as usize, at, best_set)
}

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    let end_of_run = evidence
        .deliveries
        .iter()
        .map(|d| d.arrived_ms)
        .max()
        .unwrap_or(0)
        + 600_000;
    let mut works = Vec::new();
    let mut uses_of: Vec<(usize, Vec<KeyUse>, String, String)> = Vec::new();
    for d in &evidence.deliveries {
        let Some(intent) = evidence.intent(d.n) else {
            continue;
        };
        let Some(decl) = evidence.decl.command(&intent.command) else {
            continue;
        };
        let input = intent.input(decl);
        let uses = model::keys_of(decl, &input, &intent.subject);
        works.push(Work {
            from: d.arrived_ms,
            to: d.ended_ms.unwrap_or(end_of_run),
            label: format!("intent {} attempt {}", d.n, d.attempt),
        });
        uses_of.push((
            works.len() - 1,
            uses,
            intent.command.clone(),
            intent.resource.clone(),
        ));
    }
    let all_uses: Vec<KeyUse> = uses_of.iter().flat_map(|(_, u, _, _)| u.clone()).collect();
    let bounds = model::key_bounds(&all_uses);

    let mut groups: BTreeMap<String, (u32, Vec<usize>)> = BTreeMap::new();
    for (i, uses, command, resource) in &uses_of {
        let Some(decl) = evidence.decl.command(command) else {
            continue;
        };
        let mut seen = std::collections::BTreeSet::new();
        for u in uses {
            if let Some(bound) = bounds.get(&u.key)
                && seen.insert(u.key.clone())
            {
                groups
                    .entry(format!("limit key \"{}\"", u.key))
                    .or_insert((*bound, Vec::new()))
                    .1
                    .push(*i);
            }
        }
        groups
            .entry(format!("command {command} max_in_flight"))
            .or_insert((decl.admission.max_in_flight, Vec::new()))
            .1
            .push(*i);
        if let Some(per) = decl.admission.per_resource {
            groups
                .entry(format!(
                    "resource {command}/{resource} max_in_flight_per_resource"
                ))
                .or_insert((per, Vec::new()))
                .1
                .push(*i);
        }
        if let Some(app) = &evidence.decl.application {
            groups
                .entry("application max_concurrency".to_string())
                .or_insert((app.max_concurrency, Vec::new()))
                .1
                .push(*i);
        }
    }
    for (name, (bound, members)) in &groups {
        let group: Vec<&Work> = members.iter().map(|i| &works[*i]).collect();
        let (most, at, who) = peak(&group);
        stats.limit_checks += 1;
        stats.peak_concurrency = stats.peak_concurrency.max(most);
        if most > *bound as usize {
            violations.push(Violation::new(
                "limit-exceeded",
                format!(
                    "{name}: {most} at once at the backend (limit {bound}) at {at}: {}",
                    who.join(", ")
                ),
            ));
        }
    }
    check_rates(evidence, violations, stats);
}

/// First starts (PostgreSQL's `started_at`) per bucket within `burst + per_second × window`.
fn check_rates(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    let mut buckets: BTreeMap<String, (u32, u32, Vec<i64>)> = BTreeMap::new();
    for row in &evidence.rows {
        let Some(started) = row.started_ms else {
            continue;
        };
        let Some(n) = Evidence::intent_of(row) else {
            continue;
        };
        let Some(intent) = evidence.intent(n) else {
            continue;
        };
        let Some(decl) = evidence.decl.command(&row.command) else {
            continue;
        };
        let a = &decl.admission;
        buckets
            .entry(format!("command {} start rate", row.command))
            .or_insert((a.per_second, a.burst, Vec::new()))
            .2
            .push(started);
        for u in model::keys_of(decl, &intent.input(decl), &intent.subject) {
            if let (Some(rate), Some(burst)) = (u.per_second, u.burst) {
                buckets
                    .entry(format!("limit key \"{}\" rate", u.key))
                    .or_insert((rate, burst, Vec::new()))
                    .2
                    .push(started);
            }
        }
        if let Some(app) = &evidence.decl.application {
            buckets
                .entry("application rate_per_second".to_string())
                .or_insert((app.rate_per_second, app.rate_per_second, Vec::new()))
                .2
                .push(started);
        }
    }
    for (name, (rate, burst, mut times)) in buckets {
        times.sort_unstable();
        stats.limit_checks += 1;
        'pairs: for i in 0..times.len() {
            for j in i..times.len() {
                let count = (j - i + 1) as f64;
                let window = times[j] - times[i];
                // A Redis that lost its data refills its buckets when rebuilt: one burst more.
                let losses = evidence
                    .records
                    .faults
                    .iter()
                    .filter(|f| {
                        f.kind.loses_redis_data()
                            && f.started_ms <= times[j]
                            && f.ended_ms + 5_000 >= times[i]
                    })
                    .count() as f64;
                let allowed = model::bucket_allows(rate, burst, window) + losses * f64::from(burst);
                if count > allowed {
                    violations.push(Violation::new(
                        "rate-exceeded",
                        format!(
                            "{name}: {count} first starts within {window} ms (at most {allowed:.1} for {rate}/s, burst {burst})"
                        ),
                    ));
                    break 'pairs;
                }
            }
        }
    }
}
