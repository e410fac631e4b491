#!/usr/bin/env bash
# Long model-checker runs with fresh seeds (docs/faults.md, "The model checker"): builds `sluice`
# and `sluice-check`, then runs `sluice-check soak` for the minutes given (default 60). A failure
# stops the run and prints its seed, the broken promises and a shortened plan with the command
# that replays it. SLUICE_CHECK_PROFILE=release builds optimised binaries (a cold release build
# takes about 25 minutes on two cores; debug is the default, as the suite runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-60}
profile=${SLUICE_CHECK_PROFILE:-debug}
if [ "$profile" = release ]; then
  cargo build --release --locked -p sluice-gateway --bin sluice -p sluice-check
  bin=target/release
else
  cargo build --locked -p sluice-gateway --bin sluice -p sluice-check
  bin=target/debug
fi
exec "$bin/sluice-check" --out target/sluice-check-soak soak --minutes "$minutes"
