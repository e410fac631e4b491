//! A room's `max_active`, as the protected origin sees it: every pass it received verifies, and
//! the places with a pass it would accept (from `iat` to `exp`, no leeway) never number more than
//! `max_active` at any second. And its places, as PostgreSQL holds them: one live place per
//! subject at any instant (joins sent twice at once, retries of joins whose answer was lost), and
//! arrival numbers without gaps.

use std::collections::BTreeMap;

use super::{Evidence, Stats, Violation};
use crate::rows::PlaceRow;

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    stats.passes = evidence.records.rooms.len();
    stats.places = evidence.places.len();
    places(&evidence.places, violations);
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
        let (mut open, mut most, mut at) = (0, 0, 0);
        for (t, d) in events {
            open += d;
            if open > most {
                most = open;
                at = t;
            }
        }
        if most > room.max_active as i32 {
            violations.push(Violation::new(
                "room-over-max-active",
                format!(
                    "room {}: {most} places with a live pass at second {at} (max_active {})",
                    room.code, room.max_active
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

#[cfg(test)]
mod tests {
    use super::*;

    fn place(id: &str, subject: &str, seq: i64, span: (i64, Option<i64>), state: &str) -> PlaceRow {
        PlaceRow {
            id: id.into(),
            room: "doors".into(),
            subject: subject.into(),
            seq,
            state: state.into(),
            joined_ms: span.0,
            ended_ms: span.1,
        }
    }

    fn kinds(rows: &[PlaceRow]) -> Vec<String> {
        let mut violations = Vec::new();
        places(rows, &mut violations);
        violations.into_iter().map(|v| v.kind).collect()
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
