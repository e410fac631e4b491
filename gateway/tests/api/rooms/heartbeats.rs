//! Heartbeats at the size of a drop: concurrent heartbeats share one statement, each extends its
//! own pass and only a live one, and batches in any order never wait on each other in a cycle.
//! Judged by PostgreSQL's rows (`xmin`, `pass_until`) and by passes verified as an origin does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use sluice_store::batching::BatchWriter;
use sluice_store::rooms::heartbeats::{HeartbeatRequest, Heartbeats};
use sluice_store::rooms::places::PassChange;
use uuid::Uuid;

use super::kit::*;
use crate::support::*;

const PEOPLE: usize = 40;

/// Long enough that the first pass (which lasts at least the pick-up time) is shorter than what
/// a heartbeat gives, so a heartbeat a second after admission extends it.
pub(super) const BEAT: &str = r#"
[[room]]
code = "beat"
max_active = 40
admit_per_minute = 6000
pass_seconds = 600
heartbeat_seconds = 15
"#;

/// Joins `PEOPLE` subjects and waits until PostgreSQL has admitted them all and its clock has
/// left the second of the last admission (heartbeats extend in whole seconds). Their place ids
/// and tickets, by subject.
pub(super) async fn admitted_crowd(stack: &Stack) -> HashMap<String, (Uuid, String)> {
    let mut crowd = HashMap::new();
    for p in 0..PEOPLE {
        let subject = format!("p{p}");
        let reply = join(stack, "beat", &subject).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        let id: Uuid = reply.data()["join_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("a join id");
        let ticket = reply.data()["ticket"]
            .as_str()
            .expect("a ticket")
            .to_owned();
        crowd.insert(subject, (id, ticket));
    }
    until(Duration::from_secs(20), || async move {
        let (admitted, past): (i64, bool) = sqlx::query_as(
            "SELECT count(*), coalesce(date_trunc('second', now())
                                       > max(date_trunc('second', admitted_at)), false)
               FROM room_places
              WHERE namespace_id = $1 AND room = 'beat' AND state = 'admitted'",
        )
        .bind(stack.creds.namespace_id)
        .fetch_one(&stack.pg)
        .await
        .expect("the admitted");
        (admitted == PEOPLE as i64 && past, admitted)
    })
    .await
    .unwrap_or_else(|admitted| panic!("{admitted} of {PEOPLE} admitted"));
    crowd
}

