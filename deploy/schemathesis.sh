#!/usr/bin/env bash
# Schemathesis against docs/openapi.json on a throwaway stack: builds `sluice`, starts `sluice dev`
# on free loopback ports with its own Redis and PostgreSQL (the URLs point at a closed port, so
# nothing running on this machine is touched), reads the credential and the subject key from
# its credentials.json, mints a subject token, installs schemathesis into a venv with pip when
# missing, and runs every operation with `--checks all`, positive and negative cases:
#   1. with the credential: every operation but the one only a subject token may call (`mine`)
#      and the control (its pauses would answer every later enqueue `503 INTAKE_PAUSED`);
#   2. with the subject token: every operation a subject token may call;
#   3. the control, with the credential.
# The target is 0 failures: no server error and no answer outside the document.
#
#   deploy/schemathesis.sh [--max-examples N] [--seed S] [--max-time SECONDS] [--workers N]
#                          [--if-supported] [--install-only]
#
# --install-only installs schemathesis and runs nothing (deploy/test.sh installs while it builds).
#
# --if-supported (deploy/test.sh's short run) skips, saying why, on a machine whose newest
# Python is 3.11: its ast raises a SystemError inside hypothesis on some runs of this document,
# which schemathesis reports as a run error (a flaky suite); 3.12 and later do not.
#
# Reports (JUnit, NDJSON) and the stack's log land in target/schemathesis/. Exits non-zero when
# either run finds a failure. SLUICE_BIN=path uses that binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib.sh

SCHEMATHESIS_VERSION=4.32.5
max_examples=20
seed=$(( (RANDOM << 15) | RANDOM ))
max_time=""
workers=2
if_supported=""
install_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --max-examples) max_examples=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --max-time) max_time=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --if-supported) if_supported=1; shift ;;
    --install-only) install_only=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

require_cargo
require_redis
require_postgres
require_setpriv

out=target/schemathesis
mkdir -p "$out"
# The newest Python 3 at hand: schemathesis's coverage phase trips CPython 3.11's "AST
# constructor recursion depth mismatch" (a SystemError inside hypothesis, reported as a run
# error) on this document; 3.12 and later parse it.
python=""
for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 python3; do
  # Runs, not only exists: a pyenv shim names versions it will not run.
  if "$candidate" -c 'import sys, tomllib' >/dev/null 2>&1; then
    python=$("$candidate" -c 'import sys; print(sys.executable)'); break
  fi
done
[ -n "$python" ] || { echo "python3 is missing" >&2; exit 1; }
if [ -n "$if_supported" ] && ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  log "schemathesis skipped: the newest Python here is $("$python" --version 2>&1), and 3.11's ast fails inside hypothesis on some runs (needs 3.12 or later)"
  exit 0
fi
venv=${SCHEMATHESIS_VENV:-target/schemathesis-venv-$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  log "installing schemathesis $SCHEMATHESIS_VERSION into $venv ($("$python" --version))"
  "$python" -m venv "$venv" || {
    echo "cannot make a venv with $python (Debian's python3 wants: apt-get install python3-venv)" >&2
    exit 1
  }
  "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
[ -n "$install_only" ] && exit 0

if [ -n "${SLUICE_BIN:-}" ]; then
  sluice=$SLUICE_BIN
else
  log "building sluice"
  cargo build --locked -p sluice-gateway --bin sluice
  sluice=${CARGO_TARGET_DIR:-target}/debug/sluice
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
listen=127.0.0.1:$(free_port)
admin=127.0.0.1:$(free_port)
work=$(mktemp -d /tmp/sluice-schemathesis.XXXXXX)
stack_pid=""
cleanup() {
  if [ -n "$stack_pid" ] && kill -0 "$stack_pid" 2>/dev/null; then
    kill -TERM "$stack_pid" 2>/dev/null || true
    wait "$stack_pid" 2>/dev/null || true
  fi
  cp "$work/sluice.log" "$out/sluice.log" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

log "starting sluice dev on $listen (admin $admin, its own Redis and PostgreSQL)"
# Port 1 answers nothing: `sluice dev` starts throwaway servers instead of reusing the machine's.
SLUICE_REDIS_URL=redis://127.0.0.1:1 SLUICE_DATABASE_URL=postgres://postgres@127.0.0.1:1/sluice \
  SLUICE_LOG=warn "$sluice" dev --listen "$listen" --admin-listen "$admin" --dir "$work/dev" \
  >"$work/sluice.log" 2>&1 &
stack_pid=$!
# The detailed readiness (admin port) answers 200 once every projection is ready; a deadline,
# not a guess: the stack is polled until then.
deadline=$((SECONDS + 120))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$admin/readyz")" = 200 ]; do
  if ! kill -0 "$stack_pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
    echo "sluice dev did not become ready; its log:" >&2
    cat "$work/sluice.log" >&2
    exit 1
  fi
  sleep 0.2
done

# The credential, and a subject token minted as an application backend would (README): HS256
# with the subject key's secret text as the key, `kid` its id.
subject=schemathesis-user
read -r credential token < <("$python" - "$work/dev/credentials.json" "$subject" <<'PY'
import base64, hashlib, hmac, json, sys, time
creds = json.load(open(sys.argv[1]))
key = creds["subject_key"]
raw = key["secret"].encode()
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
now = int(time.time())
header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key["id"]}).encode())
claims = b64(json.dumps({"sub": sys.argv[2], "iat": now, "exp": now + 3600}).encode())
signature = b64(hmac.new(raw, f"{header}.{claims}".encode(), hashlib.sha256).digest())
print(creds["credential"], f"{header}.{claims}.{signature}")
PY
)

