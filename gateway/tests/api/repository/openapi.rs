//! `docs/openapi.json` stays honest: it documents exactly the operations the router serves, the
//! error code enum is exactly `ErrorCode`, every `$ref` resolves, and the fields of real answers
//! are exactly the `properties` of the documented schemas (adding a field in code without
//! documenting it, or documenting one the code does not send, fails here).

use std::collections::BTreeSet;

use hyper::{Method, StatusCode};
use serde_json::Value;
use sluice_gateway::http::error::ErrorCode;

use crate::support::*;

const DOCUMENT_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

/// Every operation `gateway/src/http/router.rs` serves today. Keep in step with the router.
const OPERATIONS: &[(&str, &str)] = &[
    ("POST", "/v1/commands/{command}:enqueue"),
    ("GET", "/v1/tickets/{ticket}"),
    ("GET", "/v1/commands/{command_id}"),
    ("GET", "/v1/commands/{command}/requests/{request_key}"),
    ("GET", "/v1/commands/{command}/mine"),
    ("POST", "/v1/commands/{command_id}:cancel"),
    ("POST", "/v1/commands/{command_id}:complete"),
    ("GET", "/v1/application/resources"),
    ("POST", "/v1/application/resources:configure"),
    ("GET", "/v1/reads/{name}"),
    ("POST", "/v1/reads/{name}:invalidate"),
    ("POST", "/v1/control"),
    ("GET", "/v1/status"),
    ("GET", "/v1/quota-pools/{pool}"),
    ("POST", "/v1/quota-pools/{pool}:configure"),
    ("GET", "/v1/allocations/{allocation_id}"),
    ("POST", "/v1/allocations/{allocation_id}:confirm"),
    ("POST", "/v1/allocations/{allocation_id}:release"),
    ("POST", "/v1/rooms/{room}:join"),
    ("POST", "/v1/rooms/{room}:challenge"),
    ("GET", "/v1/rooms/{room}"),
    ("GET", "/v1/rooms/{room}/prequeue"),
    ("POST", "/v1/passes:heartbeat"),
    ("POST", "/v1/passes:leave"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/.well-known/jwks.json"),
];

/// Every variant of [`ErrorCode`].
const ERROR_CODES: &[ErrorCode] = &[
    ErrorCode::InvalidArgument,
    ErrorCode::Unauthenticated,
    ErrorCode::PermissionDenied,
    ErrorCode::NotFound,
    ErrorCode::StateConflict,
    ErrorCode::IdempotencyConflict,
    ErrorCode::PayloadTooLarge,
    ErrorCode::ApplicationFull,
    ErrorCode::QueueFull,
    ErrorCode::RateLimited,
    ErrorCode::IntakePaused,
    ErrorCode::Unavailable,
];

/// No wildcard arm on purpose: a new variant stops this from compiling, as a reminder to add it
/// to [`ERROR_CODES`] (and to the document).
fn listed(code: ErrorCode) -> bool {
    match code {
        ErrorCode::InvalidArgument
        | ErrorCode::Unauthenticated
        | ErrorCode::PermissionDenied
        | ErrorCode::NotFound
        | ErrorCode::StateConflict
        | ErrorCode::IdempotencyConflict
        | ErrorCode::PayloadTooLarge
        | ErrorCode::ApplicationFull
        | ErrorCode::QueueFull
        | ErrorCode::RateLimited
        | ErrorCode::IntakePaused
        | ErrorCode::Unavailable => ERROR_CODES.contains(&code),
    }
}

const HTTP_METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn document() -> Value {
    let text = std::fs::read_to_string(DOCUMENT_PATH)
        .unwrap_or_else(|e| panic!("read {DOCUMENT_PATH}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DOCUMENT_PATH} is not JSON: {e}"))
}

fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "components.schemas.{name} is missing");
    schema
}

