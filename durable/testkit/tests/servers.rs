//! Tests of the harness itself, in one binary so the shared instances are
//! really shared between tests.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use sluice_testkit::{PgServer, RedisServer, shared_postgres, shared_redis};
use sqlx::{Connection, PgConnection};

/// Sends one inline redis command and returns the first reply line.
fn redis(port: u16, command: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis");
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .expect("write to redis");
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .expect("read redis reply");
    line.trim_end().to_owned()
}

fn assert_refused(port: u16) {
    let err = TcpStream::connect(("127.0.0.1", port)).expect_err("server should be down");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
}

/// Runs `f`, which must panic, and returns its panic message.
fn panic_message(f: impl FnOnce()) -> String {
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .expect_err("expected a start failure");
    payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default()
}

/// A start failure names the cause and shows the server log's tail.
fn assert_failure_explained(message: &str, log_line: &str) {
    assert!(message.contains("Address already in use"), "{message}");
    assert!(message.contains("last 30 lines of"), "{message}");
    assert!(message.contains(log_line), "{message}");
}

async fn select_one(url: &str) -> i32 {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut conn)
        .await
        .expect("SELECT 1");
    conn.close().await.expect("close");
    one
}

#[test]
fn redis_kill_and_restart_on_same_port_is_empty() {
    let t = Instant::now();
    let mut server = RedisServer::start();
    eprintln!("redis start-up took {:?}", t.elapsed());
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert_eq!(redis(port, "PING"), "+PONG");
    assert_eq!(redis(port, "SET before-kill 1"), "+OK");
    assert!(server.is_running());

    server.kill();
    assert!(!server.is_running());
    assert_refused(port);

    server.restart();
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    assert_eq!(redis(port, "PING"), "+PONG");
    assert_eq!(
        redis(port, "GET before-kill"),
        "$-1",
        "data survived a restart"
    );
}

/// A restart from a snapshot comes back with the data of the snapshot and without the writes
/// made after it; a plain restart afterwards is empty again (the snapshot's file is not loaded).
#[test]
fn redis_restart_from_a_snapshot_rolls_back_and_restart_stays_empty() {
    let mut server = RedisServer::start();
    let port = server.port();
    assert_eq!(redis(port, "SET in-snapshot 1"), "+OK");
    let snapshot = server.snapshot();
    assert!(snapshot.path().is_file(), "{:?}", snapshot.path());
    assert_eq!(redis(port, "SET after-snapshot 2"), "+OK");
    assert_eq!(redis(port, "DEL in-snapshot"), ":1");

    server.restart_from(&snapshot);
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    assert_eq!(
        redis(port, "GET after-snapshot"),
        "$-1",
        "a later write survived"
    );
    assert_eq!(
        redis(port, "EXISTS in-snapshot"),
        ":1",
        "the snapshot was not loaded"
    );

    // A second snapshot of the same second still waits for its own save.
    assert_eq!(redis(port, "SET second 3"), "+OK");
    let second = server.snapshot();
    server.restart();
    assert_eq!(
        redis(port, "DBSIZE"),
        ":0",
        "an empty restart loaded a dump"
    );
    server.restart_from(&second);
    assert_eq!(redis(port, "EXISTS second"), ":1");
    assert_eq!(redis(port, "EXISTS in-snapshot"), ":1");
}

#[tokio::test]
async fn postgres_data_survives_stop_and_kill() {
    let t = Instant::now();
    let mut server = PgServer::start();
    eprintln!("postgres start-up took {:?}", t.elapsed());
    let url = server.fresh_database().await;
    assert!(url.starts_with(&server.url("t_")), "{url}");
    assert_eq!(select_one(&url).await, 1);
    let mut conn = PgConnection::connect(&url).await.expect("connect");
    sqlx::query("CREATE TABLE kept (id int)")
        .execute(&mut conn)
        .await
        .expect("CREATE TABLE");
    sqlx::query("INSERT INTO kept VALUES (7)")
        .execute(&mut conn)
        .await
        .expect("INSERT");
    conn.close().await.expect("close");

    let count = async |url: &str| -> i64 {
        let mut conn = PgConnection::connect(url).await.expect("reconnect");
        sqlx::query_scalar("SELECT count(*) FROM kept")
            .fetch_one(&mut conn)
            .await
            .expect("count rows")
    };
    let port = server.port();

    server.stop();
    assert_refused(port);
    assert!(PgConnection::connect(&url).await.is_err());
    server.start_again();
    assert_eq!(server.port(), port);
    assert_eq!(count(&url).await, 1);

    server.kill();
    assert_refused(port);
    server.start_again();
    assert_eq!(count(&url).await, 1, "crash recovery lost committed data");

    server.stop();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("take port");
    let message = panic_message(|| server.start_again());
    assert_failure_explained(&message, "could not bind IPv4 address");
    drop(squatter);
    server.start_again();
    assert_eq!(count(&url).await, 1);
}

/// `PR_SET_PDEATHSIG` fires when the forking *thread* exits; servers must
/// survive the (short-lived) test thread that started them.
#[test]
fn servers_outlive_the_thread_that_started_them() {
    let server = thread::spawn(RedisServer::start)
        .join()
        .expect("start thread panicked");
    // The death signal may be sent just after `join` returns; give it time.
    thread::sleep(Duration::from_millis(200));
    assert!(server.is_running(), "server died with its starting thread");
}

/// Records the shared instances' addresses on first call and checks every
/// later call (from another test, on another thread) gets the same ones.
fn check_shared_instances() {
    static FIRST: OnceLock<(usize, usize)> = OnceLock::new();
    let redis_ptr = std::ptr::from_ref(shared_redis()) as usize;
    let pg_ptr = std::ptr::from_ref(shared_postgres()) as usize;
    assert_eq!(
        *FIRST.get_or_init(|| (redis_ptr, pg_ptr)),
        (redis_ptr, pg_ptr)
    );
}

#[tokio::test]
async fn shared_instances_are_reused_a() {
    check_shared_instances();
    assert_eq!(redis(shared_redis().port(), "PING"), "+PONG");
    assert_eq!(
        select_one(&shared_postgres().fresh_database().await).await,
        1
    );
}

#[tokio::test]
async fn shared_instances_are_reused_b() {
    check_shared_instances();
    let (a, b) = (
        shared_postgres().fresh_database().await,
        shared_postgres().fresh_database().await,
    );
    assert_ne!(a, b, "fresh databases must be distinct");
}

#[test]
fn concurrent_starts_from_three_threads() {
    let t = Instant::now();
    let servers: Vec<(RedisServer, PgServer)> = thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| s.spawn(|| (RedisServer::start(), PgServer::start())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start thread panicked"))
            .collect()
    });
    eprintln!(
        "3 concurrent redis+postgres start-ups took {:?}",
        t.elapsed()
    );
    let mut ports: Vec<u16> = servers
        .iter()
        .flat_map(|(r, p)| [r.port(), p.port()])
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 6, "ports must be distinct");
    for (redis_server, _) in &servers {
        assert_eq!(redis(redis_server.port(), "PING"), "+PONG");
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    for (_, pg) in &servers {
        assert_eq!(rt.block_on(select_one(&pg.url("postgres"))), 1);
    }
}
