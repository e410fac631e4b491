//! The load generator against real stacks: a drop on `sluice dev`, backend services on `sluice
//! serve` + `sluice execute`, and a run whose invariant breaks, which must exit non-zero.
//! Each uses the test binary's own Redis and PostgreSQL (testkit) and a scratch database.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use clap::Parser;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::identity::ticket::TicketKeys;
use sluice_gateway::state::Gateway;
use sluice_loadtest::report::Report;
use sluice_loadtest::scenario::{self, Options};
use sluice_store::db;
use sluice_testkit::{shared_postgres, shared_redis};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

fn sluice_bin() -> PathBuf {
    sluice_testkit::sluice_binary_beside(env!("CARGO_BIN_EXE_sluice-loadtest"))
}

fn options(args: &[&str], out: &std::path::Path) -> Options {
    let database = shared_postgres().url("postgres");
    let redis = shared_redis().url();
    let sluice = sluice_bin();
    let mut argv: Vec<String> = vec!["sluice-loadtest".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.extend([
        "--database-url".into(),
        database,
        "--redis-url".into(),
        redis,
        "--sluice-bin".into(),
        sluice.display().to_string(),
        "--out".into(),
        out.display().to_string(),
        "--quiet".into(),
    ]);
    Cli::parse_from(argv).options
}

/// A drop's outcome: the invariants held, each of `people` arrived, none left with an unknown
/// outcome, every one got in (retries included), `capacity` succeeded and the rest were told
/// SOLD_OUT.
fn every_one_answered_and_the_pool_sold_exactly(report: &Report, people: u64, capacity: u64) {
    let failed: Vec<_> = report.invariants.iter().filter(|c| !c.holds).collect();
    assert!(report.invariants_hold, "invariants broken: {failed:?}");
    let seen = &report.people;
    assert_eq!(seen.arrived, people);
    assert_eq!(seen.unknown, 0, "{seen:?}");
    assert_eq!(seen.accepted, people, "every retry got in: {seen:?}");
    assert_eq!(seen.succeeded, capacity);
    assert_eq!(seen.rejected.get("SOLD_OUT"), Some(&(people - capacity)));
}

/// The warnings and errors the stack's processes logged in the run's output directory (each
/// process logs to `<name>.log` there), and each log's last lines: what a failed run or a
/// failed assertion on unknown outcomes prints, so the cause is in the test's output.
fn warnings_logged(out: &std::path::Path) -> String {
    let mut lines = Vec::new();
    // The run writes into a directory of its own under `out`.
    let runs = std::fs::read_dir(out).into_iter().flatten().flatten();
    let files = runs.flat_map(|run| {
        std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
    });
    for entry in files {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        lines.extend(
            text.lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .take(40)
                .map(|l| format!("{name}: {l}")),
        );
        // And where each process stood at the end.
        let all: Vec<&str> = text.lines().collect();
        lines.extend(
            all[all.len().saturating_sub(5)..]
                .iter()
                .map(|l| format!("{name} (last lines): {l}")),
        );
    }
    if lines.is_empty() {
        "(no warnings or errors logged)".into()
    } else {
        lines.join("\n")
    }
}

fn reread(path: &std::path::Path) -> Report {
    serde_json::from_slice(&std::fs::read(path).expect("the JSON report exists"))
        .expect("the JSON report parses back")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_on_sluice_dev_answers_everyone_and_keeps_every_invariant() {
    let out = tempfile::tempdir().expect("temp dir");
    // 300 people in one second against an intake of 30 per second (a burst of 10): most are
    // refused RATE_LIMITED first and get in by retrying with the same key; 100 units for 300.
    // The bucket is small enough that refusals come even when a busy machine spreads the
    // arrivals over several seconds (with 100 a second, 300 arrivals spread over more than
    // two seconds on a loaded 2-core machine met no refusal).
    let options = options(
        &[
            "drop",
            "--subjects",
            "300",
            "--capacity",
            "100",
            "--intake-per-second",
            "30",
            "--intake-burst",
            "10",
            "--stack",
            "dev",
        ],
        out.path(),
    );
    let written = scenario::run(options).await.expect("the run completes");
    let report = written.report;
    every_one_answered_and_the_pool_sold_exactly(&report, 300, 100);
    let people = &report.people;
    assert!(
        people
            .refusals_by_code
            .get("RATE_LIMITED")
            .copied()
            .unwrap_or(0)
            > 0
            && people.retries > 0,
        "the intake budget refused and the callers retried: {people:?}"
    );
    assert_eq!(report.requests["enqueue"].by_status["202"], 300);
    assert!(report.peaks.samples > 0, "the status board was sampled");
    let names: Vec<&str> = report.processes.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"sluice dev"), "{names:?}");
    assert!(report.timeline.iter().map(|s| s.arrivals).sum::<u64>() == 300);
    let again = reread(&written.json);
    assert_eq!(again.people.succeeded, 100);
    let html = std::fs::read_to_string(&written.html).expect("the HTML report exists");
    assert!(html.contains("<svg"), "the page has its charts");
}

