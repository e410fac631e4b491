//! A room's `max_active`, as the protected origin sees it: every pass it received verifies, and
//! the places with a pass it would accept (from `iat` to `exp`, no leeway) never number more than
//! `max_active` at any second (the declared one, or a larger one an operator applied during the
//! run, from the second the apply started). And its places, as PostgreSQL holds them: one live place per
//! subject at any instant (joins sent twice at once, retries of joins whose answer was lost), and
//! arrival numbers without gaps. And what waiting places were told (answered from the gateways'
//! memory): never fewer places ahead than PostgreSQL's rows had waiting with a smaller order,
//! and never `waiting` after the place left the queue, by a poll sent [`LEAVE_SEEN_MS`] after
//! the leave was answered, at another gateway. And the waits they were advised: never past the
//! first pass their turn brought ([`advised_waits`]). And joins sent with a key: each visit sends
//! every attempt of its join with one key, so PostgreSQL holds at most one place per visit, and
//! a join sent again with that key after its place ended is answered that place ([`rejoins`]).

use std::collections::BTreeMap;

use super::{Evidence, Stats, Violation};
use crate::journal::{FaultRecord, PlacePollRecord, QuitRecord, RejoinRecord, RoomRecord};
use crate::rows::PlaceRow;

/// How soon after a leave of the queue is answered every gateway's polls know of it: a
/// gateway reads each room it answers from memory again five times a second.
pub const LEAVE_SEEN_MS: i64 = 1_000;

/// How long a gateway that cannot read PostgreSQL answers waiting polls from its last read of a
/// room: a leave it could not read meanwhile is not judged.
pub const STALE_FRONT_MS: i64 = 5_000;

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    stats.passes = evidence.records.rooms.len();
    stats.places = evidence.places.len();
    places(&evidence.places, violations);
    let mut visits: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for op in &evidence.plan.ops {
        if let crate::plan::OpKind::Visit(visit) = &op.kind {
            *visits
                .entry((
                    visit.room.as_str(),
                    crate::plan::visitor_subject(visit.person),
                ))
                .or_default() += 1;
        }
    }
    keyed_joins(&evidence.places, &visits, violations);
    stats.rejoins = rejoins(&evidence.places, &evidence.records.rejoins, violations);
    stats.place_positions =
        told_positions(&evidence.places, &evidence.records.place_polls, violations);
    stats.advised_waits = advised_waits(
        &evidence.places,
        &evidence.records.place_polls,
        &evidence.records.rooms,
        violations,
    );
    stats.quits = quits(
        &evidence.records.quits,
        &evidence.records.place_polls,
        &evidence.records.faults,
        violations,
    );
    left_never_admitted(&evidence.records.quits, &evidence.places, violations);
    // (room, place) → the span its passes cover.
    let mut places: BTreeMap<(&str, &str), (i64, i64)> = BTreeMap::new();
    for pass in &evidence.records.rooms {
        if !pass.verified {
            violations.push(Violation::new(
                "pass-not-verified",
                format!(
                    "person {} in room {}: a pass the published keys do not verify",
                    pass.person, pass.room
                ),
            ));
            continue;
        }
        let span = places
            .entry((pass.room.as_str(), pass.place.as_str()))
            .or_insert((pass.iat, pass.exp));
        span.0 = span.0.min(pass.iat);
        span.1 = span.1.max(pass.exp);
    }
    for room in &evidence.decl.rooms {
        let mut events: Vec<(i64, i32)> = Vec::new();
        for ((r, _), (from, to)) in &places {
            if *r == room.code {
                events.push((*from, 1));
                // Accepted through second `to` (its `exp`), gone from the next one.
                events.push((*to + 1, -1));
            }
        }
        events.sort_by_key(|(t, d)| (*t, *d));
        // The limit in force at second `t`: the declared one, or a raise applied by then (from
        // the second its apply started).
        let raises: Vec<(i64, u32)> = evidence
            .records
            .raises
            .iter()
            .filter(|r| r.applied && r.room == room.code)
            .map(|r| (r.started_ms.div_euclid(1000), r.max_active))
            .collect();
        let limit_at = |t: i64| {
            raises
                .iter()
                .filter(|(from, _)| *from <= t)
                .map(|(_, max)| *max)
                .fold(room.max_active, u32::max)
        };
        let mut open = 0;
        let mut worst: Option<(i32, i64, u32)> = None;
        for (t, d) in events {
            open += d;
            let limit = limit_at(t);
            if open > limit as i32 && worst.is_none_or(|(most, _, _)| open > most) {
                worst = Some((open, t, limit));
            }
        }
        if let Some((most, at, limit)) = worst {
            violations.push(Violation::new(
                "room-over-max-active",
                format!(
                    "room {}: {most} places with a live pass at second {at} (max_active {limit})",
                    room.code
                ),
            ));
        }
    }
}

