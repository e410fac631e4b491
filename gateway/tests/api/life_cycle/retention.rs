//! Retention by whole days of `commands` (durable/src/lifecycle/retention.rs): a day goes only
//! when every command of it ended before the cutoff, its request keys forgotten in PostgreSQL
//! and in Redis first; a day found in use after its detach is attached again. Witnesses are
//! PostgreSQL's catalog and rows and Redis's hashes, never the retention's own report alone.

use std::time::Duration;

use chrono::{DateTime, Utc};
use fred::interfaces::HashesInterface;
use hyper::StatusCode;
use sluice_durable::lifecycle::retention::{prune, prune_before};
use sluice_redis::request_key_field;
use sluice_store::outbox::days::Day;

use crate::execution::{cancel, id_of, record};
use crate::support::*;

pub(crate) async fn db_now(stack: &Stack) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(&stack.pg)
        .await
        .expect("now")
}

/// Whether the table of `day` exists, and whether it is a partition of `commands`.
async fn day_table(stack: &Stack, day: Day) -> (bool, bool) {
    let attached: Option<bool> =
        sqlx::query_scalar("SELECT relispartition FROM pg_class WHERE oid = to_regclass($1)")
            .bind(day.partition())
            .fetch_optional(&stack.pg)
            .await
            .expect("pg_class");
    (attached.is_some(), attached == Some(true))
}

/// The day three days ago, made (empty) in `stack`'s database.
async fn old_day(stack: &Stack) -> Day {
    let today = Day::of(db_now(stack).await);
    let old = Day::of(today.end() - chrono::Duration::days(3));
    make_day(stack, old).await;
    old
}

async fn make_day(stack: &Stack, day: Day) {
    sqlx::query("SELECT sluice_ensure_command_days($1, $1)")
        .bind(day.date())
        .execute(&stack.pg)
        .await
        .expect("a day of commands");
}

/// Makes `day` and writes `rows` commands of it with `status`, accepted an hour before its end
/// (and ended then, if `status` is final), each with its request key held: subjects
/// `<status>-<i>`, keys `k<i>`.
pub(crate) async fn fill_day(stack: &Stack, day: Day, rows: i64, status: &str) {
    make_day(stack, day).await;
    sqlx::query(
        "WITH made AS (
             INSERT INTO commands (id, application_id, namespace_id, command, subject,
                    request_key, content_sha256, input, resource_key, queue_seq, status,
                    accepted_at, deadline_at, max_wait_at, updated_at, finished_at)
             SELECT (substr(replace($3::uuid::text, '-', ''), 1, 12) || '7'
                     || lpad(to_hex(i), 19, '0'))::uuid, $1, $2, 'claim', $4 || '-' || i,
                    'k' || i, '\\x00'::bytea, '{}'::jsonb, 'r', i, $4, $5, $5, $5, $5,
                    CASE WHEN $4 IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')
                         THEN $5 END
               FROM generate_series(1, $6) AS i
             RETURNING id, application_id, namespace_id, command, subject, request_key)
         INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id,
                                   application_id)
         SELECT namespace_id, command, subject, request_key, id, application_id FROM made",
    )
    .bind(stack.creds.application_id)
    .bind(stack.creds.namespace_id)
    .bind(day.first_id())
    .bind(status)
    .bind(day.end() - chrono::Duration::hours(1))
    .bind(rows)
    .execute(&stack.pg)
    .await
    .expect("a day's commands");
}

/// A counter of this process's executor metrics.
fn executor_counter(name: &str) -> f64 {
    let text = sluice_metrics::executor_text();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in\n{text}"))
        .trim()
        .parse()
        .expect("a number")
}

async fn request_keys_rows(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM request_keys")
        .fetch_one(&stack.pg)
        .await
        .expect("request_keys")
}

