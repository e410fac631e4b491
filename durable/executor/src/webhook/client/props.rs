//! Properties of the webhook answer parser and of `Retry-After`, on arbitrary answers: every
//! answer is classified without a panic, a `200` decides exactly what its body says (and a body
//! that says nothing usable fails the command), and `Retry-After` is read as seconds or a date.

use super::*;
use proptest::prelude::*;
use serde_json::Map;
use sluice_testkit::props::{json_object, json_value};

/// `200` bodies: any bytes, any JSON, and answers shaped like the contract with any values.
fn answer_body() -> impl Strategy<Value = Vec<u8>> {
    let outcome = prop_oneof![
        3 => proptest::sample::select(&["succeeded", "rejected", "failed", "running"][..])
            .prop_map(Value::from),
        1 => json_value(),
    ];
    let code = prop_oneof![
        "[A-Z_]{1,20}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        json_value(),
    ];
    let invalidate = prop_oneof![
        proptest::collection::vec(
            prop_oneof![".{0,210}".prop_map(Value::from), json_value()],
            0..120
        )
        .prop_map(Value::Array),
        json_value(),
    ];
    let shaped = (
        outcome,
        proptest::option::of(json_value()),
        proptest::option::of(code),
        proptest::option::of(invalidate),
        json_object(json_value()),
    )
        .prop_map(|(outcome, result, code, invalidate, mut extra)| {
            extra.insert("outcome".into(), outcome);
            let fields = [
                ("result", result),
                ("error_code", code),
                ("invalidate", invalidate),
            ];
            for (name, value) in fields {
                if let Some(value) = value {
                    extra.insert(name.into(), value);
                }
            }
            Value::Object(extra).to_string().into_bytes()
        });
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..100),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        shaped,
    ]
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn every_answer_is_classified(
        status in 100u16..=999,
        retry_after in proptest::option::of(any::<u64>()),
        body in answer_body(),
    ) {
        let Ok(status) = StatusCode::from_u16(status) else {
            return Err(TestCaseError::reject("not a status"));
        };
        let retry_after = retry_after.map(Duration::from_secs);
        let answer = classify(status, retry_after, Ok(Bytes::from(body)));
        match status.as_u16() {
            202 => prop_assert_eq!(answer, Answer::Running),
            429 | 500..=599 => {
                let is_retry = matches!(answer, Answer::Retry { retry_after: r, in_doubt: false, .. } if r == retry_after);
                prop_assert!(is_retry);
            }
            200 => prop_assert!(matches!(answer, Answer::Decided(_))),
            _ => {
                let refused = matches!(&answer, Answer::Decided(r) if r.status == CommandStatus::Failed);
                prop_assert!(refused);
            }
        }
    }

    #[test]
    fn a_decision_is_what_the_body_says(body in answer_body()) {
        let reported = decision_of(&body);
        let parsed: Option<Map<String, Value>> = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| match v { Value::Object(map) => Some(map), _ => None });
        let outcome = parsed.as_ref().and_then(|m| m.get("outcome")).and_then(Value::as_str);
        let code_ok = parsed
            .as_ref()
            .and_then(|m| m.get("error_code"))
            .is_none_or(|c| c.is_null() || c.is_string());
        match (outcome, code_ok) {
            (Some("succeeded"), true) => {
                prop_assert_eq!(reported.status, CommandStatus::Succeeded);
                prop_assert!(reported.result.as_ref().is_some_and(Value::is_object));
                prop_assert!(reported.error.is_none());
            }
            (Some("rejected"), true) => {
                prop_assert_eq!(reported.status, CommandStatus::Rejected);
                prop_assert!(reported.result.as_ref().is_none_or(Value::is_object));
            }
            _ => {
                prop_assert_eq!(reported.status, CommandStatus::Failed);
                prop_assert_eq!(reported.error.as_ref().map(|e| e.0.as_str()), Some("WEBHOOK_BAD_ANSWER"));
            }
        }
        // The code a command ends with follows `:complete`'s rule: 1 to 64 printable ASCII.
        if let Some((code, _)) = &reported.error {
            let printable = code.chars().all(|c| c.is_ascii_graphic());
            prop_assert!(!code.is_empty() && code.chars().count() <= 64 && printable, "{:?}", code);
        }
        // What a read cache is told to drop: at most 100 names of 1 to 200 characters.
        prop_assert!(reported.invalidate.len() <= 100);
        for name in &reported.invalidate {
            prop_assert!((1..=200).contains(&name.chars().count()));
            prop_assert!(!name.contains('\0'));
        }
        // Nothing PostgreSQL cannot store (`jsonb` refuses U+0000).
        prop_assert!(!reported.result.as_ref().is_some_and(has_nul));
    }

    #[test]
    fn retry_after_is_seconds_or_a_date(value in any::<String>(), seconds in any::<u64>(), ahead in 0..1_000_000i64) {
        // Anything at all: a value or nothing, never a panic.
        let _ = parse_retry_after(&value);
        prop_assert_eq!(parse_retry_after(&seconds.to_string()), Some(Duration::from_secs(seconds)));
        prop_assert_eq!(parse_retry_after(&format!(" {seconds}\t")), Some(Duration::from_secs(seconds)));
        let now = chrono::Utc::now();
        let at = (now + chrono::Duration::seconds(ahead)).to_rfc2822();
        let wait = parse_retry_after(&at).map(|d| d.as_secs_f64());
        // The date is whole seconds and the clock moves on: within a second and a bit below.
        let wanted = ahead as f64;
        prop_assert!(wait.is_some_and(|w| w <= wanted && w > wanted - 2.0), "{:?} for {}", wait, ahead);
        let past = (now - chrono::Duration::seconds(ahead + 1)).to_rfc2822();
        prop_assert_eq!(parse_retry_after(&past), Some(Duration::ZERO));
    }
}
