//! One room admitted by several gateways. Every `sluice serve` process runs the admission
//! ticker, and a step takes the room's row lock (`SKIP LOCKED`), so any number of gateways must
//! admit exactly as one would: here three processes on one database and Redis, with people
//! joining at one, polling at another and leaving at the third. The witnesses are a protected
//! origin that verifies every pass against the published keys and counts the live ones on its
//! own ([`Origin`]), and PostgreSQL's rows of the places.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice_gateway::identity::ticket::PlaceClaims;
use sluice_store::rooms::join::{Joined, join as join_room};

use super::kit::*;
use crate::support::gateway_process::GatewayProcess;
use crate::support::*;

const MAX_ACTIVE: usize = 3;
/// People who are waiting when the gateways start admitting (two rounds of `MAX_ACTIVE`).
const FIRST: usize = 6;
/// People who join through the gateways once they admit (a third round).
const LATER: usize = 3;
const PEOPLE: usize = FIRST + LATER;

/// Passes live five seconds (no heartbeat is sent), so places free up while the test runs.
const ROOM: &str = r#"
[[room]]
code = "gate"
max_active = 3
pass_seconds = 10
heartbeat_seconds = 5
"#;

/// Joins for `subject` while every gateway is stopped: the join a gateway would make, and the
/// ticket it would hand out (signed with the keys the gateways share).
async fn join_while_stopped(stack: &Stack, subject: &str) -> String {
    let joined = join_room(&stack.pg, stack.creds.namespace_id, "gate", subject, None)
        .await
        .expect("join")
        .expect("a place");
    let Joined::New(place) = joined else {
        panic!("{subject} already had a place");
    };
    stack.gateway.tickets.sign_place(&PlaceClaims {
        namespace_id: place.namespace_id,
        place_id: place.id,
        expires_at_unix: sluice_gateway::identity::auth::now_unix() + 3_600,
        seat: None,
    })
}

/// Holds the waiting places' rows while the gateways resume, so that every step that reaches
/// its admission waits here with what it read of the room, and lets go only once that waiting
/// says how the steps were ordered: a step that holds the room's row (a `NOWAIT` probe of it
/// fails) has kept every other gateway out; three steps waiting at once, none holding it, have
/// all read the room as empty and each means to fill it.
async fn hold_admissions_while(stack: &Stack, resume: impl FnOnce()) {
    let mut places = stack.pg.begin().await.expect("begin");
    let held: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM room_places WHERE namespace_id = $1 AND state = 'waiting' FOR UPDATE",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&mut *places)
    .await
    .expect("hold the waiting places");
    assert_eq!(held.len(), FIRST);
    resume();
    let room_held = || async {
        let mut probe = stack.pg.begin().await.expect("begin");
        let tried = sqlx::query(
            "SELECT 1 FROM rooms WHERE namespace_id = $1 AND code = 'gate' FOR UPDATE NOWAIT",
        )
        .bind(stack.creds.namespace_id)
        .execute(&mut *probe)
        .await;
        // 55P03: lock_not_available.
        let locked =
            matches!(&tried, Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03"));
        let _ = probe.rollback().await;
        locked
    };
    // Steps waiting in their admission statement: on these rows, or in line behind another
    // step that waits on them.
    let waiting = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'
                AND query LIKE '%WITH next AS%'",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("pg_stat_activity")
    };
    let ordered = eventually(Duration::from_secs(10), || async {
        match waiting().await {
            0 => false,
            n if n >= 3 => true,
            _ => room_held().await,
        }
    })
    .await;
    assert!(ordered, "{} steps waiting on the places", waiting().await);
    places.commit().await.expect("let the admissions go");
}

