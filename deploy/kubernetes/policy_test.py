"""Each rule of policy.py that the chart brought (drain, spread, NetworkPolicy, monitors against
the alerts' jobs, runbook URLs, the rules file carried whole, TLS files, RBAC, read-only mounts,
secrets only where used) fails on a rendering broken in that one way, and passes on the intact
one. Run by verify.sh: python3 deploy/kubernetes/policy_test.py
"""

import copy
import unittest

import policy

DRAIN = 25
SELECT_GATEWAY = {"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "gateway"}
SELECT_EXECUTOR = {"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "executor"}
MONITORING_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
SOURCE_RULES = {"groups": [{"name": "processes", "rules": [
    {"alert": "GatewayDown", "expr": 'up{job="sluice-gateway"} == 0', "for": "1m",
     "annotations": {"summary": "down", "runbook": "docs/operations.md#down"}},
    {"alert": "ExecutorDown", "expr": 'up{job="sluice-executor"} == 0', "for": "1m",
     "annotations": {"summary": "down", "runbook": "docs/operations.md#down"}},
]}]}


def container(name, ports, **extra):
    return {
        "name": name,
        "image": "ghcr.io/example/sluice:0.1.0",
        "envFrom": [{"secretRef": {"name": "sluice"}}],
        "ports": [{"name": n, "containerPort": p} for n, p in ports],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": ports[0][0]}},
        "resources": {"requests": {"cpu": "1", "memory": "1Mi"}, "limits": {"memory": "1Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        **extra,
    }


def deployment(name, labels, main, grace):
    spread = [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": labels}} for key in policy.SPREAD_KEYS]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"securityContext": {"runAsNonRoot": True}, "terminationGracePeriodSeconds": grace,
                         "topologySpreadConstraints": spread, "containers": [main]}}}}


def network_policy(name, labels, ingress):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": ingress}}


def pod_monitor(name, labels, port, job):
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels}, "podMetricsEndpoints": [
                {"port": port, "relabelings": [{"action": "replace", "targetLabel": "job", "replacement": job}]}]}}


def rendered_rule(base="https://docs.example.com/sluice/"):
    rules = copy.deepcopy(SOURCE_RULES)
    for rule in rules["groups"][0]["rules"]:
        rule["annotations"]["runbook_url"] = base + rule["annotations"].pop("runbook")
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "sluice"}, "spec": rules}


def intact():
    gateway = container("gateway", [("http", 8080), ("admin", 8081)],
                        readinessProbe={"httpGet": {"path": "/readyz", "port": "http"}},
                        lifecycle={"preStop": {"sleep": {"seconds": 10}}})
    executor = container("executor", [("metrics", 8082)])
    docs = [
        deployment("sluice-gateway", SELECT_GATEWAY, gateway, 45),
        deployment("sluice-executor", SELECT_EXECUTOR, executor, 60),
        {"kind": "PodDisruptionBudget", "metadata": {"name": "g"}, "spec": {"selector": {"matchLabels": SELECT_GATEWAY}}},
        {"kind": "PodDisruptionBudget", "metadata": {"name": "e"}, "spec": {"selector": {"matchLabels": SELECT_EXECUTOR}}},
        {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "sluice-gateway"},
         "spec": {"scaleTargetRef": {"name": "sluice-gateway"}}},
        network_policy("sluice-gateway", SELECT_GATEWAY, [
            {"ports": [{"port": "http"}]},
            {"ports": [{"port": "admin"}], "from": [MONITORING_PEER]}]),
        network_policy("sluice-executor", SELECT_EXECUTOR, [
            {"ports": [{"port": "metrics"}], "from": [MONITORING_PEER]}]),
        pod_monitor("sluice-gateway", SELECT_GATEWAY, "admin", "sluice-gateway"),
        pod_monitor("sluice-executor", SELECT_EXECUTOR, "metrics", "sluice-executor"),
        rendered_rule(),
    ]
    return docs


