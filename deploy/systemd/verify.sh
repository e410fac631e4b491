#!/usr/bin/env bash
# Checks the systemd units with `systemd-analyze verify`: syntax, every directive known to this
# systemd, the dependencies resolvable, and the ExecStart binary present and executable. The
# units name /usr/local/bin/sluice and /etc/sluice/sluice.env; the copies checked here name the
# binary given (default: the debug build) and the example environment file instead.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# The binary's path as given, relative to where the script was called from.
binary="$(realpath -m "${1:-$here/../../target/debug/sluice}")"
cd "$here"
[ -x "$binary" ] || { echo "no sluice binary at $binary (build it first)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for unit in sluice-*.service; do
  sed -e "s|/usr/local/bin/sluice|$binary|g" \
      -e "s|/etc/sluice/sluice.env|$PWD/sluice.env.example|g" "$unit" > "$work/$unit"
done
# Warnings are failures: an unknown directive or a bad value is only a warning to systemd.
out="$(cd "$work" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no ./sluice-*.service 2>&1)" || {
  printf '%s\n' "$out" >&2
  exit 1
}
if [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
# The sandbox: systemd's own exposure score (0 safest, 10 none), at most MAX_EXPOSURE each.
MAX_EXPOSURE=2.0
for unit in sluice-*.service; do
  score="$(cd "$work" && systemd-analyze security --offline=true "./$unit" 2>/dev/null \
    | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
  [ -n "$score" ] || { echo "$unit: no exposure score from systemd-analyze security" >&2; exit 1; }
  awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' || {
    echo "$unit: exposure $score is above $MAX_EXPOSURE (systemd-analyze security)" >&2
    exit 1
  }
  echo "$unit: exposure $score (at most $MAX_EXPOSURE)"
done
echo "systemd units verified: $(ls sluice-*.service | tr '\n' ' ')"
