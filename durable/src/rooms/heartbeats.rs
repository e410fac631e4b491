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
//! plus the grace has passed, and both lock the row). The batch locks its places in id order
//! before it changes them, so two batches holding heartbeats of the same places never wait on
//! each other in a cycle.
//!
//! The places are found by their ids alone (`id = ANY`), with nothing else an index could
//! serve: a drop's room grows from nothing to 100,000 places within a minute, faster than
//! statistics follow, and a plan that believed few places were admitted scanned every admitted
//! place (the partial index of live passes) for each batch, 1.4 to 1.7 s a batch with 20,000
//! admitted, until heartbeats arrived after the passes they were to extend had lapsed.

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;
use uuid::Uuid;

use super::PlaceState;
use super::places::{PassChange, read_many};
use crate::DurableError;
use crate::batching::{BatchWriter, Batcher, GroupCommitConfig};
use crate::ids::NamespaceId;

/// The holder `subject` asking to extend the pass of its place `id`.
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub namespace_id: NamespaceId,
    pub id: Uuid,
    pub subject: String,
}

/// What a heartbeat is answered: `None` when the namespace has no such place of that subject.
pub type HeartbeatOutcome = Option<PassChange>;

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
    let request = HeartbeatRequest {
        namespace_id,
        id,
        subject: subject.to_string(),
    };
    write_batch(pg, &[request])
        .await?
        .pop()
        .ok_or_else(|| DurableError::CommitFailed("a batch of one answered nothing".into()))
}

async fn write_batch(
    pool: &PgPool,
    jobs: &[HeartbeatRequest],
) -> Result<Vec<HeartbeatOutcome>, DurableError> {
    let ids: Vec<Uuid> = jobs.iter().map(|job| job.id).collect();
    let namespaces: Vec<Uuid> = jobs.iter().map(|job| job.namespace_id.as_uuid()).collect();
    let subjects: Vec<String> = jobs.iter().map(|job| job.subject.clone()).collect();
    let mut tx = pool.begin().await?;
    let extended: HashSet<Uuid> = sqlx::query_scalar!(
        r#"WITH asked AS (
                SELECT DISTINCT a.id, a.namespace_id, a.subject
                  FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS a (id, namespace_id, subject)),
              -- The rows as locked (their newest versions); every condition is on these
              -- columns, none on the table's, so no index but the primary key serves it.
              locked AS (
                SELECT p.id, p.namespace_id, p.room, p.subject, p.state, p.admitted_at,
                       p.pass_until
                  FROM room_places p
                 WHERE p.id = ANY($1)
                 ORDER BY p.id
                   FOR UPDATE OF p),
              extended AS (
                SELECT l.id,
                       least(date_trunc('second', l.admitted_at)
                                 + make_interval(secs => r.pass_seconds),
                             date_trunc('second', now())
                                 + make_interval(secs => r.heartbeat_seconds)) AS until
                  FROM locked l
                  JOIN asked a ON a.id = l.id AND a.namespace_id = l.namespace_id
                              AND a.subject = l.subject
                  JOIN rooms r ON r.namespace_id = l.namespace_id AND r.code = l.room
                 WHERE l.state = 'admitted' AND l.pass_until > now()
                   AND r.heartbeat_seconds IS NOT NULL)
         UPDATE room_places p
            SET renewed_at = date_trunc('second', now()), pass_until = e.until
           FROM extended e
          WHERE p.id = ANY($1) AND p.id = e.id AND e.until > p.pass_until
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