def find(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def pod_spec(docs, name):
    return find(docs, "Deployment", name)["spec"]["template"]["spec"]


def breaches(docs):
    found, _ = policy.check([("test", d) for d in docs], DRAIN, SOURCE_RULES)
    return found


class NewRules(unittest.TestCase):
    def assertBreach(self, docs, fragment):
        found = breaches(docs)
        self.assertTrue(any(fragment in b for b in found), f"no breach with {fragment!r} in {found}")

    def test_the_intact_rendering_passes(self):
        self.assertEqual(breaches(intact()), [])

    def test_no_prestop(self):
        docs = intact()
        del pod_spec(docs, "sluice-gateway")["containers"][0]["lifecycle"]
        self.assertBreach(docs, "no preStop drain")

    def test_a_prestop_that_needs_a_shell(self):
        docs = intact()
        pod_spec(docs, "sluice-gateway")["containers"][0]["lifecycle"]["preStop"] = {
            "exec": {"command": ["sleep", "10"]}}
        self.assertBreach(docs, "needs a shell")

    def test_a_grace_period_shorter_than_the_drains(self):
        docs = intact()
        pod_spec(docs, "sluice-gateway")["terminationGracePeriodSeconds"] = 35
        self.assertBreach(docs, "does not exceed the preStop sleep (10 s) plus the shutdown delay (0 s) plus the gateway's own drain (25 s)")

    def test_a_grace_period_that_forgets_the_shutdown_delay(self):
        docs = intact()
        pod_spec(docs, "sluice-gateway")["terminationGracePeriodSeconds"] = 40
        pod_spec(docs, "sluice-gateway")["containers"][0].setdefault("env", []).append(
            {"name": "SLUICE_GATEWAY_SHUTDOWN_DELAY_MS", "value": "5000"})
        self.assertBreach(docs, "plus the shutdown delay (5 s) plus the gateway's own drain (25 s)")

    def test_no_zone_spread(self):
        docs = intact()
        spec = pod_spec(docs, "sluice-executor")
        spec["topologySpreadConstraints"] = spec["topologySpreadConstraints"][1:]
        self.assertBreach(docs, "no topology spread over topology.kubernetes.io/zone")

    def test_a_spread_selecting_other_pods(self):
        docs = intact()
        for constraint in pod_spec(docs, "sluice-gateway")["topologySpreadConstraints"]:
            constraint["labelSelector"] = {"matchLabels": SELECT_EXECUTOR}
        self.assertBreach(docs, "no topology spread over kubernetes.io/hostname selecting its own pods")

    def test_no_network_policy_for_the_admin_port(self):
        docs = [d for d in intact() if not (d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "sluice-gateway")]
        self.assertBreach(docs, "its admin port is open to every pod")

    def test_an_admin_port_open_to_anyone(self):
        docs = intact()
        find(docs, "NetworkPolicy", "sluice-gateway")["spec"]["ingress"][0]["ports"] = []
        self.assertBreach(docs, "admits its admin port from anywhere")

    def test_a_metrics_port_open_to_a_whole_namespace(self):
        docs = intact()
        find(docs, "NetworkPolicy", "sluice-executor")["spec"]["ingress"][0]["from"] = [
            {"namespaceSelector": MONITORING_PEER["namespaceSelector"]}]
        self.assertBreach(docs, "admits its metrics port from")

    def test_an_api_port_closed(self):
        docs = intact()
        del find(docs, "NetworkPolicy", "sluice-gateway")["spec"]["ingress"][0]
        self.assertBreach(docs, "no NetworkPolicy rule admits its http port")

    def test_an_alert_on_a_job_no_monitor_produces(self):
        docs = intact()
        del find(docs, "PodMonitor", "sluice-executor")["spec"]["podMetricsEndpoints"][0]["relabelings"]
        self.assertBreach(docs, 'ExecutorDown selects job="sluice-executor", which no monitor produces')

    def test_a_monitor_on_a_port_its_pods_lack(self):
        docs = intact()
        find(docs, "PodMonitor", "sluice-gateway")["spec"]["podMetricsEndpoints"][0]["port"] = "metrics"
        self.assertBreach(docs, "port metrics is not a port of its pods")

    def test_a_relative_runbook_url(self):
        docs = [d for d in intact() if d["kind"] != "PrometheusRule"] + [rendered_rule(base="")]
        self.assertBreach(docs, "is not an absolute URL")

    def test_a_rule_that_drifted_from_the_rules_file(self):
        docs = intact()
        find(docs, "PrometheusRule", "sluice")["spec"]["groups"][0]["rules"][1]["for"] = "5m"
        self.assertBreach(docs, "ExecutorDown differs from the alert rules file")

    def test_a_certificate_file_not_mounted(self):
        docs = intact() + [{"kind": "Secret", "metadata": {"name": "sluice"}, "stringData": {
            "SLUICE_REDIS_URL": "rediss://cache:6380?sslrootcert=/etc/sluice/tls/redis/ca.crt"}}]
        self.assertBreach(docs, "sslrootcert=/etc/sluice/tls/redis/ca.crt, which is not mounted")
        spec = pod_spec(docs, "sluice-gateway")
        spec["volumes"] = [{"name": "tls-redis", "secret": {"secretName": "redis", "items": [
            {"key": "ca.crt", "path": "ca.crt"}]}}]
        for name in ("sluice-gateway", "sluice-executor"):
            pod_spec(docs, name)["volumes"] = spec["volumes"]
            pod_spec(docs, name)["containers"][0]["volumeMounts"] = [
                {"name": "tls-redis", "mountPath": "/etc/sluice/tls/redis", "readOnly": True}]
        self.assertEqual(breaches(docs), [])
        del pod_spec(docs, "sluice-executor")["containers"][0]["volumeMounts"][0]["readOnly"]
        self.assertBreach(docs, "volume tls-redis is not mounted read-only")

    def test_a_cluster_role_and_an_unnamed_rule(self):
        docs = intact() + [
            {"kind": "ClusterRole", "metadata": {"name": "wide"}, "rules": []},
            {"kind": "Role", "metadata": {"name": "prescale"}, "rules": [
                {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["patch"]}]}]
        self.assertBreach(docs, "ClusterRole/wide: cluster-wide rights")
        self.assertBreach(docs, "Role/prescale: a rule not limited to named objects")

    def test_a_kubectl_container_with_the_secret(self):
        docs = intact()
        kubectl = container("kubectl", [("none", 1)])
        docs.append({"kind": "CronJob", "metadata": {"name": "prescale", "labels": {"app.kubernetes.io/component": "prescale"}},
                     "spec": {"jobTemplate": {"spec": {"template": {"metadata": {"labels": {}}, "spec": {
                         "securityContext": {"runAsNonRoot": True}, "containers": [kubectl]}}}}}})
        self.assertBreach(docs, "reads the Secret sluice it has no use for")

    def test_two_objects_with_one_name(self):
        docs = intact()
        docs.append(copy.deepcopy(find(docs, "PodMonitor", "sluice-gateway")))
        self.assertBreach(docs, "PodMonitor/sluice-gateway: two objects of this kind share the name")

    def test_the_drain_is_read_from_the_gateway(self):
        self.assertEqual(policy.gateway_drain_seconds("gateway/src/http/server.rs"), DRAIN)


if __name__ == "__main__":
    unittest.main()
