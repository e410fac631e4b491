//! The one configuration type of `sluice serve` and `sluice execute`: [`Settings`].
//!
//! Every default is written once, in the `Default` of the struct that owns the setting
//! ([`GatewayConfig`], [`ExecutorConfig`], …). A setting is read, lowest first, from those
//! defaults, a TOML file (`--config`), the environment (`SLUICE_` and the setting's path in
//! capitals, `_` between the parts: `executor.lease_ms` is `SLUICE_EXECUTOR_LEASE_MS`), the
//! command's own flags, and `--set path=value`. The names come from the structs themselves, so a
//! new field is a new setting with its variable, and `docs/configuration.md` lists every one (a
//! test keeps the two equal). A misspelt key in the file, a value of the wrong type or a renamed
//! variable is refused at start, naming it; nothing starts half-configured.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_durable::DurableError;
use sluice_executor::ExecutorConfig;
use sluice_store::db::{self, PoolMode};
use sluice_store::outbox::DEFAULT_RETENTION_SECONDS;
use sluice_store::secrets::Redacted;
use sqlx::PgPool;

use crate::gateway_config::GatewayConfig;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// PostgreSQL, the source of truth.
    pub database_url: String,
    /// What `database_url` reaches: `session` (PostgreSQL itself, or a pooler that keeps one
    /// server connection per client connection) or `transaction` (a transaction-mode pooler
    /// such as PgBouncer's `pool_mode = transaction`; docs/operations.md).
    pub database_pool_mode: PoolMode,
    /// A URL with sessions of its own (PostgreSQL itself, or a session-mode pooler) for what
    /// a transaction-mode pooler cannot carry: the executor's `LISTEN` and `sluice migrate`'s
    /// session lock. Required with `database_pool_mode = "transaction"`; otherwise unused.
    pub database_session_url: Option<String>,
    /// A `redis://` URL, or a comma-separated list of cluster nodes.
    pub redis_url: String,
    /// PostgreSQL connections of one process.
    pub pg_pool_size: u32,
    /// Redis connections of one process.
    pub redis_pool_size: usize,
    /// The gateway's address.
    pub listen: SocketAddr,
    /// Ticket signing keys, `kid:secret,kid:secret` (the first signs; all verify). Required by
    /// `serve`; never printed.
    pub ticket_keys: Option<Redacted<String>>,
    /// Where a gateway serves `GET /metrics` and the detailed `GET /readyz` (port 0: any free
    /// port, logged at start). Loopback by default: neither belongs on a public port.
    pub admin_listen: SocketAddr,
    /// Where an executor serves `GET /metrics` and `GET /healthz`; off unless set.
    pub metrics_listen: Option<SocketAddr>,
    /// How long a finished command is kept, and its ticket stays valid after its deadline.
    pub retention_seconds: i64,
    /// Authorities trusted by webhook and read-origin calls besides the web's roots (PEM): a
    /// backend behind a private CA. Proxies come from `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`.
    pub outbound_ca_file: Option<PathBuf>,
    /// How webhooks and read origins are called: the web's roots and `outbound_ca_file` (read
    /// by [`Settings::load`], so a bad file stops the start), through the proxy variables.
    #[serde(skip)]
    pub outbound: sluice_durable::http_client::Outbound,
    pub gateway: GatewayConfig,
    pub executor: ExecutorConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: "postgres://postgres@127.0.0.1:5432/sluice".into(),
            database_pool_mode: PoolMode::Session,
            database_session_url: None,
            redis_url: "redis://127.0.0.1:6379".into(),
            pg_pool_size: 16,
            redis_pool_size: 4,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            ticket_keys: None,
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            metrics_listen: None,
            retention_seconds: DEFAULT_RETENTION_SECONDS,
            outbound_ca_file: None,
            outbound: sluice_durable::http_client::Outbound::default(),
            gateway: GatewayConfig::default(),
            executor: ExecutorConfig::default(),
        }
    }
}

/// Why the settings could not be read; each names the file, variable or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{origin}: {message}")]
    Value { origin: String, message: String },
    #[error("{old} was renamed {new}: set {new} instead")]
    Renamed { old: &'static str, new: String },
    #[error("--set {0}: not a setting (see docs/configuration.md for every setting)")]
    UnknownSetting(String),
    #[error("--set {0}: expected PATH=VALUE, for example executor.lease_ms=1500")]
    NotAnAssignment(String),
    #[error("invalid settings: {0}")]
    Invalid(String),
}

