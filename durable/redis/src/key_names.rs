//! Names of every Redis key of an application. All carry the hash tag `{a:<application_id>}`, so
//! each script touches one cluster slot and one application's admission lives on one shard.

use crate::ids::{ApplicationId, CommandId, NamespaceId};

/// The key names of one application.
#[derive(Debug, Clone)]
pub struct AppKeys {
    application_id: ApplicationId,
    prefix: String,
}

impl AppKeys {
    pub fn new(application_id: ApplicationId) -> Self {
        Self {
            application_id,
            prefix: format!("{{a:{application_id}}}"),
        }
    }

    pub fn application_id(&self) -> ApplicationId {
        self.application_id
    }

    /// The pattern that matches every key of the application (rebuild clears with it).
    pub fn pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }

    pub fn meta(&self) -> String {
        format!("{}:meta", self.prefix)
    }

    pub fn count(&self) -> String {
        format!("{}:count", self.prefix)
    }

    pub fn seq(&self) -> String {
        format!("{}:seq", self.prefix)
    }

    pub fn intake_bucket(&self, namespace_id: NamespaceId, command: &str) -> String {
        format!("{}:bucket:intake:{namespace_id}:{command}", self.prefix)
    }

    /// One subject's own intake bucket of a command (`intake.per_subject_per_second`). The
    /// subject is the key's last part, so no value of it can reach another key.
    pub fn subject_bucket(
        &self,
        namespace_id: NamespaceId,
        command: &str,
        subject: &str,
    ) -> String {
        format!(
            "{}:bucket:subject:{namespace_id}:{command}:{subject}",
            self.prefix
        )
    }

    pub fn reservations(&self, namespace_id: NamespaceId, command: &str) -> String {
        format!("{}:resv:{namespace_id}:{command}", self.prefix)
    }

    pub fn request_keys(&self, namespace_id: NamespaceId, command: &str) -> String {
        format!("{}:rk:{namespace_id}:{command}", self.prefix)
    }

    pub fn queue(&self, namespace_id: NamespaceId, command: &str, resource_key: &str) -> String {
        self.queue_by_suffix(&Self::queue_suffix(namespace_id, command, resource_key))
    }

    pub fn command(&self, command_id: CommandId) -> String {
        format!("{}:cmd:{command_id}", self.prefix)
    }

    /// The status hash prefix: `command(id)` is this followed by the id.
    pub fn command_prefix(&self) -> String {
        format!("{}:cmd:", self.prefix)
    }

    /// Commands (`<ns>:<cmd>`) with waiting work, scored by their round-robin turn: the first
    /// level of admit.lua's round robin.
    pub fn ready(&self) -> String {
        format!("{}:ready", self.prefix)
    }

    /// One command's resources (queue suffixes) with waiting work, scored by their round-robin
    /// turn: the second level.
    pub fn resource_ready(&self, namespace_id: NamespaceId, command: &str) -> String {
        format!("{}:rq:{namespace_id}:{command}", self.prefix)
    }

    /// The last round-robin turn handed out (both levels share it).
    pub fn turn(&self) -> String {
        format!("{}:turn", self.prefix)
    }

    /// Admission limits per command, written by executors from the declarations.
    pub fn admission_config(&self) -> String {
        format!("{}:cfg", self.prefix)
    }

    /// Executing permits of a command (its admission `max_in_flight`).
    pub fn command_leases(&self, namespace_id: NamespaceId, command: &str) -> String {
        format!("{}:lease:cmd:{namespace_id}:{command}", self.prefix)
    }

    /// Executing permits of one resource queue.
    pub fn resource_leases(&self, queue_suffix: &str) -> String {
        format!("{}:lease:res:{queue_suffix}", self.prefix)
    }

    /// Every permit a command of this resource with these rendered limit keys (`[[template,
    /// key], ...]`) may hold: the lease zsets of the application, its command, its resource
    /// queue and each limit key, which admit.lua records in the command's `held` field. A script
    /// that releases or extends them is given them in `KEYS` (lib/epoch.lua's declared permits);
    /// a caller without the row's limit keys passes none, and the script asks for them.
    pub fn command_permits(
        &self,
        namespace_id: NamespaceId,
        command: &str,
        resource_key: &str,
        limit_keys: &[[String; 2]],
    ) -> Vec<String> {
        let mut permits = vec![
            self.application_leases(),
            self.command_leases(namespace_id, command),
            self.resource_leases(&Self::queue_suffix(namespace_id, command, resource_key)),
        ];
        permits.extend(
            limit_keys
                .iter()
                .map(|[_, key]| self.limit_leases(namespace_id, key)),
        );
        permits
    }

    /// Executing permits of the whole application (its `max_concurrency`), all namespaces.
    pub fn application_leases(&self) -> String {
        format!("{}:lease:app", self.prefix)
    }

    /// The application's start bucket (its `rate_per_second`).
    pub fn application_bucket(&self) -> String {
        format!("{}:bucket:app", self.prefix)
    }

    /// Executing permits of one limit key (its `max_in_flight`), e.g. `account:gitee:a`. Limit
    /// keys live in their namespace: namespaces never share a budget by accident.
    pub fn limit_leases(&self, namespace_id: NamespaceId, key: &str) -> String {
        format!("{}:lease:lim:{namespace_id}:{key}", self.prefix)
    }

    /// The start bucket of one limit key (its `per_second` and `burst`).
    pub fn limit_bucket(&self, namespace_id: NamespaceId, key: &str) -> String {
        format!("{}:bucket:lim:{namespace_id}:{key}", self.prefix)
    }

    /// The `cfg` field holding the numbers of one declared limit template.
    pub fn limit_config_field(namespace_id: NamespaceId, template: &str) -> String {
        format!("lim:{namespace_id}:{template}")
    }

    /// The start rate of each resource queue (field: its suffix), written by `admit.lua` and
    /// read by `ticket.lua`: the rate behind ticket ETAs ([`super::start_rate`]).
    pub fn starts(&self) -> String {
        format!("{}:starts", self.prefix)
    }

    /// The highest queue sequence started from each resource queue (field: its suffix), while
    /// it has waiting work: written by `admit.lua`, read by `waiting.lua` for gateways that
    /// answer waiting polls from memory (a waiting command above it cannot have started).
    pub fn started(&self) -> String {
        format!("{}:started", self.prefix)
    }

    /// The namespace's outcomes of the last two minutes, by second (a ring, land.lua).
    pub fn outcomes(&self, namespace_id: NamespaceId) -> String {
        format!("{}:outcomes:{namespace_id}", self.prefix)
    }

    /// Commands that left their queue without starting (zset, lib/epoch.lua's `gone_add`).
    pub fn gone(&self) -> String {
        format!("{}:gone", self.prefix)
    }

    /// The part of a queue key after `:q:`, as the ready set and admit.lua name queues.
    pub fn queue_suffix(namespace_id: NamespaceId, command: &str, resource_key: &str) -> String {
        format!("{namespace_id}:{command}:{resource_key}")
    }

    pub fn queue_by_suffix(&self, suffix: &str) -> String {
        format!("{}:q:{suffix}", self.prefix)
    }

    /// A cached read: `digest` is the hex SHA-256 of its canonical parameters (and subject, for
    /// a subject-scoped read), so no caller-chosen text becomes part of a key.
    pub fn cache_entry(&self, namespace_id: NamespaceId, read: &str, digest: &str) -> String {
        format!("{}:cache:{namespace_id}:{read}:{digest}", self.prefix)
    }

    /// The fill lease of a cached read: one filler across every gateway.
    pub fn cache_lease(entry: &str) -> String {
        format!("{entry}:fill")
    }

    /// Cached entries by expiry, their sizes and the application's totals (the cache bounds).
    pub fn cache_index(&self) -> String {
        format!("{}:cache-index", self.prefix)
    }

    pub fn cache_sizes(&self) -> String {
        format!("{}:cache-sizes", self.prefix)
    }

    pub fn cache_totals(&self) -> String {
        format!("{}:cache-totals", self.prefix)
    }

    /// The version of one dependency of a namespace's reads (`offer:42`, `pool:stock`).
    pub fn dependency(&self, namespace_id: NamespaceId, dependency: &str) -> String {
        format!("{}:dep:{namespace_id}:{dependency}", self.prefix)
    }

    /// Origin calls in flight for the application, across gateways, and its call bucket.
    pub fn origin_leases(&self) -> String {
        format!("{}:lease:origin", self.prefix)
    }

    pub fn origin_bucket(&self) -> String {
        format!("{}:bucket:origin", self.prefix)
    }
}

/// The field of the request-key map for one (subject, request key). The subject is
/// length-prefixed because it may contain any character, so no two pairs share a field.
pub fn request_key_field(subject: &str, request_key: &str) -> String {
    format!("{}:{subject}{request_key}", subject.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_carries_the_application_hash_tag() {
        let app = ApplicationId::new_v7();
        let ns = NamespaceId::new_v7();
        let keys = AppKeys::new(app);
        let tag = format!("{{a:{app}}}");
        for key in [
            keys.meta(),
            keys.count(),
            keys.seq(),
            keys.intake_bucket(ns, "claim"),
            keys.reservations(ns, "claim"),
            keys.request_keys(ns, "claim"),
            keys.queue(ns, "claim", "r1"),
            keys.command(CommandId::new_v7()),
            keys.ready(),
            keys.resource_ready(ns, "claim"),
            keys.turn(),
        ] {
            assert!(key.starts_with(&tag), "{key}");
        }
    }

    #[test]
    fn request_key_fields_cannot_collide() {
        assert_ne!(request_key_field("ab", "c"), request_key_field("a", "bc"));
        assert_eq!(request_key_field("u1", "k"), "2:u1k");
    }
}