fn properties(doc: &Value, name: &str) -> BTreeSet<String> {
    schema(doc, name)["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("components.schemas.{name} has no properties"))
        .keys()
        .cloned()
        .collect()
}

fn required(doc: &Value, name: &str) -> BTreeSet<String> {
    schema(doc, name)["required"]
        .as_array()
        .unwrap_or_else(|| panic!("components.schemas.{name} has no required list"))
        .iter()
        .map(|v| v.as_str().expect("required names are strings").to_string())
        .collect()
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

fn string_enum(doc: &Value, name: &str) -> BTreeSet<String> {
    schema(doc, name)["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("components.schemas.{name} has no enum"))
        .iter()
        .map(|v| v.as_str().expect("enum values are strings").to_string())
        .collect()
}

/// A schema whose fields the code always sends: the real object has exactly its properties,
/// and all of them are required.
fn assert_exact(doc: &Value, name: &str, real: &Value, what: &str) {
    assert_eq!(
        keys(real),
        properties(doc, name),
        "{what}: real fields vs components.schemas.{name}.properties"
    );
    assert_eq!(
        required(doc, name),
        properties(doc, name),
        "components.schemas.{name}: every field is always sent, so every field is required"
    );
}

/// A schema with optional fields: the real object sends only documented fields and every
/// required one.
fn assert_within(doc: &Value, name: &str, real: &Value, what: &str) {
    let sent = keys(real);
    assert!(
        sent.is_subset(&properties(doc, name)),
        "{what}: undocumented fields in {sent:?} (components.schemas.{name})"
    );
    assert!(
        required(doc, name).is_subset(&sent),
        "{what}: a required field of components.schemas.{name} is missing from {sent:?}"
    );
}

/// The values of an `enum` under `pointer` (a JSON pointer into the document).
fn enum_at(doc: &Value, pointer: &str) -> BTreeSet<String> {
    doc.pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{pointer} is not an enum"))
        .iter()
        .map(|v| v.as_str().expect("enum values are strings").to_string())
        .collect()
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("$ref", Value::String(target)) => out.push(target.clone()),
                    _ => collect_refs(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
        _ => {}
    }
}

#[test]
fn the_document_lists_exactly_the_implemented_operations() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        let item = item
            .as_object()
            .unwrap_or_else(|| panic!("{path}: not an object"));
        for method in item.keys().filter(|k| HTTP_METHODS.contains(&k.as_str())) {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let implemented: BTreeSet<(String, String)> = OPERATIONS
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, implemented);
}

#[test]
fn the_error_code_enum_is_exactly_the_gateways() {
    let doc = document();
    let implemented: BTreeSet<String> = ERROR_CODES
        .iter()
        .map(|code| {
            assert!(listed(*code));
            code.as_str().to_string()
        })
        .collect();
    assert_eq!(
        implemented.len(),
        ERROR_CODES.len(),
        "duplicate in ERROR_CODES"
    );
    assert_eq!(string_enum(&doc, "ErrorCode"), implemented);
}

#[test]
fn every_reference_resolves() {
    let doc = document();
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for target in refs {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{target}: only local references are used"));
        assert!(
            doc.pointer(pointer).is_some_and(Value::is_object),
            "{target} does not resolve"
        );
    }
}

/// Whether a request string's schema states which characters it takes: an `enum`, a `const`, a
/// `format`, or a pattern anchored at both ends (its own or one in `allOf`). A string without one
/// lets a schema-driven client (schemathesis) send U+0000, which the gateway refuses with `400`
/// for every request string (the document's "U+0000" rule): a valid-looking request refused.
fn states_its_characters(schema: &Value) -> bool {
    let anchored = |s: &Value| {
        s.get("pattern")
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with('^') && p.ends_with('$'))
    };
    ["enum", "const", "format"]
        .iter()
        .any(|k| schema.get(*k).is_some())
        || anchored(schema)
        || schema
            .get("allOf")
            .and_then(Value::as_array)
            .is_some_and(|all| all.iter().any(anchored))
}

/// The request strings of `schema` (reached through `$ref`, properties, items, `allOf`/`oneOf`/
/// `anyOf` and `additionalProperties`) that do not state their characters, by path.
fn loose_strings(
    doc: &Value,
    schema: &Value,
    path: &str,
    seen: &mut Vec<String>,
    out: &mut Vec<String>,
) {
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        if seen.iter().any(|s| s == target) {
            return;
        }
        seen.push(target.to_string());
        if let Some(resolved) = target.strip_prefix('#').and_then(|p| doc.pointer(p)) {
            loose_strings(doc, resolved, path, seen, out);
        }
        seen.pop();
        return;
    }
    let is_string = match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        _ => false,
    };
    if is_string && !states_its_characters(schema) {
        out.push(path.to_string());
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            loose_strings(doc, property, &format!("{path}.{name}"), seen, out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = schema.get(key).filter(|v| v.is_object()) {
            loose_strings(doc, inner, &format!("{path}[]"), seen, out);
        }
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        for inner in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            loose_strings(doc, inner, path, seen, out);
        }
    }
}

