//! How long waiting people are told to wait before polling again, against when PostgreSQL
//! admitted them: someone far back is told to come back later, but never after their turn could
//! have come (the room's slots turning over as fast as its passes allow, nobody ahead leaving);
//! and after an apply that loosens the room, the next first passes last long enough for anyone
//! told to wait under the old limits.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use hyper::StatusCode;
use sluice_store::rooms::FIRST_PASS_PICKUP;
use sluice_store::rooms::pace::LOOSENED_PICKUP;
use sluice_store::tenancy;
use uuid::Uuid;

use super::kit::*;
use crate::support::*;

/// Four slots, each taken anew at most every 10 s (the shortest pass, and so first pass, a room
/// may declare).
const TURNOVER: &str = r#"
[[room]]
code = "turnover"
max_active = 4
pass_seconds = 10
"#;

const PEOPLE: usize = 12;

/// One waiting answer: the place, its position, the advice, and when it arrived.
struct Told {
    place: Uuid,
    position: u64,
    advice_ms: i64,
    received: DateTime<Utc>,
}

/// Twelve people in a room of four slots whose passes last 10 s and whose holders never come
/// back: the slots turn over as fast as the room allows. Every waiting answer is recorded, and
/// each place's admission instant read from PostgreSQL afterwards: anyone at least four places
/// back (a turnover, 10 s, from their turn) is never admitted before the advised wait is
/// over. Some of them were told to wait longer than the advice near the front
/// (1,000 ms + 40 ms a place, at most 1.2× with jitter), so the deep advice was what was judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_far_back_is_admitted_before_the_wait_they_were_told() {
    let stack = stack_with_rooms(TURNOVER).await;
    let mut waiting: Vec<String> = Vec::new();
    for person in 0..PEOPLE {
        let joined = join(&stack, "turnover", &format!("p{person}")).await;
        assert_eq!(joined.status, StatusCode::ACCEPTED, "{:?}", joined.body);
        waiting.push(joined.data()["ticket"].as_str().expect("ticket").to_owned());
    }
    let mut told = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !waiting.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} still waiting",
            waiting.len()
        );
        let mut still = Vec::new();
        for ticket in waiting {
            let reply = stack.poll(&ticket).await;
            let received = Utc::now();
            assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
            let data = reply.data();
            if data["status"] == "waiting" {
                told.push(Told {
                    place: data["join_id"]
                        .as_str()
                        .expect("join id")
                        .parse()
                        .expect("uuid"),
                    position: data["queue"]["position"].as_u64().expect("position"),
                    advice_ms: data["poll_after_ms"].as_i64().expect("advice"),
                    received,
                });
                still.push(ticket);
            }
        }
        waiting = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let admitted: HashMap<Uuid, DateTime<Utc>> = sqlx::query_as(
        "SELECT id, admitted_at FROM room_places
          WHERE namespace_id = $1 AND room = 'turnover' AND admitted_at IS NOT NULL",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("admissions")
    .into_iter()
    .collect();
    assert_eq!(admitted.len(), PEOPLE, "everyone admitted");
    let far_back: Vec<&Told> = told.iter().filter(|t| t.position >= 4).collect();
    for answer in &far_back {
        let at = admitted[&answer.place];
        let advised_until = answer.received + chrono::Duration::milliseconds(answer.advice_ms);
        assert!(
            at >= advised_until,
            "place {} at position {} was told to wait {} ms at {}, and admitted at {at}",
            answer.place,
            answer.position,
            answer.advice_ms,
            answer.received
        );
    }
    let longest_near = far_back
        .iter()
        .map(|t| (1.2 * (1_000.0 + 40.0 * t.position as f64)) as i64)
        .max()
        .unwrap_or(0);
    let deep = far_back
        .iter()
        .filter(|t| t.advice_ms > longest_near)
        .count();
    eprintln!(
        "{} waiting answers, {} far back, {deep} of them longer than any advice near the front",
        told.len(),
        far_back.len()
    );
    assert!(deep > 0, "no deep advice was judged");
}

fn room(max_active: u32) -> String {
    format!(
        "{CLAIM_DECLARATION}\n[[room]]\ncode = \"loosened\"\nmax_active = {max_active}\n\
         pass_seconds = 120\nheartbeat_seconds = 5\n"
    )
}

/// The first passes of one room's places, as PostgreSQL holds them: seconds from `iat` to `exp`.
async fn first_passes(stack: &Stack) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, f64)>(
        "SELECT subject, extract(epoch FROM pass_until - renewed_at)::float8 FROM room_places
          WHERE namespace_id = $1 AND room = 'loosened' AND admitted_at IS NOT NULL",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("first passes")
    .into_iter()
    .map(|(subject, seconds)| (subject, seconds as i64))
    .collect()
}

