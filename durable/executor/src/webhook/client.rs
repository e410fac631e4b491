//! One webhook request and what its answer means. The classification is the contract of
//! API.md: `200` decides, `202` means running, `429`/`5xx`/timeouts/connection errors are worth
//! another attempt, any other status fails the command.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::{Method, Request, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::fenced_body::{FencedBody, is_fence_closed};
use super::signature::WebhookSecrets;
use crate::fence::Fence;
use sluice_durable::http_client::{HttpsClient, Outbound};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::end::{Reported, is_error_code};
use sluice_model::CommandStatus;

/// Largest answer body read from a backend; a longer one is a broken answer.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Decided(Reported),
    /// `202`: the backend runs it and reports through `:complete`.
    Running,
    /// Not sent: the attempt's fence closed before the request went out (its lease may have
    /// lapsed, and another attempt may own the command).
    Withheld,
    /// Worth another attempt. `in_doubt`: the request may have reached the backend and nobody
    /// knows what it did (a timeout, a connection lost after sending).
    Retry {
        retry_after: Option<Duration>,
        in_doubt: bool,
        reason: String,
    },
}

/// One request: where, signed with what, and how long it may take.
pub struct Delivery<'a> {
    pub url: &'a str,
    pub secrets: &'a WebhookSecrets,
    pub command_id: CommandId,
    pub body: Bytes,
    pub timeout: Duration,
    /// The attempt's fence: the request goes out only while it is open.
    pub fence: &'a Fence,
    /// The command's stored `traceparent`, sent on when traces are not exported.
    pub trace_parent: Option<&'a str>,
}

#[derive(Clone)]
pub struct WebhookClient {
    client: HttpsClient<FencedBody>,
    outbound: Outbound,
}

impl WebhookClient {
    pub fn new(outbound: &Outbound) -> Self {
        Self {
            client: outbound.client(),
            outbound: outbound.clone(),
        }
    }

    /// Sends one signed attempt and classifies its answer; never fails: every failure is an
    /// answer.
    pub async fn deliver(&self, delivery: Delivery<'_>) -> Answer {
        // The call's own span, child of the attempt's: its context is the `traceparent` the
        // backend continues.
        let span = tracing::info_span!(
            "webhook",
            command_id = %delivery.command_id,
            http.request.method = "POST",
            url.full = %delivery.url,
            http.response.status_code = tracing::field::Empty,
        );
        let request = match build_request(&delivery) {
            Ok(mut request) => {
                self.outbound.decorate(&mut request);
                crate::tracing_context::inject(&span, delivery.trace_parent, request.headers_mut());
                request
            }
            Err(reason) => {
                return Answer::Decided(failed("WEBHOOK_URL_INVALID", reason));
            }
        };
        let exchange = async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes());
            Ok::<_, hyper_util::client::legacy::Error>((status, retry_after, body))
        };
        let exchanged = tracing::Instrument::instrument(
            tokio::time::timeout(delivery.timeout, exchange),
            span.clone(),
        )
        .await;
        if let Ok(Ok((status, _, _))) = &exchanged {
            span.record("http.response.status_code", status.as_u16());
        }
        match exchanged {
            Err(_) => Answer::Retry {
                retry_after: None,
                in_doubt: true,
                reason: format!("no answer within {} ms", delivery.timeout.as_millis()),
            },
            Ok(Err(error)) if is_fence_closed(&error) => Answer::Withheld,
            Ok(Err(error)) => Answer::Retry {
                retry_after: None,
                // A connection that never opened carried nothing; any later failure may have
                // delivered the request.
                in_doubt: !error.is_connect(),
                reason: format!("request failed: {}", with_causes(&error)),
            },
            Ok(Ok((status, retry_after, body))) => classify(status, retry_after, body),
        }
    }
}

/// An error and what caused it, outermost first: hyper's "client error (Connect)" says
/// nothing until its causes say which (a refused connection, a certificate no root trusts, a
/// proxy that refused the tunnel).
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut said = error.to_string();
    for inner in super::fenced_body::causes(error).skip(1) {
        let text = inner.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
    }
    said
}