/// Every string a request may carry (bodies, path and query parameters) states its characters,
/// so the document never calls a request valid that the gateway refuses for a U+0000. The
/// schemathesis run found `proof_of_work.challenge` without one (seed 666638343).
#[test]
fn every_request_string_states_its_characters() {
    let doc = document();
    let mut loose = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().expect("operations") {
            let at = format!("{} {path}", method.to_uppercase());
            if let Some(content) = operation
                .pointer("/requestBody/content")
                .and_then(Value::as_object)
            {
                for media in content.values() {
                    if let Some(schema) = media.get("schema") {
                        loose_strings(
                            &doc,
                            schema,
                            &format!("{at} body"),
                            &mut Vec::new(),
                            &mut loose,
                        );
                    }
                }
            }
            for parameter in operation
                .get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let parameter = match parameter.get("$ref").and_then(Value::as_str) {
                    Some(target) => doc.pointer(&target[1..]).expect("the parameter resolves"),
                    None => parameter,
                };
                if let Some(schema) = parameter.get("schema") {
                    let name = parameter["name"].as_str().unwrap_or("?");
                    loose_strings(
                        &doc,
                        schema,
                        &format!("{at} {name}"),
                        &mut Vec::new(),
                        &mut loose,
                    );
                }
            }
        }
    }
    assert!(
        loose.is_empty(),
        "request strings that do not state their characters: {loose:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_have_exactly_the_documented_fields() {
    let doc = document();
    let statuses = string_enum(&doc, "CommandStatus");
    let codes = string_enum(&doc, "ErrorCode");
    let stack = Stack::start().await;
    let offer = offer();
    let key = key();

    let receipt = stack.enqueue("user-1", &key, &offer).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
    assert_exact(&doc, "ReceiptEnvelope", &receipt.body, "enqueue envelope");
    assert_eq!(
        receipt.headers["x-request-id"].to_str().expect("ascii"),
        receipt.body["request_id"].as_str().expect("request_id"),
        "X-Request-Id is the envelope's request_id"
    );
    assert_exact(&doc, "Receipt", receipt.data(), "enqueue receipt (202)");
    assert!(statuses.contains(receipt.data()["status"].as_str().expect("status")));
    let queue = &receipt.data()["queue"];
    if !queue.is_null() {
        assert_exact(&doc, "QueuePosition", queue, "receipt queue");
    }

    let replay = stack.enqueue("user-1", &key, &offer).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_exact(
        &doc,
        "Receipt",
        replay.data(),
        "enqueue receipt (200 replay)",
    );

    let ticket = receipt.data()["ticket"].as_str().expect("ticket");
    let poll = stack.poll(ticket).await;
    assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
    assert_exact(&doc, "TicketStatusEnvelope", &poll.body, "poll envelope");
    assert_exact(&doc, "TicketStatus", poll.data(), "ticket poll");
    assert!(statuses.contains(poll.data()["status"].as_str().expect("status")));

    let id = receipt.data()["command_id"].as_str().expect("command_id");
    let record = stack
        .get(&format!("/v1/commands/{id}"), Some(&stack.credential()))
        .await;
    assert_eq!(record.status, StatusCode::OK, "{:?}", record.body);
    assert_exact(
        &doc,
        "CommandRecordEnvelope",
        &record.body,
        "record envelope",
    );
    assert_exact(
        &doc,
        "CommandRecord",
        record.data(),
        "GET /v1/commands/{id}",
    );
    assert!(statuses.contains(record.data()["status"].as_str().expect("status")));

    let token = stack.subject_token("user-1");
    let page = stack
        .get("/v1/commands/claim/mine?limit=1", Some(&token))
        .await;
    assert_eq!(page.status, StatusCode::OK, "{:?}", page.body);
    assert_exact(&doc, "CommandPage", page.data(), "mine page");
    assert_exact(&doc, "CommandRecord", &page.data()["items"][0], "mine item");

    let refused = stack
        .get("/v1/commands/not-a-uuid", Some(&stack.credential()))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        refused.body
    );
    assert_eq!(
        keys(&refused.body),
        properties(&doc, "ErrorEnvelope"),
        "error envelope"
    );
    let error = &refused.body["error"];
    let sent = keys(error);
    assert!(
        sent.is_subset(&properties(&doc, "Error")),
        "undocumented error fields: {sent:?}"
    );
    assert!(required(&doc, "Error").is_subset(&sent), "{error}");
    assert!(codes.contains(error["code"].as_str().expect("code")));
}

/// The operators' answers: `POST /v1/control` and `GET /v1/status`, with every nested object of
/// the board filled (a waiting command, a paused command, a quota pool, outcomes, a room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_answers_have_exactly_the_documented_fields() {
    let doc = document();
    let stack = Stack::with_declaration(&format!(
        "{CLAIM_DECLARATION}\n[[room]]\ncode = \"doors\"\nmax_active = 1\n"
    ))
    .await;
    let receipt = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
    let id = receipt.data()["command_id"]
        .as_str()
        .expect("id")
        .to_string();
    let cancelled = stack
        .post(
            &format!("/v1/commands/{id}:cancel"),
            Some(&stack.credential()),
            "",
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{:?}", cancelled.body);
    assert_eq!(
        stack.enqueue("user-2", &key(), &offer()).await.status,
        StatusCode::ACCEPTED
    );
    let control = stack
        .post(
            "/v1/control",
            Some(&stack.credential()),
            r#"{"paused": true, "reason": "fields", "command": "claim"}"#,
        )
        .await;
    assert_eq!(control.status, StatusCode::OK, "{:?}", control.body);
    assert_exact(
        &doc,
        "ControlStateEnvelope",
        &control.body,
        "control envelope",
    );
    assert_exact(&doc, "ControlState", control.data(), "control");

    let board = stack.get("/v1/status", Some(&stack.credential())).await;
    assert_eq!(board.status, StatusCode::OK, "{:?}", board.body);
    assert_exact(&doc, "StatusBoardEnvelope", &board.body, "status envelope");
    let data = board.data();
    assert_exact(&doc, "StatusBoard", data, "status");
    assert_exact(&doc, "StatusPaused", &data["paused"], "status.paused");
    assert_exact(&doc, "StatusCache", &data["cache"], "status.cache");
    assert_exact(
        &doc,
        "StatusCommand",
        &data["commands"][0],
        "status.commands[]",
    );
    assert_exact(
        &doc,
        "StatusCount",
        &data["commands"][0]["statuses"][0],
        "statuses[]",
    );
    assert_exact(&doc, "StatusQueues", &data["queues"], "status.queues");
    assert_exact(
        &doc,
        "BusyResource",
        &data["queues"]["busiest"][0],
        "busiest[]",
    );
    assert_exact(
        &doc,
        "StatusInFlight",
        &data["in_flight"],
        "status.in_flight",
    );
    assert_exact(
        &doc,
        "StatusApplicationInFlight",
        &data["in_flight"]["application"],
        "in_flight.application",
    );
    assert_exact(&doc, "OutcomeSecond", &data["outcomes"][0], "outcomes[]");
    assert_exact(
        &doc,
        "QuotaPoolStatus",
        &data["quota_pools"][0],
        "quota_pools[]",
    );
    assert_exact(&doc, "StatusRoom", &data["rooms"][0], "rooms[]");
}