/// `--stack cluster`: three gateways and three executors over a Redis Cluster the run starts
/// itself (the shared single Redis in `--redis-url` is not a cluster). The same invariants as
/// on one node, judged from PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_on_three_gateways_over_a_redis_cluster_keeps_every_invariant() {
    let out = tempfile::tempdir().expect("temp dir");
    let options = options(
        &[
            "drop",
            "--subjects",
            "300",
            "--capacity",
            "100",
            "--stack",
            "cluster",
        ],
        out.path(),
    );
    let written = scenario::run(options).await.expect("the run completes");
    let report = written.report;
    every_one_answered_and_the_pool_sold_exactly(&report, 300, 100);
    let names: Vec<&str> = report.processes.iter().map(|p| p.name.as_str()).collect();
    for process in [
        "gateway 1",
        "gateway 2",
        "gateway 3",
        "executor 1",
        "executor 2",
        "executor 3",
    ] {
        assert!(names.contains(&process), "{process} in {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_drop_decides_every_unit_and_keeps_the_pool_true() {
    let out = tempfile::tempdir().expect("temp dir");
    // 150 people for 20 units held 6 s: half the winners confirm, a fifth release, the rest let
    // their unit expire; the run waits for the last expiry before it checks the rows. (Held
    // 2 s, a loaded machine delivered every winner's result after its unit had expired: no
    // confirm or release could land.)
    let options = options(
        &[
            "drop",
            "--subjects",
            "150",
            "--capacity",
            "20",
            "--mode",
            "reserved",
            "--reservation-seconds",
            "6",
            "--confirm-share",
            "0.5",
            "--release-share",
            "0.2",
            "--think-ms",
            "200",
            "--stack",
            "dev",
        ],
        out.path(),
    );
    let written = scenario::run(options).await.expect("the run completes");
    let report = written.report;
    let failed: Vec<_> = report.invariants.iter().filter(|c| !c.holds).collect();
    assert!(report.invariants_hold, "invariants broken: {failed:?}");
    for name in [
        "no reservation left once all had time to expire",
        "pool counts equal the allocation rows (allocated = confirmed, reserved = reserved)",
        "allocated + reserved within capacity at every sample (PostgreSQL, sampled)",
        "every 200 to a confirm or release is the row's state",
        "every 409 names the row's state (expired, or the other decision)",
        "every unit let lapse expired",
        "confirmed and released rows are as many as the 200s that decided them",
        "one allocation per subject",
    ] {
        assert!(
            report.invariants.iter().any(|c| c.name == name),
            "{name} was checked: {:?}",
            report.invariants
        );
    }
    let r = report.reservations.as_ref().expect("reservation figures");
    assert!(
        r.reserved >= 20,
        "every unit was reserved at least once: {r:?}"
    );
    assert_eq!(r.reserved, report.people.succeeded, "{r:?}");
    assert_eq!(r.confirmed + r.released + r.expired, r.reserved, "{r:?}");
    assert!(
        r.confirmed > 0 && r.expired > 0 && r.released > 0,
        "every outcome occurred: {r:?}"
    );
    assert_eq!(r.still_reserved, 0);
    assert!(r.pool_samples > 0 && r.peak_held <= 20, "{r:?}");
    assert!(r.confirm_latency.count > 0, "{r:?}");
    assert_eq!(report.people.unknown, 0, "{:?}", report.people);
    let again = reread(&written.json);
    assert_eq!(
        again.reservations.map(|r| r.confirmed),
        Some(report.reservations.map_or(0, |r| r.confirmed))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_services_on_two_processes_stay_within_their_limit_keys() {
    let out = tempfile::tempdir().expect("temp dir");
    let options = options(
        &[
            "backend",
            "--rate",
            "150",
            "--seconds",
            "2",
            "--providers",
            "2",
            "--accounts",
            "4",
            "--account-max-in-flight",
            "1",
            "--provider-per-second",
            "40",
            "--backend-delay-ms",
            "10",
            "--stack",
            "split",
        ],
        out.path(),
    );
    let written = scenario::run(options).await.expect("the run completes");
    let report = written.report;
    let failed: Vec<_> = report.invariants.iter().filter(|c| !c.holds).collect();
    assert!(report.invariants_hold, "invariants broken: {failed:?}");
    assert_eq!(report.people.arrived, 300);
    assert_eq!(report.people.succeeded, 300, "{:?}", report.people);
    for name in [
        "every webhook call signed",
        "account requests at once within max_in_flight (backend's view)",
        "provider starts per second within the token bucket (backend's view)",
    ] {
        assert!(
            report.invariants.iter().any(|c| c.name == name && c.holds),
            "{name} was checked"
        );
    }
    // Each provider gets 150 calls and starts at most 40 at once plus 40 per second after: the
    // last start is 2.75 s after the first at the earliest, though arrivals end at 2 s.
    assert!(
        report.duration_seconds >= 2.75,
        "the provider limit paced the calls: {} s",
        report.duration_seconds
    );
    let names: Vec<&str> = report.processes.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"gateway") && names.contains(&"executor"),
        "{names:?}"
    );
}

/// A gateway with no executor behind it: nothing accepted ever ends, so "every row is terminal"
/// cannot hold, and the binary must say so with its exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_invariant_exits_non_zero() {
    let pg_url = shared_postgres().fresh_database().await;
    let redis_url = shared_redis().url();
    let pg = db::connect(&pg_url, 4).await.expect("postgres");
    db::run_migrations(&pg).await.expect("migrations");
    let redis = sluice_redis::connect_redis(&redis_url, 2)
        .await
        .expect("redis");
    let (_, tickets) = TicketKeys::generate();
    let gateway = Arc::new(Gateway::new(pg, redis, tickets, GatewayConfig::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(sluice_gateway::http::server::run(
        listener,
        gateway,
        shutdown.clone(),
    ));
    let out = tempfile::tempdir().expect("temp dir");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice-loadtest"))
        .args([
            "drop",
            "--subjects",
            "20",
            "--stack",
            "external",
            "--gateway",
            &base,
        ])
        .args(["--database-url", &pg_url, "--redis-url", &redis_url])
        .args(["--patience-seconds", "3", "--drain-seconds", "1", "--quiet"])
        .arg("--out")
        .arg(out.path())
        .output()
        .await
        .expect("the load generator runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(2),
        "exit status; stdout: {stdout}; stderr: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("| every row is terminal | NO |"),
        "the summary names the broken invariant: {stdout}"
    );
    assert!(stdout.contains("| unknown outcomes | 20 |"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_load_arrives_at_its_rate_and_takes_first_answers_without_retry() {
    let out = tempfile::tempdir().expect("temp dir");
    // 200 people over 2 s, intake of 50 per second with a burst of 50, no retries: some get in,
    // the rest are refused RATE_LIMITED for good, and nobody's outcome is unknown.
    let options = options(
        &[
            "steady",
            "--rate",
            "100",
            "--seconds",
            "2",
            "--intake-per-second",
            "50",
            "--intake-burst",
            "50",
            "--no-retry",
            "--stack",
            "dev",
        ],
        out.path(),
    );
    let report = match scenario::run(options).await {
        Ok(run) => run.report,
        Err(error) => panic!(
            "the run did not complete: {error}\nlogged:\n{}",
            warnings_logged(out.path())
        ),
    };
    let failed: Vec<_> = report.invariants.iter().filter(|c| !c.holds).collect();
    assert!(report.invariants_hold, "invariants broken: {failed:?}");
    let people = &report.people;
    assert_eq!(people.arrived, 200);
    assert_eq!(
        people.unknown,
        0,
        "{people:?}\n503 messages: {:?}\nlogged:\n{}",
        people.unavailable_messages,
        warnings_logged(out.path())
    );
    assert_eq!(people.retries, 0, "--no-retry");
    let refused = people.refused.get("RATE_LIMITED").copied().unwrap_or(0);
    assert!(refused > 0 && people.accepted > 0, "{people:?}");
    assert_eq!(people.accepted + refused, 200, "{people:?}");
    assert_eq!(people.succeeded, people.accepted, "capacity 1,000 for all");
    // Arrivals are spread over the seconds, not bunched into one.
    let per_second: Vec<u64> = report.timeline.iter().map(|s| s.arrivals).collect();
    assert!(
        per_second.iter().take(2).all(|n| (50..=150).contains(n)),
        "about 100 arrivals in each of the first two seconds: {per_second:?}"
    );
}

/// A drop larger than the open-file limit allows is refused before anything starts, with the fix.
#[test]
fn a_run_beyond_the_open_file_limit_is_refused_up_front() {
    let run = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n 2048 && exec {} drop --subjects 5000 --quiet --database-url postgres://nobody@127.0.0.1:1/none",
            env!("CARGO_BIN_EXE_sluice-loadtest")
        ))
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the limit is 2048") && stderr.contains("ulimit -n 6024"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_room_admits_everyone_fairly_within_max_active() {
    let out = tempfile::tempdir().expect("temp dir");
    // 12 people for 4 slots: half join the pre-queue in the 3 s before the start, the rest
    // over the 3 s after; each uses the room 2.5 s, heartbeating once (advised after 1.67 s).
    // A pass cannot be recalled, so a slot comes back a second after its last pass's exp,
    // leave or not: 10 s passes (the shortest the load generator takes) make three rounds of
    // about 11 s each, and every way out (a leave, an abandoned pass, one left to run out)
    // still occurs. (With 30 s passes and 24 people the run took 94 s.)
    let options = options(
        &[
            "room",
            "--subjects",
            "12",
            "--room-max-active",
            "4",
            "--heartbeat-seconds",
            "5",
            "--pass-seconds",
            "10",
            "--opens-in-seconds",
            "4",
            "--after-start-seconds",
            "3",
            "--visit-ms",
            "2500",
            "--leave-share",
            "0.6",
            "--abandon-share",
            "0.2",
            "--stack",
            "dev",
        ],
        out.path(),
    );
    let written = scenario::run(options).await.expect("the run completes");
    let report = written.report;
    let failed: Vec<_> = report.invariants.iter().filter(|c| !c.holds).collect();
    assert!(report.invariants_hold, "invariants broken: {failed:?}");
    for name in [
        "passes an origin accepts within max_active at every instant (origin witness)",
        "every place taken was admitted exactly once (PostgreSQL rows, origin witness)",
        "no subject holds two places",
        "fair start: the pre-queue in the revealed seed's order, later arrivals after it in arrival order",
        "a pass that ends unreturned frees its slot within exp + 1 s + a tick allowance",
        "every pass handed out verifies with the published keys (origin witness)",
    ] {
        assert!(
            report.invariants.iter().any(|c| c.name == name),
            "{name} was checked: {:?}",
            report.invariants
        );
    }
    let room = report.room.as_ref().expect("room figures");
    assert_eq!(room.joined_prequeue, 6, "{room:?}");
    assert_eq!(room.joined_after_start, 6, "{room:?}");
    assert_eq!(room.admitted, 12, "{room:?}");
    assert_eq!(
        room.peak_live_passes, 4,
        "the room was full at some point: {room:?}"
    );
    assert!(
        room.left > 0 && room.abandoned > 0 && room.ran_out > 0,
        "every exit occurred: {room:?}"
    );
    assert!(room.freed_with_people_waiting > 0, "{room:?}");
    assert!(room.heartbeats > 0, "{room:?}");
    assert_eq!(report.people.unknown, 0, "{:?}", report.people);
    let again = reread(&written.json);
    assert_eq!(again.room.map(|r| r.admitted), Some(12));
}

/// A room run whose last person would wait past their patience is refused before anything
/// starts, with the fix: it would otherwise report people lost that the room never lost.
#[test]
fn a_room_run_longer_than_its_patience_is_refused_up_front() {
    let run = Command::new(env!("CARGO_BIN_EXE_sluice-loadtest"))
        .args(["room", "--subjects", "1000", "--room-max-active", "10"])
        .args([
            "--quiet",
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
        ])
        .output()
        .expect("the load generator runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("take at least 1000 s, more than --patience-seconds 120"),
        "{stderr}"
    );
}
