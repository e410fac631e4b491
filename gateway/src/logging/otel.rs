//! Traces over OpenTelemetry: off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, as every OpenTelemetry SDK reads it. Then every
//! `tracing` span at `info` and above (a request, a group commit, a command's attempt, its
//! webhook call) is exported over OTLP/HTTP with protobuf (a collector's port 4318), in batches;
//! `traceparent` comes in on requests and goes out on webhooks (W3C trace context). The other
//! standard variables are the SDK's: `OTEL_SERVICE_NAME` (default `sluice-gateway` or
//! `sluice-executor`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`. `OTEL_SDK_DISABLED=true` turns it
//! off whatever else is set.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use sluice_durable::http_client::{HttpsClient, Outbound};

/// Whether spans are exported: read on hot paths to skip the trace-context work entirely when
/// they are not.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process exports spans.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether the environment asks for traces.
pub fn requested() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The exporting provider, flushed and shut down when dropped (at the process's end, so the
/// last batch is not lost).
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The provider, the W3C propagator made global, and the layer that turns `tracing` spans
    /// into its spans. Must be called inside the Tokio runtime (the exporter's requests run on
    /// it).
    ///
    /// # Errors
    /// The exporter cannot be built (an endpoint that is not a URL).
    pub fn start<S>(
        service: &str,
    ) -> Result<
        (
            Telemetry,
            tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>,
        ),
        String,
    >
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        let exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpClient::new()?)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|e| format!("OpenTelemetry exporter: {e}"))?;
        let mut resource = Resource::builder()
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            resource = resource.with_service_name(service.to_string());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let tracer = provider.tracer("sluice");
        ENABLED.store(true, Ordering::Relaxed);
        Ok((
            Telemetry { provider },
            tracing_opentelemetry::layer().with_tracer(tracer),
        ))
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("sluice: flushing the last spans failed: {error}");
        }
    }
}

/// The exporter's HTTP client: the outbound client (rustls with the web's roots and
/// `outbound_ca_file`, the proxy variables). The SDK exports from a thread of its own, so each
/// request is run on the Tokio runtime the process started in and awaited from there.
#[derive(Debug, Clone)]
struct OtlpClient {
    client: HttpsClient<Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl OtlpClient {
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE` (the standard variable) names the collector's CA.
    fn new() -> Result<Self, String> {
        let ca = std::env::var_os("OTEL_EXPORTER_OTLP_CERTIFICATE");
        let outbound = Outbound::from_env(ca.as_deref().map(std::path::Path::new))
            .map_err(|e| format!("OTEL_EXPORTER_OTLP_CERTIFICATE: {e}"))?;
        Ok(Self {
            client: outbound.client(),
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let request = hyper::Request::from_parts(parts, Full::new(body));
        self.runtime
            .spawn(async move {
                let response = client.request(request).await?;
                let (parts, body) = response.into_parts();
                let body = body.collect().await?.to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            })
            .await?
    }
}
