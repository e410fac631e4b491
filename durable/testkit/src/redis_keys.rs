//! Reading a Redis's keys the way a busy server allows.

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
