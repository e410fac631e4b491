//! Blocking postgres readiness checks and post-crash cleanup, kept apart
//! from the server type so each file stays small.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::ports;

/// Where the readiness handshake is made.
pub(crate) enum Probe {
    /// The server's TCP port on loopback.
    Tcp(u16),
    /// The server's Unix socket (a TLS server refuses plaintext TCP).
    Socket(PathBuf),
}

/// Whether the postmaster with `pid` serving `data` is ready at `probe`.
///
/// `postmaster.pid` must name *our* pid with status `ready` (the check
/// `pg_ctl -w` uses), so another postgres that took the port does not
/// count; then a real protocol handshake must be accepted.
pub(crate) fn is_ready(data: &Path, pid: u32, probe: &Probe) -> bool {
    let Ok(lock) = fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = lock.lines().collect();
    lines.first() == Some(&pid.to_string().as_str())
        && lines.get(7).map(|s| s.trim()) == Some("ready")
        && match probe {
            Probe::Tcp(port) => ports::connect(*port).and_then(handshake),
            Probe::Socket(path) => UnixStream::connect(path).and_then(|stream| {
                stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                handshake(stream)
            }),
        }
        .unwrap_or(false)
}

/// Sends a v3 StartupMessage as `postgres` to database `postgres` and checks
/// for AuthenticationOk (trust auth); then says goodbye with Terminate.
/// Raw bytes keep start-up synchronous: no async runtime is needed.
fn handshake(mut stream: impl Read + Write) -> io::Result<bool> {
    let params = b"user\0postgres\0database\0postgres\0\0";
    let len = u32::try_from(8 + params.len()).expect("tiny message");
    let mut msg = Vec::with_capacity(64);
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(&196_608_u32.to_be_bytes()); // protocol 3.0
    msg.extend_from_slice(params);
    stream.write_all(&msg)?;
    // 'R', length 8, auth code 0 = AuthenticationOk. During start-up the
    // server answers 'E' ("the database system is starting up") instead.
    let mut head = [0_u8; 9];
    stream.read_exact(&mut head)?;
    let _ = stream.write_all(&[b'X', 0, 0, 0, 4]);
    Ok(head == [b'R', 0, 0, 0, 8, 0, 0, 0, 0])
}

/// Waits until no process has its working directory in `data`.
///
/// Every postgres process chdirs into its data directory. After a SIGKILL of
/// the postmaster its backends linger for a moment, and a new postmaster
/// refuses to start while they still hold the old shared memory.
pub(crate) fn wait_until_no_process_in(data: &Path, timeout: Duration) {
    let Ok(data) = data.canonicalize() else {
        return;
    };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && any_process_in(&data) {
        thread::sleep(Duration::from_millis(10));
    }
}

fn any_process_in(dir: &Path) -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let is_pid = p
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid && fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd == dir)
    })
}

/// After a SIGKILL nobody removes the postmaster's small SysV shared-memory
/// segment; a restart recycles it, but a server dropped while killed would
/// leak one per test run. Its key is on line 7 of the stale `postmaster.pid`.
pub(crate) fn remove_crashed_shmem(data: &Path) {
    let Ok(lock) = fs::read_to_string(data.join("postmaster.pid")) else {
        return; // clean shutdown: postgres removed it itself
    };
    let Some(key) = lock
        .lines()
        .nth(6)
        .and_then(|l| l.split_whitespace().next())
    else {
        return;
    };
    let _ = Command::new("ipcrm")
        .args(["-M", key])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
