// Validates Prometheus Operator objects (PodMonitor, ServiceMonitor, PrometheusRule) against the
// openAPIV3Schema of the CRDs of prometheus-operator v0.90.1, as compiled into validators by
// @kubernetes-models/prometheus-operator 5.0.1 (its crd-generate input is that release's
// stripped-down-crds.yaml; tools/package-lock.json pins it). Strict, as the API server's
// `fieldValidation=Strict` (kubectl apply's default): a field the schema does not declare fails
// too. The compiled validators read exactly the properties their schema declares and enumerate
// the keys of maps (additionalProperties, x-kubernetes-preserve-unknown-fields), so a key that
// was neither read nor enumerated is one the schema does not know.
//
//   node crd_validate.mjs TOOLS_DIR FILE.json…   (each file: a JSON array of objects)
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, ...files] = process.argv.slice(2);
const schemas = path.join(toolsDir, "node_modules/@kubernetes-models/prometheus-operator/_schemas");
const KINDS = {
  "monitoring.coreos.com/v1 PodMonitor": "MonitoringCoreosComV1PodMonitor.js",
  "monitoring.coreos.com/v1 ServiceMonitor": "MonitoringCoreosComV1ServiceMonitor.js",
  "monitoring.coreos.com/v1 PrometheusRule": "MonitoringCoreosComV1PrometheusRule.js",
};

// A copy of `value` whose reads (get, has) and key enumerations are recorded per JSON pointer.
function watched(value, at, seen) {
  if (value === null || typeof value !== "object") return value;
  const entry = { read: new Set(), enumerated: false };
  seen.set(at, entry);
  const copy = Array.isArray(value)
    ? value.map((v, i) => watched(v, `${at}/${i}`, seen))
    : Object.fromEntries(Object.entries(value).map(([k, v]) => [k, watched(v, `${at}/${k}`, seen)]));
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") entry.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === "string") entry.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      entry.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

function unknownFields(value, at, seen, out) {
  if (value === null || typeof value !== "object") return;
  const entry = seen.get(at);
  if (!Array.isArray(value) && !entry.enumerated) {
    for (const key of Object.keys(value)) if (!entry.read.has(key)) out.push(`${at}/${key}`);
  }
  for (const [key, child] of Object.entries(value)) unknownFields(child, `${at}/${key}`, seen, out);
}

let failures = 0;
let checked = 0;
for (const file of files) {
  for (const object of JSON.parse(fs.readFileSync(file, "utf8"))) {
    const kind = `${object.apiVersion} ${object.kind}`;
    const name = `${file}: ${object.kind}/${object.metadata?.name}`;
    if (!KINDS[kind]) {
      console.error(`${name}: no schema for ${kind}`);
      failures++;
      continue;
    }
    const { validate } = await import(pathToFileURL(path.join(schemas, KINDS[kind])).href);
    const seen = new Map();
    const valid = validate(watched(object, "", seen));
    for (const error of valid ? [] : validate.errors) {
      console.error(`${name}: ${error.instancePath || "/"}: ${error.message ?? `fails ${error.keyword}`} ${JSON.stringify(error.params)}`);
      failures++;
    }
    const unknown = [];
    unknownFields(object, "", seen, unknown);
    for (const field of unknown) {
      console.error(`${name}: ${field}: a field the ${object.kind} schema does not declare`);
      failures++;
    }
    checked++;
  }
}
if (failures) process.exit(1);
console.log(`${checked} Prometheus Operator objects valid against the prometheus-operator v0.90.1 CRD schemas (strict)`);
