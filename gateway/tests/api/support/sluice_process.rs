//! One real `sluice` process (`CARGO_BIN_EXE_sluice`) against a stack's database and the shared
//! Redis, what [`crate::support::gateway_process`] and [`crate::execution::processes`] start.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use sluice_testkit::test_redis_url;

use crate::support::Stack;

/// A `sluice` process, killed (SIGKILL) and reaped when dropped. Its stdout and stderr (JSON
/// logs) go to `log`.
pub(crate) struct SluiceProcess {
    pub(crate) child: Child,
    log: PathBuf,
}

impl SluiceProcess {
    /// Starts `sluice <args>` against the stack's database and the shared Redis, logging JSON
    /// at `info` to `log`, with `env` on top (it may override `SLUICE_LOG`).
    pub(crate) fn spawn(
        stack: &Stack,
        args: &[&str],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> SluiceProcess {
        let out = std::fs::File::create(&log).expect("create the process log");
        let err = out.try_clone().expect("clone the log handle");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_DATABASE_URL", &stack.database_url)
            .env("SLUICE_REDIS_URL", test_redis_url())
            .env("SLUICE_LOG", "info")
            .env("SLUICE_LOG_FORMAT", "json")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|error| panic!("spawn sluice {}: {error}", args.join(" ")));
        SluiceProcess { child, log }
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (`TERM`, `INT`) through kill(1): the workspace denies `unsafe`, so no
    /// `libc::kill`.
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Polls for the process's exit for at most `within`.
    pub(crate) async fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SluiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
