//! The webhook backend and its own books: the witness of limits, decisions and deliveries.
//!
//! It verifies every signature, answers each delivery as the plan says for that intent's attempt
//! (counted here, not read from the request), and keeps each delivery's interval of work: from its
//! arrival until its answer is handed to hyper, or its caller gave up (the command's `timeout_ms`
//! after arrival, or the connection dropped), or, for a `202`, until the checker sends
//! `:complete`. Sluice holds a command's permits over a longer span (admission before the arrival,
//! landing after the answer), so these intervals are inside Sluice's: more of them at once than a
//! limit allows is a limit exceeded, whatever Sluice's own books say.
//!
//! An intent's answers are idempotent like a real backend's: once it decided (a `200`, a `400`,
//! or a `:complete` it sent), every later delivery of the intent gets the same decision.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::client::{Http, Reply, now_ms};
use crate::journal::{CompleteRecord, Journal};
use crate::plan::Answer;

/// One delivery as the backend saw it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Delivery {
    pub n: u32,
    pub command_id: String,
    /// 1 for the intent's first delivery here, 2 for the next, …
    pub attempt: usize,
    pub arrived_ms: i64,
    /// When its work ended (see the module doc); None while it is still open.
    pub ended_ms: Option<i64>,
    pub answer: Answer,
    pub signature_ok: bool,
}

/// The decision the backend made for an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Decision {
    Succeeded,
    Rejected,
    Failed,
}

#[derive(Default)]
struct Books {
    deliveries: Vec<Delivery>,
    /// Deliveries per intent so far.
    attempts: HashMap<u32, usize>,
    /// The intent's decision and when it was made.
    decided: HashMap<u32, (Decision, i64)>,
}

/// What the backend needs to know about the run.
pub struct BackendSpec {
    pub answers: HashMap<u32, Vec<Answer>>,
    pub timeouts_ms: HashMap<String, u64>,
    pub webhook_secret: String,
    /// Where `:complete` goes (any gateway that answers), with the credential.
    pub gateways: Vec<String>,
    pub credential: String,
}

pub struct Backend {
    pub url: String,
    spec: BackendSpec,
    books: Mutex<Books>,
    journal: Arc<Journal>,
    http: Http,
    shutdown: CancellationToken,
}

