//! A throwaway `redis-server`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::server_tls::TlsFiles;
use crate::spawn::{self, RunAs, StartError};
use crate::{ServerTls, ports, rundir};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a `BGSAVE` may take before [`RedisServer::snapshot`] gives up.
const SAVE_TIMEOUT: Duration = Duration::from_secs(30);
/// The file a server loads at start-up and `BGSAVE` writes (Redis' default `dbfilename`).
const DUMP: &str = "dump.rdb";
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 5;

/// A redis-server on `127.0.0.1:<free port>` with persistence off, in its own
/// temp dir (log: `redis.log`). Killed on drop.
///
/// Persistence off means no automatic saves: only an explicit
/// [`snapshot`](Self::snapshot) writes an RDB file, and only
/// [`restart_from`](Self::restart_from) loads one.
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
    snapshots: usize,
    /// A node of a Redis Cluster (`--cluster-enabled yes`): its cluster bus binds `port + 10000`.
    cluster_node: bool,
    /// TCP is TLS only ([`RedisServer::start_tls`]); the kit itself talks over a Unix socket.
    tls: Option<RedisTls>,
}

/// A TLS server's certificate files, in its directory.
struct RedisTls {
    files: TlsFiles,
    client_certificates: bool,
}

/// Where the kit sends its own commands (readiness, `INFO`, cluster administration): the TCP
/// port of a plaintext server, the Unix socket of a TLS one (whose port speaks TLS only).
#[derive(Debug, Clone)]
pub(crate) enum Admin {
    Tcp(u16),
    Socket(PathBuf),
}

/// A connection of the kit to a server, TCP or Unix.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

impl Admin {
    fn connect(&self) -> io::Result<Box<dyn Stream>> {
        match self {
            Admin::Tcp(port) => Ok(Box::new(ports::connect(*port)?)),
            Admin::Socket(path) => {
                let stream = std::os::unix::net::UnixStream::connect(path)?;
                stream.set_read_timeout(Some(ports::PROBE_TIMEOUT))?;
                stream.set_write_timeout(Some(ports::PROBE_TIMEOUT))?;
                Ok(Box::new(stream))
            }
        }
    }

    /// How `redis-cli` is pointed at it.
    pub(crate) fn cli_args(&self) -> Vec<String> {
        match self {
            Admin::Tcp(port) => vec!["-p".into(), port.to_string()],
            Admin::Socket(path) => vec!["-s".into(), path.display().to_string()],
        }
    }
}

/// A copy of the server's data at one moment (an RDB file kept aside in the
/// server's directory), to restart from later: a Redis that comes back with
/// an old state, as after a restart from a stale dump or a failover to a
/// replica that missed writes.
#[derive(Debug, Clone)]
pub struct RdbSnapshot {
    path: PathBuf,
    /// When the save finished.
    pub taken: Instant,
}

