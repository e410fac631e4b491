#!/usr/bin/env bash
# Where one answer's CPU goes: a perf profile of Sluice's side of one sluice-bench-baselines pair,
# a flame graph, and the process's CPU per answer split by side and by what the CPU ran.
#
#   loadtest/profile.sh intake|durable|polls [--bin DIR] [--preload LIB] [-- extra args]
#
# --bin DIR takes sluice-bench-baselines from DIR instead of building target/release (e.g. a
# build of an older commit, for a before/after split); --preload LIB runs it with LD_PRELOAD=LIB
# (e.g. Debian's /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 for a build from before the
# benchmark ran on jemalloc, as the `sluice` binary does). perf cannot unwind the stacks of such a
# run as well (about half its samples end up unattributed to a side); its CPU per answer, from the
# benchmark's own accounting, is unaffected. The benchmark runs the gateway in its own
# process beside its HTTP client; perf samples only while Sluice's rounds are measured (the
# benchmark switches it through `perf record --control`), so the baselines measured between the
# rounds are not in the profile. Samples are split by side from their stacks: the client (the
# benchmark's hyper client), the gateway (hyper's server, the gateway's and durable's code, fred and
# sqlx tasks: nothing else talks to Redis or PostgreSQL during Sluice's rounds) and the tokio
# runtime they share; the gateway's samples by the function that ran (allocator, kernel, JSON,
# hashing, ...).
#
# Writes target/profile/<pair>/: perf.data, stacks.folded, flame.svg (inferno, installed into
# target/tools on first use), split.md (also printed) and baselines.json. Needs perf
# (Debian: linux-perf) and PostgreSQL and Redis on loopback as loadtest/bench.sh does.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
pair="${1:-}"
case "$pair" in
  intake | durable | polls) shift ;;
  *)
    echo "usage: loadtest/profile.sh intake|durable|polls [--bin DIR] [-- extra args]" >&2
    exit 2
    ;;
esac
bin_dir=target/release
preload=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin_dir="$2"; shift 2 ;;
    --preload) preload=(env "LD_PRELOAD=$2"); shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

export SLUICE_BENCH_DATABASE_URL="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export SLUICE_BENCH_REDIS_URL="${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379}"
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
. deploy/lib.sh
require_cargo
if [[ "$bin_dir" == target/release ]]; then
  cargo build --release --locked -p sluice-loadtest --bin sluice-bench-baselines
fi
tools="$PWD/target/tools"
if [[ ! -x "$tools/bin/inferno-flamegraph" ]]; then
  cargo install --locked --root "$tools" inferno
fi

out="target/profile/$pair"
rm -rf "$out"
mkdir -p "$out"
mkfifo "$out/control"
# 499 Hz with DWARF stacks (release builds have no frame pointers), the largest stack copy perf
# takes: async stacks are deep, and shorter copies left most socket writes unattributed.
perf record -F 499 -g --call-graph dwarf,65528 -D -1 --control "fifo:$out/control" \
  -o "$out/perf.data" -- \
  "${preload[@]}" "$bin_dir/sluice-bench-baselines" --only "$pair" --concurrency 256 --rounds 3 --seconds 3 \
  --perf-control "$out/control" --json "$out/baselines.json" "$@"

perf script -i "$out/perf.data" --no-inline 2>/dev/null |
  "$tools/bin/inferno-collapse-perf" --all >"$out/stacks.folded"
"$tools/bin/inferno-flamegraph" --title "sluice-bench-baselines --only $pair: Sluice's rounds" \
  <"$out/stacks.folded" >"$out/flame.svg"

# The process's CPU per answer of Sluice's side, from the benchmark's own report.
per_answer="$(python3 -c '
import json, sys
report = json.load(open(sys.argv[1]))
side = report["comparisons"][0]["sluice"]
print(side["cpu_us_per_answer"]["this_process"])
' "$out/baselines.json")"

awk -v per_answer="$per_answer" -v pair="$pair" '
  # One folded line: "frame;frame;...;leaf count".
  {
    count = $NF
    stack = substr($0, 1, length($0) - length(count) - 1)
    n = split(stack, frames, ";")
    leaf = frames[n]
    if (stack ~ /hyper::client|role::Client|sluice_loadtest::baselines::rounds/) side = "client"
    else if (stack ~ /sluice_gateway|sluice_durable|hyper::server|hyper_util::server|HttpService|role::Server|fred::|sqlx|redis_protocol/) side = "gateway"
    else side = "shared or unattributed (socket I/O and wake-ups of both sides: DWARF unwinding stops in writev)"
    total += count
    sides[side] += count
    if (side != "gateway") next
    if (leaf ~ /_\[k\]$/) what = "kernel (syscalls, TCP, scheduling)"
    else if (leaf ~ /malloc|free|realloc|calloc|_rjem_|je_|sdallocx|arena_|tcache|_int_|unlink_chunk/) what = "allocator (malloc, free)"
    else if (leaf ~ /memcpy|memmove|memset|memcmp/) what = "memcpy and friends"
    else if (leaf ~ /serde_json|serde::/) what = "JSON (serde_json)"
    else if (leaf ~ /sha2|hmac|Sha256|sha256|compress256/) what = "hashing (SHA-256, HMAC)"
    else if (leaf ~ /fred::|redis_protocol/) what = "Redis client (fred, RESP)"
    else if (leaf ~ /sqlx|postgres/) what = "PostgreSQL client (sqlx)"
    else if (leaf ~ /hyper::|httparse|http::/) what = "HTTP (hyper, httparse)"
    else if (leaf ~ /tracing/) what = "tracing"
    else if (leaf ~ /tokio::/) what = "tokio (tasks, timers, I/O)"
    else if (leaf ~ /core::fmt|alloc::fmt|::fmt::/) what = "formatting (core::fmt)"
    else if (leaf ~ /uuid|rand/) what = "ids (uuid, rand)"
    else what = "other (gateway, std)"
    parts[what] += count
  }
  END {
    if (total == 0) { print "no samples: was perf allowed to record (perf_event_paranoid)?"; exit 1 }
    printf "CPU of the benchmark process per answer (%s, Sluice side): %.1f us, split by sampled cycles\n\n", pair, per_answer
    print "| side | share | us per answer |"
    print "| --- | ---: | ---: |"
    for (s in sides) printf "| %s | %.1f %% | %.1f |\n", s, 100 * sides[s] / total, per_answer * sides[s] / total
    print ""
    print "| gateway, by what ran (self time) | share of the process | us per answer |"
    print "| --- | ---: | ---: |"
    for (w in parts) printf "| %s | %.1f %% | %.1f |\n", w, 100 * parts[w] / total, per_answer * parts[w] / total
  }
' "$out/stacks.folded" | tee "$out/split.md"

echo
echo "flame graph: $out/flame.svg; stacks: $out/stacks.folded; split: $out/split.md"
