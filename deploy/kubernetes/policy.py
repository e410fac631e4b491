"""What the schemas cannot say about one rendering of deploy/kubernetes (the plain manifests, or
the chart rendered with one values file), checked for every object in it. Exits 1 naming each
breach.

Every container: resource requests for CPU and memory and a memory limit; runs as non-root with
no privilege escalation, a read-only root file system and every capability dropped; mounts
read-only. Every sluice container (gateway, executor, migrate): its secrets from a Secret with
envFrom, never inline; any other container (the pre-scale kubectl) gets no such Secret. Every
Deployment: a liveness probe, a PodDisruptionBudget selecting it, topology spread over zones and
nodes selecting its own pods; the gateway also a readiness probe, an autoscaler, and a preStop
sleep (the image has no shell) shorter than its grace period by at least the gateway's own drain,
read from gateway/src/http/server.rs. NetworkPolicy: the gateway's admin port and the executor's
metrics port admitted only from selected pods, the gateway's API port admitted. Monitoring: every
monitor selects pods that have its port; every `job` an alert selects is a job a monitor
produces; every alert has an absolute runbook_url and no relative runbook; with --alerts, the
PrometheusRule is that file's rules with each runbook turned into a runbook_url. TLS: every
certificate file a rendered URL names is mounted in every container that reads the URL. RBAC:
namespaced Roles only, each rule limited to named objects. No two objects of a kind share a name.
"""

import argparse
import re
import sys

import yaml

WORKLOADS = {"Deployment", "Job", "CronJob"}
SLUICE_COMPONENTS = {"gateway", "executor", "migrate"}
SECRET_SETTINGS = {"SLUICE_DATABASE_URL", "SLUICE_REDIS_URL", "SLUICE_TICKET_KEYS"}
# The port of each component that only monitoring may reach, and the gateway's public one.
PRIVATE_PORTS = {"gateway": "admin", "executor": "metrics"}
PUBLIC_PORTS = {"gateway": "http"}
SPREAD_KEYS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
CERT_PARAMETERS = ("sslrootcert", "sslcert", "sslkey", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
ABSOLUTE_URL = re.compile(r"^https?://[^/\s]+/\S*$")
JOB_MATCHER = re.compile(r'\bjob\s*(=~|!~|!=|=)\s*"([^"]*)"')


def gateway_drain_seconds(source_path):
    """DRAIN_TIMEOUT + COMMIT_FLUSH_TIMEOUT of gateway/src/http/server.rs, in seconds."""
    with open(source_path, encoding="utf-8") as f:
        source = f.read()
    total = 0
    for name in ("DRAIN_TIMEOUT", "COMMIT_FLUSH_TIMEOUT"):
        match = re.search(rf"const {name}: Duration = Duration::from_secs\((\d+)\);", source)
        if not match:
            raise SystemExit(f"{source_path}: no `const {name}: Duration = Duration::from_secs(N);`")
        total += int(match.group(1))
    return total


def pod_template(doc):
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]
    return doc["spec"]["template"]


def component(doc):
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def selects(selector, labels):
    """A LabelSelector (matchLabels and matchExpressions) against a set of labels."""
    if not selector:
        return False
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def container_ports(pod):
    ports = {}
    for container in pod["spec"]["containers"]:
        for port in container.get("ports", []):
            ports[port.get("name", str(port["containerPort"]))] = port["containerPort"]
    return ports