/// `pass_until` and the writing transaction of each place of the room, from PostgreSQL.
async fn rows(stack: &Stack) -> HashMap<Uuid, (chrono::DateTime<chrono::Utc>, String)> {
    let rows: Vec<(Uuid, chrono::DateTime<chrono::Utc>, String)> = sqlx::query_as(
        "SELECT id, pass_until, xmin::text FROM room_places
          WHERE namespace_id = $1 AND room = 'beat'",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the places");
    rows.into_iter()
        .map(|(id, until, xmin)| (id, (until, xmin)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_statement_extends_every_live_pass_of_a_batch_and_nothing_else() {
    let stack = stack_with_rooms(BEAT).await;
    let crowd = admitted_crowd(&stack).await;
    let before = rows(&stack).await;
    let namespace_id = stack.creds.namespace_id;
    let request = |id: Uuid, subject: &str| HeartbeatRequest {
        namespace_id,
        id,
        subject: subject.into(),
    };
    // Everyone once, p0 twice, p1's place under another subject's name, and a place that does
    // not exist.
    let mut batch: Vec<HeartbeatRequest> = crowd
        .iter()
        .filter(|(subject, _)| subject.as_str() != "p1")
        .map(|(subject, (id, _))| request(*id, subject))
        .collect();
    batch.push(request(crowd["p0"].0, "p0"));
    batch.push(request(crowd["p1"].0, "p2"));
    batch.push(request(Uuid::new_v4(), "p3"));
    let outcomes = Heartbeats
        .write(&stack.pg, &batch)
        .await
        .expect("the batch");
    assert_eq!(outcomes.len(), batch.len(), "one outcome per heartbeat");

    let after = rows(&stack).await;
    for (job, outcome) in batch.iter().zip(&outcomes) {
        let own = crowd.get(&job.subject).is_some_and(|(id, _)| *id == job.id);
        match (own, outcome) {
            (true, Some(PassChange::Changed(place))) => {
                assert_eq!(place.pass_until, Some(after[&job.id].0), "{}", job.subject);
                assert!(
                    after[&job.id].0 > before[&job.id].0,
                    "{}: pass_until did not move",
                    job.subject
                );
            }
            (false, None) => {}
            (_, other) => panic!("{} on {}: {other:?}", job.subject, job.id),
        }
    }
    let extended: HashSet<&String> = crowd
        .iter()
        .filter(|(subject, _)| subject.as_str() != "p1")
        .map(|(_, (id, _))| &after[id].1)
        .collect();
    assert_eq!(extended.len(), 1, "the batch's places by one transaction");
    assert_eq!(
        after[&crowd["p1"].0], before[&crowd["p1"].0],
        "a heartbeat under another subject's name changed the place"
    );

    // An ended place is answered ended, and not revived.
    let ended = crowd["p4"].0;
    sqlx::query("UPDATE room_places SET state = 'left', ended_at = now() WHERE id = $1")
        .bind(ended)
        .execute(&stack.pg)
        .await
        .expect("end p4's place");
    let revived = Heartbeats
        .write(&stack.pg, &[request(ended, "p4")])
        .await
        .expect("p4's heartbeat");
    assert!(
        matches!(
            revived[..],
            [Some(PassChange::Ended(
                sluice_store::rooms::PlaceState::Left
            ))]
        ),
        "{revived:?}"
    );
    let state: String = sqlx::query_scalar("SELECT state FROM room_places WHERE id = $1")
        .bind(ended)
        .fetch_one(&stack.pg)
        .await
        .expect("p4's place");
    assert_eq!(state, "left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_in_any_order_all_commit() {
    let stack = Arc::new(stack_with_rooms(BEAT).await);
    let crowd = admitted_crowd(&stack).await;
    let namespace_id = stack.creds.namespace_id;
    let jobs: Vec<HeartbeatRequest> = crowd
        .iter()
        .map(|(subject, (id, _))| HeartbeatRequest {
            namespace_id,
            id: *id,
            subject: subject.clone(),
        })
        .collect();
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..8_usize {
        let (stack, mut jobs) = (stack.clone(), jobs.clone());
        writers.spawn(async move {
            for round in 0..10_usize {
                // Each writer and round rotates (and every other one reverses) the order.
                jobs.rotate_left((writer * 7 + round * 3) % PEOPLE);
                if (writer + round) % 2 == 1 {
                    jobs.reverse();
                }
                let outcomes = Heartbeats.write(&stack.pg, &jobs).await?;
                assert!(
                    outcomes.iter().all(|o| matches!(
                        o,
                        Some(PassChange::Changed(_) | PassChange::Unchanged(_))
                    )),
                    "a live pass answered otherwise: {outcomes:?}"
                );
            }
            Ok::<_, sluice_durable::DurableError>(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("a writer").expect("every batch committed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_heartbeating_at_once_is_answered_with_the_committed_pass() {
    let stack = Arc::new(stack_with_rooms(BEAT).await);
    let crowd = admitted_crowd(&stack).await;
    let keys = key_set(&stack).await;
    let mut passes = HashMap::new();
    for (subject, (_, ticket)) in &crowd {
        let admitted = poll_until(&stack, ticket, "admitted", Duration::from_secs(5)).await;
        passes.insert(
            subject.clone(),
            admitted["pass"].as_str().expect("a pass").to_owned(),
        );
    }
    // Everyone heartbeats twice at once.
    let mut beats = tokio::task::JoinSet::new();
    let twice = passes.iter().flat_map(|(subject, pass)| {
        [
            (subject.clone(), pass.clone()),
            (subject.clone(), pass.clone()),
        ]
    });
    for (subject, pass) in twice {
        let stack = stack.clone();
        beats.spawn(async move { (subject.clone(), heartbeat(&stack, &subject, &pass).await) });
    }
    let mut extended: HashMap<String, usize> = HashMap::new();
    let mut exp: HashMap<String, i64> = HashMap::new();
    while let Some(beat) = beats.join_next().await {
        let (subject, reply) = beat.expect("a heartbeat");
        assert_eq!(reply.status, StatusCode::OK, "{subject}: {:?}", reply.body);
        if reply.data()["extended"] == true {
            *extended.entry(subject.clone()).or_default() += 1;
        }
        let pass = reply.data()["pass"].as_str().expect("a pass");
        let claims = verify_pass(&keys, pass, "beat").expect("an origin accepts the pass");
        let told = claims["exp"].as_i64().expect("exp");
        let latest = exp.entry(subject).or_default();
        *latest = (*latest).max(told);
    }
    assert_eq!(extended.len(), PEOPLE, "someone's pass was never extended");
    let after = rows(&stack).await;
    for (subject, (id, _)) in &crowd {
        assert_eq!(
            exp[subject],
            after[id].0.timestamp(),
            "{subject}: the latest pass told is not what PostgreSQL committed"
        );
    }
}

/// The heartbeats' statement, planned while the room's statistics say nobody is admitted (a
/// drop's room outgrows them within seconds) and kept, then run against 20,000 admitted
/// places: it finds its places by id, never by scanning the admitted ones, and updates each in
/// place, writing no index entry. Witnesses: the executed plan's nodes on `room_places` and
/// PostgreSQL's own count of the transaction's heap-only updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_statement_finds_its_places_by_id_whatever_the_statistics_said() {
    const PLACES: i64 = 20_000;
    const ASKED: usize = 48;
    let stack = stack_with_rooms(BEAT).await;
    let query =
        crate::life_cycle::query_plans::checked_query(&["WITH asked AS", "pass_until = least"]);
    let mut conn = stack.pg.acquire().await.expect("a connection");
    // The ticker's analysis would refresh the statistics under the test: it skips while this
    // lock is held.
    sqlx::raw_sql(
        "SELECT pg_advisory_lock(hashtextextended('sluice:rooms:analyze', 0));
         SET plan_cache_mode = force_generic_plan",
    )
    .execute(&mut *conn)
    .await
    .expect("hold the analysis lock");
    insert_waiting_places(&stack, "beat", PLACES).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ANALYZE room_places;
         PREPARE beats (uuid[], uuid[], text[]) AS {query};
         EXECUTE beats('{{}}', '{{}}', '{{}}')"
    )))
    .execute(&mut *conn)
    .await
    .expect("plan while nobody is admitted");
    sqlx::query(
        "UPDATE room_places SET state = 'admitted', admitted_at = now(), renewed_at = now(),
                                pass_until = now() + interval '5 seconds'
          WHERE namespace_id = $1 AND room = 'beat'",
    )
    .bind(stack.creds.namespace_id)
    .execute(&mut *conn)
    .await
    .expect("admit them all");
    let asked: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT id, subject FROM room_places WHERE namespace_id = $1 AND room = 'beat'
          ORDER BY seq LIMIT $2",
    )
    .bind(stack.creds.namespace_id)
    .bind(ASKED as i64)
    .fetch_all(&mut *conn)
    .await
    .expect("some places");
    let list = |items: Vec<String>| format!("'{{{}}}'", items.join(","));
    let run = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE beats({}, {}, {})",
        list(asked.iter().map(|(id, _)| id.to_string()).collect()),
        list(vec![stack.creds.namespace_id.to_string(); ASKED]),
        list(asked.iter().map(|(_, s)| s.clone()).collect()),
    );
    // PostgreSQL's own count of row versions this backend wrote: updated in place (heap-only,
    // no index entry written) or not. Not flushed inside a transaction, so the difference
    // across the statement is its own.
    let updates = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
                    WHERE relname = 'room_places'";
    sqlx::raw_sql("BEGIN")
        .execute(&mut *conn)
        .await
        .expect("begin");
    let before: (i64, i64) = sqlx::query_as(updates)
        .fetch_one(&mut *conn)
        .await
        .expect("the updates before");
    let explained: (serde_json::Value,) = sqlx::query_as(sqlx::AssertSqlSafe(run))
        .fetch_one(&mut *conn)
        .await
        .expect("explain the kept plan");
    let after: (i64, i64) = sqlx::query_as(updates)
        .fetch_one(&mut *conn)
        .await
        .expect("the updates after");
    let (updated, in_place) = (after.0 - before.0, after.1 - before.1);
    sqlx::raw_sql("COMMIT")
        .execute(&mut *conn)
        .await
        .expect("commit");
    let plan = &explained.0[0]["Plan"];
    let mut scans = Vec::new();
    scans_of(plan, "room_places", &mut scans);
    println!("{ASKED} heartbeats among {PLACES} admitted: scans {scans:?}");
    assert_eq!(
        plan["Actual Rows"], ASKED,
        "every asked pass is extended: {plan}"
    );
    println!("{updated} places updated, {in_place} of them in place");
    assert_eq!(updated, ASKED as i64, "the heartbeats' updates: {plan}");
    // Right after the admission rewrote every row, a few pages have no room left for a second
    // version until they are pruned; with an indexed column changed, none would be in place.
    assert!(
        in_place * 4 >= updated * 3,
        "{in_place} of {updated} heartbeats updated in place: the others wrote index entries"
    );
    assert!(!scans.is_empty(), "no scan of room_places found: {plan}");
    for scan in &scans {
        assert!(
            !scan.starts_with("Seq Scan")
                && (scan.ends_with("room_places_pkey") || scan.starts_with("Bitmap Heap Scan")),
            "room_places read by {scan}, not by id: {plan}"
        );
    }
}

/// The scans of `relation` in an executed plan, and every index scan of a bitmap (which names
/// no relation), as "node type using index".
fn scans_of(node: &serde_json::Value, relation: &str, found: &mut Vec<String>) {
    let scans_relation = node["Relation Name"] == relation && node["Node Type"] != "ModifyTable";
    if scans_relation || node["Node Type"] == "Bitmap Index Scan" {
        found.push(format!(
            "{} using {}",
            node["Node Type"].as_str().unwrap_or("?"),
            node["Index Name"].as_str().unwrap_or("-")
        ));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        scans_of(child, relation, found);
    }
}
