//! The keys each application's next `admit.lua` call is given.
//!
//! Which queues, status hashes and limit keys an admission touches depends on what it reads, and
//! every key a script touches must be in its `KEYS` (a proxy or a store that routes or locks by
//! declared keys refuses any other). So `admit.lua` names, with every answer, the keys it touched
//! or lacked and those the next call will likely need (further down the queues it started from,
//! the next resources in turn); the caller keeps them here and passes them next time. A call that
//! lacks a key asks for it and the caller calls again at once, so a key this memory forgot costs
//! one more round trip, never a wrong admission.

use std::collections::HashMap;
use std::sync::Mutex;

/// Calls after which a key no answer named again is forgotten: a resource whose turn comes back
/// within a few calls keeps its keys, a queue that emptied long ago does not cost every call.
const KEEP_CALLS: u64 = 4;

/// The most keys kept for one application, the most recently named kept first. It bounds the
/// size of every call whatever the backlog: a few windows of resources with a queue's first
/// entries each.
pub const MOST_KEYS: usize = 8_192;

/// Per application (by its projection's key prefix), the keys its next admission is given.
#[derive(Default)]
pub struct AdmissionKeys {
    apps: Mutex<HashMap<String, Known>>,
}

#[derive(Default)]
struct Known {
    /// Answers learnt from so far.
    calls: u64,
    /// Key → the answer that last named it.
    keys: HashMap<String, u64>,
}

impl AdmissionKeys {
    /// The keys to pass to the next call of the application whose keys start with `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let apps = self
            .apps
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        apps.get(prefix)
            .map(|known| known.keys.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Learns from one answer: `done` keys no call needs again (started commands' status
    /// hashes, emptied queues), `named` those it touched, lacked or expects next. An answer that
    /// named nothing (the application's own budgets were used up) ages nothing.
    pub fn learn(&self, prefix: &str, done: &[String], named: Vec<String>) {
        let mut apps = self
            .apps
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let known = apps.entry(prefix.to_string()).or_default();
        for key in done {
            known.keys.remove(key);
        }
        if named.is_empty() {
            return;
        }
        known.calls += 1;
        let call = known.calls;
        for key in named {
            known.keys.insert(key, call);
        }
        known.keys.retain(|_, last| call - *last < KEEP_CALLS);
        if known.keys.len() > MOST_KEYS {
            let mut by_age: Vec<(u64, String)> =
                known.keys.drain().map(|(key, last)| (last, key)).collect();
            by_age.sort_unstable_by_key(|entry| std::cmp::Reverse(entry.0));
            by_age.truncate(MOST_KEYS);
            known.keys = by_age.into_iter().map(|(last, key)| (key, last)).collect();
        }
    }

    /// Forgets what was learnt of one application (a rebuild renamed nothing, but a test that
    /// wants a call with no help can start from nothing).
    pub fn forget(&self, prefix: &str) {
        let mut apps = self
            .apps
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        apps.remove(prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    fn sorted(mut keys: Vec<String>) -> Vec<String> {
        keys.sort();
        keys
    }

    #[test]
    fn keys_named_stay_until_done_or_unnamed_for_a_few_calls() {
        let memory = AdmissionKeys::default();
        memory.learn("{a:1}", &[], named(&["q1", "cmd1", "cmd2"]));
        assert_eq!(sorted(memory.keys("{a:1}")), named(&["cmd1", "cmd2", "q1"]));
        assert!(memory.keys("{a:2}").is_empty(), "applications are apart");
        // cmd1 started; q1 is named again, cmd2 not.
        memory.learn("{a:1}", &named(&["cmd1"]), named(&["q1", "cmd3"]));
        assert_eq!(sorted(memory.keys("{a:1}")), named(&["cmd2", "cmd3", "q1"]));
        for _ in 0..KEEP_CALLS - 2 {
            memory.learn("{a:1}", &[], named(&["q1"]));
        }
        assert!(memory.keys("{a:1}").contains(&"cmd2".to_string()));
        memory.learn("{a:1}", &[], named(&["q1"]));
        assert!(!memory.keys("{a:1}").contains(&"cmd2".to_string()));
        // An answer naming nothing ages nothing.
        for _ in 0..10 {
            memory.learn("{a:1}", &[], Vec::new());
        }
        assert!(memory.keys("{a:1}").contains(&"q1".to_string()));
    }

    #[test]
    fn the_most_recently_named_keys_are_kept_within_the_bound() {
        let memory = AdmissionKeys::default();
        let old: Vec<String> = (0..MOST_KEYS).map(|i| format!("old{i}")).collect();
        memory.learn("{a:1}", &[], old);
        let new: Vec<String> = (0..10).map(|i| format!("new{i}")).collect();
        memory.learn("{a:1}", &[], new.clone());
        let kept = memory.keys("{a:1}");
        assert_eq!(kept.len(), MOST_KEYS);
        assert!(new.iter().all(|key| kept.contains(key)));
    }
}
