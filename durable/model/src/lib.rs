//! What every Sluice crate speaks, and nothing that acts: one type per id, a command's status,
//! the declaration language (parsed and validated TOML) and the refusal of caller input naming
//! its field. No other Sluice crate is below this one, so nothing here can reach PostgreSQL's
//! transactions, Redis or HTTP (the error type names their errors, it does not reach them); ids and statuses derive `sqlx::Type` only so that they bind as
//! columns wherever they are stored.
//!
//! - [`ids`]: one type per id (application, namespace, command).
//! - [`status`]: a command's statuses ([`CommandStatus`]), a closed set.
//! - [`declaration`]: TOML declarations of commands, budgets, reads, quota pools and rooms.
//! - [`field_error`]: a refusal of caller input naming the field.
//! - [`error`]: [`DurableError`], what can go wrong below the HTTP layer, for every crate.

pub mod declaration;
pub mod error;
pub mod field_error;
pub mod ids;
pub mod status;

pub use error::DurableError;
pub use status::CommandStatus;
