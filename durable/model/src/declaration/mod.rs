//! A namespace's declaration: its commands, quota pools and reads, written in TOML.
//!
//! [`parse`] turns the TOML text into a validated [`Declaration`] with every default filled in.
//! Every refusal is a [`FieldError`] whose `field` is the exact path of the offending value
//! (`command[1].admission.max_in_flight`), so the document is walked by hand rather than
//! deserialized: serde's errors do not carry such paths. Unknown keys are refused everywhere,
//! so a typo never silently falls back to a default.

mod budget;
mod command;
mod handler;
mod input;
mod limits;
mod model;
mod names;
mod namespace;
mod overlap;
mod params;
mod read;
mod room;
mod template;
mod waiting_page;
mod walk;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use limits::render_limit_keys;
pub use model::{
    AdmissionBudget, CommandDecl, Declaration, HandlerDecl, IntakeBudget, LimitDecl,
    NamespaceSettings, ParamDecl, ProofOfWork, QuotaMode, QuotaPoolDecl, ReadDecl, ReadScope,
    ResourceKeyDecl, RoomDecl, RoomPageDecl, SubjectRate, WaitingPageDecl,
};
pub use namespace::MAX_CAPACITY as MAX_POOL_CAPACITY;
pub use read::parse_read_params;
pub use room::{MAX_PASS_SECONDS, MAX_WORK_BITS, opens_at as room_opens_at};

use toml::Table;

use crate::field_error::FieldError;
use walk::Obj;

/// Every top-level key of a declaration.
const TOP_LEVEL_KEYS: &[&str] = &["namespace", "command", "quota_pool", "read", "room"];

/// Parses and validates a declaration document.
///
/// Pools are parsed before commands because a quota handler must name a declared pool.
pub fn parse(text: &str) -> Result<Declaration, FieldError> {
    let table = parse_toml(text)?;
    let root = Obj::root(&table);
    root.allow_only(TOP_LEVEL_KEYS)?;
    let namespace = namespace::parse_namespace(&root)?;
    let quota_pools = namespace::parse_pools(&root)?;
    let commands = command::parse_commands(&root, &quota_pools)?;
    limits::check_shared_limits(&commands)?;
    overlap::check_limit_keys(&commands)?;
    let reads = read::parse_reads(&root)?;
    let rooms = room::parse_rooms(&root)?;
    Ok(Declaration {
        namespace,
        commands,
        quota_pools,
        reads,
        rooms,
    })
}

impl Declaration {
    /// The command with `code`, if declared.
    pub fn command(&self, code: &str) -> Option<&CommandDecl> {
        self.commands.iter().find(|c| c.code == code)
    }

    /// The room with `code`, if declared.
    pub fn room(&self, code: &str) -> Option<&RoomDecl> {
        self.rooms.iter().find(|r| r.code == code)
    }

    /// The read named `name`, if declared.
    pub fn read(&self, name: &str) -> Option<&ReadDecl> {
        self.reads.iter().find(|r| r.name == name)
    }

    /// Two limits whose templates can render one key with other numbers, as [`parse`] refuses
    /// them. Never for a declaration parsed today; one stored before that rule keeps running
    /// as stored (the template `admit.lua` reads first sets the shared key's numbers), and an
    /// executor says so.
    pub fn limit_key_conflict(&self) -> Option<FieldError> {
        overlap::check_limit_keys(&self.commands).err()
    }
}

/// Parses TOML syntax; a syntax error is reported on field `toml` with its line and column.
fn parse_toml(text: &str) -> Result<Table, FieldError> {
    text.parse::<Table>()
        .map_err(|e| FieldError::new("toml", describe_syntax_error(text, &e)))
}

/// One-line description of a syntax error: `line L, column C: message`.
fn describe_syntax_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim();
    match error.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("line {line}, column {column}: {message}")
        }
        None => message.to_owned(),
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}
