//! A throwaway PostgreSQL server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tempfile::TempDir;

use crate::spawn::{self, RunAs, StartError};
use crate::{ServerTls, pg_probe};
use crate::{ports, rundir};

const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 5;

/// A postgres on `127.0.0.1:<free port>` with durability off (fsync,
/// synchronous_commit and full_page_writes off: tests want speed, and crash
/// tests kill the server, not the machine), trust auth for user `postgres`.
///
/// Its temp dir (owned by the `postgres` user) holds `data/`, the Unix
/// socket, `initdb.log` and `postgres.log`. Dropping it stops the server and
/// removes the directory.
pub struct PgServer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
    /// Serves TLS and refuses plaintext TCP ([`PgServer::start_tls`]).
    tls: bool,
    /// Asks clients for a certificate signed by the server's authority (`root.crt`).
    client_certificates: bool,
}

/// Who may connect to a TLS server: over the Unix socket (the readiness probe and local tools)
/// anyone, over TCP only with TLS (and, when `client_certificates`, only with a certificate the
/// server's authority signed whose common name is the user); a plaintext TCP connection is
/// refused by the server itself.
fn tls_only_hba(client_certificates: bool) -> String {
    let method = if client_certificates { "cert" } else { "trust" };
    format!(
        "local all all trust
hostssl all all 127.0.0.1/32 {method}
hostssl all all ::1/128 {method}
hostnossl all all all reject
"
    )
}

impl PgServer {
    /// Runs `initdb` in a new temp dir, starts postgres and waits until it
    /// accepts connections.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start() -> PgServer {
        Self::start_configured(None)
    }

    /// [`start`](Self::start), with `ssl = on` and the certificate `tls` (its key readable by
    /// the server's user only, as PostgreSQL demands), and plaintext TCP connections refused.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start_tls(tls: &ServerTls) -> PgServer {
        Self::start_configured(Some(tls))
    }

    fn start_configured(tls: Option<&ServerTls>) -> PgServer {
        let dir = dir_of_postgres_user("pg");
        let mut server = PgServer {
            port: 0,
            dir,
            child: None,
            tls: tls.is_some(),
            client_certificates: tls.is_some_and(|t| t.client_certificates),
        };
        server.initdb();
        if let Some(tls) = tls {
            server.write_tls(tls);
        }
        for attempt in 1..=PORT_ATTEMPTS {
            server.port = ports::free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(StartError::AddrInUse) if attempt < PORT_ATTEMPTS => continue,
                Err(e) => server.fail("postgres", &server.log(), e),
            }
        }
        unreachable!("the last attempt either succeeds or panics")
    }

    /// The TCP port, stable across [`stop`](Self::stop) and
    /// [`start_again`](Self::start_again).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Fast shutdown (SIGINT: sessions are cut off, the data is kept) and
    /// waits until the postmaster exited. No-op if it is not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            spawn::signal(child.id(), "INT");
            spawn::wait_or_kill(&mut child, STOP_TIMEOUT);
        }
    }

    /// SIGKILLs the postmaster, like a crash; the next
    /// [`start_again`](Self::start_again) runs crash recovery. Returns once
    /// the postmaster and all its backends are gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            pg_probe::wait_until_no_process_in(&self.data(), STOP_TIMEOUT);
        }
    }

    /// Starts the server again on the same data dir and port (stopping it
    /// first if it still runs) and waits until it accepts connections.
    ///
    /// # Panics
    /// If it cannot be started; the message includes the log tail.
    pub fn start_again(&mut self) {
        self.stop();
        if let Err(e) = self.launch() {
            self.fail("postgres", &self.log(), e);
        }
    }

    /// Creates an empty database `t_<uuid>` and returns its URL, so tests
    /// sharing a server do not see each other's tables.
    ///
    /// # Panics
    /// If the server cannot be reached or refuses.
    pub async fn fresh_database(&self) -> String {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let admin = self.url("postgres");
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("testkit: cannot connect to {admin}: {e}"));
        // The name is generated above from a UUID, so this is no injection.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("testkit: CREATE DATABASE {name} failed: {e}"));
        let _ = conn.close().await;
        self.url(&name)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn initdb(&self) {
        let log = self.dir.path().join("initdb.log");
        let result =
            spawn::command(RunAs::Postgres, &pg_bin("initdb"), &log).and_then(|mut cmd| {
                cmd.current_dir(self.dir.path())
                    .arg("-D")
                    .arg(self.data())
                    .args(["-U", "postgres", "-A", "trust", "--no-sync"])
                    .args(["-E", "UTF8", "--locale=C"]);
                let mut child = spawn::spawn(cmd)?;
                spawn::wait_or_kill(&mut child, INITDB_TIMEOUT);
                child.wait()
            });
        match result {
            Ok(status) if status.success() => {}
            Ok(status) => self.fail("initdb", &log, StartError::Exited(status)),
            Err(e) => self.fail("initdb", &log, StartError::Spawn(e)),
        }
    }

    /// The certificate and key in the data directory (`server.crt`, `server.key`: the default
    /// names of `ssl_cert_file` and `ssl_key_file`) and the TLS-only `pg_hba.conf`.
    fn write_tls(&self, tls: &ServerTls) {
        let data = self.data();
        let files = tls.write_into(&data);
        let hba = data.join("pg_hba.conf");
        std::fs::write(&hba, tls_only_hba(tls.client_certificates))
            .unwrap_or_else(|e| panic!("testkit: cannot write {}: {e}", hba.display()));
        for path in [&files.cert, &files.key, &files.ca, &hba] {
            hand_to_postgres_user(path);
        }
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let log = self.log();
        let log_from = spawn::log_len(&log);
        let mut cmd = spawn::command(RunAs::Postgres, &pg_bin("postgres"), &log)?;
        cmd.current_dir(self.dir.path())
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path());
        for setting in [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
            "shared_buffers=128MB",
        ] {
            cmd.args(["-c", setting]);
        }
        if self.tls {
            cmd.args(["-c", "ssl=on"]);
        }
        if self.client_certificates {
            cmd.args(["-c", "ssl_ca_file=root.crt"]);
        }
        let mut child = spawn::spawn(cmd)?;
        let (pid, port, data) = (child.id(), self.port, self.data());
        // A TLS server refuses the probe's plaintext TCP handshake: it is made over the Unix
        // socket, which the server opens together with its TCP listener.
        let probe = if self.tls {
            pg_probe::Probe::Socket(self.dir.path().join(format!(".s.PGSQL.{port}")))
        } else {
            pg_probe::Probe::Tcp(port)
        };
        let ready = spawn::wait_ready(&mut child, &log, log_from, READY_TIMEOUT, || {
            pg_probe::is_ready(&data, pid, &probe)
        });
        self.child = Some(child);
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    fn fail(&self, what: &str, log: &Path, error: StartError) -> ! {
        panic!(
            "testkit: {what} on port {} failed: {error}\n\
             --- last 30 lines of {} ---\n{}",
            self.port,
            log.display(),
            rundir::tail(log, 30)
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
        pg_probe::wait_until_no_process_in(&self.data(), STOP_TIMEOUT);
        pg_probe::remove_crashed_shmem(&self.data());
        // The TempDir field then removes the directory.
    }
}

