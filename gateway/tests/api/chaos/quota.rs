//! The quota pool of the `claim`s against PostgreSQL: no subject holds two units, no command
//! two allocations, allocations within capacity and as many as the pool counts (else
//! duplicated); a success owns exactly the allocation its result names, anything else owns
//! none, and `ALREADY_ALLOCATED` only for a subject that holds a unit.

use std::collections::HashMap;

use uuid::Uuid;

use super::checks::{Data, Judge, subject_phases};

/// An allocation of the pool.
#[derive(Debug, Clone)]
struct Allocation {
    id: Uuid,
    subject: String,
    command_id: Uuid,
}

pub(super) async fn check(judge: &mut Judge<'_>, data: &Data) {
    let run = judge.run;
    let allocations: Vec<Allocation> = sqlx::query_as::<_, (Uuid, String, Uuid)>(
        "SELECT id, subject, command_id FROM allocations WHERE namespace_id = $1 AND pool = 'stock'",
    )
    .bind(run.creds.namespace_id)
    .fetch_all(&run.pg)
    .await
    .expect("allocations")
    .into_iter()
    .map(|(id, subject, command_id)| Allocation {
        id,
        subject,
        command_id,
    })
    .collect();
    let (capacity, pool_allocated): (i64, i64) = sqlx::query_as(
        "SELECT capacity, allocated FROM quota_pools WHERE namespace_id = $1 AND code = 'stock'",
    )
    .bind(run.creds.namespace_id)
    .fetch_one(&run.pg)
    .await
    .expect("pool");
    let by_id = data.by_id();
    let subject_phase = subject_phases(&data.intents, &judge.phases);
    let phase_of_subject = |subject: &str| subject_phase.get(subject).copied().flatten();

    let mut per_subject: HashMap<&str, Vec<&Allocation>> = HashMap::new();
    let mut per_command: HashMap<Uuid, Vec<&Allocation>> = HashMap::new();
    for allocation in &allocations {
        per_subject
            .entry(&allocation.subject)
            .or_default()
            .push(allocation);
        per_command
            .entry(allocation.command_id)
            .or_default()
            .push(allocation);
    }
    for (subject, units) in &per_subject {
        if units.len() > 1 {
            judge.duplicated(
                phase_of_subject(subject),
                units.len() - 1,
                format!(
                    "subject {subject} holds {} units, by commands {:?}",
                    units.len(),
                    units.iter().map(|a| a.command_id).collect::<Vec<_>>()
                ),
            );
        }
    }
    for (command, units) in &per_command {
        if units.len() > 1 {
            let phase = by_id
                .get(command)
                .and_then(|r| phase_of_subject(&r.subject));
            judge.duplicated(
                phase,
                units.len() - 1,
                format!("command {command} landed {} allocations", units.len()),
            );
        }
    }
    if allocations.len() as i64 > capacity {
        let over = allocations.len() - capacity as usize;
        judge.duplicated[0] += over;
        judge.violation_of_run(format!(
            "duplicated: {} allocations for a capacity of {capacity}",
            allocations.len()
        ));
    }
    if pool_allocated != allocations.len() as i64 {
        judge.violation_of_run(format!(
            "the pool counts {pool_allocated} allocated units, the allocations table holds {}",
            allocations.len()
        ));
    }
    for row in data.rows.iter().filter(|r| r.command == "claim") {
        let units = per_command.get(&row.id).map_or(0, Vec::len);
        let phase = phase_of_subject(&row.subject);
        match row.status.as_str() {
            "succeeded" => {
                let named = per_command.get(&row.id).and_then(|u| u.first());
                let ok = units == 1
                    && named.is_some_and(|a| {
                        Some(a.id.to_string()) == row.allocation_id() && a.subject == row.subject
                    });
                if !ok {
                    judge.violation(
                        phase,
                        format!(
                            "command {} succeeded naming allocation {:?} but holds {units} \
                             allocations ({:?})",
                            row.id,
                            row.allocation_id(),
                            per_command.get(&row.id)
                        ),
                    );
                }
            }
            _ if units > 0 => judge.violation(
                phase,
                format!(
                    "command {} is {} ({}) but holds {units} allocations",
                    row.id, row.status, row.error_code
                ),
            ),
            "rejected" if row.error_code == "ALREADY_ALLOCATED" => {
                let holds = per_subject
                    .get(row.subject.as_str())
                    .is_some_and(|u| u.iter().any(|a| a.command_id != row.id));
                if !holds {
                    judge.violation(
                        phase,
                        format!(
                            "command {} was rejected ALREADY_ALLOCATED but subject {} holds no \
                             unit",
                            row.id, row.subject
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    judge.note(format!(
        "{} allocations of {capacity} (the pool counts {pool_allocated})",
        allocations.len()
    ));
}
