//! `:complete`: the authoritative result of a webhook command, reported by its backend after it
//! answered `202` (or before that answer reached the executor, or after the deadline made the
//! command `needs_review`). The first authoritative result wins; a repeat of it changes nothing;
//! a different one is a conflict.

use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::queries::CommandRecord;
use crate::DurableError;

/// A decisive result as a backend reports it: its `200` answer, or a `:complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// `succeeded`, `rejected` or `failed`.
    pub status: &'static str,
    pub result: Option<Value>,
    pub error: Option<(String, String)>,
    /// Dependencies of cached reads the result changed (a webhook's `invalidate`).
    pub invalidate: Vec<String>,
}

/// What a `:complete` came to.
#[derive(Debug, Clone)]
pub enum Completion {
    /// This call decided the command; `was` is the status it left.
    Landed {
        record: CommandRecord,
        was: String,
    },
    /// The same result had already landed: nothing changed.
    Repeated(CommandRecord),
    /// Another result (or a cancel, or expiry) decided it already.
    Conflict(CommandRecord),
    /// No backend holds it (never sent, or waiting again after attempts that certainly did
    /// not reach one or were refused): there is nothing a backend could complete.
    NotStarted(CommandRecord),
    NotFound,
}

/// Lands `reported` on command `id` of `namespace_id` in one statement under the row lock.
pub async fn complete(
    pg: &PgPool,
    namespace_id: Uuid,
    id: Uuid,
    reported: &Reported,
) -> Result<Completion, DurableError> {
    let mut tx = pg.begin().await?;
    let current = sqlx::query(concat!(
        "SELECT ",
        crate::record_columns!(""),
        ", in_doubt FROM commands WHERE id = $1 AND namespace_id = $2 FOR UPDATE"
    ))
    .bind(id)
    .bind(namespace_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(current) = current else {
        return Ok(Completion::NotFound);
    };
    let in_doubt: bool = current.try_get("in_doubt")?;
    let current = <CommandRecord as sqlx::FromRow<_>>::from_row(&current)?;
    let (code, message) = reported.error.clone().unzip();
    if current.is_terminal() {
        let same = current.status == reported.status
            && current.result == reported.result
            && current.error_code == code;
        return Ok(if same {
            Completion::Repeated(current)
        } else {
            Completion::Conflict(current)
        });
    }
    // Waiting and not in doubt: every attempt so far certainly left the backend without the
    // command (a connection that never opened, an explicit 429 or 5xx), so no backend holds
    // it. Counting attempts alone would take a refused connection for a delivered request.
    if current.attempts == 0 || (current.is_waiting() && !in_doubt) {
        return Ok(Completion::NotStarted(current));
    }
    let row = sqlx::query(concat!(
        "UPDATE commands
            SET status = $2, result = $3, error_code = $4, error_message = $5,
                finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                next_attempt_at = NULL, updated_at = now()
          WHERE id = $1
         RETURNING ",
        crate::record_columns!("")
    ))
    .bind(id)
    .bind(reported.status)
    .bind(&reported.result)
    .bind(code)
    .bind(message)
    .fetch_one(&mut *tx)
    .await?;
    let record = <CommandRecord as sqlx::FromRow<_>>::from_row(&row)?;
    tx.commit().await?;
    Ok(Completion::Landed {
        record,
        was: current.status,
    })
}
