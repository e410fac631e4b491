#!/usr/bin/env bash
# Runs Sluice locally in one command on a Debian machine: installs redis-server and PostgreSQL
# with apt when missing, starts them when they are not answering, creates the `sluice` role and
# database, then `sluice dev`: migrates, bootstraps a demo namespace with the demo declaration
# and runs the gateway and the executor.
#
# State (credentials, ticket key) lives in $SLUICE_DEV_DIR (default ./.sluice-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

dev_dir=${SLUICE_DEV_DIR:-.sluice-dev}
listen=${SLUICE_LISTEN:-127.0.0.1:8080}
export SLUICE_REDIS_URL=${SLUICE_REDIS_URL:-redis://127.0.0.1:6379}
# Loopback in plaintext, as `sluice dev` (Debian's PostgreSQL has ssl = on, which the default
# sslmode=prefer would use to no purpose on this machine).
export SLUICE_DATABASE_URL=${SLUICE_DATABASE_URL:-postgres://sluice:sluice@127.0.0.1:5432/sluice?sslmode=disable}

require_cargo
require_redis
require_postgres

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  log "starting redis-server on 127.0.0.1:6379"
  # noeviction: an evicted admission key would be a silently broken limit.
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --maxmemory-policy noeviction --logfile /tmp/sluice-redis.log
fi

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  log "starting PostgreSQL"
  version=$(basename "$(dirname "$(pg_bindir)")")
  if ! pg_lsclusters -h 2>/dev/null | grep -q .; then
    as_root pg_createcluster "$version" main
  fi
  cluster=$(pg_lsclusters -h | awk 'NR==1 {print $1" "$2}')
  as_root pg_ctlcluster --skip-systemctl-redirect $cluster start
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi

log "ensuring role and database sluice"
psql_admin() { as_root runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qtA "$@"; }
psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'sluice'" | grep -q 1 \
  || psql_admin -c "CREATE ROLE sluice LOGIN PASSWORD 'sluice'"
psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'sluice'" | grep -q 1 \
  || psql_admin -c "CREATE DATABASE sluice OWNER sluice"

# Only what this script runs: the `sluice` binary (the benchmarks' binaries are
# loadtest/bench.sh's, built by build_release there).
log "building sluice (release)"
cargo build --release --locked -p sluice-gateway --bin sluice
sluice=target/release/sluice

mkdir -p "$dev_dir"
chmod 700 "$dev_dir"
if [ ! -f "$dev_dir/ticket-keys" ]; then
  (umask 077 && "$sluice" keygen > "$dev_dir/ticket-keys")
fi
export SLUICE_TICKET_KEYS=$(cat "$dev_dir/ticket-keys")

# sluice dev migrates, bootstraps the demo namespace (credentials in $dev_dir/credentials.json),
# applies deploy/demo.toml and runs the gateway and the executor together.
cat <<EOT

Try, once it is serving (the credential is in $dev_dir/credentials.json):
  curl -s -X POST http://$listen/v1/commands/claim:enqueue \\
    -H "Authorization: Bearer \$CREDENTIAL" -H 'Content-Type: application/json' \\
    -d '{"request_key":"order-1","subject":"user-42","input":{"offer":"0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10"}}'
EOT
exec "$sluice" dev --listen "$listen" --dir "$dev_dir"