/// What the projection answers for a request key (a replay is answered from it).
async fn redis_key(stack: &Stack, subject: &str, key: &str) -> Option<String> {
    stack
        .redis
        .pool()
        .next()
        .hget(
            stack.keys().request_keys(stack.creds.namespace_id, "claim"),
            request_key_field(subject, key),
        )
        .await
        .expect("HGET")
}

/// A day holding a waiting command stays whole, keys and all, however old its ended commands
/// are; once every command of it ended before the cutoff, its keys are forgotten (PostgreSQL and
/// Redis), its table is gone, its commands read 404, and the same key is a new intent, accepted
/// into the day made again by the group commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_goes_whole_once_every_command_of_it_ended() {
    let stack = Stack::start().await;
    let offer = offer();
    let (done_key, waiting_key) = (key(), key());
    let done = stack.enqueue("u-done", &done_key, &offer).await;
    assert_eq!(done.status, StatusCode::ACCEPTED, "{:?}", done.body);
    assert_eq!(
        cancel(&stack, &id_of(&done)).await.data()["status"],
        "cancelled"
    );
    let waiting = stack.enqueue("u-wait", &waiting_key, &offer).await;
    assert_eq!(waiting.status, StatusCode::ACCEPTED, "{:?}", waiting.body);
    let today = Day::of(db_now(&stack).await);
    assert_eq!(day_table(&stack, today).await, (true, true));

    // Nothing ended an hour ago: nothing to do.
    let pruned = prune(&stack.pg, &stack.redis, 3_600).await.expect("prune");
    assert_eq!(pruned.keys_forgotten, 0);
    assert!(!pruned.days_dropped.contains(&today), "{pruned:?}");

    // The end of today as the cutoff: the waiting command holds its day.
    let pruned = prune_before(&stack.pg, &stack.redis, today.end())
        .await
        .expect("prune");
    assert!(pruned.days_held.contains(&today), "{pruned:?}");
    assert_eq!(pruned.keys_forgotten, 0, "{pruned:?}");
    assert_eq!(day_table(&stack, today).await, (true, true));
    assert_eq!(request_keys_rows(&stack).await, 2);
    assert!(redis_key(&stack, "u-done", &done_key).await.is_some());
    assert_eq!(record(&stack, &id_of(&done)).await.status, StatusCode::OK);

    // Once it ended too, the day goes, its keys first.
    assert_eq!(
        cancel(&stack, &id_of(&waiting)).await.data()["status"],
        "cancelled"
    );
    let dropped_before = executor_counter("sluice_retention_days_dropped_total");
    let forgotten_before = executor_counter("sluice_retention_keys_forgotten_total");
    let pruned = prune_before(&stack.pg, &stack.redis, today.end())
        .await
        .expect("prune");
    assert_eq!(pruned.keys_forgotten, 2, "{pruned:?}");
    // The executor's metrics count them (other tests of this process only add to them).
    assert!(
        executor_counter("sluice_retention_days_dropped_total")
            >= dropped_before + pruned.days_dropped.len() as f64
    );
    assert!(executor_counter("sluice_retention_keys_forgotten_total") >= forgotten_before + 2.0);
    assert!(pruned.days_dropped.contains(&today), "{pruned:?}");
    assert_eq!(day_table(&stack, today).await, (false, false), "dropped");
    assert_eq!(request_keys_rows(&stack).await, 0);
    assert_eq!(redis_key(&stack, "u-done", &done_key).await, None);
    assert_eq!(redis_key(&stack, "u-wait", &waiting_key).await, None);
    for reply in [&done, &waiting] {
        assert_eq!(
            record(&stack, &id_of(reply)).await.status,
            StatusCode::NOT_FOUND
        );
    }

    // The forgotten key is a new intent; its day is made again by the commit that needs it.
    let again = stack.enqueue("u-done", &done_key, &offer).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{:?}", again.body);
    assert_ne!(id_of(&again), id_of(&done));
    assert_eq!(day_table(&stack, today).await, (true, true));
    assert_eq!(record(&stack, &id_of(&again)).await.status, StatusCode::OK);
    assert_eq!(stack.count_rows().await, 1);
}

