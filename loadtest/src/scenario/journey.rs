//! The part every caller shares once it has decided to act: enqueue (retrying explicit,
//! retryable refusals with the same request key, honouring `Retry-After`), poll the ticket at
//! the pace the gateway advises, then read the authoritative result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use rand::Rng;
use serde_json::Value;

use crate::api::{Exchange, Outcome, command_status, exchange_with, is_terminal};
use crate::driver::HttpClient;
use crate::record::{Ending, Recorder, Wait};
use sluice_durable::ids::CommandId;
use sluice_model::CommandStatus;

/// What every journey of a run shares.
pub struct Context {
    pub client: HttpClient,
    pub base: String,
    pub recorder: Arc<Recorder>,
    /// Retry explicit retryable refusals (and unknown outcomes) with the same request key.
    pub retry: bool,
    /// How long a caller keeps trying from its arrival before it gives up.
    pub patience: Duration,
}

/// One caller's intent.
pub struct Intent<'a> {
    pub command: &'a str,
    /// Subject token or credential.
    pub bearer: &'a str,
    /// The enqueue body (carries the request key, fixed for every retry).
    pub body: String,
    pub arrived: Instant,
}

/// The longest random part of a retry's wait.
const MAX_JITTER_MS: u64 = 30_000;

/// Endpoint names in the report.
pub const ENQUEUE: &str = "enqueue";
pub const POLL: &str = "poll ticket";
pub const RESULT: &str = "read result";

impl Context {
    fn give_up_at(&self, arrived: Instant) -> Instant {
        arrived + self.patience
    }

    /// Sleeps for the advised wait plus up to a second of jitter, unless that passes the
    /// caller's patience; `false` when the caller gives up instead.
    ///
    /// The jitter's ceiling doubles with each retry of the same step (1 s, 2 s, 4 s … up to
    /// 30 s), as the reference's client SDK backs off: people refused together then spread out
    /// instead of returning together every second.
    ///
    /// `--no-retry` turns this off: the caller takes the first answer to what it asked to do.
    pub(super) async fn wait_to_retry(
        &self,
        arrived: Instant,
        advice: Option<Duration>,
        retry: u32,
    ) -> bool {
        if !self.retry {
            return false;
        }
        let Some(wait) = self.backoff(arrived, advice, retry) else {
            return false;
        };
        self.recorder.retry();
        tokio::time::sleep(wait).await;
        true
    }

    /// Sleeps as [`Self::wait_to_retry`] does before reading again what the gateway already
    /// decided (a command's result), `--no-retry` or not: a read refused by a budget leaves
    /// nothing undecided, and a caller asks again after the advised wait, as it polls. Not
    /// counted among the retries, which are the admission's.
    async fn wait_to_read_again(
        &self,
        arrived: Instant,
        advice: Option<Duration>,
        retry: u32,
    ) -> bool {
        let Some(wait) = self.backoff(arrived, advice, retry) else {
            return false;
        };
        tokio::time::sleep(wait).await;
        true
    }

    /// The advised wait plus the jitter of the `retry`th retry; None when it passes the
    /// caller's patience.
    fn backoff(&self, arrived: Instant, advice: Option<Duration>, retry: u32) -> Option<Duration> {
        let ceiling_ms = (1_000u64 << retry.min(5)).min(MAX_JITTER_MS);
        let jitter = Duration::from_millis(rand::rng().random_range(0..ceiling_ms));
        let wait = advice.unwrap_or(Duration::from_secs(1)) + jitter;
        (Instant::now() + wait <= self.give_up_at(arrived)).then_some(wait)
    }

    pub(super) async fn call(
        &self,
        endpoint: &'static str,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<String>,
    ) -> Exchange {
        self.call_with(endpoint, method, path, bearer, body, &[])
            .await
    }

    /// [`Self::call`] with more headers.
    pub(super) async fn call_with(
        &self,
        endpoint: &'static str,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Exchange {
        let uri = format!("{}{path}", self.base);
        let answer = exchange_with(&self.client, method, &uri, bearer, body, headers).await;
        self.recorder.exchange(endpoint, &answer);
        answer
    }

    /// The whole journey from the enqueue on; records the caller's ending. Returns the
    /// command's `result` when it succeeded: a reserved unit's holder acts on it next.
    pub async fn act(&self, intent: Intent<'_>) -> Option<Value> {
        let (ending, result) = match self.act_inner(&intent).await {
            Ok((id, record)) => self.ending_of(id, record),
            Err(ending) => (ending, None),
        };
        self.recorder.ending(intent.arrived, ending);
        result
    }

    /// The ending a terminal record read means, and the result of a success.
    fn ending_of(&self, id: CommandId, mut record: Value) -> (Ending, Option<Value>) {
        // An answer without a status of the API leaves the outcome unknown.
        let Some(status) = command_status(&record) else {
            return (Ending::Unknown, None);
        };
        self.recorder.terminal_seen(id, status);
        if status == CommandStatus::Succeeded {
            let result = record.get_mut("result").map(Value::take);
            return (Ending::Succeeded, result);
        }
        let code = record
            .pointer("/error/code")
            .and_then(Value::as_str)
            .map_or_else(|| status.as_str().to_uppercase(), str::to_string);
        (Ending::Rejected(code), None)
    }

