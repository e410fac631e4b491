//! Integration tests of the gateway against real Redis and PostgreSQL servers (one binary, so it
//! builds once; the servers are started once per binary by `sluice_testkit`), one folder per
//! capability, its failure and multi-process variants beside it. The Lua scripts' own tests,
//! which need no gateway (the life cycle's scripts, the status board's, late writes and a fenced
//! projection included), are in `durable/tests/lua/`.

mod support;

mod application;
mod browser;
mod chaos;
mod deployment;
mod execution;
mod http;
mod identity;
mod intake;
mod life_cycle;
mod operators;
mod projection;
mod quotas;
mod reads;
mod repository;
mod rooms;
mod webhooks;