/// A place's live span, from its join until it ended (or forever), and its id.
type Life<'a> = (i64, i64, &'a str);

/// One live place per subject and room, and arrival numbers 1, 2, … without gaps.
fn places(rows: &[PlaceRow], violations: &mut Vec<Violation>) {
    let mut by_subject: BTreeMap<(&str, &str), Vec<Life<'_>>> = BTreeMap::new();
    let mut seqs: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for place in rows {
        // A place still waiting or admitted is live to the end of time.
        let until = match place.state.as_str() {
            "waiting" | "admitted" => i64::MAX,
            _ => place.ended_ms.unwrap_or(i64::MAX),
        };
        by_subject
            .entry((place.room.as_str(), place.subject.as_str()))
            .or_default()
            .push((place.joined_ms, until, place.id.as_str()));
        seqs.entry(place.room.as_str()).or_default().push(place.seq);
    }
    for ((room, subject), mut lives) in by_subject {
        lives.sort();
        for pair in lives.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            if later.0 < earlier.1 {
                violations.push(Violation::new(
                    "two-places-one-subject",
                    format!(
                        "room {room}: {subject} holds place {} (joined at {}) while place {} \
                         joined at {}",
                        earlier.2, earlier.0, later.2, later.0
                    ),
                ));
            }
        }
    }
    for (room, mut numbers) in seqs {
        numbers.sort_unstable();
        let expected: Vec<i64> = (1..=numbers.len() as i64).collect();
        if numbers != expected {
            violations.push(Violation::new(
                "arrival-numbers-gap",
                format!(
                    "room {room}: {} places numbered {:?}…",
                    numbers.len(),
                    &numbers[..numbers.len().min(12)]
                ),
            ));
        }
    }
}

/// Every attempt of a visit's join carries the visit's one key, so PostgreSQL holds at most one
/// place per visit: a subject with more places in a room than visits to it had a retried join
/// make a second place. `visits` counts the plan's visits by (room, subject).
fn keyed_joins(
    rows: &[PlaceRow],
    visits: &BTreeMap<(&str, String), usize>,
    violations: &mut Vec<Violation>,
) {
    let mut made: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for place in rows {
        made.entry((place.room.as_str(), place.subject.as_str()))
            .or_default()
            .push(place.id.as_str());
    }
    for ((room, subject), ids) in made {
        let allowed = visits
            .get(&(room, subject.to_string()))
            .copied()
            .unwrap_or(0);
        if ids.len() > allowed {
            violations.push(Violation::new(
                "one-join-two-places",
                format!(
                    "room {room}: {subject}'s {allowed} keyed join(s) made {} places: {ids:?}",
                    ids.len()
                ),
            ));
        }
    }
}

/// Each join sent again with its key after its place ended: answered that place (`200`, the
/// same join id), never a new one. Unanswered ones (a fault on the way) are not judged. Also
/// each must name a place PostgreSQL holds for that person. Returns how many were judged.
fn rejoins(rows: &[PlaceRow], rejoins: &[RejoinRecord], violations: &mut Vec<Violation>) -> usize {
    let mut judged = 0;
    for rejoin in rejoins {
        let Some(status) = rejoin.status else {
            continue;
        };
        if matches!(status, 429 | 500..) {
            continue;
        }
        judged += 1;
        let named = rejoin.answered_place.as_deref();
        let subject = crate::plan::visitor_subject(rejoin.person);
        let held = rows
            .iter()
            .any(|p| Some(p.id.as_str()) == named && p.subject == subject && p.room == rejoin.room);
        if status != 200 || named != Some(rejoin.place.as_str()) || !held {
            violations.push(Violation::new(
                "rejoin-not-its-place",
                format!(
                    "room {}: person {} sent their join again with its key after place {} \
                     ended, answered {status} naming {named:?}",
                    rejoin.room, rejoin.person, rejoin.place
                ),
            ));
        }
    }
    judged
}

