#!/usr/bin/env bash
# Prints the path of a Python that has requirements.txt installed (a venv under target/, made
# with pip on first use and again whenever requirements.txt changes), for the tests of
# sluice_verify.py: `"$(examples/backend/python/venv.sh)" -m unittest` in this folder, and
# gateway/tests/api/webhooks/backend_snippets.rs. What it installs goes to stderr.
#
#   PYTHON: the interpreter the venv is made from (python3)
#   SLUICE_BACKEND_VENV: where the venv goes (target/backend-python-venv)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target="$root/$target" ;; esac
venv=${SLUICE_BACKEND_VENV:-$target/backend-python-venv}
python=${PYTHON:-python3}

mkdir -p "$(dirname "$venv")"
# Tests running at once wait for the one that installs.
exec 9>"$venv.lock"
flock 9
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" || [ ! -x "$venv/bin/python" ]; then
  echo "installing $(grep -v '^#' "$here/requirements.txt" | tr '\n' ' ')into $venv" >&2
  "$python" -m venv --clear "$venv" >&2 || {
    echo "cannot make a venv with $python (Debian's python3 wants: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi
echo "$venv/bin/python"
