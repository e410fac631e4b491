//! `intake` and `admission` budgets of a command; both tables and all their keys are optional.

use std::ops::RangeInclusive;

use super::model::{AdmissionBudget, IntakeBudget, SubjectRate};
use super::walk::{Obj, Result, in_range};
use crate::field_error::FieldError;

/// Bounds shared by every rate, burst and concurrency setting (also used by limits).
pub(crate) const PER_SECOND_RANGE: RangeInclusive<u32> = 1..=10_000_000;
pub(crate) const BURST_RANGE: RangeInclusive<u32> = 1..=10_000_000;
pub(crate) const MAX_IN_FLIGHT_RANGE: RangeInclusive<u32> = 1..=1_000_000;
/// Bounds of `admission.max_queue`.
const MAX_QUEUE_RANGE: RangeInclusive<u64> = 1..=100_000_000;

/// Intake defaults: generous, since intake only guards the accept path.
const INTAKE_PER_SECOND: u32 = 1000;
const INTAKE_MAX_IN_FLIGHT: u32 = 1000;
/// Admission defaults: modest, since admission guards the handler.
const ADMISSION_PER_SECOND: u32 = 100;
const ADMISSION_MAX_IN_FLIGHT: u32 = 16;
const ADMISSION_MAX_QUEUE: u64 = 100_000;

/// Rate settings common to both budgets; `burst` defaults to `per_second`.
struct Rate {
    per_second: u32,
    burst: u32,
    max_in_flight: u32,
}

/// Reads `per_second`, `burst` and `max_in_flight` from `table`, filling defaults.
fn parse_rate(table: Option<&Obj<'_>>, per_second: u32, max_in_flight: u32) -> Result<Rate> {
    let Some(table) = table else {
        return Ok(Rate {
            per_second,
            burst: per_second,
            max_in_flight,
        });
    };
    let per_second = table
        .opt_num("per_second", PER_SECOND_RANGE)?
        .unwrap_or(per_second);
    Ok(Rate {
        per_second,
        burst: table.opt_num("burst", BURST_RANGE)?.unwrap_or(per_second),
        max_in_flight: table
            .opt_num("max_in_flight", MAX_IN_FLIGHT_RANGE)?
            .unwrap_or(max_in_flight),
    })
}

/// Parses the optional `intake` table.
pub(crate) fn parse_intake(cmd: &Obj<'_>) -> Result<IntakeBudget> {
    let table = cmd.opt_table("intake")?;
    if let Some(t) = &table {
        t.allow_only(&[
            "per_second",
            "burst",
            "max_in_flight",
            "per_subject_per_second",
            "per_subject_burst",
        ])?;
    }
    let rate = parse_rate(table.as_ref(), INTAKE_PER_SECOND, INTAKE_MAX_IN_FLIGHT)?;
    Ok(IntakeBudget {
        per_second: rate.per_second,
        burst: rate.burst,
        max_in_flight: rate.max_in_flight,
        per_subject: table.as_ref().map(parse_per_subject).transpose()?.flatten(),
    })
}

/// `per_subject_per_second` (and its `per_subject_burst`, which defaults to it): each subject's
/// own intake bucket. It can only narrow the shared one.
fn parse_per_subject(table: &Obj<'_>) -> Result<Option<SubjectRate>> {
    let per_second = table.opt_num("per_subject_per_second", PER_SECOND_RANGE)?;
    let burst = table.opt_num("per_subject_burst", BURST_RANGE)?;
    let Some(per_second) = per_second else {
        if burst.is_some() {
            return Err(table.error(
                "per_subject_burst",
                "only allowed with per_subject_per_second",
            ));
        }
        return Ok(None);
    };
    Ok(Some(SubjectRate {
        per_second,
        burst: burst.unwrap_or(per_second),
    }))
}

/// Parses the optional `admission` table; waiting may never outlast the command's deadline.
pub(crate) fn parse_admission(cmd: &Obj<'_>, deadline_seconds: u32) -> Result<AdmissionBudget> {
    let table = cmd.opt_table("admission")?;
    if let Some(t) = &table {
        t.allow_only(&[
            "per_second",
            "burst",
            "max_in_flight",
            "max_queue",
            "max_wait_seconds",
            "max_in_flight_per_resource",
        ])?;
    }
    let rate = parse_rate(
        table.as_ref(),
        ADMISSION_PER_SECOND,
        ADMISSION_MAX_IN_FLIGHT,
    )?;
    let (max_queue, max_wait_seconds, per_resource) = match &table {
        Some(t) => (
            t.opt_num("max_queue", MAX_QUEUE_RANGE)?,
            parse_max_wait(t, deadline_seconds)?,
            t.opt_num("max_in_flight_per_resource", MAX_IN_FLIGHT_RANGE)?,
        ),
        None => (None, None, None),
    };
    Ok(AdmissionBudget {
        per_second: rate.per_second,
        burst: rate.burst,
        max_in_flight: rate.max_in_flight,
        max_queue: max_queue.unwrap_or(ADMISSION_MAX_QUEUE),
        max_wait_seconds: max_wait_seconds.unwrap_or(deadline_seconds),
        max_in_flight_per_resource: per_resource,
    })
}

/// Reads `max_wait_seconds`, which must be at least 1 and at most `deadline_seconds`.
fn parse_max_wait(table: &Obj<'_>, deadline_seconds: u32) -> Result<Option<u32>> {
    let Some(wait) = table.opt_int("max_wait_seconds")? else {
        return Ok(None);
    };
    let path = table.field("max_wait_seconds");
    if wait > i64::from(deadline_seconds) {
        return Err(FieldError::new(
            path,
            format!("must not exceed deadline_seconds ({deadline_seconds})"),
        ));
    }
    in_range(wait, &(1..=deadline_seconds), &path).map(Some)
}
