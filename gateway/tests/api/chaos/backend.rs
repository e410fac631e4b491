//! The loopback webhook backend of a chaos run: the provider behind the `call` command.
//!
//! It verifies every `Sluice-Signature` (with `crate::support::webhook_backend::verify`, independent of
//! the executor's code) and answers like a well-behaved provider: after a few ms to 100 ms
//! (always far below the lease and the attempt timeout), mostly `200` with a result, sometimes
//! `202` and then its own `:complete` a little later, sometimes `429` or `503` (retried by
//! Sluice). It honours `Idempotency-Key` the way many real backends do: the key is looked up
//! when a request arrives, and a command it already decided is answered with that same
//! decision; two requests of one command that are in flight at once both miss and decide
//! independently, which is how a double delivery shows up as two different results.
//!
//! Everything it sees goes to [`Records`] (see [`super::witness`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::load::{Answer, Client, send};
use super::witness::{Call, Complete, Decision, Records};
use crate::support::webhook_backend::verify;

/// How the backend answers.
#[derive(Debug, Clone)]
pub(super) struct Behaviour {
    /// Every answer comes after a delay drawn from this range (ms).
    pub(super) answer_ms: (u64, u64),
    /// A `:complete` is sent this long after its `202` (ms).
    pub(super) complete_ms: (u64, u64),
    /// Shares of the first answers to an undecided command (the rest are `200`).
    pub(super) accepted: f64,
    pub(super) too_many: f64,
    pub(super) unavailable: f64,
    /// Share of decisions that are `rejected` (and, for `:complete`, as many `failed`).
    pub(super) rejected: f64,
}

/// Where `:complete` goes, known once the stack runs.
struct Target {
    client: Client,
    gateways: Vec<Arc<RwLock<String>>>,
    credential: String,
    secret: String,
}

struct Inner {
    records: Arc<Records>,
    behaviour: Behaviour,
    rng: Mutex<StdRng>,
    target: OnceLock<Target>,
    completers: Mutex<JoinSet<()>>,
    calls: std::sync::atomic::AtomicU64,
}

/// The running backend.
pub(super) struct Backend {
    pub(super) base: String,
    inner: Arc<Inner>,
    shutdown: CancellationToken,
}

