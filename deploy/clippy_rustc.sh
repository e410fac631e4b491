#!/usr/bin/env bash
# The compiler of the workspace's own crates in deploy/test.sh (RUSTC_WORKSPACE_WRAPPER): clippy's
# driver with `-D warnings`, so the one build of the tests also lints them (what `cargo clippy
# --all-targets -- -D warnings` checks, benches aside: the workspace has none). A separate
# `cargo clippy` compiled every dependency a second time, in check mode: 4.5 minutes of a
# 2-core machine. Dependencies are compiled by plain rustc, as cargo clippy leaves them.
#
# Cargo calls it as `clippy_rustc.sh RUSTC ARGS...`; CLIPPY_DRIVER names the driver (default:
# the toolchain's, from rustup).
set -euo pipefail
driver=${CLIPPY_DRIVER:-$(rustup which clippy-driver)}
for arg in "$@"; do
  # A compilation (not a query such as `-vV` or `--print`): warnings fail it.
  if [ "$arg" = "--crate-name" ]; then
    exec "$driver" "$@" -D warnings
  fi
done
exec "$driver" "$@"
