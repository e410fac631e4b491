//! Two namespaces of one application share its budgets.
//!
//! The example lowers the application's `max_unfinished_tasks` to 1, lets namespace `first` take
//! that one slot, shows namespace `second` refused with `429 APPLICATION_FULL`, cancels `first`'s
//! command and shows `second` accepted when it retries with the same request key. Both commands
//! are cancelled again, the usage is read back, and the original limits are restored by
//! compare-and-set on the revision the example itself produced: if another operator changed the
//! limits meanwhile, that is reported and their change is kept.
//!
//! ```sh
//! SLUICE_URL=http://127.0.0.1:8080 \
//! SLUICE_CREDENTIALS_FILE=first.json SLUICE_SECOND_CREDENTIALS_FILE=second.json \
//!   cargo run -p sluice-gateway --example application_resources
//! ```
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SLUICE_URL` | `http://127.0.0.1:8080` | the gateway (plain HTTP) |
//! | `SLUICE_CREDENTIALS_FILE` | (required) | `sluice bootstrap --resource-access` output of the first namespace |
//! | `SLUICE_SECOND_CREDENTIALS_FILE` | (required) | the same for a second namespace of the same application |
//! | `SLUICE_EXAMPLE_COMMAND` | `claim` | a command both namespaces declare |
//! | `SLUICE_EXAMPLE_INPUT` | `{"offer": "<a fresh uuid>"}` | its input, a JSON object (`deploy/demo.toml`'s `claim`) |
//!
//! It needs an application with no unfinished commands, and a stack with no executor (a gateway
//! alone, `sluice serve`): its commands must stay waiting until it cancels them. An executor
//! (`sluice dev` runs one, serving every application of its database) starts them at once, so
//! `second` may find the slot free already and the cancels find commands that left the queue;
//! the example then stops, says so, and still restores the limits. Killed mid-run, it cannot
//! restore them: read `GET /v1/application/resources` and configure them by hand.
//!
//! The tests include this file as a module and call [`run`] (`gateway/tests/api/application/example.rs`).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long one HTTP exchange may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Calls whose outcome is unknown (connection lost, `503 UNAVAILABLE`) are repeated with the same
/// idempotency identity this many times at most.
const ATTEMPTS: u32 = 3;
/// The longest `Retry-After` the example honours before its retry.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// One namespace's credential, from a `sluice bootstrap` output file.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub namespace: String,
    pub application_id: String,
    pub credential: String,
}

impl Credentials {
    /// Reads a credentials file; `variable` names where its path came from, for the errors.
    pub fn from_file(variable: &str, path: &Path) -> Result<Self, BoxError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "{variable}={}: cannot read the credentials file: {e}",
                path.display()
            )
        })?;
        Self::from_json(&format!("{variable}={}", path.display()), &text)
    }

    /// Parses the JSON `sluice bootstrap` writes; `source` names it in the errors.
    pub fn from_json(source: &str, text: &str) -> Result<Self, BoxError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("{source}: not a credentials file (not JSON: {e})"))?;
        let field = |name: &str| -> Result<String, BoxError> {
            value[name]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    format!("{source}: not a credentials file (no string field {name:?}; write it with `sluice bootstrap … --resource-access --output FILE`)").into()
                })
        };
        Ok(Self {
            namespace: field("namespace")?,
            application_id: field("application_id")?,
            credential: field("credential")?,
        })
    }
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct ExampleConfig {
    /// `http://host:port`, no trailing slash needed.
    pub base_url: String,
    pub first: Credentials,
    pub second: Credentials,
    /// A command both namespaces declare.
    pub command: String,
    /// Its input (a JSON object).
    pub input: Value,
    /// Makes the request keys, subjects and idempotency keys of this run its own.
    pub run_id: String,
}

