//! Joins at the size of a drop: concurrent joins share transactions (the rooms' group commit),
//! and still make exactly one place per subject with arrival numbers that have no gaps, judged
//! by PostgreSQL's own rows (`xmin`: the transaction that wrote each).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;

use super::kit::*;

const PEOPLE: usize = 400;
const CALLERS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_joins_share_transactions_and_keep_one_numbered_place_each() {
    // A pre-queue that opens in an hour: nobody is admitted, so no row changes after its join.
    let opens = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Arc::new(
        stack_with_rooms(&format!(
            "[[room]]\ncode = \"drop\"\nmax_active = 10\nopens_at = \"{}\"\nprequeue_seconds = 7200\n",
            opens.format("%Y-%m-%dT%H:%M:%SZ")
        ))
        .await,
    );
    // Every subject joins twice, at once: the two answers must name one place.
    let requests: Vec<String> = (0..PEOPLE)
        .flat_map(|p| [format!("p{p}"), format!("p{p}")])
        .collect();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let requests = Arc::new(requests);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (stack, next, requests) = (stack.clone(), next.clone(), requests.clone());
        callers.spawn(async move {
            let mut answers = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(subject) = requests.get(i) else {
                    return answers;
                };
                let reply = join(&stack, "drop", subject).await;
                answers.push((subject.clone(), reply));
            }
        });
    }
    let mut places: HashMap<String, HashSet<String>> = HashMap::new();
    let mut created = 0;
    while let Some(answers) = callers.join_next().await {
        for (subject, reply) in answers.expect("a caller") {
            match reply.status {
                StatusCode::ACCEPTED => created += 1,
                StatusCode::OK => assert_eq!(reply.data()["deduplicated"], true),
                other => panic!("{subject}: {other} {:?}", reply.body),
            }
            let id = reply.data()["join_id"]
                .as_str()
                .expect("a join id")
                .to_owned();
            places.entry(subject).or_default().insert(id);
        }
    }
    assert_eq!(created, PEOPLE, "one new place per subject");
    assert!(
        places.values().all(|ids| ids.len() == 1),
        "a subject was told of two places"
    );

    let rows: Vec<(String, String, i64, String)> = sqlx::query_as(
        "SELECT id::text, subject, seq, xmin::text FROM room_places
          WHERE namespace_id = $1 AND room = 'drop' ORDER BY seq",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the places");
    assert_eq!(rows.len(), PEOPLE);
    let seqs: Vec<i64> = rows.iter().map(|r| r.2).collect();
    assert_eq!(
        seqs,
        (1..=PEOPLE as i64).collect::<Vec<_>>(),
        "arrival numbers without gaps"
    );
    for (id, subject, _, _) in &rows {
        assert_eq!(places[subject], HashSet::from([id.clone()]), "{subject}");
    }
    let transactions: HashSet<&String> = rows.iter().map(|r| &r.3).collect();
    eprintln!(
        "rooms: {PEOPLE} places from {} joins by {CALLERS} callers in {} transactions",
        2 * PEOPLE,
        transactions.len()
    );
    assert!(
        transactions.len() < PEOPLE,
        "every place had a transaction of its own ({})",
        transactions.len()
    );
    let (next_seq, waiting): (i64, i64) = sqlx::query_as(
        "SELECT next_seq, waiting FROM rooms WHERE namespace_id = $1 AND code = 'drop'",
    )
    .bind(stack.creds.namespace_id)
    .fetch_one(&stack.pg)
    .await
    .expect("the room");
    assert_eq!((next_seq, waiting), (PEOPLE as i64, PEOPLE as i64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_answers_repeats_and_spent_challenges_from_what_it_made_itself() {
    use sluice_store::batching::BatchWriter;
    use sluice_store::rooms::RoomRefusal;
    use sluice_store::rooms::join::{JoinRequest, Joined, Joins};

    let stack = stack_with_rooms("[[room]]\ncode = \"doors\"\nmax_active = 1\n").await;
    let request = |room: &str, subject: &str, challenge: Option<uuid::Uuid>| JoinRequest {
        namespace_id: stack.creds.namespace_id,
        room: room.into(),
        subject: subject.into(),
        challenge_id: challenge,
        join_key: None,
    };
    let challenge = uuid::Uuid::new_v4();
    let batch = [
        request("doors", "alice", None),
        request("doors", "alice", None),
        request("doors", "bob", Some(challenge)),
        request("doors", "carol", Some(challenge)),
        request("nowhere", "dave", None),
        request("doors", "erin", None),
    ];
    let outcomes = Joins.write(&stack.pg, &batch).await.expect("the batch");
    let new_id = |i: usize| match &outcomes[i] {
        Ok(Joined::New(place)) => place.id,
        other => panic!("join {i}: {other:?}"),
    };
    let alice = new_id(0);
    match &outcomes[1] {
        Ok(Joined::Existing(place)) => assert_eq!(place.id, alice, "alice's second join"),
        other => panic!("alice's second join: {other:?}"),
    }
    let bob = new_id(2);
    assert!(
        matches!(outcomes[3], Err(RoomRefusal::ChallengeUsed)),
        "{:?}",
        outcomes[3]
    );
    assert!(
        matches!(outcomes[4], Err(RoomRefusal::NoRoom)),
        "{:?}",
        outcomes[4]
    );
    let erin = new_id(5);

    let rows: Vec<(uuid::Uuid, i64)> =
        sqlx::query_as("SELECT id, seq FROM room_places WHERE namespace_id = $1 ORDER BY seq")
            .bind(stack.creds.namespace_id)
            .fetch_all(&stack.pg)
            .await
            .expect("the places");
    assert_eq!(rows, vec![(alice, 1), (bob, 2), (erin, 3)]);
}

/// A join batch looks up its subjects' live places. A drop's room fills in seconds, long before
/// anything analyzes `room_places`, and a connection keeps the plan it made while the room was
/// empty: that plan must still find the subjects by the index, not visit the room's every place
/// (with the room's columns first in the index, it did: 18.8 ms a batch at 20,000 places, and
/// joins fell from round to round as the room grew). The join's own query (read from `.sqlx/`)
/// is prepared with its generic plan on an empty, never analyzed table, then run on 20,000
/// places: it reads a few pages per subject asked, where visiting the room reads every place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_batch_finds_its_subjects_by_index_whatever_the_room_held_when_planned() {
    const PLACES: i64 = 20_000;
    const ASKED: usize = 48;
    let stack = stack_with_rooms("[[room]]\ncode = \"fresh\"\nmax_active = 1\n").await;
    // The two lookups of a batch: its subjects' live places, and the places of their join keys.
    let lookups = [
        (
            "live_places",
            "(uuid, text, text[])",
            crate::life_cycle::query_plans::checked_query(&[
                "FROM room_places",
                "subject = ANY($3)",
                "state IN ('waiting', 'admitted')",
            ]),
        ),
        (
            "keyed_places",
            "(uuid, text, text[], text[])",
            crate::life_cycle::query_plans::checked_query(&[
                "FROM room_places",
                "join_key = ANY($4)",
            ]),
        ),
    ];
    let mut conn = stack.pg.acquire().await.expect("a connection");
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .expect("generic plans");
    let asked: Vec<String> = (0..ASKED)
        .map(|i| format!("person-{}", 1 + i * 397))
        .collect();
    let keys: Vec<String> = (0..ASKED).map(|i| format!("key-{}", 1 + i * 397)).collect();
    let mut runs = Vec::new();
    for (name, types, query) in &lookups {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PREPARE {name} {types} AS {query}"
        )))
        .execute(&mut *conn)
        .await
        .expect("prepare");
        let keys_argument = if types.matches("text[]").count() == 2 {
            format!(", '{{{}}}'", keys.join(","))
        } else {
            String::new()
        };
        let run = format!(
            "EXECUTE {name}('{}', 'fresh', '{{{}}}'{keys_argument})",
            stack.creds.namespace_id,
            asked.join(",")
        );
        // The first execution makes the generic plan, on the empty table, and keeps it.
        let empty = sqlx::raw_sql(sqlx::AssertSqlSafe(run.clone()))
            .fetch_all(&mut *conn)
            .await
            .expect("the lookup on an empty room");
        assert!(empty.is_empty());
        runs.push(run);
    }
    insert_waiting_places(&stack, "fresh", PLACES).await;
    for run in runs {
        let explained: (serde_json::Value,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {run}"
        )))
        .fetch_one(&mut *conn)
        .await
        .expect("explain the kept plan");
        let plan = &explained.0[0]["Plan"];
        let pages = plan["Shared Hit Blocks"].as_i64().unwrap_or(0)
            + plan["Shared Read Blocks"].as_i64().unwrap_or(0);
        let found = plan["Actual Rows"].as_i64().unwrap_or(0);
        println!("{run}: {ASKED} subjects among {PLACES} places, {found} found, {pages} pages");
        assert_eq!(
            found, ASKED as i64,
            "every asked subject's place is found: {plan}"
        );
        assert!(
            pages < (ASKED * 10) as i64,
            "{pages} pages for {ASKED} subjects among {PLACES} places: {plan}"
        );
        assert!(
            !plan.to_string().contains("Seq Scan"),
            "the kept plan reads the whole room: {plan}"
        );
    }
}

