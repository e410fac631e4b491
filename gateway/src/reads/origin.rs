//! The origin of a declared read: one `GET`, bounded in time and size, classified into what the
//! cache stores (a value, a `404`, or an error). Never fails: every failure is an answer.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::StatusCode;
use serde_json::Value;
use sluice_durable::http_client::{HttpsClient, Outbound};
use sluice_redis::cache::Origin;

/// What an origin answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub origin: Origin,
    /// For [`Origin::Ok`]: the `items` array as JSON text; otherwise why it failed.
    pub body: String,
}

/// Larger bodies than this are not read at all, whatever a read declares (its `max_bytes` is at
/// most 256 KiB; a value over it is served but not cached).
const HARD_LIMIT_BYTES: usize = 1024 * 1024;

#[derive(Clone)]
pub struct OriginClient {
    client: HttpsClient<Empty<Bytes>>,
    outbound: Outbound,
}

impl OriginClient {
    pub fn new(outbound: &Outbound) -> Self {
        Self {
            client: outbound.client(),
            outbound: outbound.clone(),
        }
    }

    pub async fn fetch(&self, url: &str, timeout: Duration) -> Fetched {
        let error = |why: String| Fetched {
            origin: Origin::Error,
            body: why,
        };
        let request = match hyper::Request::get(url)
            .header(hyper::header::ACCEPT, "application/json")
            .body(Empty::new())
        {
            Ok(mut request) => {
                self.outbound.decorate(&mut request);
                request
            }
            Err(e) => return error(format!("the origin URL is not usable: {e}")),
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = Limited::new(response.into_body(), HARD_LIMIT_BYTES)
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Err(_) => error(format!("the origin did not answer within {timeout:?}")),
            Ok(Err(why)) => error(format!("the origin failed: {why}")),
            Ok(Ok((StatusCode::NOT_FOUND, _))) => Fetched {
                origin: Origin::NotFound,
                body: "the origin has no such item".into(),
            },
            Ok(Ok((StatusCode::OK, body))) => match items(&body) {
                Some(items) => Fetched {
                    origin: Origin::Ok,
                    body: items,
                },
                None => error(
                    "the origin's answer is not a JSON array nor an object with an `items` array"
                        .into(),
                ),
            },
            Ok(Ok((status, _))) => error(format!("the origin answered {status}")),
        }
    }
}

/// The items of an origin's answer: a JSON array, or an object's `items` array.
fn items(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let items = match value {
        Value::Array(_) => value,
        Value::Object(mut object) => match object.remove("items") {
            Some(items @ Value::Array(_)) => items,
            _ => return None,
        },
        _ => return None,
    };
    Some(items.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_from_an_array_or_an_items_field() {
        assert_eq!(
            items(br#"[1, {"a": 2}]"#).as_deref(),
            Some(r#"[1,{"a":2}]"#)
        );
        assert_eq!(items(br#"{"items": [], "x": 1}"#).as_deref(), Some("[]"));
        assert_eq!(items(br#"{"items": 5}"#), None);
        assert_eq!(items(br#"{"other": []}"#), None);
        assert_eq!(items(b"7"), None);
        assert_eq!(items(b"not json"), None);
    }
}