impl ExampleConfig {
    /// From the process environment (see the table at the top).
    pub fn from_env() -> Result<Self, BoxError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any variable lookup, so tests need not touch the process environment.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, BoxError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let file = |name: &str| -> Result<Credentials, BoxError> {
            let path = var(name).ok_or_else(|| {
                format!(
                    "{name} is not set: point it at the credentials file of a namespace \
                     bootstrapped with `sluice bootstrap … --resource-access --output FILE`"
                )
            })?;
            Credentials::from_file(name, Path::new(&path))
        };
        let input = match var("SLUICE_EXAMPLE_INPUT") {
            Some(text) => {
                let input: Value = serde_json::from_str(&text)
                    .map_err(|e| format!("SLUICE_EXAMPLE_INPUT is not JSON: {e}"))?;
                if !input.is_object() {
                    return Err("SLUICE_EXAMPLE_INPUT must be a JSON object".into());
                }
                input
            }
            None => json!({ "offer": uuid::Uuid::new_v4().to_string() }),
        };
        Ok(Self {
            base_url: var("SLUICE_URL").unwrap_or_else(|| "http://127.0.0.1:8080".into()),
            first: file("SLUICE_CREDENTIALS_FILE")?,
            second: file("SLUICE_SECOND_CREDENTIALS_FILE")?,
            command: var("SLUICE_EXAMPLE_COMMAND").unwrap_or_else(|| "claim".into()),
            input,
            run_id: uuid::Uuid::new_v4().simple().to_string(),
        })
    }
}

/// The three application limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_unfinished_tasks: u64,
    pub max_concurrency: u64,
    pub rate_per_second: u64,
}

/// Live usage, as `GET /v1/application/resources` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub unfinished_tasks: u64,
    pub active_attempts: u64,
    pub pending_starts: u64,
}

/// The application's configuration and usage at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    pub application_id: String,
    pub revision: u64,
    pub limits: Limits,
    pub usage: Usage,
}

impl Resources {
    /// Limits are JSON integers; the revision and usage decimal strings.
    fn parse(data: &Value) -> Result<Self, BoxError> {
        let integer = |name: &str| {
            data[name]
                .as_u64()
                .ok_or_else(|| format!("the resources have no integer {name:?}: {data}"))
        };
        let decimal = |name: &str| {
            data[name]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| format!("the resources have no decimal string {name:?}: {data}"))
        };
        Ok(Self {
            application_id: data["application_id"]
                .as_str()
                .ok_or_else(|| format!("the resources have no application_id: {data}"))?
                .to_string(),
            revision: decimal("revision")?,
            limits: Limits {
                max_unfinished_tasks: integer("max_unfinished_tasks")?,
                max_concurrency: integer("max_concurrency")?,
                rate_per_second: integer("rate_per_second")?,
            },
            usage: Usage {
                unfinished_tasks: decimal("unfinished_tasks")?,
                active_attempts: decimal("active_attempts")?,
                pending_starts: decimal("pending_starts")?,
            },
        })
    }
}

/// How step 8 ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    /// The original limits are back, at this revision.
    Restored { revision: u64 },
    /// Someone else configured the application after the example did: their limits stay.
    Conflict {
        message: String,
        current: Option<Resources>,
    },
    /// The restore could not be done (or its outcome is unknown): check by hand.
    Failed { message: String },
}

impl std::fmt::Display for Restore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Restored { revision } => write!(f, "limits restored at revision {revision}"),
            Self::Conflict { message, .. } => write!(
                f,
                "limits NOT restored: they were changed by someone else meanwhile ({message}); \
                 their change is kept"
            ),
            Self::Failed { message } => write!(
                f,
                "limits NOT restored ({message}); read GET /v1/application/resources and \
                 configure them by hand"
            ),
        }
    }
}

/// What a successful run saw.
#[derive(Debug, Clone)]
pub struct Report {
    /// Step 1: the application as found.
    pub original: Resources,
    /// Step 2: the revision of the example's own change.
    pub configured_revision: u64,
    /// Step 3.
    pub first_command_id: String,
    /// Step 4: the `Retry-After` of `second`'s `429 APPLICATION_FULL`.
    pub refusal_retry_after: Option<String>,
    /// Step 5: `first`'s command after its cancel.
    pub first_status: String,
    /// Step 6: the command `second`'s retry created.
    pub second_command_id: String,
    /// Step 7: `second`'s command after its cancel, and the usage read after it.
    pub second_status: String,
    pub usage_after: Usage,
    /// Step 8.
    pub restore: Restore,
}

