//! Waiting rooms over the real stack: the contract of join, polls, passes, heartbeats and
//! leaves; `max_active` as a protected origin counts it, with one gateway and with three
//! admitting together; `admit_per_minute` as PostgreSQL's admission instants show it; the fair
//! start recomputed by an independent script; proof of work at the door; rooms on the status
//! board and in `/metrics`, counted from the places; the browser module's room handle and the
//! hosted room page in real Chromium; waiting polls answered from memory against PostgreSQL.

mod advice;
mod board;
mod browser;
mod capacity;
mod contract;
mod fair_start;
mod gateways;
mod heartbeats;
mod joins;
pub(crate) mod kit;
mod leaves;
mod pace;
mod page;
pub(crate) mod passes;
mod polls;
mod proof_of_work;
