#!/usr/bin/env bash
# Checks the observability files offline: the alert rules with `promtool check rules`, their unit
# tests with `promtool test rules` (every alert fires on one series and stays quiet on another),
# the example Prometheus configuration with `promtool check config`, then the Grafana dashboard
# with dashboard_check.py (well-formed for Grafana: uid, title, unique panel ids, grid positions,
# every target's datasource and expression, every variable it refers to defined) and each of its
# expressions parsed as PromQL by promtool. Any failure exits non-zero.
#
# promtool: $PROMTOOL, else the one on PATH, else Debian's `prometheus` package unpacked into
# target/ (apt-get download + dpkg-deb -x: installing the package would also start a Prometheus
# server). That the metric names are the ones Sluice exports is checked against a real scrape by
# gateway/tests/api/repository/observability.rs.
#
#   deploy/observability/verify.sh [--install-only]   (--install-only: find or unpack promtool,
#                                                     check nothing; deploy/test.sh does it
#                                                     while it builds)
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib.sh

dir=deploy/observability
unpacked=${PROMTOOL_DIR:-${CARGO_TARGET_DIR:-target}/promtool}

require_promtool() {
  if [ -n "${PROMTOOL:-}" ]; then
    return 0
  fi
  if command -v promtool >/dev/null 2>&1; then
    PROMTOOL=$(command -v promtool)
    return 0
  fi
  if [ ! -x "$unpacked/usr/bin/promtool" ]; then
    log "unpacking promtool from Debian's prometheus package into $unpacked"
    local download
    download=$(mktemp -d)
    if ! (cd "$download" && apt-get download prometheus >/dev/null 2>&1); then
      as_root apt-get update -qq
      (cd "$download" && apt-get download prometheus >/dev/null)
    fi
    mkdir -p "$unpacked"
    dpkg-deb -x "$download"/prometheus_*.deb "$unpacked"
    rm -rf "$download"
  fi
  PROMTOOL=$unpacked/usr/bin/promtool
}

require_python
require_promtool
[ "${1:-}" = "--install-only" ] && exit 0
"$PROMTOOL" --version 2>&1 | head -n 1

log "promtool check rules"
"$PROMTOOL" check rules "$dir/prometheus/alerts.yml"
log "promtool test rules"
"$PROMTOOL" test rules "$dir/prometheus/alerts_test.yml"
log "promtool check config"
"$PROMTOOL" check config "$dir/prometheus/prometheus.example.yml"

log "dashboard_check.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$dir/dashboard_check.py" "$dir/grafana/sluice.json" --rules-out "$work/dashboard.yml"
# Each expression of the dashboard, its variables replaced, parsed as PromQL.
if ! out=$("$PROMTOOL" check rules "$work/dashboard.yml" 2>&1); then
  printf '%s\n' "$out" >&2
  # promtool names the line of the rule it could not parse; the line before it names the panel.
  line=$(printf '%s\n' "$out" | sed -n 's/.*dashboard\.yml: \([0-9]*\):[0-9]*:.*/\1/p' | head -n 1)
  if [ -n "$line" ] && [ "$line" -gt 2 ]; then
    echo "in $dir/grafana/sluice.json (variables replaced):" >&2
    sed -n "$((line - 2)),${line}p" "$work/dashboard.yml" >&2
  fi
  exit 1
fi
echo "the dashboard's $(grep -c '^      - record:' "$work/dashboard.yml") expressions parse as PromQL"
echo "observability files verified: $dir/prometheus/alerts.yml, alerts_test.yml, prometheus.example.yml, $dir/grafana/sluice.json"
