"""What the schema cannot say about deploy/kubernetes/*.yaml, checked for every workload.

Every container: resource requests for CPU and memory and a memory limit; runs as non-root with
no privilege escalation, a read-only root file system and every capability dropped; its secrets
from the `sluice` Secret, never inline. Every Deployment: a liveness probe, a
PodDisruptionBudget selecting it; the gateway also a readiness probe and an autoscaler.
Exits 1 naming each breach.
"""

import sys

import yaml

WORKLOADS = {"Deployment", "Job"}
SECRET_SETTINGS = {"SLUICE_DATABASE_URL", "SLUICE_REDIS_URL", "SLUICE_TICKET_KEYS"}


def pod_spec(doc):
    return doc["spec"]["template"]["spec"]


def check_container(where, pod, container, breaches):
    resources = container.get("resources", {})
    for path in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
        if path[1] not in resources.get(path[0], {}):
            breaches.append(f"{where}: no resources.{path[0]}.{path[1]}")
    context = container.get("securityContext", {})
    if context.get("allowPrivilegeEscalation") is not False:
        breaches.append(f"{where}: allowPrivilegeEscalation is not false")
    if context.get("readOnlyRootFilesystem") is not True:
        breaches.append(f"{where}: readOnlyRootFilesystem is not true")
    if context.get("capabilities", {}).get("drop") != ["ALL"]:
        breaches.append(f"{where}: capabilities are not all dropped")
    pod_context = pod.get("securityContext", {})
    if not (context.get("runAsNonRoot") or pod_context.get("runAsNonRoot")):
        breaches.append(f"{where}: may run as root")
    for env in container.get("env", []):
        if env["name"] in SECRET_SETTINGS:
            breaches.append(f"{where}: {env['name']} inline (it belongs in the Secret)")
    if {"secretRef": {"name": "sluice"}} not in container.get("envFrom", []):
        breaches.append(f"{where}: the sluice Secret is not in envFrom")


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def main(paths):
    docs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs += [(path, d) for d in yaml.safe_load_all(f) if d]
    breaches = []
    budgets = [d for _, d in docs if d["kind"] == "PodDisruptionBudget"]
    scalers = [d for _, d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    workloads = [(p, d) for p, d in docs if d["kind"] in WORKLOADS]
    if not workloads:
        breaches.append("no workloads found")
    for path, doc in workloads:
        name = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
        pod = pod_spec(doc)
        for container in pod["containers"]:
            where = f"{name} container {container['name']}"
            check_container(where, pod, container, breaches)
            if doc["kind"] == "Deployment" and "livenessProbe" not in container:
                breaches.append(f"{where}: no livenessProbe")
            if doc["metadata"]["name"] == "sluice-gateway" and "readinessProbe" not in container:
                breaches.append(f"{where}: no readinessProbe")
        if doc["kind"] != "Deployment":
            continue
        labels = doc["spec"]["template"]["metadata"]["labels"]
        if not any(selects(b["spec"]["selector"], labels) for b in budgets):
            breaches.append(f"{name}: no PodDisruptionBudget selects it")
        if doc["metadata"]["name"] == "sluice-gateway" and not any(
            s["spec"]["scaleTargetRef"]["name"] == "sluice-gateway" for s in scalers
        ):
            breaches.append(f"{name}: no HorizontalPodAutoscaler")
    for breach in breaches:
        print(breach, file=sys.stderr)
    if not breaches:
        print(f"policy: {len(workloads)} workloads, {len(budgets)} disruption budgets, "
              f"{len(scalers)} autoscaler(s) checked")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
