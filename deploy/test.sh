#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine: installs redis-server, PostgreSQL, PgBouncer,
# Chromium, python3 and node with apt when missing, and the dashboard test's playwright-core with npm ci (the tests
# start their own instances on free ports; nothing running is touched), then checks formatting
# and lints and runs every test against real servers.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

require_cargo
require_redis
require_postgres
require_pgbouncer
require_setpriv
require_python
require_systemd_analyze

# What only later steps need is installed while the workspace builds (network and disk against
# two busy cores): Chromium and the browser tests' playwright-core, then the verifiers'
# kubernetes-validate, hadolint, promtool and schemathesis, and the backend snippets' cryptography
# (examples/backend/python/venv.sh). Its log is shown when it fails.
tools_log=$(mktemp)
trap 'rm -f "$tools_log"' EXIT
(
  set -e
  require_chromium
  require_ui_test_deps
  deploy/kubernetes/verify.sh --install-only
  deploy/container/verify.sh --install-only
  deploy/observability/verify.sh --install-only
  deploy/schemathesis.sh --if-supported --install-only
  examples/backend/python/venv.sh >/dev/null
) >"$tools_log" 2>&1 &
tools=$!
tools_ready() {
  if ! wait "$tools"; then
    cat "$tools_log" >&2
    echo "installing the tools the tests need failed (above)" >&2
    exit 1
  fi
  cat "$tools_log" >&2
}

log "cargo fmt --check"
cargo fmt --all --check
# Every crate of the workspace is compiled by clippy's driver with `-D warnings`
# (deploy/clippy_rustc.sh), so the one build of the tests below is the lint too; no build is
# incremental (nothing here is built twice, and incremental builds write more).
CLIPPY_DRIVER=$(rustup which clippy-driver)
export CLIPPY_DRIVER RUSTC_WORKSPACE_WRAPPER="$PWD/deploy/clippy_rustc.sh" CARGO_INCREMENTAL=0
out=$(mktemp)
built=$(mktemp)
trap 'rm -f "$out" "$built" "$tools_log" "${offline_log:-}"' EXIT
# Three tests at a time on two cores, in each of two lanes (deploy/test_lanes.py): most of a
# test's time is spent waiting on its servers (the api binary took 341 s
# with two and about 200 s with four on this machine). The tests whose bounds assume a quiet
# machine run alone afterwards, one at a time (each name below is a filter: every test whose
# name contains it):
# - the slot-migration test: how long its slot stays half-moved follows the machine's load;
# - the three-gateway test: how fast its callers can press the shared intake bucket;
# - the Chromium tests (`browser::`, `rooms::browser::`, `operators::dashboard::`, `rooms::page::`): fifty
#   pages joining a drop showed "Reconnecting…" beside two other tests.
# Each failed once in about eight runs with three or four tests beside it.
ALONE=(
  deployment::cluster::a_slot_migrated_under_load_loses_no_acceptance_and_keeps_the_limit
  intake::concurrency::three_gateway_processes_share_one_intake_bucket_exactly
  browser::
  operators::dashboard::
  rooms::page::
)
SKIP_ALONE=()
for name in "${ALONE[@]}"; do SKIP_ALONE+=(--skip "$name"); done
# Every script runs behind lua/lib/strict_keys.lua in every test below, gateway and executor
# processes included: a call on a key that is not in the script's KEYS fails it.
export SLUICE_STRICT_SCRIPT_KEYS=1
# One build: every test binary, linted, its checked queries described against a throwaway
# PostgreSQL; deploy/sqlx.sh then fails when .sqlx/ (what every other build reads,
# SQLX_OFFLINE=true) is not what the queries and the migrations give now. Without the default
# features: the `sluice` binary the tests run is built on the system allocator, not jemalloc,
# whose C build was a third of this one's time (gateway/Cargo.toml); every `cargo test` below
# passes the same flags, so nothing is built twice.
log "building every test binary (linted by clippy), and the sqlx offline data it describes"
deploy/sqlx.sh check -- test --workspace --locked --no-default-features --no-run \
  --message-format=json-render-diagnostics >"$built"
