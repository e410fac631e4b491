//! The waiting room's invariants. Each is a pure function of evidence that does not share the
//! room's bookkeeping (its counters are never read): what the people were answered and what
//! the origin witness verified with the published keys, PostgreSQL's place rows, and the room's
//! published seed and pre-queue. Pure, so a test can hand each check fabricated evidence of a
//! violation and see it fail.
//!
//! Times are Unix microseconds. A pass's `iat` and `exp` are whole seconds of the database's
//! clock, like the rows' times; the people's own instants (a join sent or answered) are only
//! compared with each other.

use std::collections::{BTreeMap, HashMap, HashSet};

use sha2::{Digest, Sha256};
use sluice_durable::ids::NamespaceId;
use sqlx::PgPool;
use uuid::Uuid;

use crate::bench_stack::BoxError;
use crate::report::Check;

const SECOND_US: i64 = 1_000_000;

/// How long after a pass's `exp` its place still holds its slot (`sluice_store::rooms::
/// PASS_GRACE`, restated: the witness reasons from the documented contract, not the code).
pub const GRACE_US: i64 = SECOND_US;

/// How long the room may stay below capacity with people waiting once a slot is free: the
/// ticker runs every 200 ms; the rest is slack for a loaded machine.
pub const TICK_ALLOWANCE_US: i64 = SECOND_US;

/// How a person's place ended, as the person acted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Gave the pass back after the visit (`POST /v1/passes:leave`).
    Left,
    /// Gone at admission: never heartbeated, never left.
    Abandoned,
    /// Heartbeated through the visit, then let the pass run out without leaving.
    RanOut,
    /// Never admitted (refused, or out of patience).
    NotAdmitted,
}

/// One person's place as the person and the origin witness saw it.
#[derive(Debug, Clone)]
pub struct Witnessed {
    /// The `join_id` of the `202`.
    pub join_id: Uuid,
    pub subject: String,
    /// What the join answered.
    pub prequeue: bool,
    /// When the join that was answered `202` was sent and answered (this machine's clock).
    pub join_sent_us: i64,
    pub join_answered_us: i64,
    /// The `jti` of every pass the witness accepted for this person.
    pub jtis: HashSet<Uuid>,
    /// The first accepted pass's `iat` and the latest accepted `exp` (Unix seconds).
    pub first_iat: Option<i64>,
    pub last_exp: Option<i64>,
    pub exit: Exit,
}

/// A row of `room_places`, as read at the end.
#[derive(Debug, Clone)]
pub struct PlaceRow {
    pub id: Uuid,
    pub subject: String,
    pub seq: i64,
    pub prequeue: bool,
    pub state: String,
    pub joined_at_us: i64,
    pub admitted_at_us: Option<i64>,
    /// The `exp` (Unix seconds) of the newest pass PostgreSQL committed for the place, seen by
    /// its holder or not: its slot is taken until then.
    pub pass_until: Option<i64>,
}

/// The room's fair start as published: the commitment read before the start, the seed read
/// after it, and the pre-queue's join ids.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// `seed_sha256` and `seed` of `GET /v1/rooms/{room}` before the start.
    pub commitment: Option<String>,
    pub seed_before: Option<String>,
    /// `seed` after the draw (hex).
    pub seed: Option<String>,
    /// `GET /v1/rooms/{room}/prequeue` after the draw.
    pub prequeue_ids: Vec<Uuid>,
    pub complete: bool,
}

/// Every place of the room, read at the end.
pub async fn rows(
    pg: &PgPool,
    namespace: NamespaceId,
    room: &str,
) -> Result<Vec<PlaceRow>, BoxError> {
    type Row = (
        Uuid,
        String,
        i64,
        bool,
        String,
        i64,
        Option<i64>,
        Option<i64>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, subject, seq, prequeue, state,
                (extract(epoch FROM joined_at) * 1000000)::int8,
                (extract(epoch FROM admitted_at) * 1000000)::int8,
                extract(epoch FROM pass_until)::int8
           FROM room_places WHERE namespace_id = $1 AND room = $2",
    )
    .bind(namespace)
    .bind(room)
    .fetch_all(pg)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, subject, seq, prequeue, state, joined_at_us, admitted_at_us, pass_until)| {
                PlaceRow {
                    id,
                    subject,
                    seq,
                    prequeue,
                    state,
                    joined_at_us,
                    admitted_at_us,
                    pass_until,
                }
            },
        )
        .collect())
}