/// A run that failed: why, and what became of the limits.
#[derive(Debug)]
pub struct RunError {
    pub cause: BoxError,
    /// `None` when the limits were never changed.
    pub restore: Option<Restore>,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.restore {
            None => write!(f, "{} (the limits were not changed)", self.cause),
            Some(restore) => write!(f, "{}; {restore}", self.cause),
        }
    }
}

impl std::error::Error for RunError {}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<String>,
    pub body: Value,
}

impl Answer {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// `HTTP 409 STATE_CONFLICT: the message`.
    pub fn describe(&self) -> String {
        match self.body["error"]["message"].as_str() {
            Some(message) => format!("HTTP {} {}: {message}", self.status.as_u16(), self.code()),
            None => format!("HTTP {}: {}", self.status.as_u16(), self.body),
        }
    }

    /// The outcome of a write is unknown: ask again with the same identity.
    fn unknown_outcome(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE
    }

    fn retry_after(&self) -> Duration {
        self.retry_after
            .as_deref()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs)
            .min(MAX_RETRY_AFTER)
    }
}

/// A small client of the endpoints the example uses.
pub struct Api {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Api {
    pub fn new(base_url: &str) -> Result<Self, BoxError> {
        let base = base_url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "SLUICE_URL={base_url}: must be an http:// URL such as http://127.0.0.1:8080 \
                 (this example speaks plain HTTP only)"
            )
            .into());
        }
        base.parse::<Uri>()
            .map_err(|e| format!("SLUICE_URL={base_url}: not a URL: {e}"))?;
        Ok(Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        who: &Credentials,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Answer, BoxError> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", who.credential));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request.body(Full::new(
            body.map(|b| Bytes::from(b.to_string())).unwrap_or_default(),
        ))?;
        let exchange = async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = response.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((status, retry_after, bytes))
        };
        let (status, retry_after, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{method} {path}: no answer within {REQUEST_TIMEOUT:?}"))?
            .map_err(|e| format!("{method} {path} at {}: {}", self.base, causes(&*e)))?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }

    /// `GET /v1/application/resources`.
    pub async fn resources(&self, who: &Credentials) -> Result<Resources, BoxError> {
        let answer = self
            .send(Method::GET, "/v1/application/resources", who, &[], None)
            .await?;
        if answer.status != StatusCode::OK {
            return Err(format!(
                "namespace {} cannot read the application resources: {}{}",
                who.namespace,
                answer.describe(),
                scope_hint(&answer)
            )
            .into());
        }
        Resources::parse(answer.data())
    }

    /// `POST /v1/application/resources:configure`. A call whose outcome is unknown is repeated
    /// with the same key and content (a replay answers the original result).
    pub async fn configure(
        &self,
        who: &Credentials,
        key: &str,
        expected_revision: u64,
        reason: &str,
        limits: Limits,
    ) -> Result<Answer, BoxError> {
        let body = json!({
            "expected_revision": expected_revision.to_string(),
            "reason": reason,
            "max_unfinished_tasks": limits.max_unfinished_tasks,
            "max_concurrency": limits.max_concurrency,
            "rate_per_second": limits.rate_per_second,
        });
        let headers = [("idempotency-key", key)];
        let mut attempt = 1;
        loop {
            let answer = self
                .send(
                    Method::POST,
                    "/v1/application/resources:configure",
                    who,
                    &headers,
                    Some(&body),
                )
                .await;
            let wait = match &answer {
                Ok(answer) if answer.unknown_outcome() => answer.retry_after(),
                Ok(_) => return answer,
                Err(_) => Duration::from_secs(1),
            };
            if attempt == ATTEMPTS {
                return answer;
            }
            attempt += 1;
            tokio::time::sleep(wait).await;
        }
    }

    /// `POST /v1/commands/{command}:enqueue` on behalf of `subject`.
    pub async fn enqueue(
        &self,
        who: &Credentials,
        command: &str,
        request_key: &str,
        subject: &str,
        input: &Value,
    ) -> Result<Answer, BoxError> {
        let body = json!({"request_key": request_key, "subject": subject, "input": input});
        self.send(
            Method::POST,
            &format!("/v1/commands/{command}:enqueue"),
            who,
            &[],
            Some(&body),
        )
        .await
    }

    /// `POST /v1/commands/{id}:cancel`: the command's status afterwards.
    pub async fn cancel(&self, who: &Credentials, command_id: &str) -> Result<String, BoxError> {
        let answer = self
            .send(
                Method::POST,
                &format!("/v1/commands/{command_id}:cancel"),
                who,
                &[],
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(format!(
                "namespace {} cannot cancel command {command_id}: {}",
                who.namespace,
                answer.describe()
            )
            .into());
        }
        Ok(answer.data()["status"]
            .as_str()
            .unwrap_or("unknown")
            .to_string())
    }
}