tools_ready
log "node --test gateway/client (the browser module)"
node --test gateway/client/test/
log "tsc gateway/client/types-check (the browser module's types, as an application uses them)"
gateway/tests/ui/node_modules/.bin/tsc -p gateway/client/types-check
log "node --test and python -m unittest in examples/backend (the webhook and pass verifiers)"
node --test examples/backend/node/
(cd examples/backend/python && "$(./venv.sh)" -m unittest)
# The suites that must keep working on a Redis Cluster run again on a real one (three masters
# with a replica each, started by the test kit): the Lua scripts, and intake, execution, rebuild,
# reads, control and the life-cycle races through the gateway (not the executor processes'
# tests, nor retention and query plans, which are PostgreSQL's). The failover test
# (`deployment::cluster::`) runs alone below.
CLUSTER=(intake::commands:: intake::concurrency:: intake::idempotency:: execution:: life_cycle::
  operators::control:: projection::basics:: projection::reconcile:: reads::
  --skip execution::processes:: --skip life_cycle::query_plans:: --skip life_cycle::retention::)
# The deployment files, checked beside the test lanes (they need the built binary and little
# CPU); their output is shown after the lanes.
offline_checks() {
  local failed=0
  log "systemd units (systemd-analyze verify)"
  deploy/systemd/verify.sh "${CARGO_TARGET_DIR:-target}/debug/sluice" || failed=1
  log "kubernetes manifests (kubernetes-validate, policy)"
  deploy/kubernetes/verify.sh || failed=1
  log "container file (hadolint, policy)"
  deploy/container/verify.sh || failed=1
  log "observability (promtool check/test rules and config, dashboard_check.py)"
  deploy/observability/verify.sh || failed=1
  return "$failed"
}
offline_log=$(mktemp)
offline_checks >"$offline_log" 2>&1 &
offline=$!
# The gateway's api binary, then the load generator's scenarios, in one lane; every other test
# binary (the Lua scripts, the model checker's short run, the unit tests), then the cluster
# suites, in the other, side by side: the tests mostly wait on their servers
# (deploy/test_lanes.py).
log "cargo test: two lanes (the api binary, then the load generator's scenarios; every other binary, then the cluster suites)"
status=0
python3 deploy/test_lanes.py "$built" "$out" "${SKIP_ALONE[@]}" \
  --cluster "${CLUSTER[@]}" "${SKIP_ALONE[@]}" || status=$?
if [ "$status" -eq 0 ]; then
  log "cargo test: the tests that run alone"
  cargo test --workspace --locked --no-default-features --test api -- --test-threads 1 "${ALONE[@]}" 2>&1 \
    | tee -a "$out"
  status=${PIPESTATUS[0]}
fi
# Of those, the cluster suites hold the three-gateway test (`intake::concurrency::`): on the cluster too.
if [ "$status" -eq 0 ]; then
  SLUICE_TEST_REDIS=cluster cargo test --workspace --locked --no-default-features --test api -- --exact \
    intake::concurrency::three_gateway_processes_share_one_intake_bucket_exactly 2>&1 | tee -a "$out"
  status=${PIPESTATUS[0]}
fi
# The offline checks (run beside the test lanes above, their output here).
if [ "$status" -eq 0 ]; then
  if ! wait "$offline"; then status=1; fi
  cat "$offline_log"
fi
if [ "$status" -eq 0 ]; then
  # A short schemathesis run against docs/openapi.json on a throwaway `sluice dev` (the binary
  # the tests just built), bounded hard: 0 server errors and 0 answers outside the document, or
  # the suite fails. Its seed is fixed, so a red suite is this code's and not the draw's: seed
  # 666638343 found proof_of_work.challenge documented without its no-U+0000 rule (bb4847a),
  # and another draw (2413315) once sent, as a "valid" case, a request key outside the
  # document's own pattern (a U+FFFD), which the gateway rightly refuses. Fresh draws are
  # `deploy/schemathesis.sh` without `--seed` (docs/fuzzing.md).
  log "schemathesis (short run, fixed seed; deploy/schemathesis.sh for longer ones)"
  SLUICE_BIN="${CARGO_TARGET_DIR:-target}/debug/sluice" timeout 300 \
    deploy/schemathesis.sh --if-supported --max-examples 10 --seed 666638343 || status=1
fi
log "done"
# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$out"
exit "$status"
