//! Waiting rooms over the real stack: the contract of join, polls, passes, heartbeats and
//! leaves; `max_active` as a protected origin counts it; the fair start recomputed by an
//! independent script; rooms on the status board and in `/metrics`, counted from the places.

mod board;
mod capacity;
mod contract;
mod fair_start;
pub(crate) mod kit;
mod proof_of_work;
