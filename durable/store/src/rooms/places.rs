//! A place as a poll sees it (heartbeats and leaves, batched, are [`super::heartbeats`] and
//! [`super::leaves`]).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Pace, Place, PlaceState, current_state, position};
use crate::DurableError;
use crate::ids::NamespaceId;

/// The place `id` of the namespace, with its position, or `None` if there is no such place.
pub async fn read(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: Uuid,
) -> Result<Option<Place>, DurableError> {
    Ok(read_many(pg, &[id])
        .await?
        .into_iter()
        .find(|place| place.namespace_id == namespace_id))
}

/// The places `ids` that exist, of whichever namespace, with their positions, in no order.
pub(super) async fn read_many<'c>(
    pg: impl sqlx::PgExecutor<'c>,
    ids: &[Uuid],
) -> Result<Vec<Place>, DurableError> {
    let rows = sqlx::query!(
        r#"SELECT p.id, p.namespace_id AS "namespace_id: NamespaceId", p.room, p.subject,
                  p.state, p.prequeue, p.ord, p.joined_at, p.renewed_at, p.pass_until,
                  r.admitted_through, r.opens_at, r.max_active, r.admit_per_minute, r.next_seq,
                  r.pass_seconds, r.heartbeat_seconds, now() AS "now!"
             FROM room_places p
             JOIN rooms r ON r.namespace_id = p.namespace_id AND r.code = p.room
            WHERE p.id = ANY($1)"#,
        ids
    )
    .fetch_all(pg)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let state = current_state(&row.state, row.pass_until, row.now);
            Place {
                id: row.id,
                namespace_id: row.namespace_id,
                room: row.room,
                subject: row.subject,
                state,
                prequeue: row.prequeue,
                ord: row.ord,
                joined_at: row.joined_at,
                renewed_at: row.renewed_at,
                pass_until: row.pass_until,
                position: position(state, row.ord, row.admitted_through),
                opens_at: row.opens_at,
                pace: Pace {
                    max_active: row.max_active,
                    admit_per_minute: row.admit_per_minute,
                    pass_seconds: row.pass_seconds,
                    heartbeat_seconds: row.heartbeat_seconds,
                },
                crowd: row.next_seq,
                observed_at: row.now,
            }
        })
        .collect())
}

/// A holder asking to change its place (a heartbeat or a leave): `subject` names the place
/// `id` of the namespace, and only the place's own subject may change it.
#[derive(Debug, Clone)]
pub struct HolderRequest {
    pub namespace_id: NamespaceId,
    pub id: Uuid,
    pub subject: String,
}

/// What a holder's request is answered: `None` when the namespace has no such place.
pub type HolderOutcome = Option<PassChange>;

/// A batch of holders' requests as the batch statements take them: ids, namespaces, subjects,
/// in the order of the ids. Two batches that share places then reach them in one order whenever
/// the plan follows the arrays (a nested loop over them, or the id index's own order), so they
/// wait on each other instead of deadlocking; [`retry_on_deadlock`] covers the plans that do
/// not.
pub(super) fn columns(jobs: &[HolderRequest]) -> (Vec<Uuid>, Vec<Uuid>, Vec<String>) {
    let mut sorted: Vec<&HolderRequest> = jobs.iter().collect();
    sorted.sort_by_key(|job| job.id);
    (
        sorted.iter().map(|job| job.id).collect(),
        sorted
            .iter()
            .map(|job| job.namespace_id.as_uuid())
            .collect(),
        sorted.iter().map(|job| job.subject.clone()).collect(),
    )
}

/// Runs a batch's transaction again, up to three times in all, when PostgreSQL broke a deadlock
/// by aborting it (`40P01`: nothing of it committed, so running it again changes nothing twice).
/// Batches of heartbeats or leaves from several gateways may take the same places' row locks in
/// different orders when their plans differ (a sequential scan follows the heap, an index scan
/// the ids); one of two is then aborted after `deadlock_timeout`, and its callers would
/// otherwise get an error for a request that only met another.
pub(super) async fn retry_on_deadlock<T, Fut>(
    mut write: impl FnMut() -> Fut,
) -> Result<T, DurableError>
where
    Fut: std::future::Future<Output = Result<T, DurableError>>,
{
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        match write().await {
            Err(DurableError::Postgres(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("40P01") && attempt < ATTEMPTS =>
            {
                tracing::warn!(attempt, "a batch met a deadlock and runs again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

impl HolderRequest {
    pub fn new(namespace_id: NamespaceId, id: Uuid, subject: &str) -> Self {
        Self {
            namespace_id,
            id,
            subject: subject.to_string(),
        }
    }
}

/// The one answer of a batch of one (tools and tests run a heartbeat or a leave alone).
pub(super) fn only(mut outcomes: Vec<HolderOutcome>) -> Result<HolderOutcome, DurableError> {
    outcomes
        .pop()
        .ok_or_else(|| DurableError::CommitFailed("a batch of one answered nothing".into()))
}

/// What a heartbeat or a leave did.
#[derive(Debug)]
pub enum PassChange {
    /// The pass was extended (heartbeat) or given back (leave): the place as it is now.
    Changed(Place),
    /// A leave of a place that had already ended, or a heartbeat that could not extend the pass
    /// further (`pass_seconds` reached): the place as it is.
    Unchanged(Place),
    /// The place ended before this heartbeat: its state.
    Ended(PlaceState),
    /// The place is another subject's: only its holder may change it.
    NotTheHolders,
}

/// When a place's pass was last signed and when it ends, for the pass's `iat` and `exp`.
pub fn pass_times(place: &Place) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    match place.state {
        PlaceState::Admitted => Some((place.renewed_at?, place.pass_until?)),
        _ => None,
    }
}
