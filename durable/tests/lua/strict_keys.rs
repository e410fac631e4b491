//! `lua/lib/strict_keys.lua`, the guard the suite runs the scripts behind on a Redis Cluster
//! (`SLUICE_STRICT_SCRIPT_KEYS`): a call on a key the script was not given in `KEYS` fails the
//! script before Redis runs it; declared keys, keyless commands and the multi-key ones pass.

use fred::prelude::*;
use fred::types::scripts::Script;
use sluice_redis::connect_redis;
use sluice_testkit::test_redis_url;
use uuid::Uuid;

const GUARD: &str = include_str!("../../../lua/lib/strict_keys.lua");

/// Runs `body` behind the guard with `keys`; the answer, or the error's text.
async fn guarded(body: &str, keys: Vec<String>) -> Result<Value, String> {
    let redis = connect_redis(&test_redis_url(), 1).await.expect("redis");
    let client = redis.pool().next().clone();
    let script = Script::from_lua(format!("local strict_keys_script = 'test'\n{GUARD}{body}"));
    script
        .evalsha_with_reload::<Value, _, _>(&client, keys, Vec::<Value>::new())
        .await
        .map_err(|error| error.details().to_string())
}

#[tokio::test]
async fn a_script_touching_an_undeclared_key_fails_before_redis_runs_it() {
    let tag = Uuid::new_v4();
    let (declared, other) = (format!("{{{tag}}}:a"), format!("{{{tag}}}:b"));
    let allowed = "redis.call('SET', KEYS[1], 'x'); redis.call('TIME'); \
                   redis.call('DEL', KEYS[1]); return redis.call('EXISTS', KEYS[1])";
    assert_eq!(
        guarded(allowed, vec![declared.clone()]).await,
        Ok(Value::Integer(0)),
        "declared keys, a keyless and a multi-key command"
    );

    // A key built inside the script, written and read, through `redis.call`, a copy of it
    // (`local call = redis.call`, as status_board.lua does) and `redis.pcall`.
    for body in [
        "return redis.call('SET', KEYS[1] .. 'b', 'x')",
        "local call = redis.call; return call('GET', string.sub(KEYS[1], 1, -2) .. 'b')",
        "return redis.pcall('HSET', KEYS[1] .. 'b', 'f', 'v')",
        "return redis.call('DEL', KEYS[1], KEYS[1] .. 'b')",
    ] {
        let refused = guarded(body, vec![declared.clone()]).await;
        let text = refused.expect_err(body);
        assert!(
            text.contains("strict keys") && text.contains("not in KEYS"),
            "{body}: {text}"
        );
    }
    // The refusal came first: nothing was written under the undeclared name.
    let redis = connect_redis(&test_redis_url(), 1).await.expect("redis");
    let written: i64 = redis.pool().exists(&other).await.expect("EXISTS");
    let written_b: i64 = redis
        .pool()
        .exists(format!("{declared}b"))
        .await
        .expect("EXISTS");
    assert_eq!((written, written_b), (0, 0));
}
