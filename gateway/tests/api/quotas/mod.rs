//! Reserved quotas and the allocation and pool APIs: a unit held until its holder confirms or
//! releases it or the database's clock expires it; the pool's counts always what the allocation
//! rows say (read from PostgreSQL by the tests, never from the handler's own answers).

mod contract;
mod outages;
mod pools;
mod races;

use std::collections::HashMap;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::execution::{all_terminal, fast_executor, start_executor};
use crate::support::*;

/// A reserved-mode command `hold` on pool `seats` of `capacity`, units held `seconds`.
pub(crate) fn reserved_declaration(capacity: u64, seconds: u32) -> String {
    format!(
        r#"
[[command]]
code = "hold"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
intake = {{ per_second = 1000000, burst = 1000000, max_in_flight = 100000 }}
admission = {{ max_queue = 1000000, max_in_flight = 256 }}
handler = {{ kind = "quota", pool = "seats", mode = "reserved", reservation_seconds = {seconds} }}

[[quota_pool]]
code = "seats"
capacity = {capacity}
"#
    )
}

/// Enqueues `hold` for `subject` with the namespace credential.
pub(crate) async fn hold(stack: &Stack, subject: &str, offer: &str) -> Reply {
    let body = json!({"request_key": key(), "subject": subject, "input": {"offer": offer}});
    stack
        .post(
            "/v1/commands/hold:enqueue",
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await
}

/// The landed result of the command a receipt names, read from PostgreSQL:
/// (status, result, error code).
pub(crate) async fn landed(stack: &Stack, receipt: &Reply) -> (String, Value, Option<String>) {
    let id: uuid::Uuid = receipt.data()["command_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("command_id");
    let row: (String, Option<Value>, Option<String>) =
        sqlx::query_as("SELECT status, result, error_code FROM commands WHERE id = $1")
            .bind(id)
            .fetch_one(&stack.pg)
            .await
            .expect("command row");
    (row.0, row.1.unwrap_or(Value::Null), row.2)
}

/// [`landed`] once the command is final, polled until `within` has passed (`None` then).
pub(crate) async fn landed_within(
    stack: &Stack,
    receipt: &Reply,
    within: Duration,
) -> Option<(String, Value, Option<String>)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let landed = landed(stack, receipt).await;
        let terminal = ["succeeded", "rejected", "failed", "expired", "cancelled"];
        if terminal.contains(&landed.0.as_str()) {
            return Some(landed);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `POST /v1/allocations/{id}:{verb}` with `bearer` and an empty body.
pub(crate) async fn act(stack: &Stack, id: &str, verb: &str, bearer: &str) -> Reply {
    stack
        .request(
            hyper::Method::POST,
            &format!("/v1/allocations/{id}:{verb}"),
            Some(bearer),
            None,
        )
        .await
}

/// The pool's row: (capacity, allocated, reserved, revision).
pub(crate) async fn pool_row(pg: &PgPool, pool: &str) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT capacity, allocated, reserved, revision FROM quota_pools WHERE code = $1",
    )
    .bind(pool)
    .fetch_one(pg)
    .await
    .expect("pool row")
}

/// Allocation rows of `pool` by state.
pub(crate) async fn states(pg: &PgPool, pool: &str) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT state, count(*) FROM allocations WHERE pool = $1 GROUP BY state",
    )
    .bind(pool)
    .fetch_all(pg)
    .await
    .expect("states")
    .into_iter()
    .collect()
}

/// The pool's counts equal its allocation rows: `allocated` the confirmed ones, `reserved` the
/// reserved ones, read in one snapshot.
pub(crate) async fn assert_counts_match_rows(pg: &PgPool, pool: &str) {
    let mut tx = pg.begin().await.expect("begin");
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .expect("repeatable read");
    let (capacity, allocated, reserved): (i64, i64, i64) =
        sqlx::query_as("SELECT capacity, allocated, reserved FROM quota_pools WHERE code = $1")
            .bind(pool)
            .fetch_one(&mut *tx)
            .await
            .expect("pool");
    let (confirmed, held): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state = 'confirmed'), count(*) FILTER (WHERE state = 'reserved')
           FROM allocations WHERE pool = $1",
    )
    .bind(pool)
    .fetch_one(&mut *tx)
    .await
    .expect("rows");
    assert_eq!(allocated, confirmed, "allocated = confirmed rows");
    assert_eq!(reserved, held, "reserved = reserved rows");
    assert!(allocated + reserved <= capacity);
}