/// A day left detached by a round that stopped before its drop: dropped by the next round when
/// nothing in it is in use; attached again, rows and all, when a late write put an unfinished
/// command in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_left_detached_is_dropped_or_attached_again() {
    let stack = Stack::start().await;
    let offer = offer();
    let first = stack.enqueue("u-1", &key(), &offer).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    let today = Day::of(db_now(&stack).await);
    let detach = format!(
        "ALTER TABLE commands DETACH PARTITION {}",
        today.partition()
    );

    // Unfinished: attached again, and the command reads as before.
    sqlx::query(sqlx::AssertSqlSafe(detach.clone()))
        .execute(&stack.pg)
        .await
        .expect("detach");
    assert_eq!(day_table(&stack, today).await, (true, false));
    let pruned = prune_before(&stack.pg, &stack.redis, today.end())
        .await
        .expect("prune");
    assert!(!pruned.days_dropped.contains(&today), "{pruned:?}");
    assert_eq!(
        day_table(&stack, today).await,
        (true, true),
        "attached again"
    );
    assert_eq!(record(&stack, &id_of(&first)).await.status, StatusCode::OK);
    assert_eq!(stack.count_rows().await, 1);

    // Ended and detached again: dropped.
    assert_eq!(
        cancel(&stack, &id_of(&first)).await.data()["status"],
        "cancelled"
    );
    sqlx::query("DELETE FROM request_keys")
        .execute(&stack.pg)
        .await
        .expect("keys forgotten, as the round before the detach did");
    sqlx::query(sqlx::AssertSqlSafe(detach))
        .execute(&stack.pg)
        .await
        .expect("detach");
    let pruned = prune_before(&stack.pg, &stack.redis, today.end())
        .await
        .expect("prune");
    assert!(pruned.days_dropped.contains(&today), "{pruned:?}");
    assert_eq!(day_table(&stack, today).await, (false, false));
}

/// The days PostgreSQL keeps ready: yesterday to three days ahead after `migrate`, and a day a
/// batch needs is made by the group commit itself when no executor made it (the first enqueue
/// after the day was dropped by hand is accepted, not refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn days_are_ready_ahead_and_made_when_missing() {
    let stack = Stack::start().await;
    let today = Day::of(db_now(&stack).await);
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'commands'::regclass ORDER BY 1",
    )
    .fetch_all(&stack.pg)
    .await
    .expect("partitions");
    let expected: Vec<String> = (-1..=i64::from(sluice_store::outbox::days::DAYS_AHEAD))
        .map(|offset| Day::of(today.end() + chrono::Duration::days(offset - 1)).partition())
        .collect();
    assert_eq!(names, expected);
    // Their bounds are PostgreSQL's `sluice_day_floor` and the Rust side's, alike.
    let floor: uuid::Uuid = sqlx::query_scalar("SELECT sluice_day_floor($1)")
        .bind(today.date())
        .fetch_one(&stack.pg)
        .await
        .expect("floor");
    assert_eq!(floor, today.first_id());

    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE {}",
        today.partition()
    )))
    .execute(&stack.pg)
    .await
    .expect("drop today");
    let accepted = stack.enqueue("u-1", &key(), &offer()).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{:?}", accepted.body);
    assert_eq!(day_table(&stack, today).await, (true, true));
    assert_eq!(stack.count_rows().await, 1);
}

