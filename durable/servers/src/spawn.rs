//! Spawning server processes so they cannot outlive the test binary, and
//! waiting for them to become ready or to exit.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// How often readiness and exit are polled. Polling (not a fixed sleep)
/// keeps start-up as fast as the server allows.
const POLL: Duration = Duration::from_millis(10);

/// Why a server did not come up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("could not spawn it: {0}")]
    Spawn(#[from] io::Error),
    #[error("its port was taken by someone else (Address already in use)")]
    AddrInUse,
    #[error("it exited during start-up with {0}")]
    Exited(ExitStatus),
    #[error("it was not ready after {0:?}")]
    Timeout(Duration),
}

/// Who the child runs as, and which signal it gets when we die.
pub(crate) enum RunAs {
    /// Our own user; SIGKILL on parent death (redis keeps nothing worth
    /// saving).
    Me,
    /// The `postgres` user (postgres refuses root); SIGQUIT on parent death,
    /// i.e. an immediate shutdown, which unlike SIGKILL still removes the
    /// server's SysV shared-memory segment.
    Postgres,
}

/// Builds `setpriv [--reuid=postgres ...] --pdeathsig SIG -- program`.
///
/// `setpriv` sets the death signal and then execs `program` in place, so the
/// signal lands on the server itself and no `unsafe` `pre_exec` is needed.
/// The child's stdin is closed and stdout/stderr go to `log`.
pub(crate) fn command(run_as: RunAs, program: &Path, log: &Path) -> io::Result<Command> {
    let log = fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut cmd = Command::new("setpriv");
    match run_as {
        RunAs::Me => cmd.args(["--pdeathsig", "KILL"]),
        RunAs::Postgres => cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--pdeathsig",
            "QUIT",
        ]),
    };
    cmd.arg("--").arg(program);
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    Ok(cmd)
}

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the dedicated spawner thread.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// and test threads exit as soon as their test ends. The spawner thread
/// waits on a channel whose sender lives in a static, so it only ends with
/// the process — exactly when the children should die.
pub(crate) fn spawn(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("testkit: cannot start the spawner thread");
        tx
    });
    let gone = || io::Error::other("testkit spawner thread is gone");
    let (tx, rx) = mpsc::channel();
    spawner.send((cmd, tx)).map_err(|_| gone())?;
    rx.recv().map_err(|_| gone())?
}

/// Polls `probe` until it succeeds, the child exits, or `timeout` passes.
/// `log_from` is the log length before this start attempt, so an old
/// attempt's `Address already in use` is not mistaken for this one's.
pub(crate) fn wait_ready(
    child: &mut Child,
    log: &Path,
    log_from: u64,
    timeout: Duration,
    mut probe: impl FnMut() -> bool,
) -> Result<(), StartError> {
    let deadline = Instant::now() + timeout;
    loop {
        if probe() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(
                if log_since(log, log_from).contains("Address already in use") {
                    StartError::AddrInUse
                } else {
                    StartError::Exited(status)
                },
            );
        }
        if Instant::now() > deadline {
            return Err(StartError::Timeout(timeout));
        }
        thread::sleep(POLL);
    }
}

/// Waits up to `timeout` for the child to exit; SIGKILLs it after that.
/// Always reaps it, so its pid is never left as a zombie.
pub(crate) fn wait_or_kill(child: &mut Child, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(None) => thread::sleep(POLL),
            _ => return,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `signal` (e.g. `"INT"`) to `pid` with the `kill` utility, which
/// keeps the harness free of `unsafe` libc calls.
pub(crate) fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Returns once the kernel reports `pid` stopped (state `T` in `/proc/<pid>/stat`), or after
/// five seconds. A `SIGSTOP` takes effect when the process is next scheduled, so a caller that
/// acts right after sending it could still be answered by the process on a busy machine.
pub(crate) fn await_stopped(pid: u32) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match fs::read_to_string(&stat) {
            // The state follows the command name, which is in parentheses and may hold spaces.
            Ok(text) => {
                let state = text
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next());
                if matches!(state, Some("T" | "t")) {
                    return;
                }
            }
            // Gone: nothing left to wait for.
            Err(_) => return,
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Current length of a log file (0 if it does not exist yet).
pub(crate) fn log_len(log: &Path) -> u64 {
    fs::metadata(log).map_or(0, |m| m.len())
}

fn log_since(log: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(log)
        && file.seek(SeekFrom::Start(from)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}