/// An error and its sources: `client error (Connect): tcp connect error: Connection refused`.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn scope_hint(answer: &Answer) -> &'static str {
    if answer.status == StatusCode::FORBIDDEN {
        " (bootstrap the namespace's credential with --resource-access)"
    } else {
        ""
    }
}

/// Runs the scenario; prints one `key=value` line per step to `out`. Whatever happens after the
/// limits were changed, the original limits are restored (step 8) before returning.
pub async fn run(config: ExampleConfig, out: &mut impl Write) -> Result<Report, BoxError> {
    let api = Api::new(&config.base_url)?;

    // 1. The application as found.
    let original = api.resources(&config.first).await?;
    let seen_by_second = api.resources(&config.second).await?;
    if seen_by_second.application_id != original.application_id {
        return Err(format!(
            "the two credentials belong to different applications ({} of namespace {}, {} of \
             namespace {}): bootstrap the second with --application-id {}",
            original.application_id,
            config.first.namespace,
            seen_by_second.application_id,
            config.second.namespace,
            original.application_id
        )
        .into());
    }
    if config.first.namespace == config.second.namespace {
        return Err(format!(
            "both credentials are of namespace {}: the example needs two namespaces",
            config.first.namespace
        )
        .into());
    }
    writeln!(
        out,
        "application={} revision={} max_unfinished_tasks={} max_concurrency={} rate_per_second={} unfinished={}",
        original.application_id,
        original.revision,
        original.limits.max_unfinished_tasks,
        original.limits.max_concurrency,
        original.limits.rate_per_second,
        original.usage.unfinished_tasks
    )?;
    if original.usage.unfinished_tasks != 0 {
        return Err(format!(
            "application {} has {} unfinished commands: the example needs an idle application \
             (it lowers max_unfinished_tasks to 1 for everyone in it)",
            original.application_id, original.usage.unfinished_tasks
        )
        .into());
    }

    // 2. One unfinished task for the whole application; the other two limits as they were.
    let limited = Limits {
        max_unfinished_tasks: 1,
        ..original.limits
    };
    let answer = api
        .configure(
            &config.first,
            &format!("example-{}-limit", config.run_id),
            original.revision,
            "application_resources example: one unfinished task for the whole application",
            limited,
        )
        .await
        .map_err(|e| {
            format!("configure max_unfinished_tasks=1: {e}; its outcome is unknown, check GET /v1/application/resources")
        })?;
    if answer.status != StatusCode::OK {
        let unknown = if answer.unknown_outcome() {
            "; its outcome is unknown, check GET /v1/application/resources"
        } else {
            ""
        };
        return Err(format!(
            "configure max_unfinished_tasks=1: {}{unknown}",
            answer.describe()
        )
        .into());
    }
    let configured = Resources::parse(&answer.data()["resources"])?;
    writeln!(
        out,
        "configured revision={} max_unfinished_tasks={}",
        configured.revision, configured.limits.max_unfinished_tasks
    )?;

    // 3–7, then 8 whatever they did.
    let mut outstanding = Vec::new();
    let steps = exercise(&api, &config, out, &mut outstanding).await;
    if steps.is_err() {
        for (who, command_id) in outstanding {
            let status = api
                .cancel(who, &command_id)
                .await
                .unwrap_or_else(|e| format!("unknown ({e})"));
            // Best effort: nothing may keep step 8 from running.
            let _ = writeln!(out, "cleanup command_id={command_id} status={status}");
        }
    }
    let restore = restore_limits(
        &api,
        &config.first,
        &config.run_id,
        original.limits,
        original.revision,
        configured.revision,
        out,
    )
    .await?;
    match steps {
        Ok(steps) => Ok(Report {
            original,
            configured_revision: configured.revision,
            first_command_id: steps.first_command_id,
            refusal_retry_after: steps.refusal_retry_after,
            first_status: steps.first_status,
            second_command_id: steps.second_command_id,
            second_status: steps.second_status,
            usage_after: steps.usage_after,
            restore,
        }),
        Err(cause) => Err(Box::new(RunError {
            cause,
            restore: Some(restore),
        })),
    }
}