/// The migration to days: the commands of a database migrated before it (three days of them,
/// one a week old, ended and waiting alike) are each in the day of its id afterwards, with every
/// column as it was, and each request key still held by its command (a replay is one, a key
/// reused with other content still conflicts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_moves_every_command_into_its_day() {
    const BEFORE_DAYS: i64 = 20261205000001;
    let url = sluice_testkit::shared_postgres().fresh_database().await;
    let pg = sluice_store::db::connect(&url, 4).await.expect("connect");
    sluice_store::db::MIGRATOR
        .run_to(BEFORE_DAYS, &pg)
        .await
        .expect("the migrations before the days");
    let (app, ns) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    sqlx::query("INSERT INTO applications (id, name) VALUES ($1, 'before')")
        .bind(app)
        .execute(&pg)
        .await
        .expect("an application");
    sqlx::query("INSERT INTO namespaces (id, application_id, name, webhook_secret) VALUES ($1, $2, 'main', 's')")
        .bind(ns)
        .bind(app)
        .execute(&pg)
        .await
        .expect("a namespace");
    // Ids of 7, 1 and 0 days ago; every third one still waiting.
    sqlx::query(
        "INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                content_sha256, input, resource_key, queue_seq, status, accepted_at, deadline_at,
                max_wait_at, updated_at, finished_at, result)
         SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0') || '7'
                 || lpad(to_hex(i), 19, '0'))::uuid, $1, $2, 'claim', 's' || i, 'k' || i,
                sha256(convert_to(i::text, 'UTF8')), jsonb_build_object('n', i), 'r', i,
                CASE WHEN i % 3 = 0 THEN 'accepted' ELSE 'succeeded' END, t.at, t.at, t.at, t.at,
                CASE WHEN i % 3 = 0 THEN NULL ELSE t.at END,
                CASE WHEN i % 3 = 0 THEN NULL ELSE jsonb_build_object('done', i) END
           FROM generate_series(1, 30) AS i,
                LATERAL (SELECT now() - make_interval(days => (ARRAY[7, 1, 0])[i % 3 + 1]) AS at) AS t",
    )
    .bind(app)
    .bind(ns)
    .execute(&pg)
    .await
    .expect("commands before the days");
    let snapshot = "SELECT to_jsonb(c) FROM commands c ORDER BY id";
    let before: Vec<serde_json::Value> = sqlx::query_scalar(snapshot)
        .fetch_all(&pg)
        .await
        .expect("rows before");

    sluice_store::db::run_migrations(&pg)
        .await
        .expect("migrate");

    let after: Vec<serde_json::Value> = sqlx::query_scalar(snapshot)
        .fetch_all(&pg)
        .await
        .expect("rows after");
    assert_eq!(after.len(), 30);
    // Later migrations may add columns; every column the rows had is compared.
    let columns_before: std::collections::BTreeSet<String> = before
        .first()
        .and_then(serde_json::Value::as_object)
        .map(|row| row.keys().cloned().collect())
        .unwrap_or_default();
    assert!(columns_before.contains("status"), "{columns_before:?}");
    let after: Vec<serde_json::Value> = after
        .into_iter()
        .map(|row| match row {
            serde_json::Value::Object(columns) => serde_json::Value::Object(
                columns
                    .into_iter()
                    .filter(|(name, _)| columns_before.contains(name))
                    .collect(),
            ),
            other => other,
        })
        .collect();
    assert_eq!(after, before, "every column of every command as it was");
    let misplaced: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT id, tableoid::regclass::text FROM commands
          WHERE tableoid::regclass::text <> 'commands_d' || to_char(sluice_day_of(id), 'YYYYMMDD')",
    )
    .fetch_all(&pg)
    .await
    .expect("days of rows");
    assert!(
        misplaced.is_empty(),
        "rows outside their day: {misplaced:?}"
    );
    let days: i64 = sqlx::query_scalar("SELECT count(DISTINCT tableoid) FROM commands")
        .fetch_one(&pg)
        .await
        .expect("days");
    assert_eq!(days, 3);
    let keys: Vec<(String, uuid::Uuid)> = sqlx::query_as(
        "SELECT k.request_key, k.command_id FROM request_keys k
           JOIN commands c ON c.id = k.command_id AND c.request_key = k.request_key
                          AND c.subject = k.subject AND c.application_id = k.application_id",
    )
    .fetch_all(&pg)
    .await
    .expect("request keys");
    assert_eq!(keys.len(), 30, "each command's key, held by it");

    // Idempotency holds across the move: the key of the week-old command is taken.
    let week_old: (uuid::Uuid, String, String) =
        sqlx::query_as("SELECT id, subject, request_key FROM commands ORDER BY id LIMIT 1")
            .fetch_one(&pg)
            .await
            .expect("the oldest");
    let taken = sqlx::query(
        "INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id,
                                   application_id)
         VALUES ($1, 'claim', $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(ns)
    .bind(&week_old.1)
    .bind(&week_old.2)
    .bind(uuid::Uuid::now_v7())
    .bind(app)
    .execute(&pg)
    .await
    .expect("a second claim of the key");
    assert_eq!(
        taken.rows_affected(),
        0,
        "the key is still {}'s",
        week_old.0
    );
}

