//! A whole gateway in process on `127.0.0.1:0`, against a fresh database and the shared Redis
//! (or servers of the test's own), with an HTTP client and helpers that read like the API.

#![allow(dead_code)]

pub(crate) mod browser_driver;
pub(crate) mod gateway_process;
pub(crate) mod sluice_process;
pub(crate) mod webhook_backend;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fred::prelude::*;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::http::server;
use sluice_gateway::identity::subject_token;
use sluice_gateway::identity::ticket::TicketKeys;
use sluice_gateway::state::Gateway;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_store::tenancy::{self, BootstrapOutput, BootstrapRequest};
use sluice_store::{db, secrets};
use sluice_testkit::{RedisServer, shared_postgres, test_redis_url};
pub use sluice_testkit::{eventually, free_port};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// A declaration most tests use: one quota command keyed by offer, generous budgets.
pub const CLAIM_DECLARATION: &str = r#"
[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }
admission = { max_queue = 1000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[quota_pool]]
code = "stock"
capacity = 100
"#;

/// How the tests' sweeps make their Redis side: final statuses kept an hour, a rebuild waited
/// for up to five seconds.
pub const SWEEP_SIDE: sluice_durable::lifecycle::sweep::SweepSide =
    sluice_durable::lifecycle::sweep::SweepSide {
        retention_ms: 3_600_000,
        patience: Duration::from_secs(5),
    };

pub struct StackOptions {
    pub declaration: String,
    pub database_url: Option<String>,
    pub redis_url: Option<String>,
    pub config: GatewayConfig,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            declaration: CLAIM_DECLARATION.to_string(),
            database_url: None,
            redis_url: None,
            config: GatewayConfig::default(),
        }
    }
}

pub struct Stack {
    pub base: String,
    /// The admin listener: `/metrics` and the detailed `/readyz`.
    pub admin_base: String,
    pub pg: PgPool,
    pub redis: Projection,
    pub gateway: Arc<Gateway>,
    pub creds: BootstrapOutput,
    pub database_url: String,
    pub ticket_spec: String,
    shutdown: CancellationToken,
    client: TestClient,
}

/// An HTTP answer: status, headers and the JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Value,
}

impl Reply {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    pub fn field(&self) -> &str {
        self.body["error"]["details"]["field"]
            .as_str()
            .unwrap_or("")
    }
}

impl Stack {
    pub async fn start() -> Stack {
        Self::start_with(StackOptions::default()).await
    }

    pub async fn with_declaration(declaration: &str) -> Stack {
        Self::start_with(StackOptions {
            declaration: declaration.to_string(),
            ..StackOptions::default()
        })
        .await
    }

