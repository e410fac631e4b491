//! One call of a declared read, as the cache needs it: where the value comes from, how long it
//! stays fresh and stale, and its bounds.

use std::time::Duration;

use sluice_durable::declaration::ReadDecl;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_redis::cache::EntryKeys;

/// What the handler knows about one read call.
pub struct ReadCall<'a> {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub keys: EntryKeys,
    pub url: String,
    pub fresh_ms: i64,
    pub stale_ms: i64,
    pub negative_ms: i64,
    pub max_bytes: usize,
    pub timeout: Duration,
    pub read: &'a str,
}

impl<'a> ReadCall<'a> {
    /// A call of the declared read `decl` for the rendered origin `url`: the periods, bounds and
    /// timeout come from the declaration.
    pub fn of(
        decl: &'a ReadDecl,
        application_id: ApplicationId,
        namespace_id: NamespaceId,
        keys: EntryKeys,
        url: String,
    ) -> Self {
        Self {
            application_id,
            namespace_id,
            keys,
            url,
            fresh_ms: i64::from(decl.fresh_seconds) * 1_000,
            stale_ms: i64::from(decl.stale_seconds) * 1_000,
            negative_ms: i64::from(decl.negative_seconds) * 1_000,
            max_bytes: decl.max_bytes as usize,
            timeout: Duration::from_millis(u64::from(decl.timeout_ms)),
            read: &decl.name,
        }
    }
}
