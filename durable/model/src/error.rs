use crate::field_error::FieldError;

/// Everything that can go wrong below the HTTP layer. The gateway maps each variant to exactly one
/// API error code in one place (`gateway/src/http/error.rs`).
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// PostgreSQL refused or could not be reached. Whether a write landed may be unknown.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] sqlx::Error),
    /// Redis refused or could not be reached.
    #[error("Redis: {0}")]
    Redis(#[from] fred::error::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Caller input that does not fit the declaration or the schema.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("{0}")]
    NotFound(String),
    /// A revision mismatch or a state that forbids the action.
    #[error("{0}")]
    StateConflict(String),
    /// A dependency is not ready to answer (a projection being rebuilt); retry shortly.
    #[error("{0}")]
    Unavailable(String),
    /// A server is set up in a way Sluice cannot be safe with (checked at startup).
    #[error("{0}")]
    Misconfigured(String),
    /// The same idempotency key was used before with other content.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// A script answered something this code does not understand: a deployment mismatch between
    /// `lua/` and the binary, never a caller's fault.
    #[error("unexpected answer from {script}: {detail}")]
    Script {
        script: &'static str,
        detail: String,
    },
    /// The transaction of a group commit failed; its commands may or may not have landed
    /// (a failed COMMIT is ambiguous), so callers answer "outcome unknown, retry the same key".
    #[error("the batch commit failed: {0}")]
    CommitFailed(String),
    /// The group committer is gone (shutting down).
    #[error("the group committer has stopped")]
    CommitterStopped,
    /// A fault-injection point stopped the work (tests only, see `sluice_durable::faults`): what a
    /// crash there would leave behind.
    #[error("fault injected at {0}")]
    FaultInjected(String),
}

impl DurableError {
    pub fn script(script: &'static str, detail: impl Into<String>) -> Self {
        Self::Script {
            script,
            detail: detail.into(),
        }
    }

    /// PostgreSQL could not be reached, or went away mid-statement (a restart, a failover), or
    /// refused for a moment (a serialization failure, a deadlock): the same statement may
    /// succeed later. Any other failure would fail again.
    pub fn postgres_is_unreachable(&self) -> bool {
        let Self::Postgres(error) = self else {
            return false;
        };
        match error {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_) => true,
            sqlx::Error::Database(e) => e.code().is_some_and(|code| {
                code.starts_with("08")
                    || matches!(
                        code.as_ref(),
                        "57P01" | "57P02" | "57P03" | "40001" | "40P01"
                    )
            }),
            _ => false,
        }
    }
}