/// Each waiting place's told position against the places PostgreSQL had waiting ahead of it
/// (a smaller order) when the answer arrived. Counted leniently: a place whose admission or end
/// the database stamped by then no longer counts, though it may have committed a little later,
/// so the count is never above the truth. Returns how many positions were judged.
fn told_positions(
    rows: &[PlaceRow],
    polls: &[PlacePollRecord],
    violations: &mut Vec<Violation>,
) -> usize {
    let by_id: BTreeMap<&str, &PlaceRow> = rows.iter().map(|row| (row.id.as_str(), row)).collect();
    let mut judged = 0;
    for poll in polls {
        let (Some(told), Some(place)) = (poll.position, by_id.get(poll.place.as_str())) else {
            continue;
        };
        let Some(ord) = place.ord else { continue };
        let gone = |at: Option<i64>| at.is_some_and(|at| at <= poll.answered_ms);
        let ahead = rows
            .iter()
            .filter(|row| row.room == place.room && row.ord.is_some_and(|o| o < ord))
            .filter(|row| !gone(row.admitted_ms) && !gone(row.ended_ms))
            .count() as u64;
        judged += 1;
        if told < ahead {
            violations.push(Violation::new(
                "position-below-truth",
                format!(
                    "room {}: place {} (order {ord}) told position {told} at gateway {} at {}, \
                     with {ahead} places waiting ahead of it",
                    place.room, place.id, poll.gateway, poll.answered_ms
                ),
            ));
        }
    }
    judged
}

/// A holder who polls when advised finds their first pass still live: a waiting answer's
/// `poll_after_ms`, counted from its arrival, ends before the `exp` of the place's first pass
/// (the pass with the earliest `iat` the person received; people here poll every 200 ms
/// whatever they are told, so they receive it). Gateways advise those far back by how soon
/// the room's limits let their turn come, assuming fewer than half of the places ahead leave
/// meanwhile: an answer after which that many places with a smaller order left the queue
/// (counted from [`STALE_FRONT_MS`] before it, as the answer may not have known of them) is
/// excused. Those told to come back at the start (in the pre-queue, before the draw) are not:
/// an admission while the pre-queue comes back gives a first pass that outlasts the spread.
/// Returns how many advised waits were judged.
fn advised_waits(
    rows: &[PlaceRow],
    polls: &[PlacePollRecord],
    passes: &[RoomRecord],
    violations: &mut Vec<Violation>,
) -> usize {
    let by_id: BTreeMap<&str, &PlaceRow> = rows.iter().map(|row| (row.id.as_str(), row)).collect();
    let mut first_exp: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for pass in passes {
        let first = first_exp
            .entry(pass.place.as_str())
            .or_insert((pass.iat, pass.exp));
        if pass.iat < first.0 {
            *first = (pass.iat, pass.exp);
        }
    }
    let mut judged = 0;
    for poll in polls.iter().filter(|p| p.status == "waiting") {
        let (Some(advice), Some(place), Some((_, exp))) = (
            poll.advice_ms,
            by_id.get(poll.place.as_str()),
            first_exp.get(poll.place.as_str()),
        ) else {
            continue;
        };
        let (Some(ord), Some(admitted_ms)) = (place.ord, place.admitted_ms) else {
            continue;
        };
        judged += 1;
        let comes_back = poll.answered_ms + advice as i64;
        let expired_ms = exp * 1000;
        if comes_back < expired_ms {
            continue;
        }
        let left_ahead = rows
            .iter()
            .filter(|row| row.room == place.room && row.ord.is_some_and(|o| o < ord))
            .filter(|row| row.state == "left" && row.admitted_ms.is_none())
            .filter(|row| {
                row.ended_ms
                    .is_some_and(|at| at >= poll.answered_ms - STALE_FRONT_MS && at <= admitted_ms)
            })
            .count() as u64;
        // A pre-queue place told to come back at the start (no position yet) is excused by
        // nothing: its first pass outlasts the start's spread whoever leaves.
        if poll
            .position
            .is_some_and(|position| 2 * left_ahead >= position)
        {
            continue;
        }
        violations.push(Violation::new(
            "advised-past-first-pass",
            format!(
                "room {}: place {} (order {ord}) told at {} (position {:?}, gateway {}) to come \
                 back in {advice} ms, at {comes_back}; admitted at {admitted_ms}, its first pass \
                 expired at {expired_ms} ({left_ahead} places ahead left meanwhile)",
                place.room, place.id, poll.answered_ms, poll.position, poll.gateway
            ),
        ));
    }
    judged
}

