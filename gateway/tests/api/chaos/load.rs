//! The load of a chaos run: enqueues of distinct subjects over both gateways at a steady rate
//! (plus bursts on demand), a second request key for some subjects, deliberate replays, and
//! ticket polls. Every answer is recorded with its request key and its times.
//!
//! Like a real client, an enqueue whose outcome is unknown (`503 UNAVAILABLE`, a connection
//! error, a timeout) is sent again with the same request key, alternating gateways (a load
//! balancer would), a few times; its final outcome is what counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub(super) type Client = HttpClient<HttpConnector, Full<Bytes>>;

/// A client with a short connect timeout, without Nagle's delay.
pub(super) fn client() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    HttpClient::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .pool_idle_timeout(Duration::from_secs(5))
        .build(connector)
}

/// What a request got: an HTTP answer, or none (connection refused or cut, timeout).
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Http {
        status: u16,
        /// The error code, or "" for a success.
        code: String,
        retry_after_ms: Option<u64>,
        body: Value,
    },
    Failed(String),
}

/// One request, answered within `timeout` or [`Answer::Failed`].
pub(super) async fn send(
    client: &Client,
    method: Method,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Answer {
    let mut builder = Request::builder().method(method).uri(url);
    if let Some(bearer) = bearer {
        builder = builder.header("authorization", format!("Bearer {bearer}"));
    }
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let request = builder.body(Full::new(bytes)).expect("request");
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, bytes))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Answer::Failed(format!("no answer within {timeout:?}")),
        Ok(Err(error)) => Answer::Failed(error),
        Ok(Ok((status, bytes))) => {
            let body: Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
            Answer::Http {
                status,
                code: body["error"]["code"].as_str().unwrap_or("").to_string(),
                retry_after_ms: body["error"]["retry_after_ms"].as_u64(),
                body,
            }
        }
    }
}

/// How one HTTP request ended, as the tables count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Class {
    /// 2xx.
    Success,
    /// A definite answer that is not a success: 4xx, 429, a 503 with a code on a read, or a
    /// 503 other than `UNAVAILABLE` on a write.
    Refused,
    /// A write whose outcome the caller cannot know: `503 UNAVAILABLE`, no answer at all.
    Unknown,
}

/// One HTTP request of the load.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    pub(super) write: bool,
    pub(super) gateway: usize,
    /// Since the start of the run.
    pub(super) started: Duration,
    pub(super) finished: Duration,
    /// `None`: no HTTP answer.
    pub(super) status: Option<u16>,
    pub(super) code: String,
    pub(super) failure: String,
}

impl Attempt {
    pub(super) fn class(&self) -> Class {
        match self.status {
            None => Class::Unknown,
            Some(200..=299) => Class::Success,
            Some(503) if self.write && self.code == "UNAVAILABLE" => Class::Unknown,
            Some(_) => Class::Refused,
        }
    }

    /// Whether it overlaps `[from, to]`.
    pub(super) fn overlaps(&self, from: Duration, to: Duration) -> bool {
        self.started <= to && self.finished >= from
    }
}

/// The final outcome of one intent (a subject and a request key) after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// `202`: a new command.
    Accepted,
    /// `200`: the command of this key, deduplicated.
    Replayed,
    /// A definite refusal: (status, code).
    Refused(u16, String),
    /// Every attempt's outcome was unknown.
    Unknown,
}

/// One intent and every attempt it took.
#[derive(Debug, Clone)]
pub(super) struct Intent {
    pub(super) subject: String,
    pub(super) key: String,
    /// A deliberate replay of a key that was acknowledged before.
    pub(super) replay_of: Option<Uuid>,
    pub(super) attempts: Vec<Attempt>,
    pub(super) outcome: Outcome,
    pub(super) command_id: Option<Uuid>,
    /// The status the final answer named (`accepted`, or the current one of a replay).
    pub(super) answered_status: Option<String>,
}

impl Intent {
    pub(super) fn started(&self) -> Duration {
        self.attempts.first().map(|a| a.started).unwrap_or_default()
    }

    /// When the acknowledgement (`202`/`200`) arrived.
    pub(super) fn acknowledged_at(&self) -> Option<Duration> {
        match self.outcome {
            Outcome::Accepted | Outcome::Replayed => self.attempts.last().map(|a| a.finished),
            _ => None,
        }
    }
}

/// One ticket poll and what it said.
#[derive(Debug, Clone)]
pub(super) struct Poll {
    pub(super) attempt: Attempt,
    pub(super) command_id: Uuid,
    pub(super) status: Option<String>,
}

/// The shape of the load.
#[derive(Debug, Clone)]
pub(super) struct LoadConfig {
    pub(super) subjects_per_second: u32,
    /// Intents in flight at most (the spawner waits beyond it, like a saturated client pool).
    pub(super) max_concurrency: usize,
    /// Every n-th subject also sends a second request key (a second command).
    pub(super) second_every: u64,
    /// Every n-th subject replays its acknowledged key once (same command, `200`).
    pub(super) replay_every: u64,
    /// Attempts per intent at most.
    pub(super) max_attempts: u32,
    pub(super) pollers: usize,
    pub(super) polls_per_second: u32,
    pub(super) offers: usize,
}

