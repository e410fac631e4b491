//! The Redis client itself on a cluster: what Sluice relies on when a slot moves.

use std::time::Duration;

use fred::prelude::*;
use sluice_redis::connect_redis;
use sluice_testkit::RedisCluster;

/// Holds the master it runs on for a second, then answers `slow-answer` (within the two seconds
/// Sluice's pool gives a command).
const SLOW: &str = "local s = redis.call('TIME')
repeat local n = redis.call('TIME')
until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 1000000
return 'slow-answer'";

/// The first line of the answer of the server on `port` to `args`, sent on a connection of its
/// own (so without a cluster client's redirections): `+PONG`, `-ASK 123 127.0.0.1:7001`,
/// `-BUSY …`, `$-1`.
async fn first_line(port: u16, args: &[&str]) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the node");
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send to the node");
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stream).read_line(&mut line),
    )
    .await
    .expect("the node answers within 10 s")
    .expect("read the node's answer");
    line.trim_end().to_string()
}

/// A new cluster and one client of Sluice's own pool (one connection per master).
async fn cluster_with_one_client() -> (RedisCluster, Client) {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("start the cluster");
    let redis = connect_redis(&cluster.url(), 1).await.expect("connect");
    let client = redis.pool().next().clone();
    (cluster, client)
}

/// `key`'s slot and the port of a master that does not serve it.
fn slot_and_another_master(cluster: &RedisCluster, key: &str) -> (u16, u16) {
    let slot = cluster.slot_of(key);
    (
        slot,
        cluster.other_master(cluster.master_of(slot).port).port,
    )
}

/// A key whose slot the master on `port` serves.
fn key_on(cluster: &RedisCluster, port: u16, name: &str) -> String {
    (0..100_000)
        .map(|i| format!("{{{name}-{i}}}:k"))
        .find(|key| cluster.master_of(cluster.slot_of(key)).port == port)
        .expect("a key on that master")
}

/// Following an `ASK` must not take another command's reply. One client (so one connection per
/// master): a slow script runs on the target master while a read of a migrating slot is
/// answered `ASK` by its owner; the client then sends `ASKING` to the target, where the slow
/// script's reply is still due. Each caller gets its own answer: the script `slow-answer`, the
/// read of a key that exists nowhere `nil`.
///
/// Both states are waited for, not slept into: the owner answers `ASK` for the key (the slot is
/// half moved), and the target answers another connection `BUSY` (the script is running there;
/// its busy threshold is lowered to 10 ms so it says so at once). The read goes out then, with
/// most of the script's second left; the test checks afterwards that the script was still
/// running for half a second after the read went out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_an_ask_takes_no_other_commands_reply() {
    let (cluster, client) = cluster_with_one_client().await;
    let moving = "{ask-moving}:k".to_string();
    let (slot, to) = slot_and_another_master(&cluster, &moving);
    let owner = cluster.master_of(slot).port;
    let busy = key_on(&cluster, to, "busy");
    // Warm both connections, so neither is being opened when it matters.
    let _: Option<String> = client.get(&busy).await.expect("read on the target");
    let _: Option<String> = client.get(&moving).await.expect("read on the owner");
    cluster.begin_migration(slot, to);
    let asked = sluice_testkit::eventually(Duration::from_secs(5), || async {
        first_line(owner, &["GET", &moving])
            .await
            .starts_with("-ASK ")
    })
    .await;
    assert!(
        asked,
        "the owner never answered ASK for the half-moved slot"
    );
    assert_eq!(
        first_line(to, &["CONFIG", "SET", "busy-reply-threshold", "10"]).await,
        "+OK"
    );

    let slow = {
        let client = client.clone();
        let busy = busy.clone();
        tokio::spawn(async move {
            let answer = client
                .eval::<String, _, _, _>(SLOW, vec![busy], Vec::<String>::new())
                .await;
            (answer, std::time::Instant::now())
        })
    };
    let running = sluice_testkit::eventually(Duration::from_secs(10), || async {
        first_line(to, &["PING"]).await.starts_with("-BUSY")
    })
    .await;
    assert!(running, "the target never ran the script");
    let read_sent = std::time::Instant::now();
    let read: Result<Option<String>, _> = client.get(&moving).await;
    let (slow, slow_answered) = slow.await.expect("the script's task");
    assert_eq!(
        slow.as_deref().map_err(ToString::to_string),
        Ok("slow-answer"),
        "the script's own answer"
    );
    assert_eq!(
        read.map_err(|e| e.to_string()),
        Ok(None),
        "the read's own answer"
    );
    let overlap = slow_answered.saturating_duration_since(read_sent);
    assert!(
        overlap >= Duration::from_millis(500),
        "the script answered {overlap:?} after the read went out: the read's ASKING may not \
         have met the script's reply in flight"
    );
}

/// After a slot moved, its old owner answers `MOVED`; the client follows it with the one write
/// attempt Sluice allows a command (a retried script could run twice), since the write that
/// drew the redirection reached a server and was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_answer_is_followed_within_one_write_attempt() {
    let (cluster, client) = cluster_with_one_client().await;
    let key = "{moved}:k".to_string();
    let () = client
        .set(&key, "before the move", None, None, false)
        .await
        .expect("write");
    let (slot, to) = slot_and_another_master(&cluster, &key);
    let mover = std::sync::Arc::new(cluster);
    let moving = mover.clone();
    tokio::task::spawn_blocking(move || moving.migrate_slot(slot, to, 10, Duration::ZERO))
        .await
        .expect("move the slot");
    let read: Result<Option<String>, _> = client.get(&key).await;
    assert_eq!(
        read.map_err(|e| e.to_string()),
        Ok(Some("before the move".to_string())),
        "read through the MOVED answer"
    );
}
