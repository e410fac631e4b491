//! Keyset pages: a `limit` and an opaque `cursor` in, the next page's cursor out.
//!
//! A cursor is the last id of the page it ends, base64url without padding: it names a place in
//! an order by id, so pages never repeat or skip an item however long the caller takes between
//! them, and it says nothing a caller could edit into another query.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

use crate::http::error::ApiError;
use crate::http::url::query_value;

/// The `limit` parameter: `default` when absent, else an integer in `1..=max`.
pub fn limit(query: &[(String, String)], default: i64, max: i64) -> Result<i64, ApiError> {
    match query_value(query, "limit") {
        None => Ok(default),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", format!("must be an integer between 1 and {max}"))
            }),
    }
}

/// The `cursor` parameter: the id the previous page ended at, or `None` for the first page.
pub fn cursor(query: &[(String, String)]) -> Result<Option<Uuid>, ApiError> {
    query_value(query, "cursor").map(decode).transpose()
}

/// The cursor a page ending at `id` hands out.
pub fn encode(id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

fn decode(text: &str) -> Result<Uuid, ApiError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .ok()
        .and_then(|bytes| Uuid::from_slice(&bytes).ok())
        .ok_or_else(|| ApiError::invalid("cursor", "is not a cursor this API returned"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_cursor_round_trips_and_anything_else_is_refused() {
        let id = Uuid::new_v4();
        let given = query(&[("cursor", &encode(id))]);
        assert_eq!(cursor(&given).expect("a cursor"), Some(id));
        assert_eq!(cursor(&query(&[])).expect("no cursor"), None);
        for bad in ["", "abc", "not base64!", &encode(id)[..10]] {
            assert!(cursor(&query(&[("cursor", bad)])).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_limit_is_an_integer_within_its_bounds() {
        assert_eq!(limit(&query(&[]), 20, 50).expect("default"), 20);
        assert_eq!(limit(&query(&[("limit", "50")]), 20, 50).expect("max"), 50);
        for bad in ["0", "51", "-1", "1.5", "", "+5 "] {
            assert!(limit(&query(&[("limit", bad)]), 20, 50).is_err(), "{bad:?}");
        }
    }
}