/// A room of one slot admits its first person with a first pass of the pickup (10 s); an apply
/// raising `max_active` to three lets the two others in at once, and their first passes are the
/// loosened pickup (40 s): they may have been told, under one slot, to come back much later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_loosens_a_room_lengthens_the_next_first_passes() {
    let stack = Stack::with_declaration(&room(1)).await;
    for person in ["first", "second", "third"] {
        let joined = join(&stack, "loosened", person).await;
        assert_eq!(joined.status, StatusCode::ACCEPTED, "{:?}", joined.body);
    }
    let one = until(Duration::from_secs(20), || async {
        let passes = first_passes(&stack).await;
        (!passes.is_empty(), passes)
    })
    .await
    .expect("the first admitted");
    assert_eq!(
        one,
        HashMap::from([("first".to_owned(), FIRST_PASS_PICKUP.as_secs() as i64)])
    );
    tenancy::apply_declaration(&stack.pg, stack.creds.namespace_id, &room(3), "test", None)
        .await
        .expect("three slots");
    let all = until(Duration::from_secs(20), || async {
        let passes = first_passes(&stack).await;
        (passes.len() == 3, passes)
    })
    .await
    .expect("all admitted");
    let loosened = LOOSENED_PICKUP.as_secs() as i64;
    assert_eq!(
        all,
        HashMap::from([
            ("first".to_owned(), FIRST_PASS_PICKUP.as_secs() as i64),
            ("second".to_owned(), loosened),
            ("third".to_owned(), loosened),
        ])
    );
}

/// A room's settings as one `[[room]]` table.
#[derive(Clone, Copy)]
struct Settings {
    max_active: Option<u32>,
    per_minute: Option<u32>,
    pass_seconds: u32,
    heartbeat: Option<u32>,
    opens_in_minutes: Option<i64>,
}

impl Settings {
    fn declaration(&self, now: DateTime<Utc>) -> String {
        let mut room = format!(
            "{CLAIM_DECLARATION}\n[[room]]\ncode = \"knobs\"\npass_seconds = {}\n",
            self.pass_seconds
        );
        let mut line = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                room.push_str(&format!("{name} = {value}\n"));
            }
        };
        line("max_active", self.max_active.map(|n| n.to_string()));
        line("admit_per_minute", self.per_minute.map(|n| n.to_string()));
        line("heartbeat_seconds", self.heartbeat.map(|n| n.to_string()));
        line(
            "opens_at",
            self.opens_in_minutes.map(|m| {
                format!(
                    "\"{}\"",
                    (now + chrono::Duration::minutes(m)).format("%Y-%m-%dT%H:%M:%SZ")
                )
            }),
        );
        room
    }
}

/// Which applies record a loosening: each change applied to the same settings, the room's
/// `loosened_at` read before and after. Anything that lets the room admit sooner does (more or
/// no `max_active` or `admit_per_minute`, an earlier start, a shorter first pass); the same
/// settings, tighter limits, a later start or a change the first pass does not feel do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_that_let_a_room_admit_sooner_record_a_loosening() {
    let base = Settings {
        max_active: Some(10),
        per_minute: Some(60),
        pass_seconds: 60,
        heartbeat: Some(30),
        opens_in_minutes: Some(60),
    };
    let now = Utc::now();
    let stack = Stack::with_declaration(&base.declaration(now)).await;
    let no_heartbeats = Settings {
        heartbeat: None,
        ..base
    };
    let cases: [(&str, Settings, Settings, bool); 12] = [
        ("the same settings", base, base, false),
        (
            "more slots",
            base,
            Settings {
                max_active: Some(11),
                ..base
            },
            true,
        ),
        (
            "fewer slots",
            base,
            Settings {
                max_active: Some(9),
                ..base
            },
            false,
        ),
        (
            "no max_active",
            base,
            Settings {
                max_active: None,
                ..base
            },
            true,
        ),
        (
            "a faster rate",
            base,
            Settings {
                per_minute: Some(61),
                ..base
            },
            true,
        ),
        (
            "a slower rate",
            base,
            Settings {
                per_minute: Some(59),
                ..base
            },
            false,
        ),
        (
            "no rate",
            base,
            Settings {
                per_minute: None,
                ..base
            },
            true,
        ),
        (
            "an earlier start",
            base,
            Settings {
                opens_in_minutes: Some(30),
                ..base
            },
            true,
        ),
        (
            "a later start",
            base,
            Settings {
                opens_in_minutes: Some(90),
                ..base
            },
            false,
        ),
        (
            "shorter heartbeats",
            base,
            Settings {
                heartbeat: Some(20),
                ..base
            },
            true,
        ),
        (
            "heartbeats under the pickup either way",
            Settings {
                heartbeat: Some(8),
                ..base
            },
            Settings {
                heartbeat: Some(5),
                ..base
            },
            false,
        ),
        (
            "a shorter pass without heartbeats",
            no_heartbeats,
            Settings {
                pass_seconds: 40,
                ..no_heartbeats
            },
            true,
        ),
    ];
    let loosened_at = || async {
        sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
            "SELECT loosened_at FROM rooms WHERE namespace_id = $1 AND code = 'knobs'",
        )
        .bind(stack.creds.namespace_id)
        .fetch_one(&stack.pg)
        .await
        .expect("loosened_at")
    };
    let apply = |settings: Settings| {
        let declaration = settings.declaration(now);
        let pg = stack.pg.clone();
        let namespace_id = stack.creds.namespace_id;
        async move {
            tenancy::apply_declaration(&pg, namespace_id, &declaration, "test", None)
                .await
                .expect("apply");
        }
    };
    for (name, from, to, loosens) in cases {
        apply(from).await;
        let before = loosened_at().await;
        apply(to).await;
        let after = loosened_at().await;
        assert_eq!(
            after != before,
            loosens,
            "{name}: loosened_at {before:?} then {after:?}"
        );
    }
}
