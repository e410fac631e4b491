//! Joining a room: one live place per subject, joins batched into one transaction each.
//!
//! Joins arrive all at once when a room opens, and each needs the room's next arrival number.
//! One transaction per join serialised them on the room's row; here concurrent joins share a
//! transaction ([`crate::batching`]), which takes each of its rooms' rows once and numbers that
//! room's new places in the batch's order. Under the row lock nothing else can add a place to
//! the room, so the live places and spent challenges read there are exact: a repeated subject or
//! challenge is answered without writing, and arrival numbers stay without gaps.
//!
//! A join may carry a key (`Idempotency-Key`): sent again with the same key, by the same subject
//! to the same room, it is answered the place that key made, as it is now, even once that place
//! has ended. In a rush the answer to a join is lost often (a dropped connection, a client's
//! timeout); without a key the retry, arriving after the first place lapsed, would make a second.
//!
//! The clock is read while holding the room's row, so arrival numbers and the pre-queue cut
//! (`clock < opens_at`) agree: every pre-queue place has a smaller number than every place that
//! came after the start, and the draw (which takes the same lock) sees every pre-queue place
//! committed. A batch also takes each of its namespaces' control locks shared, as an enqueue
//! does, so once an operator's pause has answered no join slips in.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{Pace, Place, PlaceState, RoomRefusal, places, position};
use crate::DurableError;
use crate::batching::{BatchWriter, Batcher, GroupCommitConfig};
use crate::ids::NamespaceId;

/// What a join found or made.
#[derive(Debug)]
pub enum Joined {
    /// A new place, at the back of the queue (or in the pre-queue).
    New(Place),
    /// The subject's live place, or the place its join key made, as it is now (a repeated
    /// join changes nothing).
    Existing(Place),
}

/// One person asking for a place. `challenge_id` is the proof-of-work challenge the join
/// solved, when the room asks for one: a new place records it, and a challenge already recorded
/// is refused ([`RoomRefusal::ChallengeUsed`]) with nothing written. A repeated join of a
/// subject with a live place uses up nothing. `join_key` is the caller's key for this join: a
/// join with a key the subject already used in the room is answered that key's place.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub namespace_id: NamespaceId,
    pub room: String,
    pub subject: String,
    pub challenge_id: Option<Uuid>,
    pub join_key: Option<String>,
}

/// What a join is answered: a place, or why the room took none.
pub type JoinOutcome = Result<Joined, RoomRefusal>;

/// Room joins as a batched write.
pub struct Joins;

impl BatchWriter for Joins {
    type Job = JoinRequest;
    type Outcome = JoinOutcome;
    const SPAN: &'static str = "room_joins";

    async fn write(
        &self,
        pool: &PgPool,
        joins: &[JoinRequest],
    ) -> Result<Vec<JoinOutcome>, DurableError> {
        write_batch(pool, joins).await
    }
}

/// The handle gateways submit joins to.
pub type RoomJoiner = Batcher<Joins>;

/// Starts the joins' committers.
pub fn start(pool: PgPool, config: GroupCommitConfig) -> RoomJoiner {
    Batcher::start(pool, config, Joins)
}

/// One join in a transaction of its own (tools and tests; the gateway batches).
pub async fn join(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    subject: &str,
    challenge_id: Option<Uuid>,
) -> Result<JoinOutcome, DurableError> {
    let request = JoinRequest {
        namespace_id,
        room: room.to_string(),
        subject: subject.to_string(),
        challenge_id,
        join_key: None,
    };
    write_batch(pg, &[request])
        .await?
        .pop()
        .ok_or_else(|| DurableError::CommitFailed("a batch of one answered nothing".into()))
}