# Two copies of the document, one per scheme, both with the commands, `input` and the quota pools
# as the demo declaration (deploy/demo.toml, which `sluice dev` applies) declares them: the
# document cannot know a namespace's commands, parameters and pools, and without them every
# positive enqueue is a 404 or a 400 on `input`, and every positive pool request a 404. What
# `x-required-with-credential` marks (`subject`) is required in the credential's copy and, in
# the token's, may only name the token's own subject: JSON Schema cannot see which scheme
# authenticated a request.
"$python" - docs/openapi.json deploy/demo.toml "$out" "$subject" <<'PY'
import copy, json, sys, tomllib
doc = json.load(open(sys.argv[1]))
declaration = tomllib.load(open(sys.argv[2], "rb"))
UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
def parameter(p):
    kind = p["type"]
    if kind == "uuid":
        return {"type": "string", "pattern": UUID}
    if kind == "string":
        s = {"type": "string", "maxLength": p.get("max_length", 256)}
        if "enum" in p:
            s["enum"] = p["enum"]
        return s
    if kind == "integer":
        return {"type": "integer", "minimum": p.get("min", -2**53), "maximum": p.get("max", 2**53)}
    return {"type": "boolean"}
inputs = [{"type": "object", "additionalProperties": False,
           "required": sorted(c.get("parameters", {})),
           "properties": {n: parameter(p) for n, p in c.get("parameters", {}).items()}}
          for c in declaration.get("command", [])]
# The commands the namespace declares: positive cases name them (negative ones anything else).
doc["components"]["parameters"]["CommandCode"]["schema"]["enum"] = [
    c["code"] for c in declaration.get("command", [])]
# And its quota pools, so that positive reads and configures of a pool reach more than a 404.
doc["components"]["parameters"]["PoolCode"]["schema"]["enum"] = [
    p["code"] for p in declaration.get("quota_pool", [])]
body = doc["components"]["schemas"]["EnqueueRequest"]["properties"]
body["input"] = {**inputs[0], "description": body["input"].get("description", "")} if len(inputs) == 1 \
    else {"anyOf": inputs}
def require_marked(node):
    if isinstance(node, dict):
        if node.get("x-required-with-credential") is True and "in" in node:
            node["required"] = True
        marked = [k for k, v in (node.get("properties") or {}).items()
                  if isinstance(v, dict) and v.get("x-required-with-credential") is True]
        if marked:
            node["required"] = sorted(set(node.get("required", [])) | set(marked))
        for value in node.values():
            require_marked(value)
    elif isinstance(node, list):
        for value in node:
            require_marked(value)
credential = copy.deepcopy(doc)
# With a subject token, a marked field may be absent or name the token's own subject only.
def own_subject(node):
    if isinstance(node, dict):
        if node.get("x-required-with-credential") is True:
            (node["schema"] if "in" in node else node)["enum"] = [sys.argv[4]]
        for value in node.values():
            own_subject(value)
    elif isinstance(node, list):
        for value in node:
            own_subject(value)
own_subject(doc)
json.dump(doc, open(f"{sys.argv[3]}/openapi.subject.json", "w"), indent=2)
require_marked(credential)
json.dump(credential, open(f"{sys.argv[3]}/openapi.credential.json", "w"), indent=2)
PY

common=(
  --url "http://$listen"
  --checks all --mode all
  --max-examples "$max_examples" --seed "$seed" --workers "$workers"
  --request-timeout 10 --suppress-health-check all --generation-database none
)
if [ -n "$max_time" ]; then common+=(--max-time "$max_time"); fi

# Three runs: the credential on every operation but `mine` and the control (a pause it sets
# makes every later enqueue a `503 INTAKE_PAUSED`, which is the contract but reads as a server
# error), the subject token on what it may call, then the control alone.
status=0
log "schemathesis (seed $seed, at most $max_examples examples per operation): with the credential"
# From inside $out: schemathesis keeps what `st replay <id>` needs in ./.schemathesis.
st=$(cd "$venv/bin" && pwd)/st
all_phases=(--phases examples,coverage,fuzzing,stateful)
(cd "$out" && "$st" --no-color run openapi.credential.json "${common[@]}" "${all_phases[@]}" \
  -H "Authorization: Bearer $credential" \
  --exclude-operation-id-regex '^(listMyCommands|setControl)$' \
  --report junit,ndjson --report-dir credential) || status=1
log "schemathesis (seed $seed): with a subject token"
(cd "$out" && "$st" --no-color run openapi.subject.json "${common[@]}" "${all_phases[@]}" \
  -H "Authorization: Bearer $token" \
  --include-operation-id-regex '^(enqueueCommand|getCommand|getCommandByRequestKey|listMyCommands|cancelCommand|getRead|getAllocation|confirmAllocation|releaseAllocation|joinRoom|getRoomChallenge|getRoom|getRoomPrequeue|heartbeatPass|leavePass)$' \
  --report junit,ndjson --report-dir subject) || status=1
log "schemathesis (seed $seed): the control, with the credential"
# No stateful phase: no link leads to or from the control.
(cd "$out" && "$st" --no-color run openapi.credential.json "${common[@]}" \
  --phases examples,coverage,fuzzing \
  -H "Authorization: Bearer $credential" \
  --include-operation-id setControl \
  --report junit,ndjson --report-dir control) || status=1

if [ "$status" -ne 0 ]; then
  log "schemathesis found failures (seed $seed; reports in $out; replay a case with: cd $out && $st replay ID)"
else
  log "schemathesis: no failures (seed $seed; reports in $out)"
fi
exit "$status"