/// The most places at once whose newest accepted pass an origin would still accept: a pass is
/// accepted through its `exp` second by a verifier comparing whole seconds, so a place is live
/// over [first `iat`, latest `exp` + 1 s).
pub fn peak_live(witnessed: &[Witnessed]) -> u64 {
    let mut events: Vec<(i64, i64)> = witnessed
        .iter()
        .filter_map(|w| Some((w.first_iat?, w.last_exp?)))
        .flat_map(|(iat, exp)| [(iat * SECOND_US, 1), ((exp + 1) * SECOND_US, -1)])
        .collect();
    // Half-open intervals: at one instant, ends before starts.
    events.sort_unstable();
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, step) in events {
        live += step;
        peak = peak.max(live);
    }
    peak.max(0) as u64
}

/// Invariant 1, capacity: the witness's live places never exceed `max_active`.
pub fn capacity(witnessed: &[Witnessed], max_active: u32) -> Check {
    let peak = peak_live(witnessed);
    Check {
        name: "passes an origin accepts within max_active at every instant (origin witness)".into(),
        holds: peak <= u64::from(max_active),
        detail: format!(
            "at most {peak} places live at once of max_active {max_active} ({} passes' places)",
            witnessed.iter().filter(|w| w.last_exp.is_some()).count()
        ),
    }
}

/// Invariant 2, nothing lost: every place answered `202` has its row, was admitted (PostgreSQL's
/// `admitted_at`, and a pass of that place the witness verified), no pass of another place was
/// handed to its holder, and no row exists that no person was answered; no subject holds two
/// places.
pub fn nothing_lost(witnessed: &[Witnessed], rows: &[PlaceRow]) -> Vec<Check> {
    let by_id: HashMap<Uuid, &PlaceRow> = rows.iter().map(|r| (r.id, r)).collect();
    let joined: HashSet<Uuid> = witnessed.iter().map(|w| w.join_id).collect();
    let (mut no_row, mut not_admitted, mut no_pass, mut foreign) = (0, 0, 0, 0);
    for w in witnessed {
        match by_id.get(&w.join_id) {
            None => no_row += 1,
            Some(row) if row.admitted_at_us.is_none() => not_admitted += 1,
            Some(_) => {}
        }
        if !w.jtis.contains(&w.join_id) {
            no_pass += 1;
        }
        if w.jtis.iter().any(|jti| *jti != w.join_id) {
            foreign += 1;
        }
    }
    let unanswered = rows.iter().filter(|r| !joined.contains(&r.id)).count();
    let mut per_subject: HashMap<&str, u64> = HashMap::new();
    for row in rows {
        *per_subject.entry(row.subject.as_str()).or_default() += 1;
    }
    let twice = per_subject.values().filter(|n| **n > 1).count();
    let witnessed_subjects: HashSet<&str> = witnessed.iter().map(|w| w.subject.as_str()).collect();
    let joined_twice = witnessed.len() - witnessed_subjects.len();
    vec![
        Check {
            name: "every place taken was admitted exactly once (PostgreSQL rows, origin witness)"
                .into(),
            holds: no_row + not_admitted + no_pass + foreign + unanswered == 0,
            detail: format!(
                "{} places taken: {no_row} without a row, {not_admitted} never admitted, \
                 {no_pass} without a verified pass, {foreign} handed another place's pass; \
                 {unanswered} rows no person was answered",
                witnessed.len()
            ),
        },
        Check {
            name: "no subject holds two places".into(),
            holds: twice == 0 && joined_twice == 0,
            detail: format!(
                "{twice} subjects with more than one row, {joined_twice} subjects answered 202 \
                 twice"
            ),
        },
    ]
}

/// The documented order of the pre-queue: ascending SHA-256(seed ‖ join id as lowercase
/// hyphenated text), ties (never seen) by the id.
pub fn fair_order(seed: &[u8], ids: &[Uuid]) -> Vec<Uuid> {
    let mut keyed: Vec<([u8; 32], String, Uuid)> = ids
        .iter()
        .map(|id| {
            let text = id.hyphenated().to_string();
            let mut hash = Sha256::new();
            hash.update(seed);
            hash.update(text.as_bytes());
            (hash.finalize().into(), text, *id)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, _, id)| id).collect()
}