/// Joins so far in `room` (its arrival counter), for the rate adaptive proof of work follows;
/// `None` when the room does not exist.
pub async fn arrivals(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<Option<i64>, DurableError> {
    Ok(sqlx::query_scalar!(
        "SELECT next_seq FROM rooms WHERE namespace_id = $1 AND code = $2",
        namespace_id as _,
        room
    )
    .fetch_optional(pg)
    .await?)
}

/// A room's row as the batch found it under its lock.
struct Door {
    clock: DateTime<Utc>,
    next_seq: i64,
    admitted_through: i64,
    opens_at: Option<DateTime<Utc>>,
    pace: Pace,
    /// Why it takes no joins now, if it does not.
    closed: Option<RoomRefusal>,
}

/// A place the batch decided to make.
struct NewPlace {
    id: Uuid,
    job: usize,
    seq: i64,
    prequeue: bool,
}

/// How each job of the batch is answered, decided before anything is written.
enum Decision {
    New(usize),
    Existing(Uuid),
    Refused(RoomRefusal),
}

type RoomKey = (NamespaceId, String);

async fn write_batch(
    pool: &PgPool,
    joins: &[JoinRequest],
) -> Result<Vec<JoinOutcome>, DurableError> {
    let mut tx = pool.begin().await?;
    // Lock order, everywhere: the namespaces' control locks, then rooms' rows (sorted), then
    // place rows.
    let namespaces: BTreeSet<NamespaceId> = joins.iter().map(|j| j.namespace_id).collect();
    let mut paused = HashMap::new();
    for namespace_id in namespaces {
        paused.insert(
            namespace_id,
            paused_under_lock(&mut tx, namespace_id).await?,
        );
    }
    let rooms: BTreeSet<RoomKey> = joins
        .iter()
        .map(|j| (j.namespace_id, j.room.clone()))
        .collect();
    let mut doors = BTreeMap::new();
    let mut live: HashMap<(RoomKey, String), Uuid> = HashMap::new();
    let mut keyed: HashMap<(RoomKey, String, String), Uuid> = HashMap::new();
    for key in &rooms {
        let door = lock_room(&mut tx, key).await?;
        if door.is_some() {
            let in_room = || {
                joins
                    .iter()
                    .filter(|j| j.namespace_id == key.0 && j.room == key.1)
            };
            let subjects: Vec<String> = in_room().map(|j| j.subject.clone()).collect();
            for (subject, id) in live_places(&mut tx, key, &subjects).await? {
                live.insert((key.clone(), subject), id);
            }
            let (keyed_subjects, join_keys): (Vec<String>, Vec<String>) = in_room()
                .filter_map(|j| Some((j.subject.clone(), j.join_key.clone()?)))
                .unzip();
            for (subject, join_key, id) in
                keyed_places(&mut tx, key, &keyed_subjects, &join_keys).await?
            {
                keyed.insert((key.clone(), subject, join_key), id);
            }
        }
        doors.insert(key.clone(), door);
    }
    let challenges: Vec<Uuid> = joins.iter().filter_map(|j| j.challenge_id).collect();
    let mut spent: HashSet<Uuid> = spent_challenges(&mut tx, &challenges).await?;

    let mut next_seq: HashMap<RoomKey, i64> = HashMap::new();
    let mut made = Vec::new();
    let mut decisions = Vec::with_capacity(joins.len());
    for (i, join) in joins.iter().enumerate() {
        let key = (join.namespace_id, join.room.clone());
        let decision = match doors.get(&key).and_then(Option::as_ref) {
            None => Decision::Refused(RoomRefusal::NoRoom),
            Some(door) => {
                let by_join_key = join
                    .join_key
                    .as_ref()
                    .and_then(|k| keyed.get(&(key.clone(), join.subject.clone(), k.clone())));
                if let Some(&id) = by_join_key {
                    Decision::Existing(id)
                } else if let Some(&id) = live.get(&(key.clone(), join.subject.clone())) {
                    Decision::Existing(id)
                } else if paused.get(&join.namespace_id).copied().unwrap_or(false) {
                    Decision::Refused(RoomRefusal::Paused)
                } else if let Some(refusal) = &door.closed {
                    Decision::Refused(refusal.clone())
                } else if join.challenge_id.is_some_and(|c| !spent.insert(c)) {
                    Decision::Refused(RoomRefusal::ChallengeUsed)
                } else {
                    let seq = next_seq.entry(key.clone()).or_insert(door.next_seq);
                    *seq += 1;
                    // Time-ordered, like command ids: a drop's places go to the right-hand
                    // pages of the id indexes instead of one random page each.
                    let id = Uuid::now_v7();
                    if let Some(join_key) = &join.join_key {
                        keyed.insert((key.clone(), join.subject.clone(), join_key.clone()), id);
                    }
                    live.insert((key, join.subject.clone()), id);
                    made.push(NewPlace {
                        id,
                        job: i,
                        seq: *seq,
                        prequeue: door.opens_at.is_some_and(|at| door.clock < at),
                    });
                    Decision::New(made.len() - 1)
                }
            }
        };
        decisions.push(decision);
    }
    insert_places(&mut tx, joins, &made, &doors).await?;
    for (key, seq) in &next_seq {
        // Numbered from the row's `next_seq` without gaps: the places added are the difference.
        let numbered_from = doors
            .get(key)
            .and_then(Option::as_ref)
            .map_or(*seq, |door| door.next_seq);
        let added = seq - numbered_from;
        sqlx::query!(
            "UPDATE rooms SET next_seq = $3, waiting = waiting + $4
              WHERE namespace_id = $1 AND code = $2",
            key.0 as _,
            &key.1,
            seq,
            added
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;

    let mut outcomes = Vec::with_capacity(joins.len());
    for (join, decision) in joins.iter().zip(decisions) {
        outcomes.push(match decision {
            Decision::New(m) => {
                let key = (join.namespace_id, join.room.clone());
                let door = doors
                    .get(&key)
                    .and_then(Option::as_ref)
                    .ok_or(RoomRefusal::NoRoom);
                door.map(|door| Joined::New(new_place(join, &made[m], door)))
            }
            // A place made earlier in this batch, or before it: as it is now.
            Decision::Existing(id) => places::read(pool, join.namespace_id, id)
                .await?
                .map(Joined::Existing)
                .ok_or(RoomRefusal::NoRoom),
            Decision::Refused(refusal) => Err(refusal),
        });
    }
    Ok(outcomes)
}

/// Whether the namespace's intake is paused, read under its control lock (shared).
async fn paused_under_lock(
    tx: &mut PgConnection,
    namespace_id: NamespaceId,
) -> Result<bool, DurableError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT coalesce(
               (SELECT paused FROM controls WHERE namespace_id = $1::uuid AND command = ''), false)
               AS "paused!"
             FROM (SELECT pg_advisory_xact_lock_shared(
                          hashtextextended('sluice:control:' || $1::text, 0))) AS locked"#,
        namespace_id as _
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// The room's row, locked for the rest of the batch, with the clock read under the lock;
/// `None` when no such room is declared.
async fn lock_room(tx: &mut PgConnection, key: &RoomKey) -> Result<Option<Door>, DurableError> {
    let row = sqlx::query!(
        r#"SELECT next_seq, admitted_through, opens_at, max_active, admit_per_minute, pass_seconds,
                  heartbeat_seconds,
                  opens_at - make_interval(secs => prequeue_seconds) AS prequeue_opens_at,
                  clock_timestamp() AS "clock!"
             FROM rooms WHERE namespace_id = $1 AND code = $2 AND declared
              FOR UPDATE"#,
        key.0 as _,
        &key.1
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|row| Door {
        clock: row.clock,
        next_seq: row.next_seq,
        admitted_through: row.admitted_through,
        opens_at: row.opens_at,
        pace: Pace {
            max_active: row.max_active,
            admit_per_minute: row.admit_per_minute,
            pass_seconds: row.pass_seconds,
            heartbeat_seconds: row.heartbeat_seconds,
        },
        closed: row
            .prequeue_opens_at
            .filter(|opens| row.clock < *opens)
            .map(|prequeue_opens_at| RoomRefusal::NotOpenYet { prequeue_opens_at }),
    }))
}

/// The live places (waiting or admitted) of these subjects in the room.
async fn live_places(
    tx: &mut PgConnection,
    key: &RoomKey,
    subjects: &[String],
) -> Result<Vec<(String, Uuid)>, DurableError> {
    Ok(sqlx::query!(
        "SELECT subject, id FROM room_places
          WHERE namespace_id = $1 AND room = $2 AND subject = ANY($3)
            AND state IN ('waiting', 'admitted')",
        key.0 as _,
        &key.1,
        subjects
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.subject, row.id))
    .collect())
}

/// The places these subjects made in the room with any of these join keys, whatever their
/// state now (a superset of the asked pairs: each join looks up its own pair). Written as
/// `= ANY` on the index's columns, as [`live_places`] is, so that a plan made while the room was
/// empty still probes the index (a join of the two arrays planned then hashed the whole room,
/// 32 ms a batch at 100,000 places).
async fn keyed_places(
    tx: &mut PgConnection,
    key: &RoomKey,
    subjects: &[String],
    join_keys: &[String],
) -> Result<Vec<(String, String, Uuid)>, DurableError> {
    if subjects.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query!(
        r#"SELECT subject, join_key AS "join_key!", id FROM room_places
            WHERE subject = ANY($3) AND namespace_id = $1 AND room = $2
              AND join_key IS NOT NULL AND join_key = ANY($4)"#,
        key.0 as _,
        &key.1,
        subjects,
        join_keys
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.subject, row.join_key, row.id))
    .collect())
}

