//! Who is asking, and what finding out may cost: bearer credentials and subject tokens become a
//! [`auth::Caller`], tickets are signed and checked, and unknown identities spend a budget.
//!
//! - [`auth`]: credentials and subject tokens become a caller.
//! - [`subject_token`]: HS256 JWTs a backend mints for a person.
//! - [`ticket`]: the HMAC-signed tickets browsers poll.
//! - [`lookup_budget`] and [`pg_budget`]: what unknown identities and PostgreSQL-backed requests
//!   may cost, per process and per subject.
//! - `mac`: the HMAC both tickets and tokens use.

pub mod auth;
pub mod lookup_budget;
pub(crate) mod mac;
pub mod pg_budget;
pub mod subject_token;
pub mod ticket;