/// Places in `order` whose admission came strictly before that of one ahead of them, and those
/// never admitted.
fn out_of_order(order: &[Uuid], admitted: &HashMap<Uuid, Option<i64>>) -> (usize, usize, i64) {
    let (mut overtook, mut never, mut latest) = (0, 0, i64::MIN);
    for id in order {
        match admitted.get(id).copied().flatten() {
            Some(at) if at < latest => overtook += 1,
            Some(at) => latest = at,
            None => never += 1,
        }
    }
    (overtook, never, latest)
}

/// Invariant 3, fair start: the seed revealed is the one committed to before the start; the published
/// pre-queue is exactly the places answered `prequeue: true`; the pre-queue was admitted in
/// the order recomputed here from the seed and the ids; every later arrival after every
/// pre-queue place, in arrival order (the rows' `seq`, which must agree with the people's own
/// view: a join answered before another was sent arrived first).
pub fn fair_start(published: &Published, witnessed: &[Witnessed], rows: &[PlaceRow]) -> Check {
    let mut wrong: Vec<String> = Vec::new();
    if published.seed_before.is_some() {
        wrong.push("the seed was public before the start".into());
    }
    let seed = published.seed.as_deref().and_then(|s| hex::decode(s).ok());
    match (&seed, &published.commitment) {
        (Some(seed), Some(commitment)) => {
            if hex::encode(Sha256::digest(seed)) != *commitment {
                wrong.push("the revealed seed's SHA-256 is not the commitment".into());
            }
        }
        _ => wrong.push("no commitment before the start, or no seed after it".into()),
    }
    if !published.complete {
        wrong.push("the published pre-queue is not complete".into());
    }
    let published_set: HashSet<Uuid> = published.prequeue_ids.iter().copied().collect();
    let answered: HashSet<Uuid> = witnessed
        .iter()
        .filter(|w| w.prequeue)
        .map(|w| w.join_id)
        .collect();
    if published_set != answered || published_set.len() != published.prequeue_ids.len() {
        wrong.push(format!(
            "{} ids published, {} places answered prequeue",
            published.prequeue_ids.len(),
            answered.len()
        ));
    }
    let admitted: HashMap<Uuid, Option<i64>> =
        rows.iter().map(|r| (r.id, r.admitted_at_us)).collect();
    let order = fair_order(seed.as_deref().unwrap_or_default(), &published.prequeue_ids);
    let (overtook, never, last_prequeue) = out_of_order(&order, &admitted);
    if overtook + never > 0 {
        wrong.push(format!(
            "pre-queue: {overtook} admitted before a place the seed puts ahead, {never} never \
             admitted"
        ));
    }
    let mut later: Vec<&PlaceRow> = rows.iter().filter(|r| !r.prequeue).collect();
    later.sort_by_key(|r| r.seq);
    let ahead = later
        .iter()
        .filter(|r| r.admitted_at_us.is_some_and(|at| at < last_prequeue))
        .count();
    let later_order: Vec<Uuid> = later.iter().map(|r| r.id).collect();
    let (later_overtook, later_never, _) = out_of_order(&later_order, &admitted);
    if ahead + later_overtook + later_never > 0 {
        wrong.push(format!(
            "after the start: {ahead} admitted before the last of the pre-queue, \
             {later_overtook} before an earlier arrival, {later_never} never admitted"
        ));
    }
    let misordered = arrivals_against_seq(witnessed, rows);
    if misordered > 0 {
        wrong.push(format!(
            "{misordered} joins answered before another was sent but given a later seq"
        ));
    }
    Check {
        name: "fair start: the pre-queue in the revealed seed's order, later arrivals after it \
               in arrival order"
            .into(),
        holds: wrong.is_empty(),
        detail: if wrong.is_empty() {
            format!(
                "seed matches its commitment; {} pre-queue places admitted in the recomputed \
                 order, then {} later arrivals in arrival order",
                order.len(),
                later.len()
            )
        } else {
            wrong.join("; ")
        },
    }
}

