//! PostgreSQL's own ceiling for the group commit: pgbench running the gateway's multi-row INSERT
//! transaction (`loadtest/baselines/group_commit_insert.pgbench.sql`) at the batch size the
//! gateway reached in pair 2, in rows per second. It answers whether the gateway's acceptances
//! are bounded by PostgreSQL or by the gateway itself.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use uuid::Uuid;

use super::Bench;
use super::commands::{CLAIM, OFFER};
use super::cpu::Cpu;
use super::side::{Comparison, Side};
use crate::bench_stack::BoxError;

/// The group commit's transaction for pgbench (see the file's header).
const SCRIPT: &str = include_str!("../../baselines/group_commit_insert.pgbench.sql");

/// PostgreSQL's own ceiling for the group commit's transaction at the batch size the gateway
/// reached; never fails the run when pgbench is missing, only when it ran and failed.
pub(super) async fn ceiling(bench: &Bench<'_>, sluice: Side, batch: u64) -> Comparison {
    let name = format!(
        "durable acceptances/s (HTTP 202 vs pgbench group-commit INSERT rows/s, {batch} rows per \
         transaction)"
    );
    let mut ceiling = Side::new(&format!(
        "pgbench: the group commit's transaction, {batch} rows, -c 4 -j 2 -M prepared"
    ));
    let Some(pgbench) = find_pgbench(bench.options.pgbench.as_deref()) else {
        println!(
            "pgbench: not found (neither /usr/lib/postgresql/*/bin/pgbench nor on PATH): skipped"
        );
        return Comparison::skipped(&name, sluice, ceiling, "pgbench not found");
    };
    match pgbench_rounds(bench, &pgbench, batch, &mut ceiling).await {
        Ok(()) => Comparison::new(&name, sluice, ceiling, None),
        Err(error) => {
            println!("pgbench failed: {error}");
            let mut comparison = Comparison::skipped(&name, sluice, ceiling, "pgbench failed");
            comparison.problem = Some(format!("pgbench failed: {error}"));
            comparison
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin/pgbench`, else `pgbench` on `PATH`.
fn find_pgbench(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dir| {
            dir.filter_map(|entry| {
                let entry = entry.ok()?;
                let version: u32 = entry.file_name().to_str()?.parse().ok()?;
                let path = entry.path().join("bin/pgbench");
                path.is_file().then_some((version, path))
            })
            .max_by_key(|(version, _)| *version)
            .map(|(_, path)| path)
        });
    newest.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join("pgbench"))
            .find(|path| path.is_file())
    })
}

/// `--rounds` pgbench runs of `--seconds` (whole, at least one) each, in rows per second.
async fn pgbench_rounds(
    bench: &Bench<'_>,
    pgbench: &Path,
    batch: u64,
    ceiling: &mut Side,
) -> Result<(), BoxError> {
    let script = TempFile::write("pgbench.sql", SCRIPT)?;
    let decl = bench
        .namespace
        .declaration
        .command(CLAIM)
        .ok_or("the declaration lost its claim command")?;
    let ns = bench.namespace.namespace_id;
    let defines = [
        ("control_lock", format!("sluice:control:{ns}")),
        ("app", bench.namespace.application_id.to_string()),
        ("ns", ns.to_string()),
        ("command", CLAIM.to_string()),
        ("offer", OFFER.to_string()),
        ("batch", batch.to_string()),
        ("deadline", decl.deadline_seconds.to_string()),
        ("max_wait", decl.admission.max_wait_seconds.to_string()),
    ];
    let seconds = bench.options.seconds.ceil().max(1.0) as u64;
    // Warm-up: connections, prepared statements, the table's and indexes' next pages.
    pgbench_run(pgbench, bench.database_url, &script.path, &defines, 1).await?;
    for r in 0..bench.options.rounds {
        let cpu = Cpu::read();
        let run = pgbench_run(pgbench, bench.database_url, &script.path, &defines, seconds).await?;
        let rows = run.tps * batch as f64;
        ceiling.push(rows, (rows * seconds as f64) as u64, Cpu::read().since(cpu));
        println!(
            "pgbench round {}: {:.1} transactions/s x {batch} = {:.0} rows/s (latency average \
             {} ms)",
            r + 1,
            run.tps,
            ceiling.last(),
            run.latency_ms.map_or("?".into(), |ms| format!("{ms:.1}"))
        );
    }
    Ok(())
}

/// What one pgbench run reported.
struct PgbenchRun {
    tps: f64,
    latency_ms: Option<f64>,
}

/// One pgbench run; its `tps = …` and `latency average = …` lines. Killed if it outlives its
/// duration by a minute.
async fn pgbench_run(
    pgbench: &Path,
    url: &str,
    script: &Path,
    defines: &[(&str, String)],
    seconds: u64,
) -> Result<PgbenchRun, BoxError> {
    let mut command = tokio::process::Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared", "-c", "4", "-j", "2", "-T"])
        .arg(seconds.to_string())
        .arg("-f")
        .arg(script);
    for (name, value) in defines {
        command.arg("-D").arg(format!("{name}={value}"));
    }
    command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(seconds + 60), command.output())
        .await
        .map_err(|_| "pgbench did not finish in time (killed)")??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{}: {} {}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let number_after = |prefix: &str| -> Option<f64> {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|number| number.parse().ok())
    };
    Ok(PgbenchRun {
        tps: number_after("tps = ")
            .ok_or_else(|| format!("no tps line in pgbench's output: {stdout}"))?,
        latency_ms: number_after("latency average = "),
    })
}

/// A file in the temporary directory, removed when dropped.
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    fn write(suffix: &str, contents: &str) -> Result<Self, BoxError> {
        let path = std::env::temp_dir().join(format!(
            "sluice-bench-baselines-{}-{suffix}",
            Uuid::new_v4().simple()
        ));
        std::fs::write(&path, contents)?;
        Ok(Self { path })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
