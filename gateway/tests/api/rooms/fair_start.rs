//! The fair start: 10,000 people join the pre-queue before `opens_at`; at the start the room
//! reveals the seed it committed to, and the queue's order (read from PostgreSQL, and as the
//! people's polls show it) is exactly what an independent Python script computes from the
//! revealed seed and the published join ids. Later arrivals queue behind, first come, first
//! served.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_store::tenancy;

use super::kit::*;
use crate::support::*;

const PEOPLE: usize = 10_000;
const CALLERS: usize = 32;

fn declaration(opens_at: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "{CLAIM_DECLARATION}\n[[room]]\ncode = \"drop\"\nadmit_per_minute = 600\n\
         opens_at = \"{}\"\nprequeue_seconds = 7200\n",
        opens_at.format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// The documented order, computed without any of Sluice's code: ascending
/// SHA-256(seed bytes ‖ join id text). Also checks the seed against its commitment.
const ORDER_SCRIPT: &str = r#"
import hashlib, json, sys
room = json.load(sys.stdin)
seed = bytes.fromhex(room["seed"])
assert hashlib.sha256(seed).hexdigest() == room["seed_sha256"], "the seed is not the committed one"
ids = sorted(room["join_ids"], key=lambda i: (hashlib.sha256(seed + i.encode()).digest(), i))
json.dump(ids, sys.stdout)
"#;

fn recompute(seed: &str, seed_sha256: &str, join_ids: &Value) -> Vec<String> {
    let mut child = Command::new("python3")
        .args(["-c", ORDER_SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let input = json!({"seed": seed, "seed_sha256": seed_sha256, "join_ids": join_ids});
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write the room to the script");
    let output = child.wait_with_output().expect("the script ran");
    assert!(output.status.success(), "the order script failed");
    serde_json::from_slice(&output.stdout).expect("the script's order")
}

async fn room(stack: &Stack) -> Value {
    let reply = stack.get("/v1/rooms/drop", Some(&stack.credential())).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.data().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prequeue_is_admitted_in_the_order_the_revealed_seed_gives() {
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Arc::new(Stack::with_declaration(&declaration(later)).await);
    let before = room(&stack).await;
    let commitment = before["seed_sha256"]
        .as_str()
        .expect("committed")
        .to_owned();
    assert_eq!(
        before["seed"],
        json!(null),
        "the seed is secret until the start"
    );

    // Everyone joins the pre-queue: a place, no position yet.
    let joining = std::time::Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let stack = stack.clone();
        callers.spawn(async move {
            let mut tickets = Vec::new();
            for person in (caller..PEOPLE).step_by(CALLERS) {
                let reply = join(&stack, "drop", &format!("p{person}")).await;
                assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
                assert_eq!(reply.data()["prequeue"], json!(true));
                assert_eq!(reply.data()["queue"], json!(null));
                if person % 500 == 0 {
                    tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_owned());
                }
            }
            tickets
        });
    }
    let mut sample = Vec::new();
    while let Some(tickets) = callers.join_next().await {
        sample.extend(tickets.expect("a caller"));
    }

    let joined_in = joining.elapsed();

    // The operator brings the start forward; the ticker draws at it.
    let start = chrono::Utc::now() + chrono::Duration::seconds(2);
    tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &declaration(start),
        "test",
        None,
    )
    .await
    .expect("move the start");
    let revealed = until(Duration::from_secs(15), || {
        let stack = &stack;
        async move {
            let revealed = room(stack).await;
            (!revealed["drawn_at"].is_null(), revealed)
        }
    })
    .await
    .unwrap_or_else(|last| panic!("never drawn: {last}"));
    let (draw_ms,): (f64,) = sqlx::query_as(
        "SELECT extract(epoch FROM drawn_at - opens_at)::float8 * 1000 FROM rooms WHERE code = 'drop'",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("the draw's time");
    eprintln!(
        "rooms: {PEOPLE} pre-queue joins by {CALLERS} callers in {joined_in:.1?} ({:.0}/s); drawn {draw_ms:.0} ms after opens_at",
        PEOPLE as f64 / joined_in.as_secs_f64()
    );
    let seed = revealed["seed"]
        .as_str()
        .expect("the seed, after the start")
        .to_owned();
    assert_eq!(revealed["seed_sha256"], json!(commitment));

    // Two arrivals after the start: first come, first served, behind the pre-queue.
    let late: Vec<String> = {
        let mut late = Vec::new();
        for subject in ["late-1", "late-2"] {
            let reply = join(&stack, "drop", subject).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
            assert_eq!(reply.data()["prequeue"], json!(false));
            late.push(reply.data()["join_id"].as_str().expect("id").to_owned());
        }
        late
    };

    let published = stack
        .get(
            "/v1/rooms/drop/prequeue",
            Some(&stack.subject_token("anyone")),
        )
        .await;
    assert_eq!(published.status, StatusCode::OK);
    assert_eq!(published.data()["complete"], json!(true));
    let join_ids = &published.data()["join_ids"];
    assert_eq!(join_ids.as_array().map(Vec::len), Some(PEOPLE));
    assert_eq!(published.data()["total"], json!(PEOPLE));
    assert_eq!(
        published.data()["next_cursor"],
        Value::Null,
        "one page holds them"
    );
    let expected = recompute(&seed, &commitment, join_ids);
    assert_eq!(expected.len(), PEOPLE);

    // Smaller pages make the same list, each after the last one's end, the last saying so.
    let reader = stack.subject_token("anyone");
    let mut paged: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/v1/rooms/drop/prequeue?limit=3000&cursor={cursor}"),
            None => "/v1/rooms/drop/prequeue?limit=3000".to_string(),
        };
        let page = stack.get(&path, Some(&reader)).await;
        assert_eq!(page.status, StatusCode::OK, "{:?}", page.body);
        pages += 1;
        let ids = page.data()["join_ids"].as_array().expect("ids").clone();
        assert!(ids.len() <= 3000, "{} ids in a page of 3000", ids.len());
        paged.extend(ids);
        match page.data()["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, PEOPLE.div_ceil(3000));
    assert_eq!(&Value::Array(paged), join_ids, "the pages, end to end");
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=10001", "limit"),
        ("cursor=not-a-cursor", "cursor"),
    ] {
        let refused = stack
            .get(&format!("/v1/rooms/drop/prequeue?{query}"), Some(&reader))
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(refused.field(), field, "{query}: {:?}", refused.body);
    }

    // The queue's order in PostgreSQL.
    let queued: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM room_places WHERE room = 'drop' ORDER BY ord")
            .fetch_all(&stack.pg)
            .await
            .expect("the queue");
    assert_eq!(queued[..PEOPLE], expected[..], "the pre-queue's order");
    assert_eq!(
        queued[PEOPLE..],
        late[..],
        "later arrivals, in arrival order"
    );
    assert_eq!(
        queued.iter().collect::<HashSet<_>>().len(),
        PEOPLE + 2,
        "one place each"
    );

    // Admission follows that order: the admitted are exactly its head.
    let admitted_then = |stack: Arc<Stack>| async move {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id::text FROM room_places WHERE room = 'drop' AND state = 'admitted'",
        )
        .fetch_all(&stack.pg)
        .await
        .expect("the admitted");
        ids
    };
    let started = eventually(Duration::from_secs(5), || {
        let stack = stack.clone();
        async move { !admitted_then(stack).await.is_empty() }
    })
    .await;
    assert!(started, "nobody was admitted after the start");
    let head_before = admitted_then(stack.clone()).await.len();
    // The sample's positions, as their polls show them: their rank in the script's order less
    // those admitted, which grows while we look.
    for ticket in &sample {
        let poll = stack.poll(ticket).await;
        let data = poll.data();
        let id = data["join_id"].as_str().expect("id");
        let rank = expected.iter().position(|e| e == id).expect("in the order");
        if data["status"] == "waiting" {
            let position = data["queue"]["position"].as_u64().expect("a position") as usize;
            let admitted = rank
                .checked_sub(position)
                .expect("position beyond its rank");
            assert!(
                admitted >= head_before && admitted <= head_before + 200,
                "rank {rank}, position {position}, {head_before} admitted before"
            );
        } else {
            assert!(
                rank < head_before + 200,
                "rank {rank} admitted early: {data}"
            );
        }
    }
    let admitted: HashSet<String> = admitted_then(stack.clone()).await.into_iter().collect();
    let head: HashSet<String> = expected[..admitted.len()].iter().cloned().collect();
    assert_eq!(
        admitted, head,
        "the admitted are the head of the drawn order"
    );
}