def check_container(where, pod_spec, container, is_sluice, secrets, breaches):
    resources = container.get("resources", {})
    for section, name in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
        if name not in resources.get(section, {}):
            breaches.append(f"{where}: no resources.{section}.{name}")
    context = container.get("securityContext", {})
    if context.get("allowPrivilegeEscalation") is not False:
        breaches.append(f"{where}: allowPrivilegeEscalation is not false")
    if context.get("readOnlyRootFilesystem") is not True:
        breaches.append(f"{where}: readOnlyRootFilesystem is not true")
    if context.get("capabilities", {}).get("drop") != ["ALL"]:
        breaches.append(f"{where}: capabilities are not all dropped")
    pod_context = pod_spec.get("securityContext", {})
    if not (context.get("runAsNonRoot") or pod_context.get("runAsNonRoot")):
        breaches.append(f"{where}: may run as root")
    for env in container.get("env", []):
        if env["name"] in SECRET_SETTINGS:
            breaches.append(f"{where}: {env['name']} inline (it belongs in the Secret)")
    secret_refs = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
    if is_sluice and not secret_refs:
        breaches.append(f"{where}: no Secret in envFrom (the datastore URLs and ticket keys)")
    if not is_sluice and secret_refs:
        breaches.append(f"{where}: reads the Secret {secret_refs[0]} it has no use for")
    secret_volumes = {v["name"] for v in pod_spec.get("volumes", []) if "secret" in v}
    for mount in container.get("volumeMounts", []):
        if mount["name"] in secret_volumes and mount.get("readOnly") is not True:
            breaches.append(f"{where}: volume {mount['name']} is not mounted read-only")
    for name in secret_refs:
        check_certificate_files(where, pod_spec, container, secrets.get(name), breaches)


