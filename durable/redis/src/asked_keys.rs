//! Scripts whose keys depend on what they read call again with the keys they ask for.
//!
//! Every key a script touches must be in its `KEYS`, or a proxy or a store that routes or locks
//! by declared keys refuses it. Some scripts only learn which keys they need by reading others: a
//! command's permits are named in its status hash (`held`), a lease zset's holders are its
//! members, the commands a metrics read reports are the fields of two hashes. Such a script checks
//! the keys it would touch against its `KEYS` first and, when one is missing, answers
//! `{"KEYS", key, ...}` having done nothing; [`call_asking`] then calls it again with those keys
//! appended. Callers pass what they can derive up front, so a second call is the exception for
//! the hot paths.

use std::future::Future;

use fred::prelude::*;

use crate::DurableError;

/// Calls before [`call_asking`] gives up: each answer names every key the call lacked, so the
/// second call succeeds unless what the script reads changed in between (a command admitted
/// again, a new holder of a lease).
const TRIES: usize = 4;

/// Calls `call` with `keys`, and again with the keys a `{"KEYS", key, ...}` answer asks for
/// (appended, so the script's own keys keep their places); the first other answer is returned.
pub async fn call_asking<F, Fut>(
    script: &'static str,
    mut keys: Vec<String>,
    mut call: F,
) -> Result<Value, DurableError>
where
    F: FnMut(Vec<String>) -> Fut,
    Fut: Future<Output = Result<Value, DurableError>>,
{
    for _ in 0..TRIES {
        let answer = call(keys.clone()).await?;
        match keys_asked(&answer) {
            None => return Ok(answer),
            Some(asked) if asked.is_empty() => {
                return Err(DurableError::script(script, "asked for no key"));
            }
            Some(asked) => keys.extend(asked),
        }
    }
    Err(DurableError::script(
        script,
        "asked for more keys on every call",
    ))
}

/// The keys a `{"KEYS", key, ...}` answer asks for; None for any other answer.
fn keys_asked(answer: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = answer else {
        return None;
    };
    let (first, keys) = items.split_first()?;
    if first.as_str().as_deref() != Some("KEYS") {
        return None;
    }
    Some(keys.iter().filter_map(Value::as_string).collect())
}
