#!/usr/bin/env bash
# The long chaos run: a seeded random schedule of faults under a mixed load on a
# local stack, and the table of what they did.
#
# Usage: deploy/chaos/run.sh [--seed S] [--minutes M]
#   --seed S     the u64 seed of the fault schedule (decimal or 0x hex); default: a random one.
#                The seed is printed first, and again in the report and in any failure: run again
#                with --seed S to replay the same schedule.
#   --minutes M  how long the faults go on (at least one round of every kind); default 2.
#
# Runs the ignored test `chaos::table` (gateway/tests/api/chaos/) in release, passing the seed and
# the length as SLUICE_CHAOS_SEED and SLUICE_CHAOS_MINUTES. It starts its own throwaway Redis and
# PostgreSQL on free loopback ports, migrates and bootstraps the database with the `sluice` CLI
# (a quota `claim` whose pool is smaller than the number of subjects, and a webhook `call` with the
# limit keys provider:{provider} (per_second) and account:{provider}:{account} (max_in_flight),
# served by a loopback backend inside the test that verifies every signature and records what it
# sees), runs two `sluice serve` gateways and two `sluice execute` executors, and drives a steady
# load of enqueues over both gateways (replays, second keys, cancels) plus ticket polls, recording
# every answer. The seed draws rounds of the eight fault kinds in random order, with random holds
# and gaps: Redis FLUSHALL; Redis killed and restarted empty; Redis killed and restarted from an
# RDB taken seconds earlier; PostgreSQL stopped and started again; a gateway SIGKILLed and started
# again, or SIGSTOPped then SIGCONTed; an executor SIGKILLed and started again, or SIGSTOPped past
# its lease then SIGCONTed. Then the load stops, every command drains, and the invariants are
# checked against PostgreSQL and the backend's own records, never Redis (every 202/200 has its
# row, nothing duplicated, every row in exactly one terminal state, allocations within capacity,
# no queue_seq twice, acceptance order and FIFO after rebuilds kept, account concurrency and
# provider starts within their limit keys as the backend saw them, every backend decision exactly
# what PostgreSQL recorded). It prints the seed, then a markdown table to stdout — one row per
# fault kind: times, requests during the fault, explicit refusals, unknown outcomes (final), lost,
# duplicated, recovery time, the backend's peak in flight against the limit, violations — and the
# run's totals, with notes and every violation (each naming the seed, the fault phase and the
# commands), and exits non-zero if any invariant broke.
#
# Needs nothing but this repository: no Redis or PostgreSQL has to run (none is touched), the
# servers are the run's own. It needs their programs (redis-server, PostgreSQL's initdb and
# postgres, setpriv; installed with apt when missing, like deploy/test.sh) and root (PostgreSQL
# runs as the `postgres` OS user). The run takes the minutes asked for plus about a minute of
# set-up and drain after the release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib.sh

seed=""
minutes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
    --minutes) minutes="${2:?--minutes needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$seed" ]; then
  seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
fi
echo "chaos seed $seed (replay: deploy/chaos/run.sh --seed $seed${minutes:+ --minutes $minutes})"

require_cargo
require_redis
require_postgres
require_setpriv

export SLUICE_CHAOS_SEED="$seed"
if [ -n "$minutes" ]; then
  export SLUICE_CHAOS_MINUTES="$minutes"
fi
# The run is the `api` test binary in release: it needs the fault-injection points, which no
# shipped binary has, so Sluice's own two crates are built again with them; every dependency is
# the same build as deploy/lib.sh's build_release (the features unify alike), so after
# deploy/local.sh or loadtest/bench.sh this compiles only those two crates.
cargo test --release --locked -p sluice-gateway --test api chaos::table -- --ignored --nocapture
