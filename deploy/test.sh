#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine: installs redis-server and PostgreSQL with apt
# when missing (the tests start their own instances on free ports; nothing running is touched),
# then checks formatting and lints and runs every test against real servers.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

require_cargo
require_redis
require_postgres
require_setpriv

log "cargo fmt --check"
cargo fmt --all --check
log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "cargo test"
cargo test --workspace --locked
