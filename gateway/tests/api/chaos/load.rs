//! The load of a chaos run: enqueues of distinct subjects over both gateways at a steady rate
//! (plus bursts on demand): quota `claim`s (a second request key for some subjects, deliberate
//! replays) and webhook `call`s (see [`super::calls`]: replays and cancels), and ticket polls.
//! Every answer is recorded with its request key and its times.
//!
//! Like a real client, an enqueue whose outcome is unknown (`503 UNAVAILABLE`, a connection
//! error, a timeout) is sent again with the same request key, alternating gateways (a load
//! balancer would), a few times; its final outcome is what counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub(super) use super::http::{Answer, Client, send};

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
    /// `claim` or `call`.
    pub(super) command: &'static str,
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

/// A cancel and what it answered, after retries of unknown outcomes.
#[derive(Debug, Clone)]
pub(super) struct Cancel {
    pub(super) command_id: Uuid,
    pub(super) attempts: Vec<Attempt>,
    /// The status of the record it returned (None: no definite answer).
    pub(super) answered_status: Option<String>,
}

/// The shape of the load.
#[derive(Debug, Clone)]
pub(super) struct LoadConfig {
    /// `claim` subjects per second.
    pub(super) subjects_per_second: u32,
    /// `call` subjects per second.
    pub(super) calls_per_second: u32,
    /// Providers, and accounts per provider, of the `call`s.
    pub(super) providers: usize,
    pub(super) accounts: usize,
    /// Every n-th `call` is cancelled as soon as it is accepted (while it most likely waits).
    pub(super) cancel_every: u64,
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
    pub(super) client: Client,
    bases: Vec<Arc<RwLock<String>>>,
    pub(super) credential: String,
    pub(super) offers: Vec<String>,
    next_subject: AtomicU64,
    next_call: AtomicU64,
    burst: AtomicU64,
    call_burst: AtomicU64,
    pub(super) stop: AtomicBool,
    pub(super) intents: Mutex<Vec<Intent>>,
    pub(super) polls: Mutex<Vec<Poll>>,
    pub(super) cancels: Mutex<Vec<Cancel>>,
    /// Acknowledged commands and their tickets, for the pollers and the position checks.
    pub(super) tickets: RwLock<Vec<(Uuid, String)>>,
    /// The latest start (µs since the clock) of an attempt that got a `202`.
    accepted_start_us: AtomicU64,
}

impl Shared {
    pub(super) fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    pub(super) fn base(&self, gateway: usize) -> String {
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

    /// Sends one intent of `command` until its outcome is known or its attempts are spent;
    /// records it.
    pub(super) async fn enqueue(
        &self,
        command: &'static str,
        subject: &str,
        key: &str,
        input: Value,
        first_gateway: usize,
        replay_of: Option<Uuid>,
    ) -> Intent {
        let body = json!({"request_key": key, "subject": subject, "input": input});
        let mut attempts = Vec::new();
        let mut outcome = Outcome::Unknown;
        let (mut command_id, mut answered_status, mut ticket) = (None, None, None);
        for n in 0..self.config.max_attempts {
            let gateway = first_gateway + n as usize;
            let url = format!("{}/v1/commands/{command}:enqueue", self.base(gateway));
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
            command,
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
        let input = json!({ "offer": offer });
        let first = self
            .enqueue(
                "claim",
                &subject,
                &format!("k-{i}-a"),
                input.clone(),
                gateway,
                None,
            )
            .await;
        if i.is_multiple_of(self.config.replay_every)
            && let Some(id) = first.command_id
        {
            self.enqueue(
                "claim",
                &subject,
                &first.key,
                input.clone(),
                gateway + 1,
                Some(id),
            )
            .await;
        }
        if i.is_multiple_of(self.config.second_every) {
            self.enqueue(
                "claim",
                &subject,
                &format!("k-{i}-b"),
                input,
                gateway + 1,
                None,
            )
            .await;
        }
    }
}

pub(super) fn attempt_of(
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
    spawners: Vec<JoinHandle<Vec<JoinHandle<()>>>>,
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
            next_call: AtomicU64::new(0),
            burst: AtomicU64::new(0),
            call_burst: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            intents: Mutex::new(Vec::new()),
            polls: Mutex::new(Vec::new()),
            cancels: Mutex::new(Vec::new()),
            tickets: RwLock::new(Vec::new()),
            accepted_start_us: AtomicU64::new(0),
        });
        let spawners = vec![
            tokio::spawn(spawn_subjects(shared.clone(), Kind::Claim)),
            tokio::spawn(spawn_subjects(shared.clone(), Kind::Call)),
        ];
        let pollers = (0..config.pollers)
            .map(|p| tokio::spawn(poll_tickets(shared.clone(), p)))
            .collect();
        Load {
            shared,
            spawners,
            pollers,
        }
    }

    /// Adds `claims` claim subjects and `calls` call subjects at once, on top of the steady
    /// rates.
    pub(super) fn burst(&self, claims: u64, calls: u64) {
        self.shared.burst.fetch_add(claims, Ordering::Relaxed);
        self.shared.call_burst.fetch_add(calls, Ordering::Relaxed);
    }

    /// Stops the spawners and the pollers; waits until every intent in flight has its outcome.
    pub(super) async fn stop(self) -> Arc<Shared> {
        self.shared.stop.store(true, Ordering::Relaxed);
        for spawner in self.spawners {
            for task in spawner.await.expect("load spawner") {
                task.await.expect("load task");
            }
        }
        for poller in self.pollers {
            poller.await.expect("poller");
        }
        self.shared
    }
}

/// The two kinds of subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Claim,
    Call,
}

/// Starts subjects of `kind` at their steady rate (and the bursts asked for), at most
/// `max_concurrency` of each kind in flight.
async fn spawn_subjects(shared: Arc<Shared>, kind: Kind) -> Vec<JoinHandle<()>> {
    let slots = Arc::new(Semaphore::new(shared.config.max_concurrency));
    let rate = match kind {
        Kind::Claim => shared.config.subjects_per_second,
        Kind::Call => shared.config.calls_per_second,
    };
    let every = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let (counter, bursts) = match kind {
        Kind::Claim => (&shared.next_subject, &shared.burst),
        Kind::Call => (&shared.next_call, &shared.call_burst),
    };
    let mut tasks = Vec::new();
    let mut next = tokio::time::Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let burst = bursts.swap(0, Ordering::Relaxed);
        for _ in 0..=burst {
            let slot = slots.clone().acquire_owned().await.expect("semaphore");
            let i = counter.fetch_add(1, Ordering::Relaxed);
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                match kind {
                    Kind::Claim => shared.subject(i).await,
                    Kind::Call => shared.call_subject(i).await,
                }
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