/// A position a waiting place was told, with when its poll was sent and answered (Unix µs).
#[derive(Debug, Clone, Copy)]
pub struct Told {
    pub join_id: Uuid,
    pub sent_us: i64,
    pub answered_us: i64,
    pub position: u64,
}

/// How old the admission front a position was told from may be, at most (the gateway reads it
/// again after 200 ms, and answers from the last one for up to 5 s while a read is slow).
pub const FRONT_AGE_US: i64 = 5 * SECOND_US;

/// Invariant 5, the pre-queue's positions are its ranks: a pre-queue place told a position after
/// the draw was told its rank in the order recomputed from the revealed seed less the places
/// admitted ahead of it, as PostgreSQL's admission instants bracket them (admission goes in that
/// order, so those ahead are the first admitted): at least the rank less those admitted by the
/// answer, at most the rank less those admitted [`FRONT_AGE_US`] before the poll was sent.
pub fn prequeue_positions(published: &Published, told: &[Told], rows: &[PlaceRow]) -> Check {
    let seed = published.seed.as_deref().and_then(|s| hex::decode(s).ok());
    let order = fair_order(seed.as_deref().unwrap_or_default(), &published.prequeue_ids);
    let rank: HashMap<Uuid, u64> = order
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, i as u64))
        .collect();
    let mut admitted: Vec<i64> = rows
        .iter()
        .filter(|r| r.prequeue)
        .filter_map(|r| r.admitted_at_us)
        .collect();
    admitted.sort_unstable();
    let admitted_by = |at: i64| admitted.partition_point(|t| *t <= at) as u64;
    let (mut judged, mut wrong, mut example) = (0u64, 0u64, None);
    for t in told {
        let Some(&r) = rank.get(&t.join_id) else {
            continue;
        };
        judged += 1;
        let low = r.saturating_sub(admitted_by(t.answered_us));
        let high = r.saturating_sub(admitted_by(t.sent_us - FRONT_AGE_US));
        if t.position < low || t.position > high {
            wrong += 1;
            example.get_or_insert(format!(
                "rank {r} told {} (between {low} and {high} by the admissions)",
                t.position
            ));
        }
    }
    Check {
        name: "pre-queue positions told are the revealed seed's ranks, less those admitted ahead"
            .into(),
        holds: wrong == 0,
        detail: match example {
            None => format!("{judged} positions of pre-queue places judged, all their ranks"),
            Some(example) => format!("{wrong} of {judged} positions off their rank: {example}"),
        },
    }
}

/// Joins after the start whose `seq` contradicts what their people saw: one answered before
/// another was even sent must have arrived first.
fn arrivals_against_seq(witnessed: &[Witnessed], rows: &[PlaceRow]) -> usize {
    let seq: HashMap<Uuid, i64> = rows.iter().map(|r| (r.id, r.seq)).collect();
    let mut later: Vec<(&Witnessed, i64)> = witnessed
        .iter()
        .filter(|w| !w.prequeue)
        .filter_map(|w| Some((w, *seq.get(&w.join_id)?)))
        .collect();
    let mut by_answer = later.clone();
    by_answer.sort_by_key(|(w, _)| w.join_answered_us);
    later.sort_by_key(|(w, _)| w.join_sent_us);
    let (mut next, mut highest, mut misordered) = (0, i64::MIN, 0);
    for (w, s) in &later {
        while next < by_answer.len() && by_answer[next].0.join_answered_us < w.join_sent_us {
            highest = highest.max(by_answer[next].1);
            next += 1;
        }
        if highest > *s {
            misordered += 1;
        }
    }
    misordered
}

