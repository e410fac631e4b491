//! A throwaway PgBouncer in front of a PostgreSQL on this machine.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use tempfile::TempDir;

use crate::spawn::{self, RunAs, StartError};
use crate::{ports, rundir};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts with a fresh port when another process took the chosen one.
const PORT_ATTEMPTS: usize = 5;

/// How PgBouncer hands out server connections (`pool_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per client connection, for the client's whole session.
    Session,
    /// A server connection per transaction: between two transactions a client may land on
    /// another server connection, so nothing of a session (prepared statements, `LISTEN`,
    /// session advisory locks, `SET`) carries over.
    Transaction,
}

impl PoolMode {
    fn name(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// Debian's `pgbouncer` on `127.0.0.1:<free port>`, run as the `postgres` OS user (it refuses
/// root), forwarding every database name to the PostgreSQL on `upstream_port` with trust
/// authentication for user `postgres`. At most `server_connections` server connections per
/// database and user, fewer than a Sluice process opens, so clients really share them. Its temp
/// dir holds the configuration and `pgbouncer.log`; killed on drop.
pub struct PgBouncer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl PgBouncer {
    /// Starts one and waits until it accepts connections.
    ///
    /// # Panics
    /// If `pgbouncer` is not installed or cannot be started; the message includes the log tail.
    pub fn start(upstream_port: u16, mode: PoolMode, server_connections: u32) -> PgBouncer {
        Self::start_with_connect_query(upstream_port, mode, server_connections, None)
    }

    /// [`start`](Self::start) running `connect_query` (PgBouncer's per-database setting; no
    /// single quotes in it) on each server connection it opens, before any client uses it.
    pub fn start_with_connect_query(
        upstream_port: u16,
        mode: PoolMode,
        server_connections: u32,
        connect_query: Option<&str>,
    ) -> PgBouncer {
        assert!(
            !connect_query.is_some_and(|q| q.contains('\'')),
            "a connect_query with a single quote cannot be written in pgbouncer.ini here"
        );
        let dir = crate::postgres::dir_of_postgres_user("pgbouncer");
        let mut bouncer = PgBouncer {
            port: 0,
            dir,
            child: None,
        };
        for attempt in 1..=PORT_ATTEMPTS {
            bouncer.port = ports::free_port();
            bouncer.write_config(upstream_port, mode, server_connections, connect_query);
            match bouncer.launch() {
                Ok(()) => return bouncer,
                Err(StartError::AddrInUse) if attempt < PORT_ATTEMPTS => continue,
                Err(e) => bouncer.fail(e),
            }
        }
        unreachable!("the last attempt either succeeds or panics")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`, the same database through PgBouncer.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The admin console (`SHOW POOLS`, `SHOW STATS`), a database of its own.
    pub fn admin_url(&self) -> String {
        self.url("pgbouncer")
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("pgbouncer.ini")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("pgbouncer.log")
    }

    fn write_config(
        &self,
        upstream_port: u16,
        mode: PoolMode,
        server_connections: u32,
        connect_query: Option<&str>,
    ) {
        let dir = self.dir.path().display();
        let users = self.dir.path().join("users.txt");
        // `trust` still needs the user in the auth file.
        write_owned(&users, "\"postgres\" \"\"\n");
        let connect_query = connect_query
            .map(|query| format!(" connect_query='{query}'"))
            .unwrap_or_default();
        let ini = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={upstream_port}{connect_query}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir = {dir}\n\
             pidfile = {dir}/pgbouncer.pid\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             admin_users = postgres\n\
             pool_mode = {mode}\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 1000\n\
             ignore_startup_parameters = extra_float_digits\n",
            port = self.port,
            users = users.display(),
            mode = mode.name(),
        );
        write_owned(&self.config(), &ini);
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let log = self.log();
        let log_from = spawn::log_len(&log);
        let mut cmd = spawn::command(RunAs::Postgres, &pgbouncer_bin(), &log)?;
        cmd.current_dir(self.dir.path()).arg(self.config());
        let mut child = spawn::spawn(cmd)?;
        let port = self.port;
        let ready = spawn::wait_ready(&mut child, &log, log_from, READY_TIMEOUT, || {
            ports::connect(port).is_ok()
        });
        self.child = Some(child);
        if ready.is_err() {
            self.stop();
        }
        ready
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: immediate shutdown (SIGINT would wait for every client to leave).
            spawn::signal(child.id(), "TERM");
            spawn::wait_or_kill(&mut child, STOP_TIMEOUT);
        }
    }

    fn fail(&self, error: StartError) -> ! {
        panic!(
            "testkit: pgbouncer on port {} failed: {error}\n--- last 30 lines of {} ---\n{}",
            self.port,
            self.log().display(),
            rundir::tail(&self.log(), 30)
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `text` to `path`, owned by the `postgres` user who runs PgBouncer.
fn write_owned(path: &std::path::Path, text: &str) {
    std::fs::write(path, text)
        .unwrap_or_else(|e| panic!("testkit: cannot write {}: {e}", path.display()));
    crate::postgres::hand_to_postgres_user(path);
}

/// `pgbouncer` from `PATH`, else Debian's `/usr/sbin/pgbouncer` (absolute: it runs under
/// `setpriv` as another user).
fn pgbouncer_bin() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("pgbouncer"))
        .chain([PathBuf::from("/usr/sbin/pgbouncer")])
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("testkit: pgbouncer is not installed (apt-get install pgbouncer; deploy/test.sh installs it)")
        })
}
