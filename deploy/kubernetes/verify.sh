#!/usr/bin/env bash
# Validates the manifests offline: every document against the Kubernetes schema of
# KUBERNETES_VERSION with kubernetes-validate (--strict: an unknown field fails), then
# policy.py for what a schema cannot say (probes, resources, hardening, secrets, disruption
# budgets, the gateway's autoscaler). kubernetes-validate is installed with pip into target/
# when missing, as deploy/schemathesis.sh installs schemathesis.
#
#   deploy/kubernetes/verify.sh [--install-only]   (--install-only: install, check nothing;
#                                                  deploy/test.sh installs while it builds)
set -euo pipefail
cd "$(dirname "$0")/../.."
KUBERNETES_VALIDATE_VERSION=1.37.0
KUBERNETES_VERSION=1.31
python=${PYTHON:-python3}
venv=${KUBERNETES_VALIDATE_VENV:-target/kubernetes-validate-venv}
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KUBERNETES_VALIDATE_VERSION"; then
  echo "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $venv" >&2
  "$python" -m venv "$venv" || {
    echo "cannot make a venv with $python (Debian's python3 wants: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
[ "${1:-}" = "--install-only" ] && exit 0
manifests=(deploy/kubernetes/*.yaml)
"$venv/bin/kubernetes-validate" --strict --kubernetes-version "$KUBERNETES_VERSION" \
  --quiet "${manifests[@]}"
"$venv/bin/python" deploy/kubernetes/policy.py "${manifests[@]}"
echo "kubernetes manifests valid for $KUBERNETES_VERSION: ${manifests[*]}"
