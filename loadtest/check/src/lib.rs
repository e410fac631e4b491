//! `sluice-check`: a model checker for a running Sluice.
//!
//! A seed draws a [`plan`] (a declaration, a workload and faults, [`generate`]); [`run`] carries
//! it out against real processes on real Redis and PostgreSQL ([`stack`], with a TCP [`proxy`]
//! on every link a fault can cut); witnesses that share none of Sluice's bookkeeping record what
//! happened (the webhook [`backend`], the queue [`recorder`], PostgreSQL's [`rows`], the origin's
//! [`passes`]); the [`judge`] holds every record against the reference [`model`]. A failing plan
//! is [`shrink`]ed to fewer operations that still fail, and saved for `sluice-check replay`.
//!
//! # Layout
//! - [`plan`]: the plan and its file format; [`generate`]: the seeded generators.
//! - [`model`]: the promises in the checker's own terms (key rendering, overlap, order, buckets).
//! - [`stack`], [`proxy`]: the processes, the stores, the faults.
//! - [`client`], [`token`]: how the checker talks to gateways.
//! - [`backend`], [`recorder`], [`rows`], [`passes`]: the witnesses.
//! - [`journal`]: what the run observed; [`judge`]: the checks.
//! - [`run`]: one run; [`shrink`]: the shortest failing plan.

pub mod backend;
pub mod client;
pub mod generate;
pub mod journal;
pub mod judge;
pub mod model;
pub mod passes;
pub mod plan;
pub mod proxy;
pub mod recorder;
pub mod rows;
pub mod run;
pub mod shrink;
pub mod stack;
pub mod token;