    pub async fn start_with(options: StackOptions) -> Stack {
        let database_url = match options.database_url {
            Some(url) => url,
            None => shared_postgres().fresh_database().await,
        };
        let redis_url = options.redis_url.unwrap_or_else(test_redis_url);
        let pg = db::connect(&database_url, 32)
            .await
            .expect("connect PostgreSQL");
        db::run_migrations(&pg).await.expect("migrate");
        let redis = sluice_redis::connect_redis(&redis_url, 4)
            .await
            .expect("connect Redis");
        let creds = tenancy::bootstrap(
            &pg,
            &BootstrapRequest {
                application: "test".into(),
                namespace: "main".into(),
                application_id: None,
                scopes: vec![],
                resource_access: false,
            },
        )
        .await
        .expect("bootstrap");
        tenancy::apply_declaration(&pg, creds.namespace_id, &options.declaration, "test", None)
            .await
            .expect("apply declaration");
        sluice_durable::lifecycle::rebuild::ensure_ready(&pg, &redis, creds.application_id)
            .await
            .expect("projection ready");
        let (ticket_spec, tickets) = TicketKeys::generate();
        let gateway = Arc::new(Gateway::new(
            pg.clone(),
            redis.clone(),
            tickets,
            options.config,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the admin listener");
        let admin_base = format!("http://{}", admin.local_addr().expect("addr"));
        let shutdown = CancellationToken::new();
        tokio::spawn(server::run(listener, gateway.clone(), shutdown.clone()));
        tokio::spawn(sluice_gateway::http::admin::serve_gateway(
            admin,
            gateway.clone(),
            shutdown.clone(),
        ));
        let client = http_client(256);
        Stack {
            base,
            admin_base,
            pg,
            redis,
            gateway,
            creds,
            database_url,
            ticket_spec,
            shutdown,
            client,
        }
    }

    pub fn keys(&self) -> AppKeys {
        AppKeys::new(self.creds.application_id)
    }

    /// Deletes every Redis key of the application, `meta` too: the projection is lost, as after
    /// a FLUSHALL of its keys, and the next caller that needs it rebuilds it.
    pub async fn lose_projection(&self) {
        let doomed = scan_keys(&self.redis, &self.keys().pattern()).await;
        assert!(
            !doomed.is_empty(),
            "the application has a projection to lose"
        );
        let _: i64 = self
            .redis
            .pool()
            .next()
            .del(doomed)
            .await
            .expect("lose the projection");
    }

    /// `FLUSHALL` on the stack's Redis: every key of every application gone at once (a private
    /// Redis only: the shared one serves other tests).
    pub async fn flush_redis(&self) {
        let _: () = self
            .redis
            .pool()
            .next()
            .flushall(false)
            .await
            .expect("flushall");
    }

    /// PostgreSQL, Redis and the scripts, as the life-cycle transitions take them.
    pub fn stores(&self) -> sluice_durable::lifecycle::Stores<'_> {
        self.gateway.stores()
    }

    /// One round of the projection reconciler over the stack's application (no grace: every
    /// waiting row is looked at).
    pub async fn reconcile(&self, cursor: &mut sluice_durable::lifecycle::repair::Cursor) -> usize {
        sluice_durable::lifecycle::repair::projection(
            self.stores(),
            &[self.creds.application_id],
            cursor,
            SWEEP_SIDE,
            Duration::ZERO,
        )
        .await
        .expect("reconcile")
    }

    pub fn credential(&self) -> String {
        self.creds.credential.clone()
    }

    /// A subject token signed with the namespace's subject key (its secret as shown, the
    /// documented key), valid for an hour.
    pub fn subject_token(&self, subject: &str) -> String {
        let now = sluice_gateway::identity::auth::now_unix();
        subject_token::issue(
            &self.creds.subject_key.id,
            self.creds.subject_key.secret.as_bytes(),
            subject,
            now,
            now + 3600,
        )
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<Bytes>,
    ) -> Reply {
        self.request_with(method, path, bearer, body, &[]).await
    }

    /// A request with extra headers (e.g. `Origin`).
    pub async fn request_with(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<Bytes>,
        headers: &[(&str, &str)],
    ) -> Reply {
        send_request(
            &self.client,
            &self.base,
            method,
            path,
            bearer,
            body,
            headers,
        )
        .await
    }

    /// Waits until no client of the stack's Redis pool believes it is connected (each notices
    /// a closed socket by itself, within milliseconds; a request sent before that waits for its
    /// timeout). True when that happened within `within`.
    pub async fn redis_disconnected(&self, within: Duration) -> bool {
        eventually(within, || async {
            self.redis
                .pool()
                .clients()
                .iter()
                .all(|c| !c.is_connected())
        })
        .await
    }

    /// `GET {path}` on the admin listener.
    pub async fn admin_get(&self, path: &str) -> Reply {
        send_request(
            &self.client,
            &self.admin_base,
            Method::GET,
            path,
            None,
            None,
            &[],
        )
        .await
    }

    pub async fn post(&self, path: &str, bearer: Option<&str>, body: &str) -> Reply {
        self.request(
            Method::POST,
            path,
            bearer,
            Some(Bytes::from(body.to_string())),
        )
        .await
    }

    pub async fn get(&self, path: &str, bearer: Option<&str>) -> Reply {
        self.request(Method::GET, path, bearer, None).await
    }

    /// Enqueues `claim` with the namespace credential on behalf of `subject`.
    pub async fn enqueue(&self, subject: &str, key: &str, offer: &str) -> Reply {
        let body = json!({"request_key": key, "subject": subject, "input": {"offer": offer}});
        self.post(
            "/v1/commands/claim:enqueue",
            Some(&self.credential()),
            &body.to_string(),
        )
        .await
    }

    pub async fn poll(&self, ticket: &str) -> Reply {
        self.get(&format!("/v1/tickets/{ticket}"), None).await
    }

    pub async fn count_rows(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM commands WHERE application_id = $1")
            .bind(self.creds.application_id)
            .fetch_one(&self.pg)
            .await
            .expect("count rows")
    }

    /// `(unfinished, waiting, queued)`: the counters a waiting command of `command` in the
    /// stack's namespace holds.
    pub async fn open_counts(&self, command: &str) -> (i64, i64, i64) {
        let ns = self.creds.namespace_id;
        let c = self.counters().await;
        let get = |name: &str| c.get(name).copied().unwrap_or(0);
        (
            get("unfinished"),
            get(&format!("waiting:{ns}")),
            get(&format!("queued:{ns}:{command}")),
        )
    }

    /// Waits up to 5 s for every open count of `command` to be back at zero (the command's end
    /// gave back what it held), and fails naming the counts if they are not.
    pub async fn assert_open_counts_drain(&self, command: &str) {
        let drained = eventually(Duration::from_secs(5), || async {
            self.open_counts(command).await == (0, 0, 0)
        })
        .await;
        assert!(
            drained,
            "open counts of {command} (unfinished, waiting, queued) never drained: {:?}",
            self.open_counts(command).await
        );
    }

    /// The application's Redis counters (`unfinished`, `waiting:…`, `queued:…`).
    pub async fn counters(&self) -> std::collections::HashMap<String, i64> {
        self.redis
            .pool()
            .next()
            .hgetall(self.keys().count())
            .await
            .expect("counters")
    }

    /// Live reservations of a command (the intake in-flight set).
    pub async fn reservations(&self, command: &str) -> i64 {
        self.redis
            .pool()
            .next()
            .zcard(self.keys().reservations(self.creds.namespace_id, command))
            .await
            .expect("zcard")
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The HTTP client of the tests.
pub type TestClient = HttpClient<HttpConnector, Full<Bytes>>;

/// A client that keeps up to `max_idle_per_host` connections open, without Nagle's delay.
/// How long the test client keeps an idle connection: shorter than the gateway's idle keep-alive
/// limit (`header_read_timeout_ms`, 10 s), so it never sends a request on a connection the
/// gateway is closing at that instant (a reset the test would take for the gateway's answer; it
/// happened under load with a 90 s pool).
pub const CLIENT_IDLE: Duration = Duration::from_secs(5);

pub fn http_client(max_idle_per_host: usize) -> TestClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    HttpClient::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .pool_idle_timeout(CLIENT_IDLE)
        .build(connector)
}

/// One request to `{base}{path}` with the bearer credential and `headers`, and a JSON content
/// type whenever there is a body; answered within 30 s. The body is read as JSON, or as a JSON
/// string when it is not JSON.
pub async fn send_request(
    client: &TestClient,
    base: &str,
    method: Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<Bytes>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if let Some(bearer) = bearer {
        builder = builder.header("authorization", format!("Bearer {bearer}"));
    }
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    let request = builder
        .body(Full::new(body.unwrap_or_default()))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .expect("answered within 30 s")
        .expect("HTTP exchange");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = body_bytes(response).await;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply {
        status,
        headers,
        body,
    }
}

/// The whole body of a response.
pub async fn body_bytes(response: hyper::Response<hyper::body::Incoming>) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
}

/// Another namespace `name` of the stack's application, declaring nothing, with a credential
/// holding `scopes` (none: every namespace scope) and, when `resource_access`, the two
/// application scopes.
pub async fn bootstrap_namespace(
    stack: &Stack,
    name: &str,
    scopes: Vec<String>,
    resource_access: bool,
) -> BootstrapOutput {
    tenancy::bootstrap(
        &stack.pg,
        &BootstrapRequest {
            application: "test".into(),
            namespace: name.into(),
            application_id: Some(stack.creds.application_id),
            scopes,
            resource_access,
        },
    )
    .await
    .expect("bootstrap another namespace")
}

/// A new credential of `namespace_id` holding exactly `scopes`.
pub async fn credential_with_scopes(
    stack: &Stack,
    namespace_id: sluice_durable::ids::NamespaceId,
    scopes: &[&str],
) -> String {
    let secret = secrets::new_credential_secret();
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    sqlx::query(
        "INSERT INTO credentials (id, namespace_id, secret_sha256, scopes, label)
         VALUES ($1, $2, $3, $4, 'test')",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(namespace_id)
    .bind(secrets::credential_hash(&secret).to_vec())
    .bind(&scopes)
    .execute(&stack.pg)
    .await
    .expect("insert credential");
    secret
}

pub fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .expect("base64url secret")
}

/// A random offer (a lowercase uuid).
pub fn offer() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A unique request key.
pub fn key() -> String {
    format!("k-{}", hex::encode(secrets::random_bytes::<8>()))
}

/// Every Redis key matching `pattern`.
pub async fn scan_keys(redis: &Projection, pattern: &str) -> Vec<String> {
    sluice_testkit::scan_keys(redis.pool(), pattern).await
}

/// A Redis of the test's own (one it may kill), started off the async runtime.
pub async fn start_private_redis() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis")
}

/// SIGKILLs the test's own Redis (a crash: nothing is saved).
pub async fn kill_redis(mut redis: RedisServer) -> RedisServer {
    tokio::task::spawn_blocking(move || {
        redis.kill();
        redis
    })
    .await
    .expect("kill redis")
}

/// Starts the test's own Redis again, empty, on the same port.
pub async fn restart_redis(mut redis: RedisServer) -> RedisServer {
    tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .expect("restart redis")
}
