//! Attempt fencing and monotonic statuses: a start whose lease lapsed can neither land nor touch
//! the start that replaced it (the same at the script level: `durable/tests/lua/late_writes.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sluice_durable::ids::CommandId;
use tokio::sync::Notify;
use uuid::Uuid;

use super::{LEASE_MS, start_short_lease_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{arrivals_of, arrives, enqueue_ocr, ocr_stack, row};

/// The first request of a command is held until the second one arrives and then answered
/// `first`; the second is held three leases long and answered `second`.
async fn two_calls_backend(second_arrived: Arc<Notify>, seen: Arc<Mutex<usize>>) -> Backend {
    let answer = handler(move |_arrival| {
        let (second_arrived, seen) = (second_arrived.clone(), seen.clone());
        async move {
            let nth = {
                let mut seen = seen.lock().expect("seen");
                *seen += 1;
                *seen
            };
            let answer = |from: &str| {
                Answer::json(
                    200,
                    json!({"outcome": "succeeded", "result": {"from": from}}),
                )
            };
            if nth == 1 {
                let arrived = second_arrived.notified();
                let _ = tokio::time::timeout(Duration::from_secs(20), arrived).await;
                answer("first")
            } else {
                second_arrived.notify_waiters();
                tokio::time::sleep(Duration::from_millis(3 * LEASE_MS)).await;
                answer("second")
            }
        }
    });
    Backend::start(answer).await
}

/// A lease lapses while the attempt's request is still at the backend: the row is rescued and
/// started again under a new attempt by the same executor. The first attempt's answer, arriving
/// after the second started, cannot land; the second attempt keeps renewing although the first
/// one ended beside it (no third request), and its answer is the one PostgreSQL keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_attempt_cannot_land_and_the_new_one_keeps_renewing() {
    let second_arrived = Arc::new(Notify::new());
    let seen = Arc::new(Mutex::new(0));
    let backend = two_calls_backend(second_arrived.clone(), seen.clone()).await;
    let stack = ocr_stack(&backend, 20_000, 60, "").await;
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    let executor = start_short_lease_executor(&stack);
    assert!(
        arrives(&backend, &id, Duration::from_secs(10)).await,
        "the first attempt reached the backend"
    );
    // The first attempt's lease lapses, in PostgreSQL and in Redis (as if its executor had
    // stalled): the sweeper rescues the row and the executor starts it again. A renewal racing
    // the backdating puts the lease forward again, so it is backdated until the second attempt
    // shows up.
    let command: Uuid = id.parse().expect("uuid");
    let rescued = eventually(Duration::from_secs(10), || async {
        lapse(&stack, command).await;
        arrivals_of(&backend, &id).len() >= 2
    })
    .await;
    assert!(
        rescued,
        "the command was started again after its lease lapsed"
    );
    let first_attempt = arrivals_of(&backend, &id)[0].body["attempt"].clone();
    let second_attempt = arrivals_of(&backend, &id)[1].body["attempt"].clone();
    assert_eq!((first_attempt, second_attempt), (json!(1), json!(2)));

    let landed = eventually(Duration::from_secs(15), || async {
        row(&stack, &id).await["status"] == "succeeded"
    })
    .await;
    assert!(landed, "{}", row(&stack, &id).await);
    let landed = row(&stack, &id).await;
    assert_eq!(
        landed["result"],
        json!({"from": "second"}),
        "only the attempt holding the row lands: {landed}"
    );
    assert_eq!(landed["attempts"], 2, "{landed}");
    assert_eq!(
        arrivals_of(&backend, &id).len(),
        2,
        "the second attempt kept its lease for its three-lease-long request: no third start"
    );
    executor.cancel();
}

/// Backdates the lease of `command`'s first attempt in PostgreSQL and every permit it holds in
/// Redis, as a stalled executor would leave them. Fenced by the attempt on both sides: once the
/// second attempt holds the row, neither its lease nor its permits (the same members of the same
/// sets) are touched, so the test cannot lapse the attempt it watches keep renewing.
async fn lapse(stack: &Stack, command: Uuid) {
    let first: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE commands SET lease_expires_at = now() - interval '10 seconds'
          WHERE id = $1 AND status = 'executing' AND attempts = 1
          RETURNING attempt_id",
    )
    .bind(command)
    .fetch_optional(&stack.pg)
    .await
    .expect("backdate the lease");
    if let Some((attempt,)) = first {
        backdate_permits(stack, command, attempt).await;
    }
}

/// Backdates every permit `command` holds in Redis, as long as `attempt` still holds them (one
/// script, so a new attempt's permits, the same members of the same sets, are never touched).
pub(super) async fn backdate_permits(stack: &Stack, command: Uuid, attempt: Uuid) {
    use fred::prelude::*;
    const BACKDATE_IF_ATTEMPT: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'attempt', 'held')
if h[1] ~= ARGV[1] or not h[2] then return 0 end
for _, lease in ipairs(cjson.decode(h[2])) do
  redis.call('ZADD', lease, 'XX', 1, ARGV[2])
end
return 1"#;
    let _: i64 = stack
        .redis
        .pool()
        .next()
        .eval(
            BACKDATE_IF_ATTEMPT,
            vec![stack.keys().command(CommandId::from_uuid(command))],
            vec![attempt.to_string(), command.to_string()],
        )
        .await
        .expect("backdate the attempt's permits");
}
