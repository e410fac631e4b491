//! What operators use: the control API, the status board, metrics, logs, readiness, the
//! dashboard and the `sluice` CLI.

pub(crate) mod cli;
pub(crate) mod control;
pub(crate) mod dashboard;
pub(crate) mod logs;
pub(crate) mod metrics;
pub(crate) mod readiness;
pub(crate) mod status_board;
pub(crate) mod traces;