/// Invariant 4, abandonment returns capacity. For each pass that ended without a leave (abandoned at
/// admission, or run out after a visit), from its `exp` plus the grace second: how long the
/// room then stayed below `max_active` live places with someone waiting. Live places are
/// [admission (PostgreSQL's `admitted_at`), the witness's latest `exp` + 1 s); a person waits
/// from the later of its join and `opens_at` until its admission. The delay, counted from the
/// `exp`, is reported; with `admit_per_minute` unset it must stay within the grace and
/// [`TICK_ALLOWANCE_US`] (with a rate, the rate may rightly keep the room below capacity).
pub fn freeing(
    witnessed: &[Witnessed],
    rows: &[PlaceRow],
    max_active: u32,
    opens_at_us: i64,
    rate_limited: bool,
) -> (Check, Vec<i64>) {
    let admitted_at: HashMap<Uuid, i64> = rows
        .iter()
        .filter_map(|r| Some((r.id, r.admitted_at_us?)))
        .collect();
    let committed_exp: HashMap<Uuid, i64> = rows
        .iter()
        .filter_map(|r| Some((r.id, r.pass_until?)))
        .collect();
    // A pass is accepted through the later of the newest `exp` its holder saw and the newest
    // PostgreSQL committed (a heartbeat whose answer came too late still extended it).
    let last_exp = |w: &Witnessed| {
        let committed = committed_exp.get(&w.join_id).copied();
        w.last_exp.max(committed).filter(|_| w.last_exp.is_some())
    };
    // (time, live step, waiting step)
    let mut events: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut add = |at: i64, live: i64, waiting: i64| {
        let e = events.entry(at).or_default();
        e.0 += live;
        e.1 += waiting;
    };
    let mut seen = HashSet::new();
    for w in witnessed {
        let (Some(iat), Some(exp)) = (w.first_iat, last_exp(w)) else {
            continue;
        };
        seen.insert(w.join_id);
        let from = admitted_at
            .get(&w.join_id)
            .copied()
            .unwrap_or(iat * SECOND_US);
        add(from, 1, 0);
        add((exp + 1) * SECOND_US, -1, 0);
    }
    // An admission its holder never saw takes its slot all the same, until its pass's `exp`.
    for row in rows.iter().filter(|r| !seen.contains(&r.id)) {
        if let (Some(from), Some(exp)) = (row.admitted_at_us, row.pass_until) {
            add(from, 1, 0);
            add((exp + 1) * SECOND_US, -1, 0);
        }
    }
    for row in rows {
        let from = row.joined_at_us.max(opens_at_us);
        match row.admitted_at_us {
            Some(at) if at <= from => {}
            Some(at) => {
                add(from, 0, 1);
                add(at, 0, -1);
            }
            None => add(from, 0, 1),
        }
    }
    let timeline: Vec<(i64, i64, i64)> = events
        .iter()
        .scan((0i64, 0i64), |state, (at, (live, waiting))| {
            state.0 += live;
            state.1 += waiting;
            Some((*at, state.0, state.1))
        })
        .collect();
    let below = |live: i64, waiting: i64| live < i64::from(max_active) && waiting > 0;
    let mut delays = Vec::new();
    for w in witnessed
        .iter()
        .filter(|w| matches!(w.exit, Exit::Abandoned | Exit::RanOut))
    {
        let Some(exp) = last_exp(w) else { continue };
        let freed = (exp + 1) * SECOND_US;
        // The state once everything at the freeing instant happened.
        let start = timeline.partition_point(|(at, _, _)| *at <= freed);
        let Some(&(_, live, waiting)) = start.checked_sub(1).and_then(|i| timeline.get(i)) else {
            continue;
        };
        if !below(live, waiting) {
            continue;
        }
        let until = timeline[start..]
            .iter()
            .find(|(_, live, waiting)| !below(*live, *waiting))
            .map_or(i64::MAX, |(at, _, _)| *at);
        delays.push(until.saturating_sub(exp * SECOND_US));
    }
    let worst = delays.iter().copied().max().unwrap_or(0);
    let bound = GRACE_US + TICK_ALLOWANCE_US;
    let check = Check {
        name: "a pass that ends unreturned frees its slot within exp + 1 s + a tick allowance"
            .into(),
        holds: rate_limited || worst <= bound,
        detail: format!(
            "{} passes ended without a leave while people waited; the room refilled at worst \
             {} ms after such a pass's exp (bound {} ms{})",
            delays.len(),
            if worst == i64::MAX {
                "never".into()
            } else {
                (worst / 1000).to_string()
            },
            bound / 1000,
            if rate_limited {
                "; not enforced: admit_per_minute paces admissions"
            } else {
                ""
            }
        ),
    };
    (check, delays)
}