/// Variables of earlier releases whose setting now has another name: refused with the new name,
/// so an old unit file cannot be silently ignored.
const RENAMED: &[(&str, &str)] = &[
    (
        "SLUICE_GROUP_COMMIT_MAX_BATCH",
        "gateway.group_commit.max_batch",
    ),
    (
        "SLUICE_GROUP_COMMIT_COMMITTERS",
        "gateway.group_commit.committers",
    ),
    ("SLUICE_FALLBACK_PER_SECOND", "gateway.fallback_per_second"),
    (
        "SLUICE_FALLBACK_CONCURRENCY",
        "gateway.fallback_concurrency",
    ),
    (
        "SLUICE_ORIGIN_PER_PROCESS",
        "gateway.cache.origin_per_process",
    ),
    (
        "SLUICE_ORIGIN_PER_APPLICATION",
        "gateway.cache.origin_per_application",
    ),
    ("SLUICE_WEBHOOK_RETRY_BASE_MS", "executor.retry_base_ms"),
    ("SLUICE_WEBHOOK_RETRY_MAX_MS", "executor.retry_max_ms"),
];

/// `SLUICE_` variables that are not settings: read elsewhere (the log filter and format are
/// needed before the settings are), the file's own name, or the tests' script-key guard.
const NOT_SETTINGS: &[&str] = &[
    "SLUICE_LOG",
    "SLUICE_LOG_FORMAT",
    "SLUICE_CONFIG",
    sluice_redis::STRICT_KEYS_VARIABLE,
];

/// One value given by a flag: the setting's path and the flag's value, when it was passed. The
/// flag is named after the path's last part (`executor.lease_ms` is `--lease-ms`).
pub struct Flag {
    pub path: &'static str,
    pub value: Option<String>,
}

impl Flag {
    pub fn new(path: &'static str, value: &Option<String>) -> Self {
        Self {
            path,
            value: value.clone(),
        }
    }

    /// `--lease-ms` for `executor.lease_ms`.
    pub fn name(&self) -> String {
        let last = self.path.rsplit('.').next().unwrap_or(self.path);
        format!("--{}", last.replace('_', "-"))
    }
}