impl Backend {
    /// Serves on `127.0.0.1:0`; [`connect`](Self::connect) must follow before the first call.
    pub(super) async fn start(records: Arc<Records>, behaviour: Behaviour, seed: u64) -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the backend");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let inner = Arc::new(Inner {
            records,
            behaviour,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            target: OnceLock::new(),
            completers: Mutex::new(JoinSet::new()),
            calls: Default::default(),
        });
        let shutdown = CancellationToken::new();
        let (stop, shared) = (shutdown.clone(), inner.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stop.cancelled() => return,
                };
                let _ = stream.set_nodelay(true);
                let inner = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let inner = inner.clone();
                        async move { Ok::<_, Infallible>(serve(inner, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Backend {
            base,
            inner,
            shutdown,
        }
    }

    /// The namespace's webhook secret, and where and how to send `:complete`.
    pub(super) fn connect(
        &self,
        client: Client,
        gateways: Vec<Arc<RwLock<String>>>,
        credential: String,
        secret: String,
    ) {
        let target = Target {
            client,
            gateways,
            credential,
            secret,
        };
        assert!(
            self.inner.target.set(target).is_ok(),
            "the backend is connected once"
        );
    }

    pub(super) fn url(&self) -> String {
        format!("{}/call", self.base)
    }

    /// `:complete` calls not finished yet.
    pub(super) fn completes_pending(&self) -> usize {
        let mut set = self.inner.completers.lock().expect("completers lock");
        while set.try_join_next().is_some() {}
        set.len()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.inner
            .completers
            .lock()
            .expect("completers lock")
            .abort_all();
    }
}

fn header(request: &Request<Incoming>, name: &str) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn respond(status: u16, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).expect("a status"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a response")
}

/// What one call is answered.
enum Reply {
    Decided(Decision),
    Retry(u16),
}

async fn serve(inner: Arc<Inner>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let at = inner.records.now();
    let wall = chrono::Utc::now();
    let signature = header(&request, "sluice-signature");
    let key = header(&request, "idempotency-key");
    let raw = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return respond(400, String::new()),
    };
    let Some(target) = inner.target.get() else {
        return respond(500, "not connected".into());
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let command_id: Uuid = body["command_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .unwrap_or_default();
    let input = &body["input"];
    let provider = input["provider"].as_str().unwrap_or("").to_string();
    let account = format!(
        "account:{provider}:{}",
        input["account"].as_str().unwrap_or("")
    );
    let signed = verify(&target.secret, &signature, &raw) && key == command_id.to_string();
    let mut guard = inner.records.arrive(Call {
        command_id,
        provider,
        account: account.clone(),
        at,
        wall,
        signed,
        attempt: body["attempt"].as_i64().unwrap_or(-1),
        answer: None,
        ended: None,
    });
    if !signed {
        guard.answer(401);
        return respond(401, r#"{"error":"bad signature"}"#.into());
    }
    // The idempotency key is looked up on arrival; the decision is stored when it is made.
    let known = inner.records.decided(command_id);
    let redelivery = known.is_some();
    let (delay, reply) = {
        let behaviour = &inner.behaviour;
        let mut rng = inner.rng.lock().expect("rng lock");
        let delay = rng.random_range(behaviour.answer_ms.0..=behaviour.answer_ms.1);
        let reply = match known {
            Some(decision) => Reply::Decided(decision),
            None => draw(
                &mut rng,
                behaviour,
                inner
                    .calls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ),
        };
        (Duration::from_millis(delay), reply)
    };
    tokio::time::sleep(delay).await;
    match reply {
        Reply::Retry(status) => {
            guard.answer(status);
            respond(status, String::new())
        }
        Reply::Decided(decision) if decision.by_complete => {
            if !redelivery {
                inner.records.decide(command_id, decision.clone());
                schedule_complete(&inner, command_id, account, decision);
                guard.answer(202);
            } else {
                // The task it names is the one already counted (or already reported).
                guard.answer_again(202);
            }
            respond(202, "{}".into())
        }
        Reply::Decided(decision) => {
            if !redelivery {
                inner.records.decide(command_id, decision.clone());
            }
            guard.answer(200);
            let mut answer = json!({"outcome": decision.outcome, "result": decision.result});
            if let Some(code) = &decision.error_code {
                answer["error_code"] = json!(code);
            }
            respond(200, answer.to_string())
        }
    }
}

/// The answer to a command the backend has not decided yet. Every decision carries the call's
/// number, so two decisions of one command never look alike.
fn draw(rng: &mut StdRng, behaviour: &Behaviour, call: u64) -> Reply {
    let roll: f64 = rng.random();
    if roll < behaviour.too_many {
        return Reply::Retry(429);
    }
    if roll < behaviour.too_many + behaviour.unavailable {
        return Reply::Retry(503);
    }
    let by_complete = roll < behaviour.too_many + behaviour.unavailable + behaviour.accepted;
    let result = json!({"call": call, "value": rng.random::<u32>()});
    let outcome: f64 = rng.random();
    let (outcome, error_code) = if outcome < behaviour.rejected {
        ("rejected", Some("PROVIDER_REJECTED".to_string()))
    } else if by_complete && outcome < 2.0 * behaviour.rejected {
        ("failed", Some("PROVIDER_FAILED".to_string()))
    } else {
        ("succeeded", None)
    };
    Reply::Decided(Decision {
        outcome: outcome.into(),
        result,
        error_code,
        by_complete,
    })
}

/// Sends the task's result a little later, retrying unknown outcomes (`503`, no answer) over
/// both gateways with the same body until a definite answer or 60 s.
fn schedule_complete(inner: &Arc<Inner>, command_id: Uuid, account: String, decision: Decision) {
    let after = {
        let mut rng = inner.rng.lock().expect("rng lock");
        let (low, high) = inner.behaviour.complete_ms;
        Duration::from_millis(rng.random_range(low..=high))
    };
    let task_inner = inner.clone();
    inner
        .completers
        .lock()
        .expect("completers lock")
        .spawn(async move {
            let inner = task_inner;
            tokio::time::sleep(after).await;
            let target = inner.target.get().expect("connected");
            inner.records.task_done(&account, command_id);
            let sent = inner.records.now();
            let mut body = json!({"outcome": decision.outcome, "result": decision.result});
            if let Some(code) = &decision.error_code {
                body["error_code"] = json!(code);
            }
            let mut answers = Vec::new();
            let mut status = None;
            let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
            for n in 0usize.. {
                let base = target.gateways[n % target.gateways.len()]
                    .read()
                    .expect("base lock")
                    .clone();
                let url = format!("{base}/v1/commands/{command_id}:complete");
                let answer = send(
                    &target.client,
                    Method::POST,
                    &url,
                    Some(&target.credential),
                    Some(&body),
                    Duration::from_secs(5),
                )
                .await;
                match answer {
                    Answer::Http {
                        status: got, code, ..
                    } => {
                        answers.push(format!("{got} {code}"));
                        if !(got == 503 || got == 429) {
                            status = Some(got);
                            break;
                        }
                    }
                    Answer::Failed(failure) => answers.push(failure),
                }
                if tokio::time::Instant::now() >= give_up {
                    break;
                }
                let wait = 50u64 << n.min(4);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            inner.records.completed(Complete {
                command_id,
                decision,
                sent,
                answers,
                status,
            });
        });
}
