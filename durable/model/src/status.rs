//! The statuses of a command: a closed set, with the two properties every transition asks of
//! them (may it still change, and is it waiting in a queue).

use std::fmt;

/// A command's status as PostgreSQL records it (API.md, Command life): the `commands.status`
/// column (text) and the `status` field of every answer, in `snake_case` both ways.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, sqlx::Type,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum CommandStatus {
    Accepted,
    Executing,
    Running,
    RetryWait,
    NeedsReview,
    Succeeded,
    Rejected,
    Failed,
    Expired,
    Cancelled,
}

impl CommandStatus {
    pub const ALL: [CommandStatus; 10] = [
        CommandStatus::Accepted,
        CommandStatus::Executing,
        CommandStatus::Running,
        CommandStatus::RetryWait,
        CommandStatus::NeedsReview,
        CommandStatus::Succeeded,
        CommandStatus::Rejected,
        CommandStatus::Failed,
        CommandStatus::Expired,
        CommandStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Executing => "executing",
            Self::Running => "running",
            Self::RetryWait => "retry_wait",
            Self::NeedsReview => "needs_review",
            Self::Succeeded => "succeeded",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Waiting in its queue for a start (the first, or the next after a retry wait).
    pub fn is_waiting(self) -> bool {
        matches!(self, Self::Accepted | Self::RetryWait)
    }

    /// Final: the row never changes again (`needs_review` is not final: a late authoritative
    /// result still ends it).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Rejected | Self::Failed | Self::Expired | Self::Cancelled
        )
    }
}

impl fmt::Display for CommandStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_parses_back() {
        for status in CommandStatus::ALL {
            assert_eq!(CommandStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(CommandStatus::parse("done"), None);
    }

    #[test]
    fn only_the_five_endings_are_final() {
        let finals: Vec<_> = CommandStatus::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .map(CommandStatus::as_str)
            .collect();
        assert_eq!(
            finals,
            ["succeeded", "rejected", "failed", "expired", "cancelled"]
        );
    }
}
