//! Ticket polls of waiting commands: when a caller polls again, and the gateway's memory of each
//! application's queues that answers most polls without Redis.
//!
//! - [`poll_policy`]: when to poll again (pure, unit-tested without servers).
//! - [`waiting_view`]: waiting commands' polls answered from memory (one `waiting.lua` pull per
//!   application at most every refresh).

pub mod poll_policy;
pub mod waiting_view;