fn build_request(delivery: &Delivery<'_>) -> Result<Request<FencedBody>, String> {
    let signature = delivery
        .secrets
        .header(chrono::Utc::now().timestamp(), &delivery.body);
    Request::builder()
        .method(Method::POST)
        .uri(delivery.url)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header("Idempotency-Key", delivery.command_id.to_string())
        .header("Sluice-Signature", signature)
        .body(FencedBody::new(
            delivery.body.clone(),
            delivery.fence.clone(),
        ))
        .map_err(|e| format!("cannot build a request to {}: {e}", delivery.url))
}

fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Result<Bytes, Box<dyn std::error::Error + Send + Sync>>,
) -> Answer {
    match status.as_u16() {
        200 => match body {
            Ok(body) => Answer::Decided(decision_of(&body)),
            // The backend decided but its answer could not be read whole: nobody knows what.
            Err(error) => Answer::Retry {
                retry_after: None,
                in_doubt: true,
                reason: format!("200 answer unreadable: {error}"),
            },
        },
        202 => Answer::Running,
        429 => Answer::Retry {
            retry_after,
            in_doubt: false,
            reason: "backend answered 429".into(),
        },
        500..=599 => Answer::Retry {
            retry_after,
            in_doubt: false,
            reason: format!("backend answered {}", status.as_u16()),
        },
        code => Answer::Decided(failed(
            "WEBHOOK_REFUSED",
            format!("backend answered {code}"),
        )),
    }
}

/// The `200` body: `{"outcome": "succeeded"|"rejected", "result": {…}?, "error_code": "…"?,
/// "invalidate": [...]?}`. A body that says neither is a failed command: the backend broke the
/// contract, and guessing would be worse. A rejection's `error_code` follows `:complete`'s rule
/// ([`is_error_code`]); one that does not (empty, too long, control characters) is dropped
/// for `REJECTED` and logged: the backend has decided, only its code is unusable.
fn decision_of(body: &[u8]) -> Reported {
    #[derive(Deserialize)]
    struct Body {
        outcome: String,
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        error_code: Option<String>,
        #[serde(default)]
        invalidate: Option<Value>,
    }
    let Ok(parsed) = serde_json::from_slice::<Body>(body) else {
        return failed(
            "WEBHOOK_BAD_ANSWER",
            "backend answered 200 with a body that is not {\"outcome\": …}".into(),
        );
    };
    let result = parsed.result.filter(Value::is_object).filter(|result| {
        let storable = !has_nul(result);
        if !storable {
            tracing::warn!(
                "a webhook answer's result held U+0000, which PostgreSQL cannot store; it is dropped"
            );
        }
        storable
    });
    let invalidate = dependencies(parsed.invalidate.as_ref());
    match CommandStatus::parse(&parsed.outcome) {
        Some(CommandStatus::Succeeded) => Reported {
            status: CommandStatus::Succeeded,
            result: Some(result.unwrap_or_else(|| Value::Object(Default::default()))),
            error: None,
            invalidate,
        },
        Some(CommandStatus::Rejected) => Reported {
            status: CommandStatus::Rejected,
            error: Some((
                rejection_code(parsed.error_code),
                "the backend rejected the command".into(),
            )),
            result,
            invalidate,
        },
        _ => failed(
            "WEBHOOK_BAD_ANSWER",
            format!("backend answered 200 with outcome {:?}", parsed.outcome),
        ),
    }
}

/// Whether U+0000 is in any string or key of `value` (`jsonb` cannot hold one).
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

fn rejection_code(code: Option<String>) -> String {
    match code {
        Some(code) if is_error_code(&code) => code,
        Some(_) => {
            tracing::warn!(
                "a webhook answer's error_code was unusable (1 to 64 printable ASCII characters are taken); REJECTED is recorded"
            );
            "REJECTED".into()
        }
        None => "REJECTED".into(),
    }
}

fn failed(code: &str, message: String) -> Reported {
    Reported {
        status: CommandStatus::Failed,
        result: None,
        error: Some((code.into(), message)),
        invalidate: Vec::new(),
    }
}

