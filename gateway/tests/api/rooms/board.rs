//! Rooms as an operator sees them: `GET /v1/status` (`rooms`) and `GET /metrics` after joins,
//! admissions, leaves, an abandonment (a pass allowed to lapse) and a room a later declaration
//! left out. Every figure equals what the test counts on its own from the `room_places` rows
//! (never the rooms' own counters) and what the scenario says it must be; the abandoned pass is
//! refused by an origin verifying it against the published keys. With a long history in a
//! room, the board's counts are index ranges, never a scan of `room_places`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_durable::ids::NamespaceId;
use sluice_store::rooms::PASS_GRACE;
use sluice_store::rooms::figures::{ADMITTED_WINDOW, ROOMS_SHOWN, ROOMS_SQL};
use sluice_store::tenancy;
use uuid::Uuid;

use super::kit::*;
use crate::operators::metrics::{Exposition, scrape};
use crate::support::*;

/// `gate`: two passes at most, long ones, no heartbeats (its figures hold still once settled).
/// `lapse`: opens at `opens_at` (a pre-queue and a draw); its one pass needs a heartbeat every
/// 5 s and gets none, and lasts 10 s at most (so its first pass is 10 s even though its start
/// is brought forward, which would otherwise make first passes 40 s long). `gone`: left out of the declaration once someone holds
/// a pass in it.
fn rooms(opens_at: DateTime<Utc>, with_gone: bool) -> String {
    let gone = if with_gone {
        "[[room]]\ncode = \"gone\"\nmax_active = 1\npass_seconds = 600\n"
    } else {
        ""
    };
    format!(
        r#"
[[room]]
code = "gate"
max_active = 2
pass_seconds = 600

[[room]]
code = "lapse"
max_active = 1
pass_seconds = 10
heartbeat_seconds = 5
opens_at = "{}"

{gone}"#,
        opens_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// One room's figures, as the board shows them or as the test computes them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Figures {
    declared: bool,
    waiting: i64,
    active: i64,
    holding: i64,
    admitted_last_minute: i64,
    admitted_total: i64,
    left_total: i64,
    abandoned_total: i64,
}

/// A decimal-string count of the board.
fn dec(value: &Value) -> i64 {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a decimal string, not {value}"))
        .parse()
        .expect("a decimal count")
}

fn int(value: &Value) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("an integer, not {value}"))
}

/// The board's rooms, in the board's order.
fn board_figures(board: &Value) -> Vec<(String, Figures)> {
    board["rooms"]
        .as_array()
        .expect("rooms")
        .iter()
        .map(|room| {
            (
                room["code"].as_str().expect("code").to_owned(),
                Figures {
                    declared: room["declared"].as_bool().expect("declared"),
                    waiting: dec(&room["waiting"]),
                    active: int(&room["active"]),
                    holding: int(&room["holding"]),
                    admitted_last_minute: int(&room["admitted_last_minute"]),
                    admitted_total: dec(&room["admitted_total"]),
                    left_total: dec(&room["left_total"]),
                    abandoned_total: dec(&room["abandoned_total"]),
                },
            )
        })
        .collect()
}

/// A room counted from its places: code, declared, then the figures in [`Figures`]' order.
type CountedRow = (String, bool, i64, i64, i64, i64, i64, i64, i64);

/// The same figures counted by the test from the places' rows alone (`declared` from the rooms
/// table), at one instant of PostgreSQL's clock.
async fn rows_figures(stack: &Stack, ns: NamespaceId) -> BTreeMap<String, Figures> {
    let rows: Vec<CountedRow> = sqlx::query_as(
        "SELECT r.code, r.declared,
                count(*) FILTER (WHERE p.state = 'waiting'),
                count(*) FILTER (WHERE p.state = 'admitted' AND p.pass_until > now()),
                count(*) FILTER (WHERE p.state IN ('admitted', 'left')
                                   AND p.pass_until + make_interval(secs => $2) > now()),
                count(*) FILTER (WHERE p.admitted_at > now() - make_interval(secs => $3)),
                count(*) FILTER (WHERE p.admitted_at IS NOT NULL),
                count(*) FILTER (WHERE p.state = 'left'),
                count(*) FILTER (WHERE p.state = 'expired')
           FROM rooms r
           LEFT JOIN room_places p ON p.namespace_id = r.namespace_id AND p.room = r.code
          WHERE r.namespace_id = $1
          GROUP BY r.code, r.declared",
    )
    .bind(ns)
    .bind(PASS_GRACE.as_secs_f64())
    .bind(ADMITTED_WINDOW.as_secs_f64())
    .fetch_all(&stack.pg)
    .await
    .expect("the places counted");
    rows.into_iter()
        .map(|(code, declared, w, a, h, m, t, l, x)| {
            (
                code,
                Figures {
                    declared,
                    waiting: w,
                    active: a,
                    holding: h,
                    admitted_last_minute: m,
                    admitted_total: t,
                    left_total: l,
                    abandoned_total: x,
                },
            )
        })
        .collect()
}