/// What every load task shares.
pub(super) struct Shared {
    pub(super) clock: Instant,
    pub(super) config: LoadConfig,
    client: Client,
    bases: Vec<Arc<RwLock<String>>>,
    credential: String,
    pub(super) offers: Vec<String>,
    next_subject: AtomicU64,
    burst: AtomicU64,
    stop: AtomicBool,
    pub(super) intents: Mutex<Vec<Intent>>,
    pub(super) polls: Mutex<Vec<Poll>>,
    /// Acknowledged commands and their tickets, for the pollers and the position checks.
    pub(super) tickets: RwLock<Vec<(Uuid, String)>>,
    /// The latest start (µs since the clock) of an attempt that got a `202`.
    accepted_start_us: AtomicU64,
}

impl Shared {
    pub(super) fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn base(&self, gateway: usize) -> String {
        self.bases[gateway % self.bases.len()]
            .read()
            .expect("base lock")
            .clone()
    }

    /// Whether an enqueue that started at or after `since` was accepted (`202`).
    pub(super) fn accepted_since(&self, since: Duration) -> bool {
        self.accepted_start_us.load(Ordering::Relaxed) >= since.as_micros() as u64
    }

    pub(super) fn ticket_map(&self) -> HashMap<Uuid, String> {
        self.tickets
            .read()
            .expect("tickets lock")
            .iter()
            .cloned()
            .collect()
    }

    /// Polls one ticket on `gateway`; the answer is recorded too.
    pub(super) async fn poll(&self, gateway: usize, command_id: Uuid, ticket: &str) -> Answer {
        let url = format!("{}/v1/tickets/{ticket}", self.base(gateway));
        let started = self.now();
        let answer = send(
            &self.client,
            Method::GET,
            &url,
            None,
            None,
            Duration::from_secs(10),
        )
        .await;
        let attempt = attempt_of(false, gateway, started, self.now(), &answer);
        let status = match &answer {
            Answer::Http { body, .. } => body["data"]["status"].as_str().map(str::to_string),
            Answer::Failed(_) => None,
        };
        self.polls.lock().expect("polls lock").push(Poll {
            attempt,
            command_id,
            status,
        });
        answer
    }

    /// Sends one intent until its outcome is known or its attempts are spent; records it.
    async fn enqueue(
        &self,
        subject: &str,
        key: &str,
        offer: &str,
        first_gateway: usize,
        replay_of: Option<Uuid>,
    ) -> Intent {
        let body = json!({"request_key": key, "subject": subject, "input": {"offer": offer}});
        let mut attempts = Vec::new();
        let mut outcome = Outcome::Unknown;
        let (mut command_id, mut answered_status, mut ticket) = (None, None, None);
        for n in 0..self.config.max_attempts {
            let gateway = first_gateway + n as usize;
            let url = format!("{}/v1/commands/claim:enqueue", self.base(gateway));
            let started = self.now();
            let answer = send(
                &self.client,
                Method::POST,
                &url,
                Some(&self.credential),
                Some(&body),
                Duration::from_secs(15),
            )
            .await;
            let attempt = attempt_of(true, gateway, started, self.now(), &answer);
            let class = attempt.class();
            attempts.push(attempt);
            let mut wait = Duration::from_millis(100 << n.min(3));
            match answer {
                Answer::Http {
                    status: status @ (200 | 202),
                    body,
                    ..
                } => {
                    let data = &body["data"];
                    command_id = data["command_id"].as_str().and_then(|id| id.parse().ok());
                    answered_status = data["status"].as_str().map(str::to_string);
                    ticket = data["ticket"].as_str().map(str::to_string);
                    outcome = if status == 202 {
                        // Replays can be answered by Redis alone; only a 202 shows that
                        // enqueues are accepted again.
                        self.accepted_start_us
                            .fetch_max(started.as_micros() as u64, Ordering::Relaxed);
                        Outcome::Accepted
                    } else {
                        Outcome::Replayed
                    };
                    break;
                }
                Answer::Http {
                    status,
                    code,
                    retry_after_ms,
                    ..
                } => {
                    // 429 says "retry later with the same key"; 503 UNAVAILABLE is unknown.
                    if class != Class::Unknown && status != 429 {
                        outcome = Outcome::Refused(status, code);
                        break;
                    }
                    outcome = if class == Class::Unknown {
                        Outcome::Unknown
                    } else {
                        Outcome::Refused(status, code)
                    };
                    if let Some(ms) = retry_after_ms {
                        wait = wait.max(Duration::from_millis(ms.min(2_000)));
                    }
                }
                Answer::Failed(_) => outcome = Outcome::Unknown,
            }
            if n + 1 < self.config.max_attempts {
                let jitter = rand::random::<f64>() * 0.5 + 0.75;
                tokio::time::sleep(wait.mul_f64(jitter)).await;
            }
        }
        if let (Some(id), Some(ticket)) = (command_id, ticket) {
            self.tickets
                .write()
                .expect("tickets lock")
                .push((id, ticket));
        }
        let intent = Intent {
            subject: subject.to_string(),
            key: key.to_string(),
            replay_of,
            attempts,
            outcome,
            command_id,
            answered_status,
        };
        self.intents
            .lock()
            .expect("intents lock")
            .push(intent.clone());
        intent
    }