/// The answer's `invalidate` list: at most 100 strings of 1 to 200 characters (no U+0000). The backend has
/// already acted, so a malformed list does not fail the command: what is unusable is dropped
/// (and logged), and those views expire by age.
fn dependencies(list: Option<&Value>) -> Vec<String> {
    let Some(list) = list else {
        return Vec::new();
    };
    let usable: Vec<String> = list
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .filter(|d| !d.is_empty() && d.chars().count() <= 200 && !d.contains('\0'))
                .take(100)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if list
        .as_array()
        .is_none_or(|items| items.len() != usable.len())
    {
        tracing::warn!(
            "a webhook answer's invalidate list was partly unusable; only strings of 1 to 200 characters, at most 100, are taken"
        );
    }
    usable
}

/// What an answer of `status` with `Retry-After: retry_after` and `body` comes to, for the
/// coverage-guided fuzz targets (`fuzz/`, feature `fuzzing`): the header parser and the
/// classification of the answer, exactly as [`WebhookClient::deliver`] runs them.
#[cfg(feature = "fuzzing")]
pub fn classify_for_fuzzing(status: u16, retry_after: &str, body: &[u8]) -> Option<Answer> {
    let status = StatusCode::from_u16(status).ok()?;
    let retry_after = parse_retry_after(retry_after);
    Some(classify(
        status,
        retry_after,
        Ok(Bytes::copy_from_slice(body)),
    ))
}

/// `Retry-After` as delay-seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn answers_are_classified_as_the_contract_says() {
        let ok = |s: &str| Ok(Bytes::from(s.to_owned()));
        assert_eq!(
            classify(
                StatusCode::OK,
                None,
                ok(r#"{"outcome":"succeeded","result":{"a":1}}"#)
            ),
            Answer::Decided(Reported {
                status: CommandStatus::Succeeded,
                result: Some(serde_json::json!({"a": 1})),
                error: None,
                invalidate: Vec::new(),
            })
        );
        let Answer::Decided(named) = classify(
            StatusCode::OK,
            None,
            ok(r#"{"outcome":"succeeded","invalidate":["offer:1","",7,"pool:stock"]}"#),
        ) else {
            panic!("a 200 decides")
        };
        assert_eq!(
            named.status,
            CommandStatus::Succeeded,
            "a bad invalidate list does not fail the command"
        );
        assert_eq!(
            named.invalidate,
            vec!["offer:1".to_string(), "pool:stock".to_string()]
        );
        let Answer::Decided(rejected) = classify(
            StatusCode::OK,
            None,
            ok(r#"{"outcome":"rejected","error_code":"NO_CREDIT"}"#),
        ) else {
            panic!("a 200 decides")
        };
        assert_eq!(rejected.status, CommandStatus::Rejected);
        assert_eq!(rejected.error.map(|e| e.0).as_deref(), Some("NO_CREDIT"));
        // `:complete`'s rule for the code: an unusable one is recorded as REJECTED.
        for code in [
            r#""""#,
            r#""NO CREDIT""#,
            &format!("\"{}\"", "X".repeat(65)),
        ] {
            let body = format!(r#"{{"outcome":"rejected","error_code":{code}}}"#);
            let Answer::Decided(unusable) = classify(StatusCode::OK, None, ok(&body)) else {
                panic!("a 200 decides")
            };
            assert_eq!(unusable.status, CommandStatus::Rejected);
            assert_eq!(
                unusable.error.map(|e| e.0).as_deref(),
                Some("REJECTED"),
                "{body}"
            );
        }
        let Answer::Decided(bad) = classify(StatusCode::OK, None, ok("[]")) else {
            panic!("a 200 decides")
        };
        assert_eq!(bad.status, CommandStatus::Failed);
        assert_eq!(
            classify(StatusCode::ACCEPTED, None, ok("")),
            Answer::Running
        );
        assert!(matches!(
            classify(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(2)), ok("")),
            Answer::Retry { retry_after: Some(d), in_doubt: false, .. } if d == Duration::from_secs(2)
        ));
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, None, ok("")),
            Answer::Retry {
                in_doubt: false,
                ..
            }
        ));
        let Answer::Decided(refused) = classify(StatusCode::NOT_FOUND, None, ok("")) else {
            panic!("a 4xx decides")
        };
        assert_eq!(refused.status, CommandStatus::Failed);
    }
}
