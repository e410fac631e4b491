//! A throwaway `redis-server`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use tempfile::TempDir;

use super::spawn::{self, RunAs, StartError};
use super::{ports, rundir};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 5;

/// A redis-server on `127.0.0.1:<free port>` with persistence off, in its own
/// temp dir (log: `redis.log`). Killed on drop.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a new, empty server and waits until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start() -> RedisServer {
        let dir = rundir::create("redis");
        let mut server = RedisServer {
            port: 0,
            dir,
            child: None,
        };
        for attempt in 1..=PORT_ATTEMPTS {
            server.port = ports::free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(StartError::AddrInUse) if attempt < PORT_ATTEMPTS => continue,
                Err(e) => server.fail(e),
            }
        }
        unreachable!("the last attempt either succeeds or panics")
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TCP port, stable across [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILLs the server (a crash: nothing is saved) and waits until it
    /// is gone. No-op if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts a new, empty one on the
    /// same port and waits until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.launch() {
            self.fail(e);
        }
    }

    /// Whether *this* server answers `PING` on its port (checked by its
    /// process id, so another server on a reused port does not count).
    pub fn is_running(&self) -> bool {
        self.child
            .as_ref()
            .is_some_and(|child| ping_pid(self.port).is_ok_and(|pid| pid == child.id()))
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let log = self.log();
        let log_from = spawn::log_len(&log);
        let mut cmd = spawn::command(RunAs::Me, Path::new("redis-server"), &log)?;
        cmd.current_dir(self.dir.path())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--maxmemory-policy", "noeviction"]);
        let mut child = spawn::spawn(cmd)?;
        let (pid, port) = (child.id(), self.port);
        let ready = spawn::wait_ready(&mut child, &log, log_from, READY_TIMEOUT, || {
            ping_pid(port).is_ok_and(|p| p == pid)
        });
        self.child = Some(child);
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    fn fail(&self, error: StartError) -> ! {
        let log = self.log();
        panic!(
            "testkit: redis-server on port {} failed to start: {error}\n\
             --- last 30 lines of {} ---\n{}",
            self.port,
            log.display(),
            rundir::tail(&log, 30)
        )
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `PING` and `INFO server`; returns the server's `process_id` if the
/// PING was answered with `+PONG`. The pid proves that the answer comes from
/// our child, not from some other redis that took the port first.
fn ping_pid(port: u16) -> io::Result<u32> {
    let mut stream = ports::connect(port)?;
    stream.write_all(b"PING\r\nINFO server\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line != "+PONG\r\n" {
        return Err(io::Error::other(format!("PING answered {line:?}")));
    }
    line.clear();
    reader.read_line(&mut line)?;
    let len: usize = line
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::Error::other(format!("INFO answered {line:?}")))?;
    let mut info = vec![0; len];
    reader.read_exact(&mut info)?;
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:")?.trim().parse().ok())
        .ok_or_else(|| io::Error::other("INFO has no process_id"))
}
