//! Waiting rooms in the gateway: the admission ticker every gateway runs, the board that answers
//! waiting places' polls from memory, proof of work at the door and the keys that verify passes.
//! (The endpoints are [`crate::handlers::rooms`]; PostgreSQL's side is `sluice_store::rooms`.)
//!
//! - [`ticker`]: admits waiting-room places (every gateway runs one).
//! - [`board`]: waiting places' polls answered from memory.
//! - [`poll_policy`]: when a waiting place polls again.
//! - [`work_challenge`]: proof of work at a room's door, whose difficulty follows
//!   [`arrival_rate`].
//! - [`jwks`]: the public keys that verify passes.

pub mod arrival_rate;
pub mod board;
pub mod jwks;
pub mod poll_policy;
pub mod ticker;
pub mod work_challenge;
