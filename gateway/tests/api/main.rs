//! Integration tests of the gateway against real Redis and PostgreSQL servers (one binary, so it
//! builds once; the servers are started once per binary by `sluice_testkit`). The Lua scripts'
//! own tests, which need no gateway, are in `durable/tests/lua/`; their fixture is shared with
//! the life-cycle and status tests here.

mod support;

mod application;
mod auth;
mod auth_flood;
mod browser;
mod browser_driver;
mod chaos;
mod cli;
mod cluster;
mod code_map;
mod commands;
mod concurrency;
mod connections;
mod control;
mod cors;
mod crash_points;
mod crate_graph;
mod dashboard;
mod execution;
mod executor_processes;
mod gateway_process;
mod idempotency;
mod life_cycle;
mod logs;
#[path = "../../../durable/tests/lua/lua_fixture.rs"]
mod lua_fixture;
mod metrics;
mod observability;
mod openapi;
mod passes;
mod pgbouncer;
mod postgres_outage;
mod projection;
mod query_plans;
mod quotas;
mod readiness;
mod readme_tokens;
mod reads;
mod reconcile;
mod redis_outage;
mod retention;
mod rooms;
mod shutdown;
mod sluice_process;
mod startup_checks;
mod status_board;
mod strict_bodies;
mod ticket_answers;
mod webhook_backend;
mod webhooks;