/// The reads against a real origin: `GET /v1/reads/{name}` (application and subject scope),
/// `POST /v1/reads/{name}:invalidate`, and an origin failure's `details.reason`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_answers_have_exactly_the_documented_fields() {
    let doc = document();
    let origin = crate::reads::OriginServer::start().await;
    let stack = Stack::with_declaration(&crate::reads::declaration(&origin)).await;
    let credential = stack.credential();
    let enum_of = |field: &str| -> BTreeSet<String> {
        schema(&doc, "ReadView")["properties"][field]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("ReadView.{field} has no enum"))
            .iter()
            .map(|v| v.as_str().expect("a string").to_string())
            .collect()
    };
    assert_eq!(
        enum_of("freshness"),
        BTreeSet::from(["fresh".to_string(), "stale".to_string()])
    );

    let view = stack
        .get("/v1/reads/page?id=fields", Some(&credential))
        .await;
    assert_eq!(view.status, StatusCode::OK, "{:?}", view.body);
    assert_exact(&doc, "ReadViewEnvelope", &view.body, "read envelope");
    assert_exact(&doc, "ReadView", view.data(), "GET /v1/reads/{name}");
    assert_eq!(view.data()["freshness"], "fresh");
    let token = stack.subject_token("user-1");
    let mine = stack.get("/v1/reads/mine?id=1", Some(&token)).await;
    assert_eq!(mine.status, StatusCode::OK, "{:?}", mine.body);
    assert_exact(&doc, "ReadView", mine.data(), "a subject's read");

    let invalidated = stack
        .post(
            "/v1/reads/stock:invalidate",
            Some(&credential),
            r#"{"dependencies": ["pool:stock", "offer:1"]}"#,
        )
        .await;
    assert_eq!(invalidated.status, StatusCode::OK, "{:?}", invalidated.body);
    assert_exact(
        &doc,
        "InvalidatedDependenciesEnvelope",
        &invalidated.body,
        "invalidate envelope",
    );
    assert_exact(
        &doc,
        "InvalidatedDependencies",
        invalidated.data(),
        "POST /v1/reads/{name}:invalidate",
    );
    for entry in invalidated.data()["dependencies"]
        .as_array()
        .expect("dependencies")
    {
        assert_exact(&doc, "InvalidatedDependency", entry, "dependencies[]");
    }
    assert_eq!(
        keys(&serde_json::json!({"dependencies": []})),
        properties(&doc, "InvalidateReadRequest"),
        "the request's only field"
    );

    let reasons: BTreeSet<String> =
        schema(&doc, "Error")["properties"]["details"]["properties"]["reason"]["enum"]
            .as_array()
            .expect("details.reason enum")
            .iter()
            .map(|v| v.as_str().expect("a string").to_string())
            .collect();
    let broken = stack
        .get("/v1/reads/broken?id=fields", Some(&credential))
        .await;
    assert_eq!(
        broken.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        broken.body
    );
    assert_eq!(keys(&broken.body), properties(&doc, "ErrorEnvelope"));
    let error = &broken.body["error"];
    assert!(keys(error).is_subset(&properties(&doc, "Error")), "{error}");
    assert!(reasons.contains(error["details"]["reason"].as_str().expect("reason")));
}

