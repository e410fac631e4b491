//! A flood of random bearers and random subject-token `kid`s costs PostgreSQL at most the
//! per-process budget for unknown identities, while a valid caller is served throughout. The
//! witness is PostgreSQL's own count of the scans of `credentials` and `subject_keys`
//! (`pg_stat_user_tables`): every lookup of a bearer or a `kid` is one scan of one of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::identity::subject_token;
use sluice_store::secrets;
use sqlx::{Connection, PgConnection};

use crate::support::*;

const BUDGET_PER_SECOND: u32 = 10;
const FLOOD: Duration = Duration::from_secs(3);

/// Scans of the identity tables, as PostgreSQL counts them, once every backend has reported
/// its share. A backend reports within a second of a transaction or, idle, within
/// `PGSTAT_IDLE_INTERVAL` (10 s), but always as it exits: so every backend of the stack's
/// database is ended (the pools open new connections on their next use) and the count is read
/// once their processes are gone, on a connection of the witness's own that looked nothing up.
/// A backend leaves `pg_stat_activity` before it writes its counts, so the wait is on the
/// process itself (the test's PostgreSQL runs on this machine).
async fn settled_identity_scans(stack: &Stack) -> i64 {
    let mut witness = PgConnection::connect(&stack.database_url)
        .await
        .expect("the witness's own connection");
    let ended: Vec<i32> = sqlx::query_scalar(
        "WITH others AS MATERIALIZED (
             SELECT pid FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid())
         SELECT pid FROM others WHERE pg_terminate_backend(pid)",
    )
    .fetch_all(&mut witness)
    .await
    .expect("end the other backends");
    let gone = eventually(Duration::from_secs(10), || async {
        ended.iter().all(|pid| process_ended(*pid))
    })
    .await;
    assert!(gone, "the ended backends {ended:?} did not exit");
    let scans = sqlx::query_scalar::<_, i64>(
        "SELECT coalesce(sum(coalesce(idx_scan, 0) + coalesce(seq_scan, 0)), 0)::bigint
           FROM pg_stat_user_tables WHERE relname IN ('credentials', 'subject_keys')",
    )
    .fetch_one(&mut witness)
    .await
    .expect("pg_stat_user_tables");
    let _ = witness.close().await;
    scans
}

/// Whether the process `pid` has ended: no longer in `/proc`, or a zombie waiting to be reaped
/// (its exit, and with it every exit callback, is done).
fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses and may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn random_bearer() -> String {
    secrets::new_credential_secret()
}

fn random_kid_token() -> String {
    let now = sluice_gateway::identity::auth::now_unix();
    subject_token::issue(
        &secrets::new_key_id(),
        b"not the key",
        "someone",
        now,
        now + 60,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_bearers_and_kids_cost_at_most_the_lookup_budget() {
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            config: GatewayConfig {
                unknown_lookups_per_second: BUDGET_PER_SECOND,
                ..GatewayConfig::default()
            },
            ..StackOptions::default()
        })
        .await,
    );
    // The valid caller replays one accepted enqueue: Redis answers it, so its PostgreSQL cost
    // is only the credential and namespace reloads, once per cache period each. Its identity
    // is known before the flood, as a live caller's would be.
    let (request_key, offer) = (key(), offer());
    let first = stack.enqueue("valid-user", &request_key, &offer).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);

    let before = settled_identity_scans(&stack).await;
    let started = Instant::now();
    let mut flood = Vec::new();
    for worker in 0..16 {
        let stack = stack.clone();
        flood.push(tokio::spawn(async move {
            let (mut sent, mut refused) = (0u64, 0u64);
            while started.elapsed() < FLOOD {
                let bearer = if (sent + worker) % 2 == 0 {
                    random_bearer()
                } else {
                    random_kid_token()
                };
                let reply = stack.get("/v1/status", Some(&bearer)).await;
                assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{:?}", reply.body);
                sent += 1;
                refused += u64::from(reply.code() == "UNAUTHENTICATED");
            }
            (sent, refused)
        }));
    }
    // Meanwhile the valid caller is answered throughout.
    let mut slowest = Duration::ZERO;
    while started.elapsed() < FLOOD {
        let at = Instant::now();
        let reply = stack.enqueue("valid-user", &request_key, &offer).await;
        slowest = slowest.max(at.elapsed());
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        assert_eq!(reply.data()["deduplicated"], true, "{:?}", reply.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut sent = 0;
    for worker in flood {
        let (s, refused) = worker.await.expect("flood worker");
        assert_eq!(
            s, refused,
            "every flood request is refused as unauthenticated"
        );
        sent += s;
    }
    let elapsed = started.elapsed();
    let after = settled_identity_scans(&stack).await;

    // Allowed: the budget over the flood (its burst of one second's worth, then its rate) and
    // the valid caller's credential reloads (one per cache period of 1 s).
    let seconds = elapsed.as_secs_f64().ceil() as i64;
    let lookups = after - before;
    let budget = i64::from(BUDGET_PER_SECOND) * (seconds + 1) + (seconds + 1);
    assert!(
        sent > 500,
        "the flood was too small to show anything: {sent} requests"
    );
    // The budget's first second alone is spent on unknown identities: a witness that counted
    // fewer did not see the lookups at all (and would pass the malformed test vacuously).
    assert!(
        lookups >= i64::from(BUDGET_PER_SECOND),
        "PostgreSQL counted only {lookups} identity scans for {sent} unknown identities"
    );
    assert!(
        lookups <= budget,
        "{sent} unknown bearers and kids cost {lookups} lookups in PostgreSQL in {elapsed:?}; \
         the budget allows {budget}"
    );
    println!(
        "flood: {sent} random bearers and kids in {elapsed:?} cost {lookups} lookups \
         (budget {budget}); the valid caller's slowest answer took {slowest:?}"
    );
}

/// Bearers that cannot be credentials and tokens whose `kid` cannot be a key id are refused
/// before any lookup: PostgreSQL scans the identity tables not once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bearers_and_kids_cost_no_lookup() {
    let stack = Stack::start().await;
    let before = settled_identity_scans(&stack).await;
    let now = sluice_gateway::identity::auth::now_unix();
    let good = secrets::new_credential_secret();
    let mut refused = 0;
    for i in 0..400 {
        let bearer = match i % 4 {
            0 => format!("slc_{}", &good[4..good.len() - 1]),
            1 => good.replacen("slc_", "slx_", 1),
            2 => format!("{}{i}", uuid::Uuid::new_v4()),
            _ => subject_token::issue(&format!("key-{i}"), b"secret", "someone", now, now + 60),
        };
        let reply = stack.get("/v1/status", Some(&bearer)).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{bearer}: {:?}",
            reply.body
        );
        refused += 1;
    }
    let after = settled_identity_scans(&stack).await;
    assert_eq!(refused, 400);
    assert_eq!(after - before, 0, "malformed identities were looked up");
}