/// A join sent again with its `Idempotency-Key` (its answer was lost) is answered the place that
/// key made, as it is now, even once that place has ended; a new key after it ended makes a new
/// place; a malformed key is refused and writes nothing. Witness: the subject's rows in
/// PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_retried_with_its_key_is_answered_its_place_even_once_ended() {
    let stack = stack_with_rooms("[[room]]\ncode = \"doors\"\nmax_active = 1\n").await;
    let rows = || async {
        let rows: Vec<(String, Option<String>, String)> = sqlx::query_as(
            "SELECT id::text, join_key, state FROM room_places
              WHERE namespace_id = $1 AND room = 'doors' AND subject = 'alice' ORDER BY seq",
        )
        .bind(stack.creds.namespace_id)
        .fetch_all(&stack.pg)
        .await
        .expect("alice's places");
        rows
    };
    let join_id = |reply: &crate::support::Reply| {
        reply.data()["join_id"]
            .as_str()
            .expect("a join id")
            .to_owned()
    };

    let first = join_keyed(&stack, "doors", "alice", "k-1").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    let first_id = join_id(&first);
    let ticket = first.data()["ticket"]
        .as_str()
        .expect("a ticket")
        .to_owned();
    let left = leave(&stack, "alice", "ticket", &ticket).await;
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);

    // The retry of the first join, after its place ended: that place, not a second one.
    let retried = join_keyed(&stack, "doors", "alice", "k-1").await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(join_id(&retried), first_id);
    assert_eq!(retried.data()["status"], "left");
    assert_eq!(retried.data()["deduplicated"], true);
    assert_eq!(rows().await.len(), 1, "a retried join made a second place");

    // Malformed keys: refused, nothing written.
    for key in ["has space", &"k".repeat(129)] {
        let refused = join_keyed(&stack, "doors", "alice", key).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(refused.body["error"]["details"]["field"], "Idempotency-Key");
    }
    assert_eq!(rows().await.len(), 1);

    // Joining again on purpose (a new key) makes a new place; without a key, the live one.
    let again = join_keyed(&stack, "doors", "alice", "k-2").await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{:?}", again.body);
    let again_id = join_id(&again);
    assert_ne!(again_id, first_id);
    let unkeyed = join(&stack, "doors", "alice").await;
    assert_eq!(
        (unkeyed.status, join_id(&unkeyed)),
        (StatusCode::OK, again_id.clone())
    );
    let old_key = join_keyed(&stack, "doors", "alice", "k-1").await;
    assert_eq!(
        (old_key.status, join_id(&old_key)),
        (StatusCode::OK, first_id.clone())
    );
    // Another subject's key of the same text is its own.
    let bob = join_keyed(&stack, "doors", "bob", "k-1").await;
    assert_eq!(bob.status, StatusCode::ACCEPTED, "{:?}", bob.body);

    let rows: Vec<(String, Option<String>)> = rows()
        .await
        .into_iter()
        .map(|(id, key, _)| (id, key))
        .collect();
    assert_eq!(
        rows,
        [
            (first_id, Some("k-1".into())),
            (again_id, Some("k-2".into()))
        ]
    );
}

/// A room that grows by thousands of places gets fresh planner statistics within seconds, from
/// the admission ticker, not a minute later from autovacuum. Witness: PostgreSQL's own record
/// of the table's last manual analysis (`pg_stat_user_tables.last_analyze`; autovacuum's are
/// recorded apart, in `last_autoanalyze`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_that_grows_is_analyzed_by_the_ticker_within_seconds() {
    let stack = stack_with_rooms("[[room]]\ncode = \"growing\"\nmax_active = 1\n").await;
    let analyzed = || async {
        let at: (Option<chrono::DateTime<chrono::Utc>>,) = sqlx::query_as(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE relid = 'room_places'::regclass",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("the table's statistics");
        at.0
    };
    let before: (chrono::DateTime<chrono::Utc>,) = sqlx::query_as("SELECT now()")
        .fetch_one(&stack.pg)
        .await
        .expect("the clock");
    insert_waiting_places(&stack, "growing", 5_000).await;
    let outcome = until(Duration::from_secs(15), || async {
        let at = analyzed().await;
        (at.is_some_and(|at| at > before.0), at)
    })
    .await;
    assert!(
        outcome.is_ok(),
        "room_places last analyzed at {outcome:?}, grown at {}",
        before.0
    );
}