/// The quota answers: the results of a reserved and a committed quota command, a pool's `GET`
/// and `:configure` (and its repeat), an allocation's `GET`, `:confirm` (and its repeat) and the
/// `409` of `:release` after it, with `details.state`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_answers_have_exactly_the_documented_fields() {
    let doc = document();
    let declaration = format!(
        "{}{CLAIM_DECLARATION}",
        crate::quotas::reserved_declaration(3, 300)
    );
    let stack = Stack::with_declaration(&declaration).await;
    let shutdown = crate::execution::start_executor(&stack, crate::execution::fast_executor());
    let credential = stack.credential();
    let offer = offer();
    let reserved = crate::quotas::hold(&stack, "alice", &offer).await;
    assert_eq!(reserved.status, StatusCode::ACCEPTED, "{:?}", reserved.body);
    let committed = stack.enqueue("alice", &key(), &offer).await;
    assert_eq!(
        committed.status,
        StatusCode::ACCEPTED,
        "{:?}",
        committed.body
    );
    assert!(
        crate::execution::all_terminal(&stack, std::time::Duration::from_secs(20)).await,
        "both commands land"
    );

    // The results, as the command's record shows them.
    let result_of = |receipt: &Reply| {
        let id = receipt.data()["command_id"]
            .as_str()
            .expect("command_id")
            .to_string();
        let stack = &stack;
        async move {
            let record = crate::execution::record(stack, &id).await;
            assert_eq!(record.status, StatusCode::OK, "{:?}", record.body);
            assert_eq!(record.data()["status"], "succeeded", "{:?}", record.body);
            record.data()["result"].clone()
        }
    };
    let held = result_of(&reserved).await;
    assert_within(&doc, "QuotaResult", &held, "a reserved quota result");
    assert_eq!(held["state"], "reserved", "{held}");
    assert!(held["expires_at"].is_string(), "{held}");
    let taken = result_of(&committed).await;
    assert_within(&doc, "QuotaResult", &taken, "a committed quota result");
    assert_eq!(taken["state"], "confirmed", "{taken}");
    assert!(taken.get("expires_at").is_none(), "{taken}");
    let result_states = enum_at(
        &doc,
        "/components/schemas/QuotaResult/properties/state/enum",
    );
    assert_eq!(
        result_states,
        BTreeSet::from(["confirmed".to_string(), "reserved".to_string()])
    );

    // The pool, and a configure of it (and its repeat).
    let pool = stack.get("/v1/quota-pools/seats", Some(&credential)).await;
    assert_eq!(pool.status, StatusCode::OK, "{:?}", pool.body);
    assert_exact(&doc, "QuotaPoolEnvelope", &pool.body, "pool envelope");
    assert_exact(&doc, "QuotaPool", pool.data(), "GET /v1/quota-pools/{pool}");
    assert_eq!(pool.data()["reserved"], 1, "{:?}", pool.body);
    let revision = pool.data()["revision"].as_str().expect("revision");
    let body = serde_json::json!({
        "expected_revision": revision, "reason": "fields", "capacity": 4,
    });
    assert_eq!(
        keys(&body),
        properties(&doc, "ConfigureQuotaPoolRequest"),
        "the request's fields"
    );
    let configure = || {
        stack.request_with(
            Method::POST,
            "/v1/quota-pools/seats:configure",
            Some(&credential),
            Some(body.to_string().into()),
            &[("Idempotency-Key", "fields-1")],
        )
    };
    let configured = configure().await;
    assert_eq!(configured.status, StatusCode::OK, "{:?}", configured.body);
    assert_exact(
        &doc,
        "ConfiguredQuotaPoolEnvelope",
        &configured.body,
        "configure envelope",
    );
    assert_exact(
        &doc,
        "ConfiguredQuotaPool",
        configured.data(),
        "POST /v1/quota-pools/{pool}:configure",
    );
    assert_exact(
        &doc,
        "QuotaPool",
        &configured.data()["pool"],
        "configured pool",
    );
    let repeated = configure().await;
    assert_eq!(repeated.status, StatusCode::OK, "{:?}", repeated.body);
    assert_eq!(repeated.data()["deduplicated"], true);
    assert_exact(&doc, "QuotaPool", &repeated.data()["pool"], "repeated pool");

    // The allocation, its confirm, the confirm's repeat and a release after it.
    let states = string_enum(&doc, "AllocationState");
    let id = held["allocation_id"].as_str().expect("allocation_id");
    let alice = stack.subject_token("alice");
    let allocation = stack
        .get(&format!("/v1/allocations/{id}"), Some(&alice))
        .await;
    assert_eq!(allocation.status, StatusCode::OK, "{:?}", allocation.body);
    assert_exact(
        &doc,
        "AllocationEnvelope",
        &allocation.body,
        "allocation envelope",
    );
    assert_within(
        &doc,
        "Allocation",
        allocation.data(),
        "GET /v1/allocations/{id}",
    );
    assert_eq!(allocation.data()["state"], "reserved");
    assert!(
        allocation.data()["expires_at"].is_string(),
        "{:?}",
        allocation.body
    );
    let decide = |verb: &'static str| {
        let (stack, alice) = (&stack, &alice);
        async move {
            stack
                .post(&format!("/v1/allocations/{id}:{verb}"), Some(alice), "{}")
                .await
        }
    };
    for (answer, changed) in [
        (decide("confirm").await, true),
        (decide("confirm").await, false),
    ] {
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        assert_exact(
            &doc,
            "AllocationDecisionEnvelope",
            &answer.body,
            "confirm envelope",
        );
        assert_within(&doc, "AllocationDecision", answer.data(), "a confirm");
        assert_eq!(answer.data()["changed"], changed, "{:?}", answer.body);
        assert_eq!(answer.data()["state"], "confirmed");
        assert!(
            answer.data().get("expires_at").is_none(),
            "{:?}",
            answer.body
        );
        assert!(states.contains(answer.data()["state"].as_str().expect("state")));
    }
    // Exactly one field of the decision is not the allocation's.
    let mut decision = properties(&doc, "AllocationDecision");
    assert!(decision.remove("changed"));
    assert_eq!(decision, properties(&doc, "Allocation"));

    let refused = decide("release").await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{:?}", refused.body);
    assert_eq!(keys(&refused.body), properties(&doc, "ErrorEnvelope"));
    let error = &refused.body["error"];
    assert!(keys(error).is_subset(&properties(&doc, "Error")), "{error}");
    assert_eq!(error["code"], "STATE_CONFLICT");
    let refusing = enum_at(
        &doc,
        "/components/schemas/Error/properties/details/properties/state/enum",
    );
    assert!(
        refusing.contains(error["details"]["state"].as_str().expect("details.state")),
        "{error}"
    );
    // The same enum also names the ended places a heartbeat refuses (`left`, `expired`).
    let places = string_enum(&doc, "PlaceState");
    assert!(
        refusing
            .iter()
            .all(|state| states.contains(state) || places.contains(state)),
        "{refusing:?}"
    );
    shutdown.cancel();
}