def mounted_files(pod_spec, container):
    """Every file a container sees from its Secret volumes: mount path / item path."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    files = set()
    for mount in container.get("volumeMounts", []):
        secret = volumes.get(mount["name"], {}).get("secret")
        if secret is None:
            continue
        for item in secret.get("items", []):
            files.add(f"{mount['mountPath'].rstrip('/')}/{item['path']}")
    return files


def check_certificate_files(where, pod_spec, container, secret, breaches):
    """Every certificate file named by a URL of the Secret (when rendered) is mounted."""
    if secret is None:
        return
    data = secret.get("stringData", {})
    files = mounted_files(pod_spec, container)
    for key in ("SLUICE_DATABASE_URL", "SLUICE_REDIS_URL"):
        for parameter, path in re.findall(r"[?&](\w+)=([^&,\s]+)", data.get(key, "")):
            if parameter in CERT_PARAMETERS and path not in files:
                breaches.append(f"{where}: {key} names {parameter}={path}, which is not mounted")


def check_prestop(name, pod_spec, container, drain_seconds, breaches):
    grace = pod_spec.get("terminationGracePeriodSeconds", 30)
    pre_stop = container.get("lifecycle", {}).get("preStop")
    if pre_stop is None:
        breaches.append(f"{name}: no preStop drain (endpoints drop the pod after SIGTERM)")
        return
    if "exec" in pre_stop:
        breaches.append(f"{name}: preStop exec needs a shell the image does not have; use sleep")
    seconds = pre_stop.get("sleep", {}).get("seconds", 0)
    if seconds <= 0:
        breaches.append(f"{name}: preStop sleeps {seconds} s")
    # gateway.shutdown_delay_ms keeps the port open that long after SIGTERM, before the drain.
    delay_ms = next((int(e.get("value", "0")) for e in container.get("env", [])
                     if e.get("name") == "SLUICE_GATEWAY_SHUTDOWN_DELAY_MS"), 0)
    delay = -(-delay_ms // 1000)
    if grace <= seconds + delay + drain_seconds:
        breaches.append(
            f"{name}: terminationGracePeriodSeconds {grace} does not exceed the preStop sleep "
            f"({seconds} s) plus the shutdown delay ({delay} s) plus the gateway's own drain "
            f"({drain_seconds} s)")


def check_spread(name, pod, breaches):
    labels = pod["metadata"].get("labels", {})
    constraints = pod["spec"].get("topologySpreadConstraints", [])
    for key in SPREAD_KEYS:
        if not any(c["topologyKey"] == key and selects(c.get("labelSelector"), labels)
                   for c in constraints):
            breaches.append(f"{name}: no topology spread over {key} selecting its own pods")


def admits(rule, port_name, port_number):
    """Whether an ingress rule admits a port (a rule without ports admits every port)."""
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("port") in (port_name, port_number) for p in ports)


def check_network_policies(name, pod, policies, breaches):
    what = component_of_pod(pod)
    labels = pod["metadata"].get("labels", {})
    ports = container_ports(pod)
    mine = [p for p in policies
            if selects(p["spec"]["podSelector"], labels) and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    private = PRIVATE_PORTS.get(what)
    if private is None:
        return
    if not mine:
        breaches.append(f"{name}: no NetworkPolicy selects it: its {private} port is open to every pod")
        return
    rules = [r for p in mine for r in p["spec"].get("ingress", [])]
    for rule in rules:
        if not admits(rule, private, ports.get(private)):
            continue
        peers = rule.get("from")
        if not peers:
            breaches.append(f"{name}: a NetworkPolicy rule admits its {private} port from anywhere")
            continue
        for peer in peers:
            if "ipBlock" in peer or not (peer.get("podSelector") or {}).keys():
                breaches.append(
                    f"{name}: a NetworkPolicy rule admits its {private} port from {peer} (not selected pods)")
    public = PUBLIC_PORTS.get(what)
    if public and not any(admits(r, public, ports.get(public)) for r in rules):
        breaches.append(f"{name}: no NetworkPolicy rule admits its {public} port")


def component_of_pod(pod):
    return pod["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def monitor_jobs(monitor, pods, breaches):
    """The job label a PodMonitor or ServiceMonitor gives its targets, per endpoint."""
    name = f"{monitor['kind']}/{monitor['metadata']['name']}"
    endpoints_key = "podMetricsEndpoints" if monitor["kind"] == "PodMonitor" else "endpoints"
    selected = [p for p in pods if selects(monitor["spec"]["selector"], p["metadata"].get("labels", {}))]
    if monitor["kind"] == "PodMonitor" and not selected:
        breaches.append(f"{name}: selects no pod of this rendering")
    jobs = set()
    for endpoint in monitor["spec"].get(endpoints_key, []):
        if monitor["kind"] == "PodMonitor":
            for pod in selected:
                if endpoint.get("port") not in container_ports(pod):
                    breaches.append(f"{name}: port {endpoint.get('port')} is not a port of its pods")
        job = None
        if monitor["spec"].get("jobLabel") and selected:
            job = selected[0]["metadata"]["labels"].get(monitor["spec"]["jobLabel"])
        if job is None:
            namespace = monitor["metadata"].get("namespace", "<namespace>")
            job = f"{namespace}/{monitor['metadata']['name']}"
        # Relabelings run after the operator's own, so a replace into `job` wins.
        for relabeling in endpoint.get("relabelings", []):
            if (relabeling.get("targetLabel") == "job" and relabeling.get("action", "replace").lower() == "replace"
                    and not relabeling.get("sourceLabels")):
                job = relabeling.get("replacement", "$1")
        jobs.add(job)
    return jobs


def check_rules(rule_docs, jobs, alerts_source, breaches):
    for doc in rule_docs:
        name = f"PrometheusRule/{doc['metadata']['name']}"
        for group in doc["spec"]["groups"]:
            for rule in group["rules"]:
                alert = rule.get("alert") or rule.get("record")
                for operator, value in JOB_MATCHER.findall(str(rule["expr"])):
                    if operator == "=" and value not in jobs:
                        breaches.append(
                            f"{name}: {alert} selects job=\"{value}\", which no monitor produces "
                            f"(they produce {sorted(jobs) or 'nothing'})")
                if "alert" not in rule:
                    continue
                annotations = rule.get("annotations", {})
                if "runbook" in annotations:
                    breaches.append(f"{name}: {alert} has a relative runbook; use runbook_url")
                url = annotations.get("runbook_url")
                if url is None or not ABSOLUTE_URL.match(url):
                    breaches.append(f"{name}: {alert} runbook_url {url!r} is not an absolute URL")
        if alerts_source is not None:
            check_rules_match_source(name, doc, alerts_source, breaches)


def check_rules_match_source(name, doc, source, breaches):
    """The PrometheusRule's groups are the source's, each runbook made runbook_url = base + runbook."""
    rendered = doc["spec"]["groups"]
    if [g["name"] for g in rendered] != [g["name"] for g in source["groups"]]:
        breaches.append(f"{name}: its groups are not those of the alert rules file")
        return
    for mine, theirs in zip(rendered, source["groups"]):
        if len(mine["rules"]) != len(theirs["rules"]):
            breaches.append(f"{name}: group {mine['name']} has not the rules of the alert rules file")
            continue
        for rule, expected in zip(mine["rules"], theirs["rules"]):
            expected = dict(expected, annotations=dict(expected.get("annotations", {})))
            runbook = expected["annotations"].pop("runbook", None)
            got = dict(rule, annotations=dict(rule.get("annotations", {})))
            url = got["annotations"].pop("runbook_url", None)
            if runbook is not None and (url is None or not url.endswith("/" + runbook)):
                breaches.append(f"{name}: {rule.get('alert')} runbook_url {url!r} does not end in /{runbook}")
            if got != expected:
                breaches.append(
                    f"{name}: {rule.get('alert') or rule.get('record')} differs from the alert rules file")


def check_rbac(docs, breaches):
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            breaches.append(f"{doc['kind']}/{doc['metadata']['name']}: cluster-wide rights")
        if doc["kind"] == "Role":
            for rule in doc.get("rules", []):
                if not rule.get("resourceNames") or "*" in rule.get("verbs", []):
                    breaches.append(f"Role/{doc['metadata']['name']}: a rule not limited to named objects and verbs")


def check(located, drain_seconds, alerts_source=None):
    """Every breach of one rendering, given as (path, document) pairs."""
    docs = [d for _, d in located]
    breaches = []
    seen = set()
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        if key in seen:
            breaches.append(f"{key[0]}/{key[1]}: two objects of this kind share the name")
        seen.add(key)
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    scalers = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    monitors = [d for d in docs if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    rule_docs = [d for d in docs if d["kind"] == "PrometheusRule"]
    workloads = [(p, d) for p, d in located if d["kind"] in WORKLOADS]
    if not workloads:
        breaches.append("no workloads found")
    pods = []
    for path, doc in workloads:
        name = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
        pod = pod_template(doc)
        spec = pod["spec"]
        is_sluice = component(doc) in SLUICE_COMPONENTS
        for container in spec["containers"]:
            where = f"{name} container {container['name']}"
            check_container(where, spec, container, is_sluice, secrets, breaches)
            if doc["kind"] == "Deployment" and "livenessProbe" not in container:
                breaches.append(f"{where}: no livenessProbe")
            if component(doc) == "gateway":
                if "readinessProbe" not in container:
                    breaches.append(f"{where}: no readinessProbe")
                check_prestop(where, spec, container, drain_seconds, breaches)
        if doc["kind"] != "Deployment":
            continue
        pods.append(pod)
        labels = pod["metadata"]["labels"]
        if not any(selects(b["spec"]["selector"], labels) for b in budgets):
            breaches.append(f"{name}: no PodDisruptionBudget selects it")
        if component(doc) == "gateway" and not any(
            s["spec"]["scaleTargetRef"]["name"] == doc["metadata"]["name"] for s in scalers
        ):
            breaches.append(f"{name}: no HorizontalPodAutoscaler")
        check_spread(name, pod, breaches)
        check_network_policies(name, pod, policies, breaches)
    jobs = set()
    for monitor in monitors:
        jobs |= monitor_jobs(monitor, pods, breaches)
    if rule_docs and not monitors:
        breaches.append("alert rules but no monitor: every alert on `up` would stay silent")
    check_rules(rule_docs, jobs, alerts_source, breaches)
    check_rbac(docs, breaches)
    summary = (f"{len(workloads)} workloads, {len(budgets)} disruption budgets, {len(scalers)} autoscaler(s), "
               f"{len(policies)} network policies, {len(monitors)} monitors ({', '.join(sorted(jobs)) or 'no jobs'}), "
               f"{sum(len(g['rules']) for d in rule_docs for g in d['spec']['groups'])} alert rules")
    return breaches, summary


def load(paths):
    located = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            located += [(path, d) for d in yaml.safe_load_all(f) if d]
    return located


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway-source", default="gateway/src/http/server.rs",
                        help="where the gateway's drain timeouts are declared")
    parser.add_argument("--alerts", help="the alert rules file a PrometheusRule must carry")
    parser.add_argument("--name", help="what this rendering is, for the messages")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    alerts = None
    if args.alerts:
        with open(args.alerts, encoding="utf-8") as f:
            alerts = yaml.safe_load(f)
    breaches, summary = check(load(args.paths), gateway_drain_seconds(args.gateway_source), alerts)
    label = args.name or " ".join(args.paths)
    for breach in breaches:
        print(f"policy ({label}): {breach}", file=sys.stderr)
    if not breaches:
        print(f"policy ({label}): {summary}")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