impl Backend {
    pub async fn start(spec: BackendSpec, journal: Arc<Journal>) -> std::io::Result<Arc<Backend>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let backend = Arc::new(Backend {
            url,
            spec,
            books: Mutex::default(),
            journal,
            http: Http::default(),
            shutdown: CancellationToken::new(),
        });
        let serving = Arc::clone(&backend);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = serving.shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let backend = Arc::clone(&serving);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let backend = Arc::clone(&backend);
                        async move { Ok::<_, Infallible>(backend.serve(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(backend)
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.books().deliveries.clone()
    }

    pub fn decisions(&self) -> HashMap<u32, (Decision, i64)> {
        self.books().decided.clone()
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn serve(self: Arc<Self>, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let arrived_ms = now_ms();
        let signature = request
            .headers()
            .get("sluice-signature")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
            return respond(400, json!({"error": "unreadable body"}));
        };
        let signature_ok = signature
            .as_deref()
            .is_some_and(|header| verify(&self.spec.webhook_secret, header, &body));
        let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
            self.journal
                .stray(format!("webhook body is not JSON: {body:?}"));
            return respond(400, json!({"error": "not JSON"}));
        };
        let n = payload["input"]["n"]
            .as_str()
            .and_then(|s| s.parse::<u32>().ok());
        let command_id = payload["command_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let command = payload["command"].as_str().unwrap_or_default().to_string();
        let Some(n) = n else {
            self.journal
                .stray(format!("webhook for an intent the plan has not: {payload}"));
            return respond(400, json!({"error": "unknown intent"}));
        };
        let timeout_ms = self.spec.timeouts_ms.get(&command).copied().unwrap_or(1000);
        let (index, answer) = {
            let mut books = self.books();
            let attempt = books.attempts.entry(n).or_insert(0);
            *attempt += 1;
            let attempt = *attempt;
            let planned = self
                .spec
                .answers
                .get(&n)
                .and_then(|answers| answers.get(attempt - 1).or(answers.last()).cloned());
            let mut answer = planned.unwrap_or(Answer::Decide {
                latency_ms: 5,
                succeeded: true,
            });
            if let Some((decision, _)) = books.decided.get(&n) {
                answer = match decision {
                    Decision::Succeeded | Decision::Rejected => Answer::Decide {
                        latency_ms: answer.latency_ms(),
                        succeeded: *decision == Decision::Succeeded,
                    },
                    Decision::Failed => Answer::Refuse {
                        latency_ms: answer.latency_ms(),
                    },
                };
            }
            books.deliveries.push(Delivery {
                n,
                command_id: command_id.clone(),
                attempt,
                arrived_ms,
                ended_ms: None,
                answer: answer.clone(),
                signature_ok,
            });
            (books.deliveries.len() - 1, answer)
        };
        // Counted until its answer goes out, or until its caller gave up on it (the delivery's
        // future is dropped when the connection goes, and the timeout caps it either way).
        let guard = EndOnDrop {
            backend: Arc::clone(&self),
            index,
            cap_ms: arrived_ms + timeout_ms as i64,
            keep_open: false,
        };
        tokio::time::sleep(Duration::from_millis(answer.latency_ms())).await;
        let mut guard = guard;
        match answer {
            Answer::Decide { succeeded, .. } => {
                self.decide(
                    n,
                    if succeeded {
                        Decision::Succeeded
                    } else {
                        Decision::Rejected
                    },
                );
                let outcome = if succeeded { "succeeded" } else { "rejected" };
                respond(200, json!({"outcome": outcome, "result": {"n": n}}))
            }
            Answer::Refuse { .. } => {
                self.decide(n, Decision::Failed);
                respond(400, json!({"error": "refused by the plan"}))
            }
            Answer::TooMany { retry_after_s, .. } => {
                let mut response = respond(429, json!({"error": "too many"}));
                if let Ok(value) = retry_after_s.to_string().parse() {
                    response.headers_mut().insert("retry-after", value);
                }
                response
            }
            Answer::Unavailable { .. } => respond(503, json!({"error": "unavailable"})),
            Answer::Running {
                complete_after_ms,
                succeeded,
                late,
                ..
            } => {
                // Open until the checker sends :complete (the permits stay held until then).
                guard.keep_open = true;
                let backend = Arc::clone(&self);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(complete_after_ms)).await;
                    backend
                        .complete(index, n, command_id, succeeded, late)
                        .await;
                });
                respond(202, json!({"accepted": true}))
            }
        }
    }

    fn decide(&self, n: u32, decision: Decision) {
        self.books()
            .decided
            .entry(n)
            .or_insert((decision, now_ms()));
    }

    fn end(&self, index: usize, at_ms: i64) {
        let mut books = self.books();
        if let Some(delivery) = books.deliveries.get_mut(index)
            && delivery.ended_ms.is_none()
        {
            delivery.ended_ms = Some(at_ms);
        }
    }

    /// Sends `:complete` for a delivery answered `202`: the delivery's work ends when the call
    /// goes out. Sent again while no gateway answers; a `late` one follows once the command ended.
    async fn complete(
        &self,
        index: usize,
        n: u32,
        command_id: String,
        succeeded: bool,
        late: bool,
    ) {
        let decision = {
            let mut books = self.books();
            books
                .decided
                .entry(n)
                .or_insert((
                    if succeeded {
                        Decision::Succeeded
                    } else {
                        Decision::Rejected
                    },
                    now_ms(),
                ))
                .0
        };
        let outcome = |d: Decision| match d {
            Decision::Succeeded => "succeeded",
            Decision::Rejected => "rejected",
            Decision::Failed => "failed",
        };
        let body = json!({"outcome": outcome(decision), "result": {"n": n}});
        self.end(index, now_ms());
        let mut sent = 0;
        loop {
            let reply = self.send_complete(&command_id, &body, sent).await;
            sent += 1;
            let retry = matches!(reply.0.status(), None | Some(503)) && sent < 40;
            self.record_complete(
                n,
                &command_id,
                decision == Decision::Succeeded,
                false,
                reply,
            );
            if !retry {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if late {
            // After the command ended, a different outcome must be refused (409).
            tokio::time::sleep(Duration::from_millis(500)).await;
            let other = match decision {
                Decision::Succeeded => Decision::Rejected,
                _ => Decision::Succeeded,
            };
            let body = json!({"outcome": outcome(other), "result": {"n": n, "late": true}});
            let reply = self.send_complete(&command_id, &body, sent).await;
            self.record_complete(n, &command_id, other == Decision::Succeeded, true, reply);
        }
    }

    async fn send_complete(&self, command_id: &str, body: &Value, turn: usize) -> (Reply, i64) {
        let gateways = &self.spec.gateways;
        let base = &gateways[turn % gateways.len().max(1)];
        let sent_ms = now_ms();
        let reply = self
            .http
            .post(
                &format!("{base}/v1/commands/{command_id}:complete"),
                Some(&self.spec.credential),
                body,
            )
            .await;
        (reply, sent_ms)
    }

    fn record_complete(
        &self,
        n: u32,
        command_id: &str,
        succeeded: bool,
        late: bool,
        reply: (Reply, i64),
    ) {
        let (reply, sent_ms) = reply;
        let record = CompleteRecord {
            n,
            command_id: command_id.to_string(),
            succeeded,
            late,
            sent_ms,
            status: reply.status(),
            code: reply.error_code().map(str::to_string),
        };
        self.journal.with(|r| r.completes.push(record));
    }
}

/// Ends a delivery's interval when its answer goes out or its future is dropped (the caller
/// went away), never later than the caller's timeout.
struct EndOnDrop {
    backend: Arc<Backend>,
    index: usize,
    cap_ms: i64,
    keep_open: bool,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if self.keep_open {
            return;
        }
        self.backend.end(self.index, now_ms().min(self.cap_ms));
    }
}

fn respond(status: u16, body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Checks `Sluice-Signature: t=<unix>,v1=<hex>[,v1=…]` against the secret: any `v1` may match.
fn verify(secret: &str, header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut macs = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = Some(value.to_string()),
            Some(("v1", value)) => macs.push(value.to_string()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = hex::encode(mac.finalize().into_bytes());
    macs.contains(&expected)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_signature_verifies_only_with_its_secret_and_body() {
        use hmac::{Hmac, KeyInit, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").expect("key");
        mac.update(b"17.{}");
        let good = format!("t=17,v1={}", hex::encode(mac.finalize().into_bytes()));
        assert!(super::verify("s3cret", &good, b"{}"));
        assert!(!super::verify("other", &good, b"{}"));
        assert!(!super::verify("s3cret", &good, b"{ }"));
    }
}
