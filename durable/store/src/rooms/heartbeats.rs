//! Heartbeats at the size of a drop: the heartbeats waiting together are one statement.
//!
//! An admitted holder heartbeats every third of `heartbeat_seconds`, so 10,000 people admitted
//! in a room with a 5 s heartbeat send 6,000 a second. One statement each kept PostgreSQL seconds
//! behind at that rate, and passes lapsed while their heartbeats queued. Here concurrent
//! heartbeats share a transaction ([`crate::batching`]): one `UPDATE` over their places and one
//! read of them. A heartbeat still touches its place's row only, never the room's.
//!
//! A heartbeat extends `pass_until` only while the pass is live by the database's clock, so it
//! never revives a place the ticker has freed (the ticker frees a place only once `pass_until`
//! plus the grace has passed; an `UPDATE` re-checks its conditions on a row another transaction
//! changed meanwhile, so a heartbeat that waited for the ticker's lock sees the place ended).
//!
//! A heartbeat writes no index: nothing indexes `renewed_at` or `pass_until` (admitted places
//! are indexed without it, given-back ones by `holds_until`, which only a leave sets), and the
//! table leaves room on its pages, so PostgreSQL updates the row in place (a heap-only tuple)
//! instead of adding an entry to each of the table's ten indexes, and there is no `SELECT … FOR
//! UPDATE` before it (a second write per row): 4.1 times the passes moved a second of the
//! statement it replaced (`loadtest/heartbeats.sh`). The batch's locks follow the order the
//! module's parent states for every batch of places ([`super`]).
//!
//! The places are found by their ids alone (`id = ANY`), with nothing else an index could
//! serve (the condition on the state is written so that no partial index's predicate follows
//! from it): a drop's room grows from nothing to 100,000 places within a minute, faster than
//! statistics follow, and a plan that believed few places were admitted scanned every admitted
//! place (the partial index of live passes) for each batch, 1.4 to 1.7 s a batch with 20,000
//! admitted, until heartbeats arrived after the passes they were to extend had lapsed.

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;
use uuid::Uuid;

use super::PlaceState;
use super::places::{
    HolderOutcome, HolderRequest, PassChange, columns, only, read_many, retry_on_deadlock,
};
use crate::DurableError;
use crate::batching::{BatchWriter, Batcher, GroupCommitConfig};
use crate::ids::NamespaceId;

/// The holder asking to extend the pass of its place.
pub type HeartbeatRequest = HolderRequest;

/// What a heartbeat is answered: `None` when the namespace has no such place of that subject.
pub type HeartbeatOutcome = HolderOutcome;

/// Pass heartbeats as a batched write.
pub struct Heartbeats;

impl BatchWriter for Heartbeats {
    type Job = HeartbeatRequest;
    type Outcome = HeartbeatOutcome;
    const SPAN: &'static str = "pass_heartbeats";

    async fn write(
        &self,
        pool: &PgPool,
        jobs: &[HeartbeatRequest],
    ) -> Result<Vec<HeartbeatOutcome>, DurableError> {
        write_batch(pool, jobs).await
    }
}

/// The handle gateways submit heartbeats to.
pub type PassHeartbeats = Batcher<Heartbeats>;

/// Starts the heartbeats' committers.
pub fn start(pool: PgPool, config: GroupCommitConfig) -> PassHeartbeats {
    Batcher::start(pool, config, Heartbeats)
}

/// One heartbeat in a transaction of its own (tools and tests; the gateway batches): extends
/// the admitted place `id` of `subject` so that `pass_until` becomes the earlier of the admission
/// plus `pass_seconds` and now plus `heartbeat_seconds` (whole seconds).
pub async fn heartbeat(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: Uuid,
    subject: &str,
) -> Result<HeartbeatOutcome, DurableError> {
    only(write_batch(pg, &[HolderRequest::new(namespace_id, id, subject)]).await?)
}

async fn write_batch(
    pool: &PgPool,
    jobs: &[HeartbeatRequest],
) -> Result<Vec<HeartbeatOutcome>, DurableError> {
    retry_on_deadlock(|| write_batch_once(pool, jobs)).await
}

async fn write_batch_once(
    pool: &PgPool,
    jobs: &[HeartbeatRequest],
) -> Result<Vec<HeartbeatOutcome>, DurableError> {
    let (ids, namespaces, subjects) = columns(jobs);
    let mut tx = pool.begin().await?;
    let extended: HashSet<Uuid> = sqlx::query_scalar!(
        r#"WITH asked AS (
                SELECT DISTINCT a.id, a.namespace_id, a.subject
                  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS a (id, namespace_id, subject))
         UPDATE room_places p
            SET renewed_at = date_trunc('second', now()),
                pass_until = least(date_trunc('second', p.admitted_at)
                                       + make_interval(secs => r.pass_seconds),
                                   date_trunc('second', now())
                                       + make_interval(secs => r.heartbeat_seconds))
           FROM asked a, rooms r
          WHERE p.id = ANY($1) AND p.id = a.id AND p.namespace_id = a.namespace_id
            AND p.subject = a.subject
            AND r.namespace_id = p.namespace_id AND r.code = p.room
            AND r.heartbeat_seconds IS NOT NULL
            -- A live pass, said so that no partial index's predicate follows from it: the
            -- rows are found by id alone (see the module's notes).
            AND CASE p.state WHEN 'admitted' THEN p.pass_until > now() ELSE false END
            AND least(date_trunc('second', p.admitted_at) + make_interval(secs => r.pass_seconds),
                      date_trunc('second', now()) + make_interval(secs => r.heartbeat_seconds))
                > p.pass_until
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

    Ok(jobs
        .iter()
        .map(|job| {
            let place = places.get(&job.id).filter(|place| {
                place.namespace_id == job.namespace_id && place.subject == job.subject
            })?;
            Some(match (extended.contains(&job.id), place.state) {
                (true, _) => PassChange::Changed(place.clone()),
                (false, PlaceState::Admitted) => PassChange::Unchanged(place.clone()),
                (false, state) => PassChange::Ended(state),
            })
        })
        .collect())
}
