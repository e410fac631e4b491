#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run` built, in two lanes side by side.

    deploy/test_lanes.py BUILT_JSON LOG ARGS... --cluster CLUSTER_ARGS...

BUILT_JSON is what `cargo test --no-run --message-format=json` printed; ARGS go to every test
binary (the filters `cargo test -- ARGS` would pass; the tests at a time are set here). One lane
runs the gateway's `api` binary (most of the suite, mostly waiting on its servers), then the load
generator's scenarios; the other every other binary (each in its package's folder, as `cargo
test` runs it), then the suites that must keep working on a Redis Cluster again on one
(SLUICE_TEST_REDIS=cluster): the `lua` binary whole, and the `api` binary with CLUSTER_ARGS.
Running them side by side instead of one after the other is what this script is for: one after
the other, the tests kept a 2-core machine's cores half idle, waiting on their servers.

Each lane's output goes to a file of its own, printed whole when the lane ends (lines of two
lanes interleaved would be unreadable), and all of it is appended to LOG for the suite's closing
count. The exit status is 0 only when every run passed.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading

# Tests at a time in each binary. Three lanes, or four tests at a time in the api binary beside
# two lanes, kept both cores busy and failed tests whose work must finish in time (a chaos
# run's drain, two executors' sale, a waiting poll's snapshot): two lanes of three leave the
# machine room to answer.
THREADS = 3


def test_binaries(built_json):
    """(target name, kind, executable, package folder, source path) of each test binary."""
    found = []
    with open(built_json, encoding="utf-8") as lines:
        for line in lines:
            if not line.startswith("{"):
                continue
            message = json.loads(line)
            if message.get("reason") != "compiler-artifact":
                continue
            if not message.get("profile", {}).get("test") or not message.get("executable"):
                continue
            target = message["target"]
            folder = os.path.dirname(message["manifest_path"])
            found.append(
                (target["name"], target["kind"][0], message["executable"], folder, target["src_path"])
            )
    return found


def run_lane(runs, out, statuses, lane):
    """Runs `runs` ((binary, args, extra environment) each) one after another."""
    root = os.getcwd()
    with open(out, "w", encoding="utf-8") as log:
        for (name, kind, executable, folder, source), args, env in runs:
            shown = os.path.relpath(source, folder)
            settings = "".join(f"{k}={v} " for k, v in env.items())
            log.write(f"     Running {settings}{shown} ({os.path.relpath(executable, root)})\n")
            log.flush()
            status = subprocess.call(
                [executable, *args],
                cwd=folder,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            statuses.append((lane, name, kind, status))


def main():
    if len(sys.argv) < 3 or "--cluster" not in sys.argv:
        sys.exit("usage: deploy/test_lanes.py BUILT_JSON LOG ARGS... --cluster CLUSTER_ARGS...")
    built_json, suite_log = sys.argv[1], sys.argv[2]
    at = sys.argv.index("--cluster")
    args, cluster_args = sys.argv[3:at], sys.argv[at + 1 :]
    binaries = test_binaries(built_json)
    def tests_named(name):
        return [b for b in binaries if b[0] == name and b[1] == "test"]

    api, lua, scenarios = tests_named("api"), tests_named("lua"), tests_named("scenarios")
    rest = [b for b in binaries if b not in api and b not in scenarios]
    if len(api) != 1 or len(lua) != 1 or not rest:
        sys.exit(f"expected one api and one lua binary, found {len(api)} and {len(lua)}")
    cluster = {"SLUICE_TEST_REDIS": "cluster"}
    local = ["--test-threads", str(THREADS), *args]
    # The two lanes take about as long (316 s and 272 s in a run here): the api binary, then
    # the load generator's scenarios (each a stack under load: beside the api binary they were
    # the first to run late); every other binary, then the Lua scripts and the api binary's
    # suites on the cluster.
    api_lane = [(binary, local, {}) for binary in api + scenarios]
    others_lane = [(binary, local, {}) for binary in rest] + [
        (lua[0], [], cluster),
        (api[0], cluster_args, cluster),
    ]
    # `cargo test` sets CARGO for the tests that build a binary they lack.
    os.environ.setdefault("CARGO", "cargo")
    statuses = []
    with tempfile.TemporaryDirectory() as scratch:
        lanes = [("others", others_lane), ("api", api_lane)]
        running = []
        for lane, runs in lanes:
            out = os.path.join(scratch, lane)
            thread = threading.Thread(target=run_lane, args=(runs, out, statuses, lane))
            thread.start()
            running.append((out, thread))
        for out, thread in running:
            thread.join()
            with open(out, encoding="utf-8") as text, open(suite_log, "a", encoding="utf-8") as log:
                for line in text:
                    sys.stdout.write(line)
                    log.write(line)
            sys.stdout.flush()
    failed = [(lane, name, kind) for lane, name, kind, status in statuses if status != 0]
    for lane, name, kind in failed:
        print(f"FAILED: the {kind} binary {name} (lane {lane})", file=sys.stderr)
    ran, planned = len(statuses), len(api_lane) + len(others_lane)
    if ran != planned:
        print(f"ran {ran} of {planned} test runs", file=sys.stderr)
        sys.exit(1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
