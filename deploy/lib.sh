# Shared by deploy/local.sh and deploy/test.sh: make sure the machine has what Sluice needs.
# Installs with apt only what is missing, so a prepared machine is left untouched.

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

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
# benchmarks), shared by deploy/local.sh and loadtest/bench.sh. Building `-p sluice-gateway`
# in one and `-p sluice-gateway -p sluice-loadtest` in the other unified the dependencies'
# features differently, so the second script compiled the whole tree again: the same command
# in both builds it once.
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

require_setpriv() {
  command -v setpriv >/dev/null 2>&1 || { log "installing util-linux (setpriv)"; apt_install util-linux; }
}

# The dashboard's browser test (gateway/tests/api/dashboard.rs) drives Debian's Chromium.
require_chromium() {
  [ -x /usr/bin/chromium ] || { log "installing chromium"; apt_install chromium; }
}

# node and npm for that test, then playwright-core as pinned by gateway/tests/ui/package-lock.json
# (`npm ci` again whenever the lock file is newer than the installed tree).
require_ui_test_deps() {
  command -v node >/dev/null 2>&1 || { log "installing nodejs"; apt_install nodejs; }
  command -v npm >/dev/null 2>&1 || { log "installing npm"; apt_install npm; }
  local dir=gateway/tests/ui
  local installed="$dir/node_modules/.package-lock.json"
  if [ ! -f "$installed" ] || [ "$dir/package-lock.json" -nt "$installed" ] \
      || [ ! -f "$dir/node_modules/playwright-core/package.json" ]; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
