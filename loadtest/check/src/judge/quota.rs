//! Quota units, from PostgreSQL's allocations: never more units taken than the pool holds, one
//! allocation per subject per pool, every success holding exactly one, and reserved units ending
//! as their holders said (confirmed, released) or as time said (expired).

use std::collections::{HashMap, HashSet};

use super::{Evidence, Stats, Violation};
use crate::plan::Handler;

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, _stats: &mut Stats) {
    let mut by_pool: HashMap<&str, Vec<&crate::rows::AllocationRow>> = HashMap::new();
    for a in &evidence.allocations {
        by_pool.entry(a.pool.as_str()).or_default().push(a);
    }
    for (pool, allocations) in &by_pool {
        let Some(decl) = evidence.decl.pool(pool) else {
            continue;
        };
        let held = allocations
            .iter()
            .filter(|a| matches!(a.state.as_str(), "reserved" | "confirmed"))
            .count();
        if held > decl.capacity as usize {
            violations.push(Violation::new(
                "quota-over-capacity",
                format!("pool {pool}: {held} units held, capacity {}", decl.capacity),
            ));
        }
        let mut subjects = HashSet::new();
        for a in allocations {
            if !subjects.insert(a.subject.as_str()) {
                violations.push(Violation::new(
                    "quota-twice",
                    format!("pool {pool}: subject {} holds two allocations", a.subject),
                ));
            }
            if a.state == "reserved" {
                violations.push(Violation::new(
                    "reservation-left",
                    format!(
                        "pool {pool}: allocation {} still reserved after the drain",
                        a.id
                    ),
                ));
            }
        }
    }
    let allocation_of: HashMap<&str, &crate::rows::AllocationRow> = evidence
        .allocations
        .iter()
        .map(|a| (a.command_id.as_str(), a))
        .collect();
    for row in &evidence.rows {
        let Some(decl) = evidence.decl.command(&row.command) else {
            continue;
        };
        if !matches!(decl.handler, Handler::Quota { .. }) {
            continue;
        }
        let allocation = allocation_of.get(row.id.as_str());
        match (row.status.as_str(), allocation) {
            ("succeeded", None) => violations.push(Violation::new(
                "quota-success-without-unit",
                format!("command {} succeeded without an allocation", row.id),
            )),
            ("succeeded", Some(_)) => {}
            (other, Some(a)) => violations.push(Violation::new(
                "quota-unit-without-success",
                format!(
                    "command {} ended {other} but holds allocation {} ({})",
                    row.id, a.id, a.state
                ),
            )),
            ("rejected", None)
                if !matches!(
                    row.error_code.as_deref(),
                    Some("SOLD_OUT" | "ALREADY_ALLOCATED")
                ) =>
            {
                violations.push(Violation::new(
                    "quota-refusal-code",
                    format!("command {} rejected with {:?}", row.id, row.error_code),
                ));
            }
            _ => {}
        }
    }
    // Reserved units follow their holders: a confirm or release that answered 200 is the end.
    for r in &evidence.records.reservations {
        if r.status != Some(200) {
            continue;
        }
        let Some(a) = evidence
            .allocations
            .iter()
            .find(|a| a.id == r.allocation_id)
        else {
            continue;
        };
        let want = if r.action == "confirm" {
            "confirmed"
        } else {
            "released"
        };
        if r.state.as_deref() == Some(want) && a.state != want {
            violations.push(Violation::new(
                "reservation-not-kept",
                format!(
                    "allocation {}: {} answered {want}, PostgreSQL says {}",
                    a.id, r.action, a.state
                ),
            ));
        }
    }
}
