//! Ctrl-C in the middle of a run: the generator stops its callers, stops the stack it started
//! and drops its scratch database, then exits 130. (Its own test binary: it counts the scratch
//! databases of its PostgreSQL server, which no other test may create meanwhile.)

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_store::db;
use sluice_testkit::{shared_postgres, shared_redis};

fn sluice_bin() -> PathBuf {
    sluice_testkit::sluice_binary_beside(env!("CARGO_BIN_EXE_sluice-loadtest"))
}

/// The `sluice dev` log of the run under `out`, once the gateway has printed its address.
fn stack_started(out: &Path) -> bool {
    let Ok(runs) = std::fs::read_dir(out) else {
        return false;
    };
    runs.flatten().any(|run| {
        std::fs::read_to_string(run.path().join("sluice-dev.log"))
            .is_ok_and(|log| log.contains("gateway:"))
    })
}

/// Processes whose command line names `needle`.
fn processes_naming(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains(needle))
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_stack_and_drops_the_scratch_database() {
    let server = shared_postgres().url("postgres");
    let admin = db::connect(&server, 1).await.expect("postgres");
    let scratch = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'sluice_bench_%'",
        )
        .fetch_one(&admin)
        .await
        .expect("pg_database")
    };
    assert_eq!(scratch().await, 0, "no scratch database before the run");
    let out = tempfile::tempdir().expect("temp dir");
    // Slow on purpose: 2,000 people through an intake of 50 per second take over 40 s.
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice-loadtest"))
        .args(["drop", "--subjects", "2000", "--intake-per-second", "50"])
        .args(["--intake-burst", "50", "--stack", "dev", "--quiet"])
        .args([
            "--database-url",
            &server,
            "--redis-url",
            &shared_redis().url(),
        ])
        .arg("--sluice-bin")
        .arg(sluice_bin())
        .arg("--out")
        .arg(out.path())
        .spawn()
        .expect("the load generator starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stack_started(out.path()) {
        assert!(Instant::now() < deadline, "the stack never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scratch().await, 1, "the run made its scratch database");
    // `sluice dev --dir <out>/<run>/sluice-dev` (the generator itself names `<out>` only).
    let dir = format!("{}/", out.path().display());
    assert_eq!(processes_naming(&dir), 1, "sluice dev runs");
    let pid = run.id().expect("running").to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("the generator stops within 30 s of Ctrl-C")
        .expect("exit status");
    assert_eq!(status.code(), Some(130));
    assert_eq!(processes_naming(&dir), 0, "sluice dev was stopped");
    assert_eq!(scratch().await, 0, "the scratch database was dropped");
    let reports = std::fs::read_dir(out.path())
        .expect("out dir")
        .flatten()
        .filter(|run| run.path().join("report.json").exists())
        .count();
    assert_eq!(reports, 0, "an interrupted run writes no report");
}