/// Person `i`: joins at one gateway unless it already holds a `ticket`, polls at the next until
/// admitted, shows the pass to the origin for a second (polling again at the third gateway,
/// which answers with the pass too), then leaves there (even `i`) or simply stops (odd `i`).
/// Returns the join id.
async fn person(
    gateways: &[GatewayProcess; 3],
    stack: &Stack,
    origin: &Origin,
    i: usize,
    ticket: Option<String>,
) -> String {
    let subject = format!("person-{i}");
    let token = stack.subject_token(&subject);
    let (joins, polls, leaves) = (
        &gateways[i % 3],
        &gateways[(i + 1) % 3],
        &gateways[(i + 2) % 3],
    );
    let ticket = match ticket {
        Some(ticket) => ticket,
        None => {
            let joined = joins.post("/v1/rooms/gate:join", &token, &json!({})).await;
            assert_eq!(joined.status, StatusCode::ACCEPTED, "{:?}", joined.body);
            joined.data()["ticket"].as_str().expect("ticket").to_owned()
        }
    };
    let path = format!("/v1/tickets/{ticket}");
    let admitted = until(Duration::from_secs(60), || async {
        let reply = polls.send(Method::GET, &path, None, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        (reply.data()["status"] == "admitted", reply.data().clone())
    })
    .await
    .unwrap_or_else(|last| panic!("{subject} never admitted: {last}"));
    let pass = admitted["pass"].as_str().expect("pass").to_owned();
    let claims = origin.serve(&pass).expect("a fresh pass is accepted");
    assert_eq!(claims["sub"], subject.as_str());
    let using = Instant::now();
    let mut shown_passes = 0;
    while using.elapsed() < Duration::from_secs(1) {
        let again = leaves.send(Method::GET, &path, None, None).await;
        assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
        match again.data()["pass"].as_str() {
            Some(shown) => {
                origin.serve(shown).expect("a live pass is accepted");
                shown_passes += 1;
            }
            // Another gateway answers waiting places from its memory of the room, read again
            // every 200 ms (and the read's own time): until then it may not know of the
            // admission; within the second it must.
            None => assert_eq!(
                again.data()["status"],
                "waiting",
                "{subject}: {:?}",
                again.body
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        shown_passes > 0,
        "{subject}: another gateway never showed the pass"
    );
    if i.is_multiple_of(2) {
        let left = leaves
            .post("/v1/passes:leave", &token, &json!({ "pass": pass }))
            .await;
        assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    }
    claims["jti"].as_str().expect("jti").to_owned()
}

/// Three gateway processes admit one room of `max_active = 3` for nine people, who poll and
/// leave through different gateways. Six are waiting when the three gateways resume together
/// from a stop (SIGSTOP while they joined, then SIGCONT to all three): every ticker's tick fell
/// due meanwhile, so their steps of the room's first fill run side by side, with places free and
/// nobody to expire (no row of a place orders them), and [`hold_admissions_while`] keeps them
/// at the admission until it is clear whether the room's lock kept them apart. Three more join
/// through the gateways once they admit. The origin never has more than 3 live passes (and has 3);
/// PostgreSQL has one place per person, each admitted, in queue order; the origin saw one place
/// per person and one admission per place (every pass of a place carries the `iat` of its one
/// admission, the second of its `admitted_at`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_admit_one_room_as_one_would() {
    let stack = Arc::new(Stack::with_declaration(&format!("{CLAIM_DECLARATION}\n{ROOM}")).await);
    // Only the processes admit: the stack's own gateway (and its ticker) stops.
    stack.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    let gateways = Arc::new([
        GatewayProcess::start(&stack, dir.path(), "one").await,
        GatewayProcess::start(&stack, dir.path(), "two").await,
        GatewayProcess::start(&stack, dir.path(), "three").await,
    ]);
    let keys = gateways[2]
        .send(Method::GET, "/.well-known/jwks.json", None, None)
        .await;
    assert_eq!(keys.status, StatusCode::OK, "{:?}", keys.body);
    let origin = Arc::new(Origin::new(
        serde_json::from_value(keys.body).expect("a JWK Set"),
        "gate",
    ));
    for gateway in gateways.iter() {
        gateway.pause().await;
    }
    let mut tickets = Vec::new();
    for i in 0..FIRST {
        tickets.push(join_while_stopped(&stack, &format!("person-{i}")).await);
    }
    hold_admissions_while(&stack, || {
        for gateway in gateways.iter() {
            gateway.resume();
        }
    })
    .await;
    let mut people = tokio::task::JoinSet::new();
    let tickets = tickets
        .into_iter()
        .map(Some)
        .chain((0..LATER).map(|_| None));
    for (i, ticket) in tickets.enumerate() {
        let (gateways, stack, origin) = (gateways.clone(), stack.clone(), origin.clone());
        people.spawn(async move { person(&gateways, &stack, &origin, i, ticket).await });
    }
    let mut joins = BTreeSet::new();
    while let Some(join_id) = people.join_next().await {
        joins.insert(join_id.expect("a person's task"));
    }

    let most = origin.most();
    assert!(
        most <= MAX_ACTIVE,
        "the origin had {most} live passes at once (max_active {MAX_ACTIVE})"
    );
    assert_eq!(most, MAX_ACTIVE, "the room never filled");
    assert_eq!(joins.len(), PEOPLE, "one place per person");
    let places_of = origin.places_of();
    assert_eq!(places_of.len(), PEOPLE, "everyone got in: {places_of:?}");
    for (subject, places) in &places_of {
        assert_eq!(places.len(), 1, "{subject} got in with {places:?}");
    }

    let rows: Vec<(String, String, String, Option<i64>, i64)> = sqlx::query_as(
        "SELECT id::text, subject, state, extract(epoch FROM date_trunc('second', admitted_at))::int8,
                ord
           FROM room_places WHERE namespace_id = $1 AND room = 'gate' ORDER BY ord",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the places");
    assert_eq!(rows.len(), PEOPLE, "one place per join: {rows:?}");
    let subjects: BTreeSet<&String> = rows.iter().map(|r| &r.1).collect();
    assert_eq!(
        subjects.len(),
        PEOPLE,
        "a subject with two places: {rows:?}"
    );
    let issued = origin.issued();
    let mut admitted_at = Vec::new();
    for (id, subject, state, admitted, _) in &rows {
        assert!(
            joins.contains(id),
            "{subject}'s place {id} is not the one it joined with"
        );
        assert!(
            ["admitted", "left", "expired"].contains(&state.as_str()),
            "{subject}: {state}"
        );
        let admitted = admitted.unwrap_or_else(|| panic!("{subject} never admitted: {state}"));
        assert_eq!(
            issued.get(id),
            Some(&BTreeSet::from([admitted])),
            "{subject}: the passes' iat against the admission's second"
        );
        admitted_at.push(admitted);
    }
    assert!(
        admitted_at.is_sorted(),
        "admitted out of queue order: {rows:?}"
    );
    let states: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    eprintln!("three gateways, max_active {MAX_ACTIVE}: most live {most}; states {states:?}");
}
