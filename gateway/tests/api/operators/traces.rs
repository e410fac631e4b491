//! Traces over OpenTelemetry, end to end with real processes: a gateway and an executor export
//! to an OTLP receiver this test runs (OTLP/HTTP, protobuf, decoded with the protocol's own
//! messages). One enqueue sent with a `traceparent` makes one trace: the gateway's `request`
//! span is the caller's span's child, the executor's `attempt` span (naming the command) is the
//! request's, the `webhook` call is the attempt's, and the backend receives the `traceparent`
//! of that call. The command's result, read from PostgreSQL, is the backend's answer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::json;

use crate::support::gateway_process::GatewayProcess;
use crate::support::sluice_process::SluiceProcess;
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{ocr_stack, row};

/// A span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            let path = request.uri().path().to_string();
                            let body = request
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let status =
                                match (path.as_str(), ExportTraceServiceRequest::decode(body)) {
                                    ("/v1/traces", Ok(export)) => {
                                        kept.lock().expect("spans lock").extend(decoded(&export));
                                        StatusCode::OK
                                    }
                                    _ => StatusCode::BAD_REQUEST,
                                };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .header("content-type", "application/x-protobuf")
                                    .body(Full::new(Bytes::new()))
                                    .expect("a response"),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { endpoint, spans }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().expect("spans lock").clone()
    }
}

fn decoded(export: &ExportTraceServiceRequest) -> Vec<Received> {
    let text = |value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match value
        .as_ref()
        .and_then(|v| v.value.as_ref())
    {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(n)) => n.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    let mut spans = Vec::new();
    for resource in &export.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for scope in &resource.scope_spans {
            for span in &scope.spans {
                spans.push(Received {
                    service: service.clone(),
                    name: span.name.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                });
            }
        }
    }
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_enqueue_is_one_trace_from_the_caller_to_the_webhook() {
    let receiver = Receiver::start().await;
    let backend = Backend::start(handler(|_| async {
        Answer::succeeded(json!({"pages": 3}))
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let gateway = GatewayProcess::start_with(&stack, dir.path(), "traced-gateway", &otel).await;
    let mut executor_env = otel.to_vec();
    executor_env.push(("OTEL_SERVICE_NAME", "executor-under-test"));
    let _executor = SluiceProcess::spawn(
        &stack,
        &["execute", "--tick-ms", "20"],
        &executor_env,
        dir.path().join("traced-executor.log"),
    );

    let (trace, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let reply = gateway
        .post_with(
            "/v1/commands/ocr:enqueue",
            &stack.credential(),
            &json!({"request_key": key(), "subject": "u1",
                    "input": {"provider": "p", "account": "a", "doc": "d"}}),
            &[("traceparent", &format!("00-{trace}-{caller_span}-01"))],
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let id = reply.data()["command_id"]
        .as_str()
        .expect("command_id")
        .to_string();
    assert!(
        eventually(Duration::from_secs(20), || async {
            row(&stack, &id).await["status"] == "succeeded"
        })
        .await,
        "the command lands: {}",
        row(&stack, &id).await
    );
    assert_eq!(row(&stack, &id).await["result"], json!({"pages": 3}));

    // The spans arrive in batches every 100 ms; wait for the three of the trace.
    let named = |name: &str| {
        receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == trace && s.name == name)
            .collect::<Vec<_>>()
    };
    let arrived = eventually(Duration::from_secs(15), || {
        let all = ["request", "attempt", "webhook"]
            .iter()
            .all(|name| !named(name).is_empty());
        std::future::ready(all)
    })
    .await;
    assert!(arrived, "spans of the trace: {:#?}", receiver.spans());
    let enqueue: Vec<Received> = named("request")
        .into_iter()
        .filter(|s| {
            s.attributes
                .get("path")
                .is_some_and(|p| p.ends_with(":enqueue"))
        })
        .collect();
    assert_eq!(enqueue.len(), 1, "{enqueue:#?}");
    let request = &enqueue[0];
    assert_eq!(request.service, "sluice-gateway");
    assert_eq!(
        request.parent_span_id, caller_span,
        "the caller's span is its parent"
    );
    assert_eq!(
        request.attributes.get("trace_id").map(String::as_str),
        Some(trace),
        "the log's trace_id is the trace's"
    );
    let attempt = named("attempt");
    assert_eq!(attempt.len(), 1, "{attempt:#?}");
    let attempt = &attempt[0];
    assert_eq!(attempt.service, "executor-under-test");
    assert_eq!(
        attempt.parent_span_id, request.span_id,
        "the attempt is the request's child"
    );
    assert_eq!(attempt.attributes.get("command_id"), Some(&id));
    let webhook = named("webhook");
    assert_eq!(webhook.len(), 1, "{webhook:#?}");
    let webhook = &webhook[0];
    assert_eq!(
        webhook.parent_span_id, attempt.span_id,
        "the call is the attempt's child"
    );
    assert_eq!(
        webhook
            .attributes
            .get("http.response.status_code")
            .map(String::as_str),
        Some("200")
    );
    let arrivals = backend.arrivals();
    assert_eq!(arrivals.len(), 1);
    assert_eq!(
        arrivals[0].traceparent,
        format!("00-{trace}-{}-01", webhook.span_id),
        "the backend continues the call's span"
    );
}