impl Settings {
    /// Reads the settings: defaults, then `file`, then `env` (every variable of the process,
    /// as `std::env::vars()` gives them), then `flags`, then the `--set` assignments.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &[Flag],
        assignments: &[String],
    ) -> Result<Self, SettingsError> {
        let base = match file {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        let mut tree =
            serde_json::to_value(&base).map_err(|e| SettingsError::Invalid(e.to_string()))?;
        let leaves = leaves(&tree);
        for (name, raw) in env {
            if !name.starts_with("SLUICE_") || NOT_SETTINGS.contains(&name.as_str()) {
                continue;
            }
            if let Some(&(old, new)) = RENAMED.iter().find(|(old, _)| *old == name) {
                return Err(SettingsError::Renamed {
                    old,
                    new: variable_of(new),
                });
            }
            match leaves.get(&name) {
                Some(path) => assign(&mut tree, path, &raw, &name)?,
                None => tracing::warn!(variable = %name, "not a Sluice setting; ignored"),
            }
        }
        for flag in flags {
            if let Some(raw) = &flag.value {
                assign(&mut tree, flag.path, raw, &flag.name())?;
            }
        }
        for assignment in assignments {
            let (path, raw) = assignment
                .split_once('=')
                .ok_or_else(|| SettingsError::NotAnAssignment(assignment.clone()))?;
            if !leaves.values().any(|p| p == path) {
                return Err(SettingsError::UnknownSetting(assignment.clone()));
            }
            assign(&mut tree, path, raw, &format!("--set {path}"))?;
        }
        let mut settings: Self =
            serde_json::from_value(tree).map_err(|e| SettingsError::Invalid(e.to_string()))?;
        settings.validate()?;
        settings.outbound =
            sluice_durable::http_client::Outbound::from_env(settings.outbound_ca_file.as_deref())
                .map_err(|e| SettingsError::Invalid(e.to_string()))?;
        Ok(settings)
    }

    fn from_file(path: &Path) -> Result<Self, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| SettingsError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let invalid = SettingsError::Invalid;
        if self.pg_pool_size == 0 || self.redis_pool_size == 0 {
            return Err(invalid(
                "pg_pool_size and redis_pool_size must be at least 1".into(),
            ));
        }
        if self.database_pool_mode == PoolMode::Transaction && self.database_session_url.is_none() {
            return Err(invalid(
                "database_pool_mode = \"transaction\" needs database_session_url \
                 (SLUICE_DATABASE_SESSION_URL): a URL of PostgreSQL itself or of a session-mode \
                 pooler, for the executor's LISTEN and the migrator's session lock"
                    .into(),
            ));
        }
        if self.retention_seconds < 60 {
            return Err(invalid("retention_seconds must be at least 60".into()));
        }
        self.gateway_config()
            .validate()
            .map_err(|e| invalid(format!("gateway: {e}")))?;
        self.executor_config()
            .validate()
            .map_err(|e| invalid(format!("executor: {e}")))
    }

    /// The process's pool of `pg_pool_size` connections to `database_url`.
    pub async fn postgres(&self) -> Result<PgPool, DurableError> {
        self.postgres_sized(self.pg_pool_size).await
    }

    /// A pool of `size` connections to `database_url`, set up as the process's own.
    pub async fn postgres_sized(&self, size: u32) -> Result<PgPool, DurableError> {
        db::connect_in(&self.database_url, size, self.database_pool_mode).await
    }

    /// A few connections of a tool (`sluice bootstrap`, `apply`, `rebuild`, …), through the
    /// same pooler as the processes. (`sluice migrate` connects to [`Self::session_url`].)
    pub async fn postgres_for_tool(&self) -> Result<PgPool, DurableError> {
        db::connect_in(&self.database_url, 2, self.database_pool_mode).await
    }

    /// Where a session is needed (`LISTEN`, the migrator's lock): `database_session_url` when
    /// set, else `database_url`, which then is a session itself.
    pub fn session_url(&self) -> &str {
        self.database_session_url
            .as_deref()
            .unwrap_or(&self.database_url)
    }

    pub fn gateway_config(&self) -> GatewayConfig {
        GatewayConfig {
            ticket_retention_seconds: self.retention_seconds,
            outbound: self.outbound.clone(),
            ..self.gateway.clone()
        }
    }

    pub fn executor_config(&self) -> ExecutorConfig {
        ExecutorConfig {
            retention_seconds: self.retention_seconds,
            outbound: self.outbound.clone(),
            ..self.executor.clone()
        }
    }

    /// Every setting's variable and its default as TOML writes it (`None` when unset), sorted by
    /// path; for the documentation and its test.
    pub fn documented_defaults() -> Vec<(String, Option<String>)> {
        let tree = serde_json::to_value(Self::default()).unwrap_or(Value::Null);
        let mut rows = Vec::new();
        walk(&tree, "", &mut |path, value| {
            let shown = match value {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            };
            rows.push((variable_of(path), shown));
        });
        rows
    }

    /// The effective settings as TOML, the ticket keys redacted (`sluice config`).
    pub fn to_redacted_toml(&self) -> Result<String, toml::ser::Error> {
        let mut shown = self.clone();
        if shown.ticket_keys.is_some() {
            shown.ticket_keys = Some(Redacted("(set, not shown)".into()));
        }
        toml::to_string(&shown)
    }
}

/// The environment variable of a setting's path.
pub fn variable_of(path: &str) -> String {
    format!("SLUICE_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// Every leaf of the tree by its variable name, with its dotted path.
fn leaves(tree: &Value) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    walk(tree, "", &mut |path, _| {
        found.insert(variable_of(path), path.to_string());
    });
    found
}

fn walk(tree: &Value, prefix: &str, visit: &mut impl FnMut(&str, &Value)) {
    match tree {
        Value::Object(map) => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                walk(value, &path, visit);
            }
        }
        leaf => visit(prefix, leaf),
    }
}

/// Sets the leaf at `path` from `raw`, typed like the value it replaces (a number stays a number,
/// a flag a flag; an unset optional is text), and checks at once that the whole still reads, so
/// a wrong value is refused naming where it came from.
fn assign(tree: &mut Value, path: &str, raw: &str, origin: &str) -> Result<(), SettingsError> {
    let bad = |message: String| SettingsError::Value {
        origin: origin.to_string(),
        message,
    };
    let mut slot = &mut *tree;
    for part in path.split('.') {
        slot = slot
            .get_mut(part)
            .ok_or_else(|| bad(format!("{path} is not a setting")))?;
    }
    *slot = match slot {
        Value::Number(_) => serde_json::from_str::<serde_json::Number>(raw.trim())
            .map(Value::Number)
            .map_err(|_| bad(format!("{raw:?} is not a number ({path})")))?,
        Value::Bool(_) => match raw.trim() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(bad(format!("{raw:?} is neither true nor false ({path})"))),
        },
        _ => Value::String(raw.to_string()),
    };
    serde_json::from_value::<Settings>(tree.clone())
        .map(|_| ())
        .map_err(|e| bad(format!("{path}: {e}")))
}

#[cfg(test)]
mod tests;
