//! Who may call: tickets, subject tokens and bearer credentials refused as they must be, and a
//! flood of unknown identities kept within its budget.

pub(crate) mod auth;
pub(crate) mod auth_flood;
