#!/usr/bin/env bash
# The offline data of the compile-time checked queries (`sqlx::query!` and friends), kept in
# `.sqlx/` at the workspace root so that every build, CI's included, checks the queries without
# a database (`SQLX_OFFLINE=true`).
#
#   deploy/sqlx.sh prepare   rewrite .sqlx/ (after changing a query or a migration)
#   deploy/sqlx.sh check     fail, naming the files, when .sqlx/ is not what the queries and the
#                            migrations give now
#   deploy/sqlx.sh check -- CARGO_ARGS...
#                            the same, with `cargo CARGO_ARGS` as the build that describes the
#                            queries: deploy/test.sh passes its clippy run, so one build of the
#                            workspace both lints and describes (a build of its own took a
#                            minute and a half on 2 cores)
#
# Both describe every query against a throwaway PostgreSQL of their own (started on a free
# port with every migration applied, removed on exit): what a running server holds is never
# read. The macros write what they describe to SQLX_OFFLINE_DIR when they run against a live
# database, so no sqlx-cli is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

mode=${1:-}
case "$mode" in
  prepare|check) ;;
  *) echo "usage: deploy/sqlx.sh prepare|check [-- CARGO_ARGS...]" >&2; exit 2 ;;
esac
shift
build=(check --locked --quiet -p sluice-store -p sluice-durable -p sluice-executor -p sluice-gateway --lib)
if [ "${1:-}" = "--" ]; then
  shift
  [ $# -gt 0 ] || { echo "deploy/sqlx.sh: no cargo arguments after --" >&2; exit 2; }
  build=("$@")
fi

require_cargo
require_postgres
require_setpriv
start_scratch_postgres
apply_migrations "$SCRATCH_PG_URL"

described=$(mktemp -d)
trap 'rm -rf "$described"; stop_scratch_postgres' EXIT
# The crates whose queries are checked; touching them makes cargo run their macros again (it
# does not see the environment the macros read).
touch durable/store/src/lib.rs durable/src/lib.rs durable/executor/src/lib.rs gateway/src/lib.rs
log "describing every query against a throwaway PostgreSQL (cargo ${build[*]})"
SQLX_OFFLINE=false DATABASE_URL="$SCRATCH_PG_URL" SQLX_OFFLINE_DIR="$described" cargo "${build[@]}"

if [ "$mode" = prepare ]; then
  rm -rf .sqlx
  mkdir .sqlx
  cp "$described"/*.json .sqlx/ 2>/dev/null || true
  echo "wrote $(ls .sqlx | wc -l) query descriptions to .sqlx/"
  exit 0
fi
if ! diff -r .sqlx "$described" >/dev/null 2>&1; then
  echo "the offline query data in .sqlx/ is stale:" >&2
  diff -rq .sqlx "$described" | sed "s|$described|(now)|" >&2 || true
  echo "run deploy/sqlx.sh prepare and commit .sqlx/" >&2
  exit 1
fi
echo ".sqlx/ is current ($(ls .sqlx | wc -l) queries)"
