//! One real `sluice` process (`CARGO_BIN_EXE_sluice`) against a stack's database and the shared
//! Redis, what [`crate::gateway_process`] and [`crate::executor_processes`] start.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use sluice_durable::testkit::shared_redis;

use crate::support::Stack;

/// A `sluice` process, killed (SIGKILL) and reaped when dropped. Its stdout and stderr (JSON
/// logs) go to `log`.
pub(crate) struct SluiceProcess {
    pub(crate) child: Child,
    log: PathBuf,
}

impl SluiceProcess {
    /// Starts `sluice <args>` against the stack's database and the shared Redis, with `env` on
    /// top, logging JSON at `info` to `log`.
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
            .env("SLUICE_REDIS_URL", shared_redis().url())
            .envs(env.iter().copied())
            .env("SLUICE_LOG", "info")
            .env("SLUICE_LOG_FORMAT", "json")
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
}

impl Drop for SluiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