    /// Subject `i`: its first key; a replay of it now and then; a second key now and then.
    async fn subject(&self, i: u64) {
        let subject = format!("s-{i}");
        let offer = self.offers[i as usize % self.offers.len()].clone();
        let gateway = i as usize;
        let first = self
            .enqueue(&subject, &format!("k-{i}-a"), &offer, gateway, None)
            .await;
        if i.is_multiple_of(self.config.replay_every)
            && let Some(id) = first.command_id
        {
            self.enqueue(&subject, &first.key, &offer, gateway + 1, Some(id))
                .await;
        }
        if i.is_multiple_of(self.config.second_every) {
            self.enqueue(&subject, &format!("k-{i}-b"), &offer, gateway + 1, None)
                .await;
        }
    }
}

fn attempt_of(
    write: bool,
    gateway: usize,
    started: Duration,
    finished: Duration,
    answer: &Answer,
) -> Attempt {
    let (status, code, failure) = match answer {
        Answer::Http { status, code, .. } => (Some(*status), code.clone(), String::new()),
        Answer::Failed(failure) => (None, String::new(), failure.clone()),
    };
    Attempt {
        write,
        gateway: gateway % 2,
        started,
        finished,
        status,
        code,
        failure,
    }
}

/// A running load; [`Load::stop`] ends it and waits for every intent in flight.
pub(super) struct Load {
    pub(super) shared: Arc<Shared>,
    spawner: JoinHandle<Vec<JoinHandle<()>>>,
    pollers: Vec<JoinHandle<()>>,
}

impl Load {
    pub(super) fn start(
        config: LoadConfig,
        clock: Instant,
        client: Client,
        bases: Vec<Arc<RwLock<String>>>,
        credential: String,
    ) -> Load {
        let offers = (0..config.offers)
            .map(|_| Uuid::new_v4().to_string())
            .collect();
        let shared = Arc::new(Shared {
            clock,
            config: config.clone(),
            client,
            bases,
            credential,
            offers,
            next_subject: AtomicU64::new(0),
            burst: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            intents: Mutex::new(Vec::new()),
            polls: Mutex::new(Vec::new()),
            tickets: RwLock::new(Vec::new()),
            accepted_start_us: AtomicU64::new(0),
        });
        let spawner = tokio::spawn(spawn_subjects(shared.clone()));
        let pollers = (0..config.pollers)
            .map(|p| tokio::spawn(poll_tickets(shared.clone(), p)))
            .collect();
        Load {
            shared,
            spawner,
            pollers,
        }
    }

    /// Adds `n` subjects at once, on top of the steady rate.
    pub(super) fn burst(&self, n: u64) {
        self.shared.burst.fetch_add(n, Ordering::Relaxed);
    }

    /// Stops the spawner and the pollers; waits until every intent in flight has its outcome.
    pub(super) async fn stop(self) -> Arc<Shared> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for task in self.spawner.await.expect("load spawner") {
            task.await.expect("load task");
        }
        for poller in self.pollers {
            poller.await.expect("poller");
        }
        self.shared
    }
}

/// Starts subjects at the steady rate (and the bursts asked for), at most `max_concurrency`
/// in flight.
async fn spawn_subjects(shared: Arc<Shared>) -> Vec<JoinHandle<()>> {
    let slots = Arc::new(Semaphore::new(shared.config.max_concurrency));
    let every = Duration::from_secs_f64(1.0 / f64::from(shared.config.subjects_per_second));
    let mut tasks = Vec::new();
    let mut next = tokio::time::Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let burst = shared.burst.swap(0, Ordering::Relaxed);
        for _ in 0..=burst {
            let slot = slots.clone().acquire_owned().await.expect("semaphore");
            let i = shared.next_subject.fetch_add(1, Ordering::Relaxed);
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                shared.subject(i).await;
                drop(slot);
            }));
        }
        next += every;
        let now = tokio::time::Instant::now();
        if next < now {
            // Behind (the slots were full): do not make up for it all at once.
            next = now;
        }
        tokio::time::sleep_until(next).await;
    }
    tasks
}

/// Polls random acknowledged tickets on random gateways.
async fn poll_tickets(shared: Arc<Shared>, poller: usize) {
    let per_poller = f64::from(shared.config.polls_per_second) / shared.config.pollers as f64;
    let every = Duration::from_secs_f64(1.0 / per_poller.max(0.1));
    let mut turn = poller;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(every).await;
        let pick = {
            let tickets = shared.tickets.read().expect("tickets lock");
            if tickets.is_empty() {
                None
            } else {
                let i = (rand::random::<u64>() % tickets.len() as u64) as usize;
                Some(tickets[i].clone())
            }
        };
        if let Some((id, ticket)) = pick {
            turn += 1;
            shared.poll(turn, id, &ticket).await;
        }
    }
}
