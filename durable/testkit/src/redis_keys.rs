//! Reading a Redis's keys the way a busy server allows, and the permits a lease set holds now.

use fred::prelude::*;

/// Every key matching `pattern` (SCAN in pages, so it is safe on a server under load).
pub async fn scan_keys(pool: &Pool, pattern: &str) -> Vec<String> {
    let client = pool.next();
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    loop {
        let (next, page): (String, Vec<String>) = client
            .scan_page(cursor.as_str(), pattern, Some(1_000), None)
            .await
            .expect("scan");
        found.extend(page);
        if next == "0" {
            return found;
        }
        cursor = next;
    }
}

/// Milliseconds since the Unix epoch by this machine's clock: the scores of the lease sets are
/// expiry instants in it.
pub fn now_ms() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    now.as_millis() as f64
}

/// The live members of a lease set (`key`): those whose expiry is after now.
pub async fn live_leases(pool: &Pool, key: &str) -> i64 {
    pool.next()
        .zcount(key, now_ms() + 1.0, f64::INFINITY)
        .await
        .expect("zcount")
}
