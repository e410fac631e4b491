#!/usr/bin/env bash
# Sluice's benchmarks against their baselines, then the drop scenario of the load generator.
#
# Needs a PostgreSQL and a Redis on loopback (deploy/local.sh installs and starts them; the
# defaults are postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (loopback in
# plaintext, as the runs before TLS was built in; Debian's PostgreSQL has ssl = on) and redis://127.0.0.1:6379, override
# with SLUICE_BENCH_DATABASE_URL / SLUICE_BENCH_REDIS_URL). Nothing else may load the machine
# while it runs: the numbers are ratios measured in one run on it.
#
# How long: the release build (about 10 minutes from scratch on 2 cores, seconds when nothing
# changed), then sluice-bench-baselines (5 pairs x 3 rounds x 2 sides x 3 s, warm-ups and 3
# pgbench runs: about two minutes with the defaults), then the drop scenario of 10,000 subjects, then
# 10,000 idle keep-alive connections against a gateway and a bare hyper server (about a minute),
# and last the efficiency table (sluice-bench-table) from those three reports.
# Arguments are passed to sluice-bench-baselines, e.g.
#   loadtest/bench.sh --rounds 5 --seconds 5
# (callers at once: SLUICE_BENCH_CONCURRENCY, default 256).
# Reports: the Markdown tables on stdout, target/loadtest/baselines.json, and the load
# generator's reports in target/loadtest/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export SLUICE_BENCH_DATABASE_URL="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export SLUICE_BENCH_REDIS_URL="${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
out=target/loadtest

# 10,000 people hold 10,000 connections on each side: use the hard limit of open files.
ulimit -n "$(ulimit -Hn)"

. deploy/lib.sh
require_cargo
build_release
mkdir -p "$out"

echo "== sluice-bench-baselines (PostgreSQL $SLUICE_BENCH_DATABASE_URL, Redis $SLUICE_BENCH_REDIS_URL)"
# 256 callers at once: a drop has thousands of people acting together, and with 64 the group
# commit batches only ~7 commands (measured 9,300 acceptances/s at 256 against 6,200 at 64).
target/release/sluice-bench-baselines --concurrency "${SLUICE_BENCH_CONCURRENCY:-256}" --json "$out/baselines.json" "$@"

echo
echo "== sluice-loadtest drop"
target/release/sluice-loadtest drop --subjects 10000 --stack dev --out "$out"
# The report directory the drop just wrote (drop-<time>, the newest).
drop_report="$(ls -td "$out"/drop-*/ | head -n 1)report.json"

echo
echo "== sluice-bench-connections --mode idle (10,000 keep-alive connections, bare hyper beside)"
target/release/sluice-bench-connections --mode idle --connections 10000 --json "$out/connections-idle.json"

echo
echo "== The efficiency table: each figure beside its baseline from this run"
target/release/sluice-bench-table --baselines "$out/baselines.json" --drop "$drop_report" \
  --connections "$out/connections-idle.json"

echo
echo "Reports:"
echo "  baselines: the tables above, and $out/baselines.json"
echo "  drop scenario: $drop_report (and report.html beside it)"
echo "  idle connections: $out/connections-idle.json"