impl RdbSnapshot {
    /// Where the copy is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl RedisServer {
    /// Starts a new, empty server and waits until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start() -> RedisServer {
        Self::start_as(false, None)
    }

    /// [`start`](Self::start), serving TLS only on its port (`--port 0 --tls-port <port>`) with
    /// the certificate `tls`; when `tls.client_certificates`, clients must present one its
    /// authority signed (`tls-auth-clients yes`). [`url`](Self::url) is then a `rediss://` URL
    /// trusting that authority.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start_tls(tls: &ServerTls) -> RedisServer {
        Self::start_as(false, Some(tls))
    }

    /// Starts a new, empty Redis Cluster node (`--cluster-enabled yes`, its own `nodes.conf`, a
    /// two-second node timeout so a failover takes seconds) on a port whose cluster bus port
    /// (`port + 10000`) is free too. [`RedisCluster`](crate::RedisCluster) joins six of them.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start_cluster_node() -> RedisServer {
        Self::start_as(true, None)
    }

    /// [`start_cluster_node`](Self::start_cluster_node) and [`start_tls`](Self::start_tls) at
    /// once: the cluster bus and replication speak TLS too (`tls-cluster`, `tls-replication`).
    pub fn start_tls_cluster_node(tls: &ServerTls) -> RedisServer {
        Self::start_as(true, Some(tls))
    }

    fn start_as(cluster_node: bool, tls: Option<&ServerTls>) -> RedisServer {
        let dir = rundir::create(if cluster_node { "redis-node" } else { "redis" });
        let tls = tls.map(|tls| RedisTls {
            files: tls.write_into(dir.path()),
            client_certificates: tls.client_certificates,
        });
        let mut server = RedisServer {
            port: 0,
            dir,
            child: None,
            snapshots: 0,
            cluster_node,
            tls,
        };
        for attempt in 1..=PORT_ATTEMPTS {
            server.port = if cluster_node {
                ports::free_port_with_bus()
            } else {
                ports::free_port()
            };
            match server.launch() {
                Ok(()) => return server,
                Err(StartError::AddrInUse) if attempt < PORT_ATTEMPTS => continue,
                Err(e) => server.fail(e),
            }
        }
        unreachable!("the last attempt either succeeds or panics")
    }

    /// `redis://127.0.0.1:<port>`; for a TLS server
    /// `rediss://127.0.0.1:<port>?sslrootcert=<its authority's certificate>`.
    pub fn url(&self) -> String {
        match &self.tls {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(tls) => format!(
                "rediss://127.0.0.1:{}?sslrootcert={}",
                self.port,
                tls.files.ca.display()
            ),
        }
    }

    /// The file holding the authority of a TLS server's certificate.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.files.ca.as_path())
    }

    /// Where the kit's own commands go.
    pub(crate) fn admin(&self) -> Admin {
        match &self.tls {
            None => Admin::Tcp(self.port),
            Some(_) => Admin::Socket(self.socket()),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
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

    /// Stops the server without closing anything (SIGSTOP): connections stay open and every
    /// command waits unanswered, as on a stalled host or a long stop-the-world pause. Until
    /// [`thaw`](Self::thaw); a frozen server is still killed on drop.
    pub fn freeze(&mut self) {
        if let Some(child) = &self.child {
            spawn::signal(child.id(), "STOP");
            spawn::await_stopped(child.id());
        }
    }

    /// Lets a [`freeze`](Self::freeze)d server run on (SIGCONT), with its data as it was.
    pub fn thaw(&mut self) {
        if let Some(child) = &self.child {
            spawn::signal(child.id(), "CONT");
        }
    }

    /// Kills the server if it runs, then starts a new, empty one on the
    /// same port and waits until it answers `PING`. An RDB file left by a
    /// [`snapshot`](Self::snapshot) is removed first, so empty means empty.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn restart(&mut self) {
        self.kill();
        let dump = self.dump();
        if let Err(e) = std::fs::remove_file(&dump)
            && e.kind() != io::ErrorKind::NotFound
        {
            panic!("testkit: cannot remove {}: {e}", dump.display());
        }
        if let Err(e) = self.launch() {
            self.fail(e);
        }
    }

    /// Saves the data as it is now (`BGSAVE`, waiting until the save
    /// finished and succeeded) and keeps a copy of the file aside.
    ///
    /// # Panics
    /// If the server is not running, or the save fails or takes longer
    /// than 30 s.
    pub fn snapshot(&mut self) -> RdbSnapshot {
        let reply = command(&self.admin(), &["BGSAVE"])
            .unwrap_or_else(|e| panic!("testkit: redis BGSAVE: {e}"));
        assert!(
            reply.starts_with("+Background saving started"),
            "testkit: BGSAVE answered {reply:?}"
        );
        // The reply comes after the fork, with `rdb_bgsave_in_progress` already 1: its return to
        // 0 is the end of this save (a save in the same second as the previous one would leave
        // `LASTSAVE` unchanged, so that is no signal).
        let deadline = Instant::now() + SAVE_TIMEOUT;
        let field = |name: &str| {
            info_field(&self.admin(), "persistence", name)
                .unwrap_or_else(|e| panic!("testkit: redis INFO persistence: {e}"))
        };
        while field("rdb_bgsave_in_progress") != "0" {
            assert!(
                Instant::now() < deadline,
                "testkit: BGSAVE did not finish within {SAVE_TIMEOUT:?}"
            );
            std::thread::sleep(POLL);
        }
        let status = field("rdb_last_bgsave_status");
        assert_eq!(status, "ok", "testkit: BGSAVE failed:\n{}", self.log_tail());
        let taken = Instant::now();
        self.snapshots += 1;
        let path = self
            .dir
            .path()
            .join(format!("snapshot-{}.rdb", self.snapshots));
        std::fs::copy(self.dump(), &path).unwrap_or_else(|e| {
            panic!(
                "testkit: cannot keep the RDB file aside at {}: {e}",
                path.display()
            )
        });
        RdbSnapshot { path, taken }
    }

    /// SIGKILLs the server if it runs (a crash: nothing is saved), puts
    /// `snapshot` back as the file Redis loads at start-up and starts it
    /// again on the same port: it answers with the data of the snapshot and
    /// none of the writes made after it.
    ///
    /// # Panics
    /// If the file cannot be put back or the server cannot be started.
    pub fn restart_from(&mut self, snapshot: &RdbSnapshot) {
        self.kill();
        let dump = self.dump();
        std::fs::copy(&snapshot.path, &dump).unwrap_or_else(|e| {
            panic!(
                "testkit: cannot put {} back as {}: {e}",
                snapshot.path.display(),
                dump.display()
            )
        });
        if let Err(e) = self.launch() {
            self.fail(e);
        }
    }

    /// Whether *this* server answers `PING` on its port (checked by its
    /// process id, so another server on a reused port does not count).
    pub fn is_running(&self) -> bool {
        self.child
            .as_ref()
            .is_some_and(|child| ping_pid(&self.admin()).is_ok_and(|pid| pid == child.id()))
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn log_tail(&self) -> String {
        rundir::tail(&self.log(), 30)
    }

    fn dump(&self) -> PathBuf {
        self.dir.path().join(DUMP)
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let log = self.log();
        let log_from = spawn::log_len(&log);
        let mut cmd = spawn::command(RunAs::Me, Path::new("redis-server"), &log)?;
        cmd.current_dir(self.dir.path())
            .args(["--bind", "127.0.0.1"]);
        match &self.tls {
            None => {
                cmd.args(["--port", &self.port.to_string()]);
            }
            Some(tls) => {
                let auth = if tls.client_certificates { "yes" } else { "no" };
                cmd.args(["--port", "0", "--tls-port", &self.port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(&tls.files.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.files.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.files.ca)
                    .args(["--tls-auth-clients", auth])
                    .arg("--unixsocket")
                    .arg(self.socket())
                    .args(["--unixsocketperm", "700"]);
                if self.cluster_node {
                    cmd.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                }
            }
        }
        cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--maxmemory-policy", "noeviction"]);
        if self.cluster_node {
            // `nodes.conf` lives in the node's directory (`--dir`), so a restarted node rejoins
            // with its identity; `--cluster-node-timeout` decides how soon a dead master's
            // replica takes over.
            cmd.args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args([
                    "--cluster-node-timeout",
                    &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                ]);
        }
        let mut child = spawn::spawn(cmd)?;
        let (pid, admin) = (child.id(), self.admin());
        let ready = spawn::wait_ready(&mut child, &log, log_from, READY_TIMEOUT, || {
            ping_pid(&admin).is_ok_and(|p| p == pid)
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

/// How often a save is polled for.
const POLL: Duration = Duration::from_millis(10);
/// A cluster node unreachable this long is failed and its replica promoted: short, so a test's
/// failover takes seconds, long enough that a loaded machine's pauses do not fail a live master.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2_000;

/// Sends one command (as a RESP array) and returns its reply: a simple
/// string or error with its `+`/`-` prefix, an integer with `:`, a bulk
/// string's contents.
pub(crate) fn command(admin: &Admin, args: &[&str]) -> io::Result<String> {
    let mut stream = admin.connect()?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let Some(len) = line.strip_prefix('$') else {
        return Ok(line.trim_end().to_string());
    };
    let len: usize = len
        .trim_end()
        .parse()
        .map_err(|_| io::Error::other(format!("bad bulk length {line:?}")))?;
    let mut bulk = vec![0; len];
    reader.read_exact(&mut bulk)?;
    Ok(String::from_utf8_lossy(&bulk).into_owned())
}

/// One field of `INFO <section>`.
pub(crate) fn info_field(admin: &Admin, section: &str, name: &str) -> io::Result<String> {
    let info = command(admin, &["INFO", section])?;
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| io::Error::other(format!("INFO {section} has no {name}")))
}

/// Sends `PING` and `INFO server`; returns the server's `process_id` if the
/// PING was answered with `+PONG`. The pid proves that the answer comes from
/// our child, not from some other redis that took the port first.
fn ping_pid(admin: &Admin) -> io::Result<u32> {
    let mut stream = admin.connect()?;
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