/// A refusal in the documented error envelope, with `status` and `code`; its `error`.
fn assert_error<'a>(doc: &Value, reply: &'a Reply, status: StatusCode, code: &str) -> &'a Value {
    assert_eq!(reply.status, status, "{:?}", reply.body);
    assert_eq!(
        keys(&reply.body),
        properties(doc, "ErrorEnvelope"),
        "{:?}",
        reply.body
    );
    let error = &reply.body["error"];
    let sent = keys(error);
    assert!(
        sent.is_subset(&properties(doc, "Error")),
        "undocumented error fields: {sent:?}"
    );
    assert!(required(doc, "Error").is_subset(&sent), "{error}");
    assert_eq!(error["code"], code, "{error}");
    error
}

/// The waiting rooms' answers: a join (`202`, and `200` for the subject's live place), a place's
/// poll while waiting in the queue, in a pre-queue, admitted and left, a room and its pre-queue,
/// a heartbeat, leaving by pass and by ticket, and the refusals whose details are documented
/// (`prequeue_opens_at`, `state`, `INTAKE_PAUSED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_answers_have_exactly_the_documented_fields() {
    use std::time::Duration;

    let doc = document();
    let states = string_enum(&doc, "PlaceState");
    assert_eq!(
        states,
        BTreeSet::from(["waiting", "admitted", "left", "expired"].map(String::from))
    );
    let opens_in = |days| {
        (chrono::Utc::now() + chrono::Duration::days(days))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    // `doors` admits one at a time, from now on; `premiere` takes its pre-queue until tomorrow;
    // `later`'s pre-queue opens an hour before its start, the day after.
    let declaration = format!(
        r#"{CLAIM_DECLARATION}
[[room]]
code = "doors"
max_active = 1
heartbeat_seconds = 30

[[room]]
code = "premiere"
max_active = 1
opens_at = "{}"

[[room]]
code = "later"
max_active = 1
opens_at = "{}"
prequeue_seconds = 3600

[[room]]
code = "guarded"
max_active = 1
proof_of_work = {{ min_bits = 2, max_bits = 8, calm_joins_per_second = 10 }}
"#,
        opens_in(1),
        opens_in(2)
    );
    let stack = Stack::with_declaration(&declaration).await;
    let (alice, bob) = (stack.subject_token("alice"), stack.subject_token("bob"));

    // Proof-of-work challenges: a room that asks for work, and one that does not.
    for (room, required) in [("guarded", true), ("doors", false)] {
        let path = format!("/v1/rooms/{room}:challenge");
        let offer = stack.post(&path, Some(&alice), "").await;
        assert_eq!(offer.status, StatusCode::OK, "{:?}", offer.body);
        assert_exact(
            &doc,
            "WorkChallengeEnvelope",
            &offer.body,
            "challenge envelope",
        );
        assert_exact(&doc, "WorkChallenge", offer.data(), &path);
        assert_eq!(offer.data()["required"], required);
    }
    let bare = stack.post("/v1/rooms/guarded:join", Some(&alice), "").await;
    let error = assert_error(&doc, &bare, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
    assert_eq!(
        error["details"]["reason"], "proof_of_work_required",
        "{error}"
    );

    // A new place, then the same subject's live place again.
    let joined = stack.post("/v1/rooms/doors:join", Some(&alice), "").await;
    assert_eq!(joined.status, StatusCode::ACCEPTED, "{:?}", joined.body);
    assert_exact(&doc, "JoinedPlaceEnvelope", &joined.body, "join envelope");
    assert_exact(&doc, "JoinedPlace", joined.data(), "a join (202)");
    assert_eq!(joined.data()["deduplicated"], false);
    assert!(states.contains(joined.data()["status"].as_str().expect("status")));
    let again = stack.post("/v1/rooms/doors:join", Some(&alice), "{}").await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_exact(
        &doc,
        "JoinedPlace",
        again.data(),
        "a join (200, live place)",
    );
    assert_eq!(again.data()["deduplicated"], true);
    assert_eq!(again.data()["join_id"], joined.data()["join_id"]);
    let ticket = joined.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();

    // Admitted by the ticker within a few ticks; bob waits behind the only place.
    let bob_joined = stack.post("/v1/rooms/doors:join", Some(&bob), "").await;
    assert_eq!(
        bob_joined.status,
        StatusCode::ACCEPTED,
        "{:?}",
        bob_joined.body
    );
    let bob_ticket = bob_joined.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();
    let admitted = eventually(Duration::from_secs(10), || async {
        stack.poll(&ticket).await.data()["status"] == "admitted"
    })
    .await;
    assert!(
        admitted,
        "alice is admitted: {:?}",
        stack.poll(&ticket).await.body
    );
    let poll = stack.poll(&ticket).await;
    assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
    assert_exact(&doc, "PlaceEnvelope", &poll.body, "place poll envelope");
    assert_exact(&doc, "Place", poll.data(), "a place's poll (admitted)");
    assert!(poll.data()["pass"].is_string(), "{:?}", poll.body);
    assert!(
        poll.data()["heartbeat_after_ms"].is_u64(),
        "{:?}",
        poll.body
    );
    assert_eq!(
        poll.headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    let pass = poll.data()["pass"].as_str().expect("pass").to_string();
    let waiting = stack.poll(&bob_ticket).await;
    assert_eq!(waiting.status, StatusCode::OK, "{:?}", waiting.body);
    assert_exact(&doc, "Place", waiting.data(), "a place's poll (waiting)");
    assert_eq!(waiting.data()["status"], "waiting", "{:?}", waiting.body);
    assert_exact(
        &doc,
        "PlaceQueuePosition",
        &waiting.data()["queue"],
        "a waiting place's queue",
    );

    // A pre-queue place, its room (with the seed's commitment) and the pre-queue.
    let early = stack
        .post("/v1/rooms/premiere:join", Some(&alice), "")
        .await;
    assert_eq!(early.status, StatusCode::ACCEPTED, "{:?}", early.body);
    assert_exact(&doc, "JoinedPlace", early.data(), "a pre-queue join");
    assert_eq!(early.data()["prequeue"], true, "{:?}", early.body);
    let early_poll = stack
        .poll(early.data()["ticket"].as_str().expect("ticket"))
        .await;
    assert_exact(&doc, "Place", early_poll.data(), "a pre-queue place's poll");
    for (path, bearer) in [
        ("/v1/rooms/doors", &alice),
        ("/v1/rooms/premiere", &stack.credential()),
    ] {
        let room = stack.get(path, Some(bearer)).await;
        assert_eq!(room.status, StatusCode::OK, "{path}: {:?}", room.body);
        assert_exact(&doc, "RoomEnvelope", &room.body, "room envelope");
        assert_exact(&doc, "Room", room.data(), path);
    }
    let premiere = stack.get("/v1/rooms/premiere", Some(&bob)).await;
    assert!(
        premiere.data()["seed_sha256"].is_string(),
        "{:?}",
        premiere.body
    );
    assert!(premiere.data()["seed"].is_null(), "{:?}", premiere.body);
    let orders = schema(&doc, "Room")["properties"]["order"]["enum"]
        .as_array()
        .expect("Room.order has an enum");
    assert!(premiere.data()["order"].is_string(), "{:?}", premiere.body);
    assert!(
        orders.contains(&premiere.data()["order"]),
        "{:?}",
        premiere.body
    );
    let prequeue = stack.get("/v1/rooms/premiere/prequeue", Some(&bob)).await;
    assert_eq!(prequeue.status, StatusCode::OK, "{:?}", prequeue.body);
    assert_exact(
        &doc,
        "PrequeueEnvelope",
        &prequeue.body,
        "prequeue envelope",
    );
    assert_exact(
        &doc,
        "Prequeue",
        prequeue.data(),
        "GET /v1/rooms/{room}/prequeue",
    );
    assert_eq!(
        prequeue.data()["join_ids"],
        serde_json::json!([early.data()["join_id"]])
    );

    // Refused joins: before the pre-queue opens, and with a credential.
    let too_early = stack.post("/v1/rooms/later:join", Some(&alice), "").await;
    let error = assert_error(&doc, &too_early, StatusCode::CONFLICT, "STATE_CONFLICT");
    assert!(error["details"]["prequeue_opens_at"].is_string(), "{error}");
    assert!(
        keys(&error["details"]).is_subset(&keys(
            &schema(&doc, "Error")["properties"]["details"]["properties"]
        )),
        "{error}"
    );
    let credential = stack
        .post("/v1/rooms/doors:join", Some(&stack.credential()), "")
        .await;
    assert_error(
        &doc,
        &credential,
        StatusCode::FORBIDDEN,
        "PERMISSION_DENIED",
    );

    // A heartbeat, and another subject's.
    let body = serde_json::json!({"pass": pass}).to_string();
    assert_eq!(
        keys(&serde_json::json!({"pass": ""})),
        properties(&doc, "HeartbeatRequest")
    );
    let beat = stack
        .post("/v1/passes:heartbeat", Some(&alice), &body)
        .await;
    assert_eq!(beat.status, StatusCode::OK, "{:?}", beat.body);
    assert_exact(
        &doc,
        "PlaceHeartbeatEnvelope",
        &beat.body,
        "heartbeat envelope",
    );
    assert_exact(
        &doc,
        "PlaceHeartbeat",
        beat.data(),
        "POST /v1/passes:heartbeat",
    );
    assert_eq!(beat.data()["status"], "admitted", "{:?}", beat.body);
    let stolen = stack.post("/v1/passes:heartbeat", Some(&bob), &body).await;
    assert_error(&doc, &stolen, StatusCode::FORBIDDEN, "PERMISSION_DENIED");

    // Leaving by pass, the place's poll after it, and a heartbeat of the ended place.
    assert_eq!(
        keys(&serde_json::json!({"pass": "", "ticket": ""})),
        properties(&doc, "LeaveRequest")
    );
    let left = stack.post("/v1/passes:leave", Some(&alice), &body).await;
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    assert_exact(&doc, "LeftPlaceEnvelope", &left.body, "leave envelope");
    assert_exact(
        &doc,
        "LeftPlace",
        left.data(),
        "POST /v1/passes:leave (pass)",
    );
    assert_eq!(left.data()["changed"], true, "{:?}", left.body);
    assert_eq!(left.data()["status"], "left", "{:?}", left.body);
    let ended = stack.poll(&ticket).await;
    assert_exact(&doc, "Place", ended.data(), "a place's poll (left)");
    assert_eq!(
        ended
            .headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("private, max-age=3600, immutable")
    );
    let late = stack
        .post("/v1/passes:heartbeat", Some(&alice), &body)
        .await;
    let error = assert_error(&doc, &late, StatusCode::CONFLICT, "STATE_CONFLICT");
    let refusing = enum_at(
        &doc,
        "/components/schemas/Error/properties/details/properties/state/enum",
    );
    let state = error["details"]["state"].as_str().expect("details.state");
    assert_eq!(state, "left", "{error}");
    assert!(
        refusing.contains(state) && states.contains(state),
        "{error}"
    );

    // Leaving by ticket, and again (nothing changes).
    let by_ticket = serde_json::json!({"ticket": bob_ticket}).to_string();
    for changed in [true, false] {
        let left = stack.post("/v1/passes:leave", Some(&bob), &by_ticket).await;
        assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
        assert_exact(
            &doc,
            "LeftPlace",
            left.data(),
            "POST /v1/passes:leave (ticket)",
        );
        assert_eq!(left.data()["changed"], changed, "{:?}", left.body);
    }

    // Paused intake refuses a new place; a live one is still answered.
    let paused = stack
        .post(
            "/v1/control",
            Some(&stack.credential()),
            r#"{"paused": true, "reason": "fields"}"#,
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    let carol = stack.subject_token("carol");
    let refused = stack.post("/v1/rooms/doors:join", Some(&carol), "").await;
    assert_error(
        &doc,
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "INTAKE_PAUSED",
    );
    let live = stack
        .post("/v1/rooms/premiere:join", Some(&alice), "")
        .await;
    assert_eq!(live.status, StatusCode::OK, "{:?}", live.body);
    assert_exact(
        &doc,
        "JoinedPlace",
        live.data(),
        "a live place while paused",
    );
}

/// The path of a documented operation with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{command}", "claim")
        .replace("{command_id}", "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10")
        .replace("{ticket}", "c2VjcmV0LXRpY2tldA")
        .replace("{request_key}", "order-1")
        .replace("{name}", "offer")
        .replace("{pool}", "offer-stock")
        .replace("{allocation_id}", "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d11")
        .replace("{room}", "doors")
}

/// A method no operation of a path documents is `405` with `Allow` naming the documented one,
/// before authentication (no credential is sent), in the documented error envelope; an
/// unknown path stays `404`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_methods_are_405_with_the_documented_allow() {
    let doc = document();
    let described = &doc["components"]["responses"]["MethodNotAllowed"];
    assert!(
        described["headers"]["Allow"].is_object(),
        "components.responses.MethodNotAllowed documents Allow"
    );
    let stack = Stack::start().await;
    for (method, path) in OPERATIONS {
        let target = concrete(path);
        for wrong in ["GET", "POST", "PUT", "DELETE", "PATCH", "TRACE"] {
            if wrong == *method {
                continue;
            }
            let wrong_method = Method::from_bytes(wrong.as_bytes()).expect("a method");
            let reply = stack.request(wrong_method, &target, None, None).await;
            let what = format!("{wrong} {target} (documented: {method} {path})");
            assert_eq!(
                reply.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{what}: {:?}",
                reply.body
            );
            assert_eq!(
                reply.headers.get("allow").and_then(|v| v.to_str().ok()),
                Some(*method),
                "{what}"
            );
            assert_eq!(
                keys(&reply.body),
                properties(&doc, "ErrorEnvelope"),
                "{what}"
            );
            assert_eq!(reply.code(), "INVALID_ARGUMENT", "{what}");
            assert_eq!(reply.body["error"]["details"]["field"], "method", "{what}");
            assert!(reply.headers.contains_key("x-request-id"), "{what}");
            // A ticket is a capability: never echoed (nor logged) in a refusal.
            let message = reply.body["error"]["message"].as_str().unwrap_or("");
            assert!(!message.contains("c2VjcmV0LXRpY2tldA"), "{what}: {message}");
        }
    }
    for path in ["/v1/nothing", "/v1/commands/claim/else", "/metrics"] {
        let reply = stack.request(Method::DELETE, path, None, None).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{path}: {:?}",
            reply.body
        );
        assert!(!reply.headers.contains_key("allow"), "{path}");
    }
    // The documented method itself is still routed (here: refused for want of a credential).
    let reply = stack.request(Method::GET, "/v1/status", None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{:?}", reply.body);
}

/// `GET /.well-known/jwks.json` is exactly the documented JWK Set, key by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pass_key_set_has_exactly_the_documented_fields() {
    let doc = document();
    let stack = Stack::start().await;
    let reply = stack.get("/.well-known/jwks.json", None).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_exact(&doc, "JwkSet", &reply.body, "the JWK Set");
    let keys = reply.body["keys"].as_array().expect("keys");
    assert!(!keys.is_empty(), "a live key is always published");
    for key in keys {
        assert_exact(&doc, "PassJwk", key, "a published key");
    }
}