/// A place that left the queue is not told `waiting` by a poll sent [`LEAVE_SEEN_MS`] or more
/// after its leave was answered, unless the polled gateway may have been unable to read
/// PostgreSQL from [`STALE_FRONT_MS`] before the leave to the answer (it then answers from its
/// last read). Returns how many leaves were followed by a poll judged.
fn quits(
    quits: &[QuitRecord],
    polls: &[PlacePollRecord],
    faults: &[FaultRecord],
    violations: &mut Vec<Violation>,
) -> usize {
    let cut_off = |poll: &PlacePollRecord, from_ms: i64| {
        faults.iter().any(|f| {
            f.kind.cuts_gateway_from_postgres(poll.gateway)
                && f.started_ms <= poll.answered_ms
                && f.ended_ms >= from_ms - STALE_FRONT_MS
        })
    };
    let mut judged = 0;
    for quit in quits.iter().filter(|q| q.status == "left") {
        for poll in polls.iter().filter(|p| {
            p.place == quit.place
                && p.sent_ms >= quit.answered_ms + LEAVE_SEEN_MS
                && !cut_off(p, quit.answered_ms)
        }) {
            judged += 1;
            if poll.status == "waiting" {
                violations.push(Violation::new(
                    "left-told-waiting",
                    format!(
                        "room {}: place {} left the queue at {}, and gateway {} told it waiting \
                         (position {:?}) at {}",
                        quit.room,
                        quit.place,
                        quit.answered_ms,
                        poll.gateway,
                        poll.position,
                        poll.answered_ms
                    ),
                ));
            }
        }
    }
    judged
}