/// The challenges of `ids` that already bought a place.
async fn spent_challenges(
    tx: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashSet<Uuid>, DurableError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    Ok(sqlx::query_scalar!(
        r#"SELECT challenge_id AS "challenge_id!" FROM room_places WHERE challenge_id = ANY($1)"#,
        ids
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect())
}

/// Every place the batch made, in one statement.
async fn insert_places(
    tx: &mut PgConnection,
    joins: &[JoinRequest],
    made: &[NewPlace],
    doors: &BTreeMap<RoomKey, Option<Door>>,
) -> Result<(), DurableError> {
    if made.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(made.len());
    let mut namespaces = Vec::with_capacity(made.len());
    let mut rooms = Vec::with_capacity(made.len());
    let mut subjects = Vec::with_capacity(made.len());
    let mut seqs = Vec::with_capacity(made.len());
    let mut prequeues = Vec::with_capacity(made.len());
    let mut clocks = Vec::with_capacity(made.len());
    let mut challenges: Vec<Option<Uuid>> = Vec::with_capacity(made.len());
    let mut join_keys: Vec<Option<String>> = Vec::with_capacity(made.len());
    for place in made {
        let join = &joins[place.job];
        let clock = doors
            .get(&(join.namespace_id, join.room.clone()))
            .and_then(Option::as_ref)
            .map(|door| door.clock)
            .ok_or_else(|| DurableError::CommitFailed("a place without its room".into()))?;
        ids.push(place.id);
        namespaces.push(join.namespace_id.as_uuid());
        rooms.push(join.room.clone());
        subjects.push(join.subject.clone());
        seqs.push(place.seq);
        prequeues.push(place.prequeue);
        clocks.push(clock);
        challenges.push(join.challenge_id);
        join_keys.push(join.join_key.clone());
    }
    sqlx::query!(
        "INSERT INTO room_places
                (id, namespace_id, room, subject, seq, prequeue, ord, state, joined_at, challenge_id,
                 join_key)
         SELECT id, namespace_id, room, subject, seq, prequeue,
                CASE WHEN prequeue THEN NULL ELSE seq END, 'waiting', joined_at, challenge_id,
                join_key
           FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::bigint[],
                       $6::boolean[], $7::timestamptz[], $8::uuid[], $9::text[])
                AS made (id, namespace_id, room, subject, seq, prequeue, joined_at, challenge_id,
                         join_key)",
        &ids,
        &namespaces,
        &rooms,
        &subjects,
        &seqs,
        &prequeues,
        &clocks,
        &challenges as &[Option<Uuid>],
        &join_keys as &[Option<String>]
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A place the batch made, as a poll would read it right after the commit.
fn new_place(join: &JoinRequest, made: &NewPlace, door: &Door) -> Place {
    let ord = (!made.prequeue).then_some(made.seq);
    Place {
        id: made.id,
        namespace_id: join.namespace_id,
        room: join.room.clone(),
        subject: join.subject.clone(),
        state: PlaceState::Waiting,
        prequeue: made.prequeue,
        ord,
        joined_at: door.clock,
        renewed_at: None,
        pass_until: None,
        position: position(PlaceState::Waiting, ord, door.admitted_through),
        opens_at: door.opens_at,
        pace: door.pace,
        // Joins so far, this one included (at most the room's `next_seq` once committed).
        crowd: made.seq,
        observed_at: door.clock,
    }
}
