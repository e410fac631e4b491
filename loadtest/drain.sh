#!/usr/bin/env bash
# A gateway's SIGTERM under the steady run, witnessed from the callers' side (release build):
# two `sluice serve` gateways and one `sluice execute` (`--stack split --gateways 2`), the
# second gateway signalled mid-run, once with gateway.shutdown_delay_ms 0 and once with 2,000.
#
#   loadtest/drain.sh [extra sluice-loadtest args]
#
# Each run counts, for every request that concerns the signalled gateway and ends after the
# signal, what became of it on the client's side: answered (any status) or failed at the
# transport, on a connection opened before the signal or after it; new connections refused
# (each then sent to the other gateway, which stays the only one in rotation, as a load
# balancer's); every 202 it answered looked up in PostgreSQL; both of its /readyz probed every
# 50 ms until it exits. A broken claim exits 2 (the run goes on to the next).
#
# Settings (environment): SLUICE_DRAIN_RATE arrivals a second (default 300: the steady
# scenario's own 500 saturated this 2-core machine once other builds shared it, see
# docs/performance.md), SLUICE_DRAIN_SECONDS of arrivals (default 20), SLUICE_DRAIN_AFTER
# seconds from the first arrival to the signal (default 8), SLUICE_DRAIN_DELAYS the shutdown
# delays in ms to run (default "0 2000"). Extra arguments go to each run, e.g.
# `--gateway-signal kill`: SIGKILL instead, the witness's control (its in-flight requests show
# as transport failures and the run exits 2).
#
# Needs a PostgreSQL and a Redis on loopback, as loadtest/bench.sh does
# (SLUICE_BENCH_DATABASE_URL / SLUICE_BENCH_REDIS_URL). Writes target/drain/delay-<ms>/: the
# summary (summary.md), report.json (its `sigterm` section has every probe's answer) and the
# stack's logs. About 40 s a run once built.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export SLUICE_BENCH_DATABASE_URL="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export SLUICE_BENCH_REDIS_URL="${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
rate="${SLUICE_DRAIN_RATE:-300}"
seconds="${SLUICE_DRAIN_SECONDS:-20}"
after="${SLUICE_DRAIN_AFTER:-8}"
delays="${SLUICE_DRAIN_DELAYS:-0 2000}"

# A person of the run may hold a connection of its own: use the hard limit of open files.
ulimit -n "$(ulimit -Hn)"

. deploy/lib.sh
require_cargo
log "building sluice and sluice-loadtest (release)"
SQLX_OFFLINE=true cargo build --release --locked -p sluice-gateway --bin sluice \
  -p sluice-loadtest --bin sluice-loadtest

status=0
for delay in $delays; do
  out="target/drain/delay-$delay"
  rm -rf "$out"
  mkdir -p "$out"
  echo "== steady --rate $rate --seconds $seconds, gateway 2 of 2 signalled at $after s, shutdown delay $delay ms"
  if target/release/sluice-loadtest steady --rate "$rate" --seconds "$seconds" \
    --stack split --gateways 2 --sigterm-gateway-after "$after" --shutdown-delay-ms "$delay" \
    --out "$out" --quiet "$@" > "$out/summary.md"; then
    :
  else
    code=$?
    echo "exit $code (2: a claim or an invariant does not hold, see below)"
    status=$code
  fi
  # The run's own table of the signal, then every invariant (the claim's among them).
  sed -n '/^| SIGTERM under load/,/^$/p' "$out/summary.md"
  sed -n '/^| invariant /,$p' "$out/summary.md"
done
exit "$status"
