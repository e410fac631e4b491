# Shared by deploy/local.sh and deploy/test.sh: make sure the machine has what Sluice needs.
# Installs with apt only what is missing, so a prepared machine is left untouched.

# The checked queries compile from the committed descriptions in .sqlx/ (deploy/sqlx.sh), never
# from whatever database a DATABASE_URL in the caller's environment names.
export SQLX_OFFLINE=true

# Each step says how long the script had run when it began (bash's SECONDS), so a slow step
# shows in any log of it.
log() { printf '\033[1m==> [%dm%02ds] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -qq
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

require_cargo() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install Rust with rustup (https://rustup.rs), then run this again" >&2
    exit 1
  fi
}

# The one release build of every binary of the workspace (sluice, sluice-loadtest and the
# benchmarks), shared by the measuring scripts (loadtest/bench.sh, loadtest/connections.sh).
# Building `-p sluice-gateway` in one and `-p sluice-gateway -p sluice-loadtest` in the other
# unified the dependencies' features differently, so the second script compiled the whole tree
# again: the same command in each builds it once. deploy/local.sh builds the `sluice` binary
# alone, all a first run needs.
build_release() {
  log "building every binary (release)"
  cargo build --release --locked --workspace --bins
}

require_redis() {
  command -v redis-server >/dev/null 2>&1 || { log "installing redis-server"; apt_install redis-server; }
}

pg_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

require_postgres() {
  [ -n "$(pg_bindir)" ] && [ -x "$(pg_bindir)/initdb" ] || { log "installing postgresql"; apt_install postgresql; }
}

# gateway/tests/api/deployment/pgbouncer.rs starts its own PgBouncer (as the postgres user, on a free port);
# the package's own service is not used.
require_pgbouncer() {
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || { log "installing pgbouncer"; apt_install pgbouncer; }
}

require_setpriv() {
  command -v setpriv >/dev/null 2>&1 || { log "installing util-linux (setpriv)"; apt_install util-linux; }
}

# The README's token-minting snippets are run by a test (gateway/tests/api/repository/readme_tokens.rs):
# node comes with the dashboard test's dependencies, python3 from here.
require_python() {
  command -v python3 >/dev/null 2>&1 || { log "installing python3"; apt_install python3; }
  # schemathesis and kubernetes-validate are installed into venvs under target/.
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || { log "installing python3-venv"; apt_install python3-venv; }
}

# deploy/systemd/verify.sh checks the units with systemd-analyze.
require_systemd_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 || { log "installing systemd (systemd-analyze)"; apt_install systemd; }
}

# The dashboard's browser test (gateway/tests/api/operators/dashboard.rs) drives Debian's Chromium.
require_chromium() {
  [ -x /usr/bin/chromium ] || { log "installing chromium"; apt_install chromium; }
}

# node and npm for that test, then what gateway/tests/ui/package-lock.json pins: playwright-core,
# axe-core, React 19 with esbuild for the React hook's page, and TypeScript with @types/react for
# the browser module's types (`npm ci` again whenever the lock file is newer than the installed
# tree or a package is missing).
require_ui_test_deps() {
  command -v node >/dev/null 2>&1 || { log "installing nodejs"; apt_install nodejs; }
  command -v npm >/dev/null 2>&1 || { log "installing npm"; apt_install npm; }
  local dir=gateway/tests/ui
  local installed="$dir/node_modules/.package-lock.json"
  local missing=0 package
  for package in playwright-core axe-core react react-dom esbuild typescript @types/react; do
    [ -f "$dir/node_modules/$package/package.json" ] || missing=1
  done
  if [ ! -f "$installed" ] || [ "$dir/package-lock.json" -nt "$installed" ] || [ "$missing" -eq 1 ]; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# A throwaway PostgreSQL for one script: initdb in a temporary directory, on a free loopback
# port, stopped and removed when the script exits. Sets SCRATCH_PG_URL. PostgreSQL refuses to
# run as root, so as root it runs as the `postgres` user (with a directory that user owns).
start_scratch_postgres() {
  local bin port
  bin=$(pg_bindir)
  SCRATCH_PG_DIR=$(mktemp -d /tmp/sluice-pg.XXXXXX)
  local as_pg=()
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$SCRATCH_PG_DIR"
    as_pg=(setpriv --reuid postgres --regid postgres --init-groups)
  fi
  trap stop_scratch_postgres EXIT
  (cd "$SCRATCH_PG_DIR" && "${as_pg[@]}" "$bin/initdb" -D data -A trust -U postgres --no-sync >/dev/null)
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    # A port something answers on is taken; pg_ctl's own failure covers the rest of the race.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    if (cd "$SCRATCH_PG_DIR" && "${as_pg[@]}" "$bin/pg_ctl" -D data -l log -w -s \
          -o "-p $port -k $SCRATCH_PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start); then
      SCRATCH_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
      SCRATCH_PG_AS=("${as_pg[@]}")
      return 0
    fi
  done
  echo "could not start a throwaway PostgreSQL (log: $SCRATCH_PG_DIR/log)" >&2
  return 1
}

# Applies every migration to the database at URL $1 with psql: each in one transaction, as sqlx
# applies it, except those whose first line is `-- no-transaction` (CREATE INDEX CONCURRENTLY
# cannot run in one). Run from the repository's root.
apply_migrations() {
  local url=$1 migration single
  for migration in durable/store/migrations/*.sql; do
    single=(-1)
    [ "$(head -n 1 "$migration")" = "-- no-transaction" ] && single=()
    psql "$url" -v ON_ERROR_STOP=1 -q "${single[@]}" -f "$migration" >/dev/null
  done
}

stop_scratch_postgres() {
  if [ -n "${SCRATCH_PG_DIR:-}" ] && [ -d "$SCRATCH_PG_DIR/data" ]; then
    (cd "$SCRATCH_PG_DIR" && "${SCRATCH_PG_AS[@]}" "$(pg_bindir)/pg_ctl" -D data -m immediate -s stop) || true
  fi
  [ -n "${SCRATCH_PG_DIR:-}" ] && rm -rf "$SCRATCH_PG_DIR"
  return 0
}
