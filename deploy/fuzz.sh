#!/usr/bin/env bash
# Long runs of the property tests of every parser that sees caller bytes (the `props` modules of
# sluice-gateway, sluice-model and sluice-executor: tickets, subject tokens, strict JSON, path and query
# decoding, declarations, webhook answers, Retry-After). `cargo test` runs them with a few
# hundred cases each; this runs them again and again for M minutes, each round with a fresh
# seed and twice the cases of the round before (up to --max-cases), and stops at the first
# failure.
#
#   deploy/fuzz.sh --minutes M [--cases N] [--max-cases N] [--release]
#   deploy/fuzz.sh --engine libfuzzer --minutes M
#
# Every round prints its seed; a failure prints the command that replays it, and proptest keeps
# the shrunk case in <crate>/proptest-regressions/ (commit it with the fix: every later run,
# `cargo test` included, tries it first). Exits 0 when the time is up with no failure.
#
# --engine libfuzzer runs the coverage-guided targets of fuzz/ instead (libFuzzer through
# cargo-fuzz, installed with `cargo install` when missing), each for an equal share of M minutes,
# on the stable toolchain with `--sanitizer none` (the sanitizers want nightly). A crash stops
# the run; its input is in fuzz/artifacts/<target>/ and the replay command is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

minutes=""
engine=proptest
cases=1000
max_cases=64000
profile=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --max-cases) max_cases=$2; shift 2 ;;
    --release) profile=(--release); shift ;;
    --engine) engine=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ "$minutes" =~ ^[0-9]+$ ]] || [ "$minutes" -lt 1 ]; then
  echo "usage: deploy/fuzz.sh --minutes M [--cases N] [--max-cases N] [--release]" >&2
  exit 2
fi

require_cargo

if [ "$engine" = libfuzzer ]; then
  if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
  fi
  cd fuzz
  # Its own workspace and target directory; the queries compile from the main one's .sqlx/.
  unset CARGO_TARGET_DIR
  export SQLX_OFFLINE_DIR="$PWD/../.sqlx"
  log "building the libFuzzer targets (stable, no sanitizer)"
  cargo fuzz build --sanitizer none
  mapfile -t targets < <(cargo fuzz list)
  share=$((minutes * 60 / ${#targets[@]}))
  [ "$share" -ge 1 ] || share=1
  for target in "${targets[@]}"; do
    log "$target: ${share}s"
    mkdir -p "corpus/$target"
    set +e
    # New inputs go to corpus/<target> (not committed); seeds/<target> starts it off.
    cargo fuzz run --sanitizer none "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$share" -print_final_stats=1 2>&1 \
      | grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|INFO: Seed|==|thread|SUMMARY|artifact|Failing input|\s+cargo fuzz)'
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
      log "$target failed: the input is in fuzz/artifacts/$target/ (replay: cd fuzz && cargo fuzz run --sanitizer none $target fuzz/artifacts/$target/<file>)"
      exit 1
    fi
  done
  log "no crash in $minutes min (${#targets[@]} targets, ${share}s each)"
  exit 0
fi
[ "$engine" = proptest ] || { echo "unknown engine: $engine (proptest or libfuzzer)" >&2; exit 2; }

# The three test binaries, run directly (in their package's directory, as cargo runs them, so
# that proptest finds and writes <crate>/proptest-regressions/): a time box then stops the
# binary itself, not a cargo that would leave it running.
log "building the property tests"
binaries=$(cargo test "${profile[@]}" --locked -p sluice-gateway -p sluice-model -p sluice-executor --lib --no-run \
  --message-format=json | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(os.path.dirname(m["manifest_path"]) + "\t" + m["executable"])
')
[ "$(printf '%s\n' "$binaries" | wc -l)" -eq 3 ] || { echo "expected three test binaries: $binaries" >&2; exit 1; }

end=$((SECONDS + minutes * 60))
round=0
passed=0
total=0
while [ $SECONDS -lt $end ]; do
  round=$((round + 1))
  seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
  log "round $round: PROPTEST_CASES=$cases PROPTEST_RNG_SEED=$seed ($((end - SECONDS))s left)"
  started=$SECONDS
  while IFS=$'\t' read -r dir binary; do
    left=$((end - SECONDS))
    if [ "$left" -le 0 ]; then
      log "time is up in round $round (its cases were not all run)"
      break 2
    fi
    set +e
    (cd "$dir" && PROPTEST_CASES=$cases PROPTEST_RNG_SEED=$seed timeout "$left" "$binary" -q props::)
    status=$?
    set -e
    # The time box ending a round (124) is the end of the run, not a failure.
    if [ "$status" -eq 124 ]; then
      log "time is up in round $round (its cases were not all run)"
      break 2
    fi
    if [ "$status" -ne 0 ]; then
      log "round $round failed in $binary; replay it with:"
      echo "  (cd $dir && PROPTEST_CASES=$cases PROPTEST_RNG_SEED=$seed $binary props::)" >&2
      git status --short -- '*proptest-regressions*' >&2 || true
      exit 1
    fi
  done <<<"$binaries"
  passed=$round
  total=$((total + cases))
  log "round $round passed in $((SECONDS - started))s"
  cases=$((cases * 2 > max_cases ? max_cases : cases * 2))
done
log "no failure in $minutes min: $passed whole rounds, $total cases per property in them (and a cut last round)"