/// What steps 3–7 saw.
struct Steps {
    first_command_id: String,
    refusal_retry_after: Option<String>,
    first_status: String,
    second_command_id: String,
    second_status: String,
    usage_after: Usage,
}

/// Steps 3–7. Commands accepted and not yet cancelled are left in `outstanding` for the caller
/// to cancel if a step fails.
async fn exercise<'c>(
    api: &Api,
    config: &'c ExampleConfig,
    out: &mut impl Write,
    outstanding: &mut Vec<(&'c Credentials, String)>,
) -> Result<Steps, BoxError> {
    let (first, second) = (&config.first, &config.second);
    let subject = format!("example-{}", config.run_id);
    let first_key = format!("example-{}-first", config.run_id);
    let second_key = format!("example-{}-second", config.run_id);
    // `second`'s one intent, sent twice: refused in step 4, retried in step 6.
    let enqueue_second = || {
        api.enqueue(
            second,
            &config.command,
            &second_key,
            &subject,
            &config.input,
        )
    };
    let accepted_id = |answer: &Answer| -> Result<String, BoxError> {
        answer.data()["command_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("an acceptance without a command_id: {}", answer.body).into())
    };

    // 3. `first` takes the only slot.
    let answer = api
        .enqueue(first, &config.command, &first_key, &subject, &config.input)
        .await?;
    if answer.status != StatusCode::ACCEPTED {
        return Err(format!(
            "namespace {} enqueue {}: expected 202, got {}",
            first.namespace,
            config.command,
            answer.describe()
        )
        .into());
    }
    let first_command_id = accepted_id(&answer)?;
    outstanding.push((first, first_command_id.clone()));
    writeln!(
        out,
        "first_accepted=true http=202 command_id={first_command_id}"
    )?;

    // 4. `second` is refused: the backlog is the application's, not the namespace's.
    let answer = enqueue_second().await?;
    if answer.status == StatusCode::ACCEPTED {
        outstanding.push((second, accepted_id(&answer)?));
    }
    if answer.status != StatusCode::TOO_MANY_REQUESTS || answer.code() != "APPLICATION_FULL" {
        return Err(format!(
            "namespace {} enqueue {}: expected 429 APPLICATION_FULL while {}'s command holds the \
             only slot, got {} (an executor serving this application may have finished {}'s \
             command already)",
            second.namespace,
            config.command,
            first.namespace,
            answer.describe(),
            first.namespace
        )
        .into());
    }
    let retry_at = tokio::time::Instant::now() + answer.retry_after();
    writeln!(
        out,
        "cross_namespace_backpressure={} http={}",
        answer.code(),
        answer.status.as_u16()
    )?;
    let refusal_retry_after = answer.retry_after.clone();

    // 5. `first` gives the slot back: a waiting command is cancelled at once.
    let first_status = cancel_waiting(
        api,
        first,
        &first_command_id,
        "first_cancelled",
        out,
        outstanding,
    )
    .await?;

    // 6. `second` retries the same intent (same request key, same content) once Retry-After has
    // passed: the refusal left nothing behind, so this is a new acceptance.
    tokio::time::sleep_until(retry_at).await;
    let answer = enqueue_second().await?;
    let accepted = answer.status == StatusCode::ACCEPTED;
    if accepted || answer.status == StatusCode::OK {
        outstanding.push((second, accepted_id(&answer)?));
    }
    writeln!(out, "same_identity_retry_accepted={accepted}")?;
    if !accepted {
        return Err(format!(
            "namespace {} retry with request key {second_key}: expected 202, got {}",
            second.namespace,
            answer.describe()
        )
        .into());
    }
    let second_command_id = accepted_id(&answer)?;

    // 7. Clean up, then read the usage.
    let second_status = cancel_waiting(
        api,
        second,
        &second_command_id,
        "second_cancelled",
        out,
        outstanding,
    )
    .await?;
    let usage = api.resources(second).await?.usage;
    writeln!(
        out,
        "unfinished={} active={} pending_starts={}",
        usage.unfinished_tasks, usage.active_attempts, usage.pending_starts
    )?;
    Ok(Steps {
        first_command_id,
        refusal_retry_after,
        first_status,
        second_command_id,
        second_status,
        usage_after: usage,
    })
}

/// Cancels the waiting command `id` of `who` (a waiting command is cancelled at once), takes it
/// off `outstanding` and writes `<label> status=<status>`; fails unless it is now `cancelled`.
async fn cancel_waiting(
    api: &Api,
    who: &Credentials,
    id: &str,
    label: &str,
    out: &mut impl Write,
    outstanding: &mut Vec<(&Credentials, String)>,
) -> Result<String, BoxError> {
    let status = api.cancel(who, id).await?;
    outstanding.retain(|(_, held)| held != id);
    writeln!(out, "{label} status={status}")?;
    if status != "cancelled" {
        return Err(format!(
            "namespace {}'s command {id} is {status}, not cancelled: it had left the queue (an \
             executor serving this application took it)",
            who.namespace
        )
        .into());
    }
    Ok(status)
}

/// Step 8: puts `original` back, only if the limits are still at `expected_revision` (the
/// example's own change). A later change by someone else is reported, never overwritten. Errors
/// only if `out` cannot be written.
pub async fn restore_limits(
    api: &Api,
    who: &Credentials,
    run_id: &str,
    original: Limits,
    original_revision: u64,
    expected_revision: u64,
    out: &mut impl Write,
) -> Result<Restore, BoxError> {
    let answer = api
        .configure(
            who,
            &format!("example-{run_id}-restore"),
            expected_revision,
            &format!(
                "application_resources example: restore the limits of revision {original_revision}"
            ),
            original,
        )
        .await;
    let restore = match answer {
        Ok(answer) if answer.status == StatusCode::OK => {
            match Resources::parse(&answer.data()["resources"]) {
                Ok(restored) => Restore::Restored {
                    revision: restored.revision,
                },
                Err(e) => Restore::Failed {
                    message: e.to_string(),
                },
            }
        }
        Ok(answer) if answer.code() == "STATE_CONFLICT" => Restore::Conflict {
            message: answer.describe(),
            current: api.resources(who).await.ok(),
        },
        Ok(answer) => Restore::Failed {
            message: answer.describe(),
        },
        Err(e) => Restore::Failed {
            message: format!("{e}; the outcome is unknown"),
        },
    };
    match &restore {
        Restore::Restored { revision } => {
            writeln!(out, "limits_restored=true revision={revision}")?
        }
        Restore::Conflict { current, .. } => writeln!(
            out,
            "limits_restored=false reason=STATE_CONFLICT current_revision={}",
            current
                .as_ref()
                .map_or("unknown".to_string(), |c| c.revision.to_string())
        )?,
        Restore::Failed { .. } => writeln!(out, "limits_restored=false reason=FAILED")?,
    }
    Ok(restore)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let outcome = match ExampleConfig::from_env() {
        Ok(config) => run(config, &mut std::io::stdout()).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(Report {
            restore: Restore::Restored { .. },
            ..
        }) => std::process::ExitCode::SUCCESS,
        Ok(report) => {
            eprintln!("application_resources: {}", report.restore);
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("application_resources: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