/// A day dropped while intake goes on: every enqueue made during the drop is accepted and its
/// command is in PostgreSQL afterwards (the detach never blocks or loses a commit of today), and
/// the old day is gone with its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_drops_while_intake_goes_on() {
    let stack = std::sync::Arc::new(Stack::start().await);
    let old = old_day(&stack).await;
    // 500 commands of that day, ended then, their keys held.
    fill_day(&stack, old, 500, "succeeded").await;

    // Callers enqueue without pause from before the drop until after it.
    let offer = offer();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..64)
        .map(|caller| {
            let (stack, offer, done) = (stack.clone(), offer.clone(), done.clone());
            tokio::spawn(async move {
                let mut replies = Vec::new();
                while !done.load(std::sync::atomic::Ordering::SeqCst) || replies.len() < 5 {
                    let subject = format!("new-{caller}-{}", replies.len());
                    replies.push(stack.enqueue(&subject, &key(), &offer).await);
                }
                replies
            })
        })
        .collect();
    let mut dropped = false;
    for _ in 0..10 {
        let pruned = prune(&stack.pg, &stack.redis, 86_400).await.expect("prune");
        dropped |= pruned.days_dropped.contains(&old);
        if dropped {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut accepted = Vec::new();
    for caller in callers {
        for reply in caller.await.expect("a caller") {
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
            accepted.push(uuid::Uuid::parse_str(&id_of(&reply)).expect("an id"));
        }
    }
    assert!(dropped, "the old day was dropped");
    assert_eq!(day_table(&stack, old).await, (false, false));
    let landed: i64 = sqlx::query_scalar("SELECT count(*) FROM commands WHERE id = ANY($1)")
        .bind(&accepted)
        .fetch_one(&stack.pg)
        .await
        .expect("accepted rows");
    let accepted = accepted.len() as i64;
    assert_eq!(landed, accepted, "every accepted command is in PostgreSQL");
    assert_eq!(stack.count_rows().await, accepted);
    assert_eq!(
        request_keys_rows(&stack).await,
        accepted,
        "only the new keys are held"
    );
}

/// Dropping a day locks nothing an acceptance or an authentication reads: with a transaction
/// open that read `applications` and `namespaces` (as every request's credential lookup and any
/// check of a command's application do), an old day is still detached and dropped, at once.
/// (A foreign key from `commands` to either would make the drop wait for that reader under an
/// ACCESS EXCLUSIVE lock, stopping every reader queued behind it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_drops_beside_readers_of_applications_and_namespaces() {
    let stack = Stack::start().await;
    let old = old_day(&stack).await;
    let mut reader = stack.pg.begin().await.expect("begin");
    let read: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM applications) + (SELECT count(*) FROM namespaces)",
    )
    .fetch_one(&mut *reader)
    .await
    .expect("a reader");
    assert!(read >= 2);
    let pruned = tokio::time::timeout(
        Duration::from_secs(3),
        prune(&stack.pg, &stack.redis, 86_400),
    )
    .await
    .expect("the drop waited for a reader of applications or namespaces")
    .expect("prune");
    assert!(pruned.days_dropped.contains(&old), "{pruned:?}");
    assert_eq!(day_table(&stack, old).await, (false, false));
    reader.rollback().await.expect("rollback");
}
