//! The days of `commands`: one partition per UTC day of acceptance, `commands_dYYYYMMDD`, holding
//! the ids from that day's first UUID v7 to the next day's (a UUID v7 starts with its clock in
//! milliseconds, and PostgreSQL orders uuids bytewise). Retention drops a day whole
//! (`sluice_durable::lifecycle::retention`); days are made ahead of need here.
//!
//! There is no default partition (it would forbid `DETACH PARTITION … CONCURRENTLY`), so an id
//! whose day was never made is refused by PostgreSQL: [`ensure_days`] runs in `migrate`, in every
//! executor round, and in the group commit when a batch meets a missing day.

use chrono::{DateTime, Days, NaiveDate, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;

/// Days made after today: an executor that stops keeps intake going this long before the group
/// commit has to make a day itself.
pub const DAYS_AHEAD: i32 = 3;

const PREFIX: &str = "commands_d";

/// One UTC day of `commands`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(NaiveDate);

impl Day {
    pub fn of(at: DateTime<Utc>) -> Self {
        Self(at.date_naive())
    }

    /// The day a partition's name stands for, None for any other name.
    pub fn from_partition(name: &str) -> Option<Self> {
        let digits = name.strip_prefix(PREFIX)?;
        if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        NaiveDate::parse_from_str(digits, "%Y%m%d").ok().map(Self)
    }

    pub fn date(self) -> NaiveDate {
        self.0
    }

    /// Its partition's name: digits only after a fixed prefix, so it is safe to put in DDL.
    pub fn partition(self) -> String {
        format!("{PREFIX}{}", self.0.format("%Y%m%d"))
    }

    /// The first id of the day (the partition's lower bound, included).
    pub fn first_id(self) -> Uuid {
        floor(self.0)
    }

    /// The first id of the next day (the partition's upper bound, excluded).
    pub fn end_id(self) -> Uuid {
        floor(self.next())
    }

    /// When the day ends: every command of it was accepted before.
    pub fn end(self) -> DateTime<Utc> {
        midnight(self.next())
    }

    fn next(self) -> NaiveDate {
        self.0
            .checked_add_days(Days::new(1))
            .unwrap_or(NaiveDate::MAX)
    }
}

fn midnight(date: NaiveDate) -> DateTime<Utc> {
    date.and_time(chrono::NaiveTime::MIN).and_utc()
}

/// The smallest UUID v7 of a day: its first millisecond, the rest zero (`sluice_day_floor`).
fn floor(date: NaiveDate) -> Uuid {
    let ms = u128::try_from(midnight(date).timestamp_millis()).unwrap_or(0);
    Uuid::from_u128((ms & 0xFFFF_FFFF_FFFF) << 80)
}

/// Makes the days from yesterday to [`DAYS_AHEAD`] after today (PostgreSQL's clock, UTC) that
/// do not exist yet; answers how many it made. Concurrent callers are safe (the SQL function
/// skips a day another session made meanwhile).
pub async fn ensure_days(pg: &PgPool) -> Result<i32, DurableError> {
    let created = sqlx::query_scalar!(
        r#"SELECT sluice_ensure_command_days(today - 1, today + $1::int) AS "created!"
             FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS today) AS t"#,
        DAYS_AHEAD
    )
    .fetch_one(pg)
    .await?;
    if created > 0 {
        tracing::info!(created, "made days of commands ahead");
    }
    Ok(created)
}

/// PostgreSQL refused a row because no partition holds its id's day.
pub fn is_missing_day(error: &DurableError) -> bool {
    match error {
        DurableError::Postgres(sqlx::Error::Database(db)) => {
            db.code().as_deref() == Some("23514") && db.message().starts_with("no partition of")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_the_range_of_its_uuid_v7s() {
        let day = Day::from_partition("commands_d20261206").expect("a day's name");
        assert_eq!(day.partition(), "commands_d20261206");
        assert_eq!(
            day.first_id().to_string(),
            "01a248a6-7c00-0000-0000-000000000000"
        );
        assert_eq!(
            day.end_id(),
            Day::from_partition("commands_d20261207")
                .unwrap()
                .first_id()
        );
        let at = DateTime::parse_from_rfc3339("2026-12-06T23:59:59.999Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            at.timestamp() as u64,
            at.timestamp_subsec_nanos(),
        ));
        assert!(day.first_id() <= id && id < day.end_id(), "{id}");
        assert_eq!(Day::of(at), day);
        assert_eq!(day.end(), at + chrono::Duration::milliseconds(1));
    }

    #[test]
    fn other_names_are_no_day() {
        for name in [
            "commands",
            "commands_d2026120",
            "commands_d2026120x",
            "commands_d20261332",
            "request_keys",
        ] {
            assert_eq!(Day::from_partition(name), None, "{name}");
        }
    }
}
