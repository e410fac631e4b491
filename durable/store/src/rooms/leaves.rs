//! Leaves at the size of a drop: the leaves waiting together are one transaction.
//!
//! When a drop's admitted people finish, tens of thousands leave within a minute. One
//! transaction each (its statement, a read of the place, a commit) held a pooled connection for
//! each, and at 1,000 leaves a second on a 2-core machine the leaves, the polls that read
//! PostgreSQL and the heartbeats queued for the process's connections: leaves took 4 to 5 s at
//! the median. Here concurrent leaves share a transaction ([`crate::batching`]): one `UPDATE`
//! over their places and one read of them, as heartbeats do ([`super::heartbeats`]).
//!
//! A leave still changes only its place's row, never the room's: the ticker counts it into the
//! room's figures at its next step (`leave_counted`), and gateways answering polls from memory
//! learn of it by `ended_at` ([`super::board`]). A waiting place leaves at once; an admitted one
//! only while its pass is live (one that ran out meanwhile expired, which the ticker records).
//! The places are found by their ids alone, and locked in the order [`super`] states for every
//! batch of places, heartbeats' included.

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;
use uuid::Uuid;

use super::places::{
    HolderOutcome, HolderRequest, PassChange, columns, only, read_many, retry_on_deadlock,
};
use crate::DurableError;
use crate::batching::{BatchWriter, Batcher, GroupCommitConfig};
use crate::ids::NamespaceId;

/// The holder giving its place back.
pub type LeaveRequest = HolderRequest;

/// What a leave is answered: `None` when the namespace has no such place.
pub type LeaveOutcome = HolderOutcome;

/// Leaves as a batched write.
pub struct Leaves;

impl BatchWriter for Leaves {
    type Job = LeaveRequest;
    type Outcome = LeaveOutcome;
    const SPAN: &'static str = "place_leaves";

    async fn write(
        &self,
        pool: &PgPool,
        jobs: &[LeaveRequest],
    ) -> Result<Vec<LeaveOutcome>, DurableError> {
        write_batch(pool, jobs).await
    }
}

/// The handle gateways submit leaves to.
pub type PlaceLeaves = Batcher<Leaves>;

/// Starts the leaves' committers.
pub fn start(pool: PgPool, config: GroupCommitConfig) -> PlaceLeaves {
    Batcher::start(pool, config, Leaves)
}

/// Gives the place `id` of `subject` back, in a transaction of its own (tools and tests; the
/// gateway batches): a waiting one leaves the queue at once; an admitted one ends, and its slot
/// is free once its last pass can no longer be accepted (its `exp` plus the grace, see
/// [`super`]). A place that had already ended is answered as it is, another subject's is
/// [`PassChange::NotTheHolders`], and `None` means there is no such place.
pub async fn leave(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: Uuid,
    subject: &str,
) -> Result<LeaveOutcome, DurableError> {
    only(write_batch(pg, &[HolderRequest::new(namespace_id, id, subject)]).await?)
}

async fn write_batch(
    pool: &PgPool,
    jobs: &[LeaveRequest],
) -> Result<Vec<LeaveOutcome>, DurableError> {
    retry_on_deadlock(|| write_batch_once(pool, jobs)).await
}

async fn write_batch_once(
    pool: &PgPool,
    jobs: &[LeaveRequest],
) -> Result<Vec<LeaveOutcome>, DurableError> {
    let (ids, namespaces, subjects) = columns(jobs);
    let mut tx = pool.begin().await?;
    let left: HashSet<Uuid> = sqlx::query_scalar!(
        r#"WITH asked AS (
                SELECT DISTINCT a.id, a.namespace_id, a.subject
                  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS a (id, namespace_id, subject))
         UPDATE room_places p
            SET state = 'left', ended_at = clock_timestamp(), leave_counted = false
           FROM asked a
          WHERE p.id = ANY($1) AND p.id = a.id AND p.namespace_id = a.namespace_id
            AND p.subject = a.subject
            -- Waiting, or admitted with a live pass, said so that no partial index's predicate
            -- follows from it: the rows are found by id alone.
            AND CASE p.state WHEN 'waiting' THEN true
                             WHEN 'admitted' THEN p.pass_until > now()
                             ELSE false END
        RETURNING p.id"#,
        &ids,
        &namespaces,
        &subjects
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    let places: HashMap<Uuid, _> = read_many(&mut *tx, &ids)
        .await?
        .into_iter()
        .map(|place| (place.id, place))
        .collect();
    tx.commit().await?;

    // A place left twice in one batch changed once: the second leave finds it ended.
    let mut answered_left = HashSet::new();
    Ok(jobs
        .iter()
        .map(|job| {
            let place = places
                .get(&job.id)
                .filter(|place| place.namespace_id == job.namespace_id)?;
            if place.subject != job.subject {
                return Some(PassChange::NotTheHolders);
            }
            Some(if left.contains(&job.id) && answered_left.insert(job.id) {
                PassChange::Changed(place.clone())
            } else {
                PassChange::Unchanged(place.clone())
            })
        })
        .collect())
}
