#!/usr/bin/env bash
# The chaos run of issue 6: faults under load on a local stack, and the table of what they did.
#
# Runs the ignored test `chaos::table` (gateway/tests/api/chaos/) in release. It starts its own
# throwaway Redis and PostgreSQL on free loopback ports, migrates and bootstraps the database with
# the `sluice` CLI (a quota declaration: one `claim` command per offer, a pool smaller than the
# number of subjects), runs two `sluice serve` gateways and two `sluice execute` executors, and
# drives a steady load of enqueues over both gateways plus ticket polls, recording every answer.
# It injects five faults one at a time, each followed by a recovery wait: (a) Redis FLUSHALL,
# (b) Redis killed and restarted empty, (c) PostgreSQL stopped and started again, (d) a gateway
# SIGKILLed and started again, (e) an executor SIGKILLed and started again. Then the load stops,
# every command drains, and the invariants are checked against PostgreSQL (every 202/200 has its
# row, nothing duplicated, every row in exactly one terminal state, allocations within capacity,
# the in-flight limit held, acceptance order kept). It prints a markdown table to stdout — fault |
# requests during the fault | explicit refusals | unknown outcomes | lost | duplicated | recovery
# time — with notes, and fails if an invariant broke (lost and duplicated must be 0).
#
# Needs nothing but this repository: no Redis or PostgreSQL has to run (none is touched), the
# servers are the run's own. It needs their programs (redis-server, PostgreSQL's initdb and
# postgres, setpriv; installed with apt when missing, like deploy/test.sh) and root (PostgreSQL
# runs as the `postgres` OS user). The run itself takes about a minute after the release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib.sh

require_cargo
require_redis
require_postgres
require_setpriv

cargo test --release --locked -p sluice-gateway --test api chaos::table -- --ignored --nocapture
