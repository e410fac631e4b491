//! Per-server temp directories, cleanup of earlier runs, and log tails.

use std::fs;
use std::path::Path;
use std::sync::Once;

use tempfile::TempDir;

/// All harness directories live in `/tmp` (not `$TMPDIR`): the `postgres`
/// user must be able to reach them, and the stale sweep must find them.
const BASE: &str = "/tmp";
const PREFIX: &str = "sluice-testkit-";

/// Creates `/tmp/sluice-testkit-<pid>-<starttime>-<kind>-XXXXXX`.
///
/// The owner is encoded in the *name* rather than in a file inside, so a
/// directory is never visible without its owner (no window for a concurrent
/// sweep to delete it). The process start time guards against pid reuse.
/// The first call in a process sweeps directories left by dead processes:
/// shared servers are never dropped, so their directories outlive the run.
pub(crate) fn create(kind: &str) -> TempDir {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| sweep_stale(Path::new(BASE)));
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{pid}-{start}-{kind}-"))
        .tempdir_in(BASE)
        .unwrap_or_else(|e| panic!("testkit: cannot create a temp dir in {BASE}: {e}"))
}

/// Deletes harness directories under `base` whose owning process is gone.
/// Errors are ignored: a leftover directory is harmless, a panic here is not.
pub(crate) fn sweep_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let mut parts = owner.split('-').map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(start))) = (parts.next(), parts.next()) else {
            continue;
        };
        let alive = u32::try_from(pid).is_ok_and(|pid| start_time(pid) == Some(start));
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), or `None` if no such process exists.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; it ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The last `n` lines of a log file, for start-failure panic messages.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_dead_owners_only() {
        let base = tempfile::tempdir().expect("temp dir");
        let me = std::process::id();
        let live = base.path().join(format!(
            "{PREFIX}{me}-{}-x-a",
            start_time(me).expect("own start time")
        ));
        // Above the kernel's pid_max limit (2^22), so never a live pid.
        let dead = base.path().join(format!("{PREFIX}4194305-1-x-b"));
        let reused = base.path().join(format!("{PREFIX}{me}-1-x-c"));
        let foreign = base.path().join("sluice-testkit-not-ours");
        for dir in [&live, &dead, &reused, &foreign] {
            fs::create_dir(dir).expect("create dir");
        }
        sweep_stale(base.path());
        assert!(live.exists() && foreign.exists());
        assert!(!dead.exists() && !reused.exists());
    }
}