    /// The command's id and its terminal record, or the ending of a caller who never read one.
    async fn act_inner(&self, intent: &Intent<'_>) -> Result<(CommandId, Value), Ending> {
        let accepted = self.enqueue(intent).await?;
        let Some(id) = accepted
            .get("command_id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<CommandId>().ok())
        else {
            return Err(Ending::Unknown);
        };
        self.recorder.accepted(id);
        let ticket = accepted
            .get("ticket")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (terminal, wait) = self.poll_until_terminal(intent, &ticket, &accepted).await;
        self.recorder.wait(id, wait);
        if !terminal {
            return Err(Ending::Unknown);
        }
        match self.read_result(intent, id).await {
            Some(record) => Ok((id, record)),
            None => Err(Ending::Unknown),
        }
    }

    /// `Ok(data)` of the `202`/`200`, or the ending of a caller who never got in.
    async fn enqueue(&self, intent: &Intent<'_>) -> Result<Value, Ending> {
        let path = format!("/v1/commands/{}:enqueue", intent.command);
        for retry in 0.. {
            let answer = self
                .call(
                    ENQUEUE,
                    Method::POST,
                    &path,
                    Some(intent.bearer),
                    Some(intent.body.clone()),
                )
                .await;
            let (ending, advice) = match answer.outcome {
                Outcome::Success { data, .. } => return Ok(data),
                // The API's own words: the outcome of a write answered UNAVAILABLE may be unknown.
                Outcome::Refused {
                    code, retry_after, ..
                } if code == "UNAVAILABLE" => (Ending::Unknown, retry_after),
                Outcome::Refused {
                    code,
                    retryable: true,
                    retry_after,
                    ..
                } => (Ending::Refused(code), retry_after),
                Outcome::Refused { code, .. } => return Err(Ending::Refused(code)),
                Outcome::Unknown { .. } => (Ending::Unknown, None),
            };
            if !self.wait_to_retry(intent.arrived, advice, retry).await {
                return Err(ending);
            }
        }
        Err(Ending::Unknown)
    }

    /// Polls the ticket, each time after the `poll_after_ms` the last answer advised, until a
    /// terminal status; `false` if the caller's patience ran out first. Also returns how the
    /// caller waited: its first ETA and the pace of its polls against the advice.
    async fn poll_until_terminal(
        &self,
        intent: &Intent<'_>,
        ticket: &str,
        accepted: &Value,
    ) -> (bool, Wait) {
        // A status this client does not know is not terminal: it polls on.
        let mut status = command_status(accepted).unwrap_or(CommandStatus::Accepted);
        let mut advice = poll_after(accepted);
        let path = format!("/v1/tickets/{ticket}");
        let since = Instant::now();
        let mut answered = since;
        let mut wait = Wait {
            accepted_ms: chrono::Utc::now().timestamp_millis(),
            ..Wait::default()
        };
        while !is_terminal(status) {
            if Instant::now() + advice > self.give_up_at(intent.arrived) {
                return (false, wait);
            }
            tokio::time::sleep(advice).await;
            let sent = Instant::now();
            wait.polls += 1;
            wait.advised += advice;
            if sent < answered + advice {
                wait.early += 1;
            }
            let answer = self.call(POLL, Method::GET, &path, None, None).await;
            answered = Instant::now();
            wait.span = answered - since;
            match answer.outcome {
                Outcome::Success { data, .. } => {
                    status = command_status(&data).unwrap_or(CommandStatus::Accepted);
                    advice = poll_after(&data);
                    if wait.first_eta.is_none() {
                        wait.first_eta = first_eta(&data);
                    }
                }
                Outcome::Refused { retry_after, .. } => {
                    advice = retry_after.unwrap_or(Duration::from_secs(1));
                }
                Outcome::Unknown { .. } => advice = Duration::from_secs(1),
            }
        }
        (true, wait)
    }

    /// `GET /v1/commands/{id}`: the full record, read again within the caller's patience after
    /// a retryable refusal (the per-gateway command-read budget answers `503` when spent).
    async fn read_result(&self, intent: &Intent<'_>, id: CommandId) -> Option<Value> {
        let path = format!("/v1/commands/{id}");
        for retry in 0.. {
            let answer = self
                .call(RESULT, Method::GET, &path, Some(intent.bearer), None)
                .await;
            let advice = match answer.outcome {
                Outcome::Success { data, .. } => return Some(data),
                Outcome::Refused {
                    retryable: false, ..
                } => return None,
                Outcome::Refused { retry_after, .. } => retry_after,
                Outcome::Unknown { .. } => None,
            };
            if !self.wait_to_read_again(intent.arrived, advice, retry).await {
                return None;
            }
        }
        None
    }
}

/// A poll's `eta_seconds` with the Redis time its position was observed at (Unix ms; this
/// machine's clock when the answer has none).
fn first_eta(data: &Value) -> Option<(u64, i64)> {
    let eta = data.get("eta_seconds").and_then(Value::as_u64)?;
    let observed = data
        .pointer("/queue/observed_at")
        .and_then(Value::as_str)
        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
        .map_or_else(
            || chrono::Utc::now().timestamp_millis(),
            |at| at.timestamp_millis(),
        );
    Some((eta, observed))
}

fn poll_after(data: &Value) -> Duration {
    Duration::from_millis(
        data.get("poll_after_ms")
            .and_then(Value::as_u64)
            .unwrap_or(1_000),
    )
}