/// The room figures `/metrics` exports for the namespace.
fn metric_figures(exposition: &Exposition, ns: NamespaceId, room: &str) -> [f64; 5] {
    let ns = ns.to_string();
    let labels = [("namespace", ns.as_str()), ("room", room)];
    [
        "sluice_room_waiting",
        "sluice_room_active",
        "sluice_room_admitted_total",
        "sluice_room_left_total",
        "sluice_room_abandoned_total",
    ]
    .map(|name| exposition.value(name, &labels))
}

/// Joins `room` as `subject` (must be a new place): its join id and ticket.
async fn joined(stack: &Stack, room: &str, subject: &str) -> (Uuid, String) {
    let reply = join(stack, room, subject).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let id = reply.data()["join_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .expect("a join id");
    (
        id,
        reply.data()["ticket"].as_str().expect("ticket").to_owned(),
    )
}

/// The board's `data` as `bearer` gets it (must be `200`).
async fn board(stack: &Stack, bearer: &str) -> Value {
    let reply = stack.get("/v1/status", Some(bearer)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.data().clone()
}

async fn place_state(stack: &Stack, id: Uuid) -> String {
    sqlx::query_scalar("SELECT state FROM room_places WHERE id = $1")
        .bind(id)
        .fetch_one(&stack.pg)
        .await
        .expect("the place's row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_and_metrics_count_rooms_as_their_places_do() {
    // lapse opens in an hour at first, so the board before anyone joins shows a start not yet
    // drawn however long the stack took to start; the start is brought forward below.
    let later = Utc::now().trunc_subsecs(0) + chrono::Duration::hours(1);
    let stack = stack_with_rooms(&rooms(later, true)).await;
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read"]).await;

    // Before anyone joins: every room, declared, by code, nothing counted; the start shown.
    let idle = board(&stack, &operator).await;
    let codes: Vec<String> = board_figures(&idle).into_iter().map(|(c, _)| c).collect();
    assert_eq!(codes, ["gate", "gone", "lapse"]);
    for (code, figures) in board_figures(&idle) {
        assert!(figures.declared, "{code}");
        assert_eq!(
            (figures.waiting, figures.admitted_total, figures.holding),
            (0, 0, 0),
            "{code}"
        );
    }
    let lapse = |board: &Value| -> Value {
        board["rooms"]
            .as_array()
            .expect("rooms")
            .iter()
            .find(|r| r["code"] == "lapse")
            .cloned()
            .expect("the lapse room")
    };
    assert_eq!(
        (
            lapse(&idle)["max_active"].clone(),
            lapse(&idle)["drawn_at"].clone()
        ),
        (json!(1), Value::Null)
    );
    let shown_opens: DateTime<Utc> = lapse(&idle)["opens_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("opens_at");
    assert_eq!(shown_opens, later);
    let opens_at = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(2);
    tenancy::apply_declaration(&stack.pg, ns, &rooms(opens_at, true), "test", None)
        .await
        .expect("bring lapse's start forward");

    // gate: five join in order; the first two are admitted, the others wait.
    let mut gate = Vec::new();
    for i in 0..5 {
        gate.push(joined(&stack, "gate", &format!("g{i}")).await);
    }
    let g0 = poll_until(&stack, &gate[0].1, "admitted", Duration::from_secs(20)).await;
    poll_until(&stack, &gate[1].1, "admitted", Duration::from_secs(20)).await;
    // lapse: one person in the pre-queue, admitted after the draw, who never heartbeats.
    let (lapse_id, lapse_ticket) = joined(&stack, "lapse", "l0").await;
    let admitted = poll_until(&stack, &lapse_ticket, "admitted", Duration::from_secs(20)).await;
    let lapse_pass = admitted["pass"].as_str().expect("a pass").to_owned();
    let keys = key_set(&stack).await;
    verify_pass(&keys, &lapse_pass, "lapse").expect("the pass is good while live");
    // gone: someone holds a pass when the room leaves the declaration.
    let (_, gone_ticket) = joined(&stack, "gone", "x0").await;
    poll_until(&stack, &gone_ticket, "admitted", Duration::from_secs(20)).await;

    // g0 gives its pass back (its slot stays taken until its exp), g4 leaves the queue.
    let g0_pass = g0["pass"].as_str().expect("a pass");
    let left = leave(&stack, "g0", "pass", g0_pass).await;
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    let left = leave(&stack, "g4", "ticket", &gate[4].1).await;
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    tenancy::apply_declaration(&stack.pg, ns, &rooms(opens_at, false), "test", None)
        .await
        .expect("leave gone out");

    // The abandonment: the ticker ends l0's place once its pass's exp and the grace have
    // passed; meanwhile an origin refuses the pass.
    let stack_ref = &stack;
    until(Duration::from_secs(30), || async move {
        let state = place_state(stack_ref, lapse_id).await;
        (state == "expired", state)
    })
    .await
    .unwrap_or_else(|state| panic!("the lapsed place is still {state}"));
    assert!(
        verify_pass(&keys, &lapse_pass, "lapse").is_err(),
        "an origin refuses the abandoned pass"
    );
    // g0 was admitted more than a minute ago, as far as the last minute is concerned: its
    // admission moves back (gate has no heartbeats, so admitted_at decides nothing else).
    sqlx::query(
        "UPDATE room_places SET admitted_at = admitted_at - make_interval(secs => $2 + 1)
          WHERE id = $1",
    )
    .bind(gate[0].0)
    .bind(ADMITTED_WINDOW.as_secs_f64())
    .execute(&stack.pg)
    .await
    .expect("an older admission");

    // Settled: nothing moves for the next minute. The board, the rows and /metrics agree, and
    // agree with the scenario.
    let shown = board(&stack, &operator).await;
    let truth = rows_figures(&stack, ns).await;
    let board_rooms = board_figures(&shown);
    let codes: Vec<&str> = board_rooms.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        codes,
        ["gate", "lapse", "gone"],
        "declared first, then by code"
    );
    for (code, figures) in &board_rooms {
        assert_eq!(
            Some(figures),
            truth.get(code),
            "{code}: the board vs the rows"
        );
    }
    let expected = |declared, w, a, h, m, t, l, x| Figures {
        declared,
        waiting: w,
        active: a,
        holding: h,
        admitted_last_minute: m,
        admitted_total: t,
        left_total: l,
        abandoned_total: x,
    };
    let by_code: BTreeMap<&str, &Figures> =
        board_rooms.iter().map(|(c, f)| (c.as_str(), f)).collect();
    assert_eq!(by_code["gate"], &expected(true, 2, 1, 2, 1, 2, 2, 0));
    assert_eq!(by_code["lapse"], &expected(true, 0, 0, 0, 1, 1, 0, 1));
    assert_eq!(by_code["gone"], &expected(false, 0, 1, 1, 1, 1, 0, 0));
    let drawn_at: DateTime<Utc> =
        sqlx::query_scalar("SELECT drawn_at FROM rooms WHERE namespace_id = $1 AND code = 'lapse'")
            .bind(ns)
            .fetch_one(&stack.pg)
            .await
            .expect("drawn_at");
    let shown_drawn: DateTime<Utc> = lapse(&shown)["drawn_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("drawn_at shown");
    assert!(drawn_at >= opens_at);
    assert_eq!(
        lapse(&shown)["opens_at"],
        json!(sluice_store::outbox::rfc3339(opens_at))
    );
    assert_eq!(
        shown_drawn.timestamp_millis(),
        drawn_at.timestamp_millis(),
        "the draw, to the millisecond shown"
    );

    let exposition = scrape(&stack.admin_base, "/metrics").await;
    assert_eq!(exposition.value("sluice_rooms_up", &[]), 1.0);
    for (code, figures) in &board_rooms {
        assert_eq!(
            metric_figures(&exposition, ns, code),
            [
                figures.waiting,
                figures.active,
                figures.admitted_total,
                figures.left_total,
                figures.abandoned_total
            ]
            .map(|n| n as f64),
            "{code}: /metrics vs the board"
        );
    }
    println!(
        "rooms board: {:?}",
        board_rooms
            .iter()
            .map(|(c, f)| format!("{c} {f:?}"))
            .collect::<Vec<_>>()
    );
}

/// The nodes of the plan of the board's room query for `ns`: (node type, relation, index).
async fn room_plan(stack: &Stack, ns: NamespaceId) -> Vec<(String, String, String)> {
    let explain = format!("EXPLAIN (FORMAT JSON) {ROOMS_SQL}");
    let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .bind(ns)
        .bind(ROOMS_SHOWN)
        .bind(PASS_GRACE.as_secs_f64())
        .bind(ADMITTED_WINDOW.as_secs_f64())
        .fetch_one(&stack.pg)
        .await
        .expect("explain");
    crate::life_cycle::query_plans::plan_nodes(&plan[0]["Plan"])
}

/// A room with 200,000 places of history (ended long ago), 50,000 people waiting and three live
/// passes: after `ANALYZE`, the board's room query reads `room_places` only through ranges of
/// partial indexes that hold neither the history nor the queue (never a sequential scan, nor
/// an index whose range is the queue), and its counts are the live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_and_queue_are_not_scanned() {
    const HISTORY: i64 = 200_000;
    const QUEUE: i64 = 50_000;
    let stack = stack_with_rooms("[[room]]\ncode = \"gate\"\nmax_active = 3\n").await;
    let ns = stack.creds.namespace_id;

    // Three people hold the three passes, so the ticker admits nobody from the queue below.
    for i in 0..3 {
        let (_, ticket) = joined(&stack, "gate", &format!("p{i}")).await;
        poll_until(&stack, &ticket, "admitted", Duration::from_secs(20)).await;
    }
    // Behind the room's back, in one transaction under its row lock: the history and the queue
    // after the three (arrival numbers and queue orders go on from theirs), and the room's
    // counters to match. A bulk load: no statement timeout (other tests may load the machine),
    // foreign-key triggers skipped (every row names this stack's own room).
    let mut tx = stack.pg.begin().await.expect("begin");
    for setting in [
        "SET LOCAL session_replication_role = replica",
        "SET LOCAL statement_timeout = 0",
    ] {
        sqlx::query(setting)
            .execute(&mut *tx)
            .await
            .expect("bulk load settings");
    }
    sqlx::query("SELECT 1 FROM rooms WHERE namespace_id = $1 AND code = 'gate' FOR UPDATE")
        .bind(ns)
        .execute(&mut *tx)
        .await
        .expect("the room's lock");
    let inserted = sqlx::query(
        "INSERT INTO room_places (id, namespace_id, room, subject, seq, prequeue, ord, state,
                joined_at, admitted_at, renewed_at, pass_until, ended_at)
         SELECT gen_random_uuid(), $1, 'gate', 'h' || i, i, false, i,
                CASE WHEN i % 3 = 0 THEN 'left' ELSE 'expired' END,
                now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
                now() - interval '1 day', now() - interval '1 day'
           FROM generate_series(4, $2 + 3) AS i
         UNION ALL
         SELECT gen_random_uuid(), $1, 'gate', 'q' || i, i, false, i, 'waiting',
                now(), NULL, NULL, NULL, NULL
           FROM generate_series($2 + 4, $2 + $3 + 3) AS i",
    )
    .bind(ns)
    .bind(HISTORY)
    .bind(QUEUE)
    .execute(&mut *tx)
    .await
    .expect("the history and the queue");
    assert_eq!(inserted.rows_affected(), (HISTORY + QUEUE) as u64);
    sqlx::query(
        "UPDATE rooms SET next_seq = next_seq + $2 + $3, waiting = waiting + $3
          WHERE namespace_id = $1 AND code = 'gate'",
    )
    .bind(ns)
    .bind(HISTORY)
    .bind(QUEUE)
    .execute(&mut *tx)
    .await
    .expect("the room's numbers");
    tx.commit().await.expect("commit");
    sqlx::query("ANALYZE room_places")
        .execute(&stack.pg)
        .await
        .expect("analyze");

    let plan = room_plan(&stack, ns).await;
    println!("rooms plan {plan:?}");
    assert!(
        plan.iter()
            .any(|(_, relation, _)| relation == "room_places"),
        "the query reads room_places: {plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|(node, relation, _)| node == "Seq Scan" && relation == "room_places"),
        "a sequential scan of room_places: {plan:?}"
    );
    for queue_index in ["room_places_live_by_subject", "room_places_waiting"] {
        assert!(
            !plan.iter().any(|(_, _, index)| index == queue_index),
            "{queue_index} holds the whole queue: {plan:?}"
        );
    }
    // The admissions of the last minute: only the migration's own index serves that range.
    assert!(
        plan.iter()
            .any(|(_, _, index)| index == "room_places_admitted_at"),
        "room_places_admitted_at not used: {plan:?}"
    );

    let figures = board_figures(&board(&stack, &stack.credential()).await);
    assert_eq!(figures.len(), 1);
    assert_eq!(
        figures[0].1,
        Figures {
            declared: true,
            waiting: QUEUE,
            active: 3,
            holding: 3,
            admitted_last_minute: 3,
            admitted_total: 3,
            left_total: 0,
            abandoned_total: 0,
        },
        "the live places only (the history was written behind the counters' back)"
    );
}
