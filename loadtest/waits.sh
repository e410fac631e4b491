#!/usr/bin/env bash
# Where a load run's latency goes when the CPU is shared: a steady run on one stack, with every
# thread's CPU time and run-queue wait (/proc/<pid>/task/*/schedstat) of the stack's processes,
# Redis, PostgreSQL and the load generator, and the gateways' acceptance time split into its steps
# (`sluice_intake_phase_duration_seconds`: reserve, commit, project) from the /metrics each
# gateway had at the end of the run.
#
#   loadtest/waits.sh split|cluster [extra sluice-loadtest args]
#
# Runs `steady --rate 300 --seconds 20` (the multi-node table of docs/performance.md) with the
# debug build in target/debug, on PostgreSQL and Redis on loopback as loadtest/bench.sh does;
# a cluster stack starts its own Redis Cluster. Writes into target/waits/<stack>/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
stack="${1:-}"
case "$stack" in
  split | cluster) shift ;;
  *)
    echo "usage: loadtest/waits.sh split|cluster [extra sluice-loadtest args]" >&2
    exit 2
    ;;
esac
cargo build --quiet -p sluice-gateway --bin sluice -p sluice-loadtest --bin sluice-loadtest
out="target/waits/$stack"
rm -rf "$out"
mkdir -p "$out"
stop="$out/stop"
python3 loadtest/waits/schedstat.py "$stop" > "$out/schedstat.txt" &
sampler=$!
target/debug/sluice-loadtest steady --rate 300 --seconds 20 --stack "$stack" --out "$out" \
  --quiet "$@" > "$out/summary.md" || true
touch "$stop"
wait "$sampler"
grep -E '^\| (enqueue|read offer|read result) ' "$out/summary.md" || true
cat "$out/schedstat.txt"
python3 loadtest/waits/phases.py "$out"/steady-*/