/// A new run directory (see [`rundir::create`]) owned by the `postgres` OS user, for a server
/// that runs as that user.
///
/// # Panics
/// If it cannot be created or handed over (not running as root).
pub(crate) fn dir_of_postgres_user(kind: &str) -> tempfile::TempDir {
    let dir = rundir::create(kind);
    hand_to_postgres_user(dir.path());
    dir
}

/// Makes the `postgres` OS user own `path`.
///
/// # Panics
/// If it cannot (not running as root).
pub(crate) fn hand_to_postgres_user(path: &Path) {
    let (uid, gid) = postgres_ids();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap_or_else(|e| {
        panic!(
            "testkit: cannot chown {} to postgres (run as root): {e}",
            path.display()
        )
    });
}

/// Uid and gid of the `postgres` OS user, which owns the data directories.
fn postgres_ids() -> (u32, u32) {
    static IDS: OnceLock<(u32, u32)> = OnceLock::new();
    *IDS.get_or_init(|| {
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, "postgres"])
                .output()
                .unwrap_or_else(|e| panic!("testkit: cannot run `id`: {e}"));
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .parse()
                .unwrap_or_else(|_| panic!("testkit: no `postgres` OS user (`id {flag} postgres`)"))
        };
        (id("-u"), id("-g"))
    })
}

/// Absolute path of a PostgreSQL program: from `PATH` if there, else from
/// Debian's `/usr/lib/postgresql/<newest>/bin`. Absolute because the program
/// runs under `setpriv` as another user.
fn pg_bin(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut candidates: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().map(|d| d.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort_by(|a, b| b.cmp(a));
    candidates.extend(versions);
    candidates
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("testkit: `{name}` not found in PATH or /usr/lib/postgresql/*/bin")
        })
}
