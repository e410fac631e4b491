//! A room's `max_active`, as the protected origin sees it: every pass it received verifies, and
//! the places with a pass it would accept (from `iat` to `exp`, no leeway) never number more than
//! `max_active` at any second.

use std::collections::BTreeMap;

use super::{Evidence, Stats, Violation};

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    stats.passes = evidence.records.rooms.len();
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
