//! Intake through the front door: enqueue and its answers, request keys, many callers at
//! once, a command's own endpoints, and what an enqueue leaves when PostgreSQL stops or the
//! gateway stops between two of its steps.

pub(crate) mod commands;
pub(crate) mod concurrency;
pub(crate) mod crash_points;
pub(crate) mod idempotency;
pub(crate) mod postgres_outage;
pub(crate) mod ticket_answers;