/// A leave answered `left` took a waiting place out of the queue: PostgreSQL's row stays left
/// and never admitted, even when an admission step was reaching for it as the leave committed.
fn left_never_admitted(quits: &[QuitRecord], places: &[PlaceRow], violations: &mut Vec<Violation>) {
    for quit in quits.iter().filter(|q| q.status == "left") {
        let Some(row) = places.iter().find(|p| p.id == quit.place) else {
            violations.push(Violation::new(
                "left-place-missing",
                format!(
                    "room {}: place {} left at {}, and PostgreSQL has no such place",
                    quit.room, quit.place, quit.answered_ms
                ),
            ));
            continue;
        };
        if row.state != "left" || row.admitted_ms.is_some() {
            violations.push(Violation::new(
                "left-then-admitted",
                format!(
                    "room {}: place {} left the queue at {}, and PostgreSQL has it {} (admitted \
                     at {:?})",
                    quit.room, quit.place, quit.answered_ms, row.state, row.admitted_ms
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{FaultKind, Link, LinkFault, Process, Store};

    fn place(id: &str, subject: &str, seq: i64, span: (i64, Option<i64>), state: &str) -> PlaceRow {
        PlaceRow {
            id: id.into(),
            room: "doors".into(),
            subject: subject.into(),
            seq,
            ord: Some(seq),
            state: state.into(),
            joined_ms: span.0,
            admitted_ms: None,
            ended_ms: span.1,
        }
    }

    fn poll(place: &str, answered_ms: i64, status: &str, position: Option<u64>) -> PlacePollRecord {
        PlacePollRecord {
            person: 0,
            room: "doors".into(),
            place: place.into(),
            gateway: 1,
            sent_ms: answered_ms - 5,
            answered_ms,
            status: status.into(),
            position,
            advice_ms: None,
        }
    }

    #[test]
    fn a_position_below_the_places_waiting_ahead_is_found_and_one_above_is_not() {
        let mut first = place("a", "alice", 1, (100, None), "admitted");
        first.admitted_ms = Some(300);
        let rows = [
            first,
            place("b", "bob", 2, (110, Some(400)), "left"),
            place("c", "carol", 3, (120, None), "waiting"),
        ];
        let judge = |polls: &[PlacePollRecord]| {
            let mut violations = Vec::new();
            let judged = told_positions(&rows, polls, &mut violations);
            (
                judged,
                violations.into_iter().map(|v| v.kind).collect::<Vec<_>>(),
            )
        };
        // At 200 both are ahead of carol; at 350 bob alone; at 500 nobody.
        assert_eq!(
            judge(&[poll("c", 200, "waiting", Some(1))]).1,
            ["position-below-truth"]
        );
        assert_eq!(judge(&[poll("c", 200, "waiting", Some(2))]), (1, vec![]));
        assert_eq!(judge(&[poll("c", 350, "waiting", Some(1))]), (1, vec![]));
        assert_eq!(
            judge(&[poll("c", 350, "waiting", Some(0))]).1,
            ["position-below-truth"]
        );
        // Told more than the truth (leavers ahead still counted): allowed.
        assert_eq!(judge(&[poll("c", 500, "waiting", Some(1))]), (1, vec![]));
    }

    /// Carol (order 3, two places ahead) is admitted at 30,000 ms with a first pass to 40 s.
    #[test]
    fn a_wait_advised_past_the_first_pass_is_found_unless_half_those_ahead_left() {
        let mut carol = place("c", "carol", 3, (100, None), "admitted");
        carol.admitted_ms = Some(30_000);
        let ahead = |left_at: Option<i64>| {
            [
                place("a", "alice", 1, (100, None), "waiting"),
                match left_at {
                    Some(at) => place("b", "bob", 2, (100, Some(at)), "left"),
                    None => place("b", "bob", 2, (100, None), "waiting"),
                },
                carol.clone(),
            ]
        };
        let first_pass = RoomRecord {
            person: 0,
            room: "doors".into(),
            place: "c".into(),
            iat: 30,
            exp: 40,
            verified: true,
            received_ms: 30_100,
            left_ms: None,
        };
        let renewed = RoomRecord {
            iat: 35,
            exp: 45,
            ..first_pass.clone()
        };
        let judge = |rows: &[PlaceRow], advice: u64| {
            let mut told = poll("c", 20_000, "waiting", Some(2));
            told.advice_ms = Some(advice);
            let mut violations = Vec::new();
            let judged = advised_waits(
                rows,
                &[told],
                &[renewed.clone(), first_pass.clone()],
                &mut violations,
            );
            (
                judged,
                violations.into_iter().map(|v| v.kind).collect::<Vec<_>>(),
            )
        };
        // Back at 39,999: the first pass is live. Back at 40,000: it is not, whatever the
        // heartbeat that renewed it later.
        assert_eq!(judge(&ahead(None), 19_999), (1, vec![]));
        assert_eq!(judge(&ahead(None), 20_000).1, ["advised-past-first-pass"]);
        // One of the two ahead left the queue before carol's turn: excused.
        assert_eq!(judge(&ahead(Some(25_000)), 20_000), (1, vec![]));
        // It left long before the answer, which knew: not excused.
        assert_eq!(
            judge(&ahead(Some(10_000)), 20_000).1,
            ["advised-past-first-pass"]
        );
        // Told in the pre-queue (no position yet): no leave excuses it.
        let mut at_start = poll("c", 20_000, "waiting", None);
        at_start.advice_ms = Some(20_000);
        let mut violations = Vec::new();
        advised_waits(
            &ahead(Some(25_000)),
            &[at_start],
            &[renewed.clone(), first_pass.clone()],
            &mut violations,
        );
        assert_eq!(
            violations.into_iter().map(|v| v.kind).collect::<Vec<_>>(),
            ["advised-past-first-pass"]
        );
    }

    /// Place `place` of room `doors` left the queue, answered at 1 s.
    fn left_at_1s(place: &str) -> QuitRecord {
        QuitRecord {
            person: 0,
            room: "doors".into(),
            place: place.into(),
            answered_ms: 1_000,
            status: "left".into(),
        }
    }

    #[test]
    fn a_place_that_left_the_queue_and_was_admitted_all_the_same_is_found() {
        let quit = left_at_1s("c");
        let judge = |row: PlaceRow| {
            let mut violations = Vec::new();
            left_never_admitted(std::slice::from_ref(&quit), &[row], &mut violations);
            violations.into_iter().map(|v| v.kind).collect::<Vec<_>>()
        };
        assert!(judge(place("c", "s", 3, (0, Some(1_000)), "left")).is_empty());
        let admitted = PlaceRow {
            admitted_ms: Some(1_100),
            ..place("c", "s", 3, (0, None), "admitted")
        };
        assert_eq!(judge(admitted), ["left-then-admitted"]);
        assert_eq!(
            judge(place("d", "s", 3, (0, None), "waiting")),
            ["left-place-missing"]
        );
        // A leave that found the place's turn come meanwhile is not a leave of the queue.
        let mut violations = Vec::new();
        let holding = QuitRecord {
            status: "admitted".into(),
            ..quit.clone()
        };
        let admitted = PlaceRow {
            admitted_ms: Some(900),
            ..place("c", "s", 3, (0, None), "admitted")
        };
        left_never_admitted(&[holding], &[admitted], &mut violations);
        assert!(violations.is_empty());
    }

    #[test]
    fn a_left_place_told_waiting_a_second_after_its_leave_is_found() {
        let quit = left_at_1s("c");
        let judge_with = |polls: &[PlacePollRecord], faults: &[FaultRecord]| {
            let mut violations = Vec::new();
            let judged = quits(std::slice::from_ref(&quit), polls, faults, &mut violations);
            (
                judged,
                violations.into_iter().map(|v| v.kind).collect::<Vec<_>>(),
            )
        };
        let judge = |polls: &[PlacePollRecord]| judge_with(polls, &[]);
        // Before the second is up, a gateway may not know yet: not judged.
        assert_eq!(judge(&[poll("c", 1_500, "waiting", Some(3))]), (0, vec![]));
        assert_eq!(
            judge(&[poll("c", 2_100, "waiting", Some(3))]),
            (1, vec!["left-told-waiting".to_string()])
        );
        assert_eq!(judge(&[poll("c", 2_100, "left", None)]), (1, vec![]));
        // The polled gateway could not read PostgreSQL near the leave: it may answer from its
        // last read for a while, so the poll is not judged; a fault of another gateway is.
        let restart = |kind| FaultRecord {
            kind,
            started_ms: 500,
            ended_ms: 1_800,
        };
        let late = [poll("c", 2_100, "waiting", Some(3))];
        assert_eq!(
            judge_with(&late, &[restart(FaultKind::PostgresRestart)]),
            (0, vec![])
        );
        let other = FaultKind::Link(
            Link {
                process: Process::Gateway(0),
                store: Store::Postgres,
            },
            LinkFault::Reset,
        );
        assert_eq!(judge_with(&late, &[restart(other)]).0, 1);
    }

    fn kinds(rows: &[PlaceRow]) -> Vec<String> {
        let mut violations = Vec::new();
        places(rows, &mut violations);
        violations.into_iter().map(|v| v.kind).collect()
    }

    #[test]
    fn a_keyed_join_makes_one_place_per_visit() {
        let rows = [
            place("a", "person-1", 1, (100, Some(200)), "left"),
            place("b", "person-1", 2, (250, None), "waiting"),
            place("c", "person-2", 3, (260, None), "waiting"),
        ];
        let judge = |visits: &[(&'static str, usize)]| {
            let visits: BTreeMap<(&str, String), usize> = visits
                .iter()
                .map(|(subject, n)| (("doors", (*subject).to_string()), *n))
                .collect();
            let mut violations = Vec::new();
            keyed_joins(&rows, &visits, &mut violations);
            violations.into_iter().map(|v| v.kind).collect::<Vec<_>>()
        };
        assert_eq!(
            judge(&[("person-1", 1), ("person-2", 1)]),
            ["one-join-two-places"]
        );
        assert!(judge(&[("person-1", 2), ("person-2", 1)]).is_empty());
        // A place nobody's visit asked for.
        assert_eq!(judge(&[("person-1", 2)]), ["one-join-two-places"]);
    }

    #[test]
    fn a_subject_may_come_back_after_leaving_but_never_hold_two_places() {
        let after_leaving = [
            place("a", "alice", 1, (100, Some(200)), "left"),
            place("b", "alice", 2, (250, None), "waiting"),
        ];
        assert!(kinds(&after_leaving).is_empty());
        let at_once = [
            place("a", "alice", 1, (100, None), "admitted"),
            place("b", "alice", 2, (150, None), "waiting"),
        ];
        assert_eq!(kinds(&at_once), ["two-places-one-subject"]);
    }

    #[test]
    fn arrival_numbers_run_from_one_without_gaps() {
        let gap = [
            place("a", "alice", 1, (100, None), "waiting"),
            place("b", "bob", 3, (120, None), "waiting"),
        ];
        assert_eq!(kinds(&gap), ["arrival-numbers-gap"]);
    }
}
