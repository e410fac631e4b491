#!/usr/bin/env bash
# Connections against a real `sluice serve` process (sluice-bench-connections). Half-open ones
# (the default): how fast the server closes them, what they cost its memory and a valid caller's
# latency. `--mode idle`: keep-alive connections idle after one request each, the gateway's RSS
# with them open and after they close, bytes per connection beside a bare hyper server's.
# Needs a PostgreSQL and a Redis on loopback, like loadtest/bench.sh. Arguments are passed on,
# e.g. loadtest/connections.sh --connections 5000
#      loadtest/connections.sh --mode idle --connections 10000
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Thousands of sockets on each side: use the hard limit of open files.
ulimit -n "$(ulimit -Hn)"
. deploy/lib.sh
require_cargo
build_release
export SLUICE_BENCH_DATABASE_URL="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export SLUICE_BENCH_REDIS_URL="${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
exec target/release/sluice-bench-connections "$@"
