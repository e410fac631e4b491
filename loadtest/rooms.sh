#!/usr/bin/env bash
# A waiting room at the size of a drop, beside a command drop, in one sitting (release build):
#
#   1. a room drop of 10,000 people in one second (no pre-queue), then the command drop of
#      10,000 subjects: the room's join p99 over the drop's enqueue p99;
#   2. a room of 100,000 people who all join its pre-queue over the minute before the start,
#      with Redis emptied (FLUSHALL) 15 s after the start: the draw's time after `opens_at`,
#      every position against the rank recomputed from the revealed seed, the origin witness
#      against `max_active`, nothing lost;
#   3. the same room with a 15 s heartbeat instead of 5 s;
#   4. sluice-bench-baselines' room pairs: joins against command enqueues with the same callers,
#      place polls against a static hyper server.
#
# Every run checks its invariants and prints them; the reports (report.json and report.html)
# land in target/loadtest/. Needs a PostgreSQL and a Redis on loopback, as loadtest/bench.sh
# does (SLUICE_BENCH_DATABASE_URL / SLUICE_BENCH_REDIS_URL); nothing else may load the machine.
# About 15 minutes once built (each 100,000-person room about 4).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export SLUICE_BENCH_DATABASE_URL="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export SLUICE_BENCH_REDIS_URL="${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
out=target/loadtest

# 100,000 people poll over pooled connections, 10,000 of a drop hold one each.
ulimit -n "$(ulimit -Hn)"

. deploy/lib.sh
require_cargo
# Only what this script runs (the whole workspace's binaries take several times as long).
log "building sluice, sluice-loadtest and sluice-bench-baselines (release)"
cargo build --release --locked -p sluice-gateway --bin sluice \
  -p sluice-loadtest --bin sluice-loadtest --bin sluice-bench-baselines
mkdir -p "$out"

# A run whose invariants fail still lets the sitting go on (the figures stand side by side);
# the script's status says so at the end.
failed=0
echo "== room drop: 10,000 people in one second"
target/release/sluice-loadtest room --subjects 10000 --prequeue-share 0 --after-start-seconds 1 \
  --room-max-active 10000 --stack dev --out "$out" || failed=1

echo
echo "== command drop: 10,000 subjects"
target/release/sluice-loadtest drop --subjects 10000 --stack dev --out "$out" || failed=1

echo
echo "== room of 100,000: all in the pre-queue, Redis emptied 15 s after the start"
# 4,096 kept-alive connections, as a load balancer's pool in front of the gateway: one process
# cannot hold a socket per person (open files, and the ports a connect() searches).
target/release/sluice-loadtest room --subjects 100000 --prequeue-share 1 --opens-in-seconds 60 \
  --room-max-active 20000 --flush-redis-after-seconds 15 --patience-seconds 600 \
  --drain-seconds 300 --max-connections 4096 --stack dev --out "$out" || failed=1

echo
echo "== the same room of 100,000 with a 15 s heartbeat"
# 20,000 admitted people heartbeating every third of 5 s ask for 12,000 requests a second, more
# than this 2-core machine answers beside the load generator's 100,000 people; every third of
# 15 s is 4,000.
target/release/sluice-loadtest room --subjects 100000 --prequeue-share 1 --opens-in-seconds 60 \
  --room-max-active 20000 --heartbeat-seconds 15 --flush-redis-after-seconds 15 \
  --patience-seconds 600 --drain-seconds 300 --max-connections 4096 --stack dev --out "$out" \
  || failed=1

echo
echo "== room joins against command enqueues, place polls against static hyper"
target/release/sluice-bench-baselines --concurrency "${SLUICE_BENCH_CONCURRENCY:-256}" \
  --only room-joins --only place-polls --json "$out/room-baselines.json"
exit "$failed"
