//! The Lua scripts, compiled into the binary and called by `EVALSHA` with a `NOSCRIPT` reload.

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::MultipleKeys;
use fred::types::scripts::Script;

use crate::DurableError;

/// Every script Sluice runs. Cheap to clone; hashes are computed once.
///
/// The scripts of the command life cycle, and the reads that tell positions, start with
/// `lua/lib/epoch.lua` (prepended here): the check that the projection is trusted (ready, new
/// enough, and in the Redis process that built it), and the helpers they share.
#[derive(Clone)]
pub struct Scripts {
    pub intake: NamedScript,
    pub accept: NamedScript,
    pub release: NamedScript,
    pub ticket: NamedScript,
    pub waiting: NamedScript,
    pub admit: NamedScript,
    pub land: NamedScript,
    pub requeue: NamedScript,
    pub renew: NamedScript,
    pub attempt_status: NamedScript,
    pub permit_holders: NamedScript,
    pub still_held: NamedScript,
    pub start_tokens: NamedScript,
    pub ready: NamedScript,
    pub rebuild: NamedScript,
    pub app_limits: NamedScript,
    pub usage: NamedScript,
    pub queued_in_redis: NamedScript,
    pub metrics: NamedScript,
    pub control: NamedScript,
    pub status_board: NamedScript,
    pub cache_read: NamedScript,
    pub cache_fill: NamedScript,
    pub cache_invalidate: NamedScript,
    pub origin_permit: NamedScript,
}

/// A life-cycle script: `lua/lib/asked_keys.lua` and `lua/lib/epoch.lua` (whose declared
/// permits ask through the first) followed by `lua/fenced/<name>`.
macro_rules! fenced {
    ($name:literal) => {
        NamedScript::new(
            $name,
            concat!(
                include_str!("../../../lua/lib/asked_keys.lua"),
                include_str!("../../../lua/lib/epoch.lua"),
                include_str!(concat!("../../../lua/fenced/", $name))
            ),
        )
    };
}

/// A script that reads, and asks for the keys it learns by reading (`lua/lib/asked_keys.lua`
/// followed by `lua/asking/<name>`).
macro_rules! asking {
    ($name:literal) => {
        NamedScript::new(
            $name,
            concat!(
                include_str!("../../../lua/lib/asked_keys.lua"),
                include_str!(concat!("../../../lua/asking/", $name))
            ),
        )
    };
}

/// Set in a test run, every script runs behind `lua/lib/strict_keys.lua`, which fails a call on
/// a key it was not given in `KEYS`: what a proxy or a store that routes or locks by declared
/// keys would refuse. `deploy/test.sh` sets it for every test, so no script can start touching
/// an undeclared key unnoticed. Off otherwise.
pub const STRICT_KEYS_VARIABLE: &str = "SLUICE_STRICT_SCRIPT_KEYS";

/// A script that reads, or writes only what needs no trusted projection.
macro_rules! plain {
    ($name:literal) => {
        NamedScript::new($name, include_str!(concat!("../../../lua/plain/", $name)))
    };
}

/// How long a script refused with `TRYAGAIN` (a cluster slot half moved) is tried again before
/// its caller gets the error: 10, 20, 40, 80 ms apart, so at most five tries.
pub const TRYAGAIN_PATIENCE: Duration = Duration::from_millis(250);
const TRYAGAIN_FIRST_PAUSE: Duration = Duration::from_millis(10);

#[derive(Clone)]
pub struct NamedScript {
    name: &'static str,
    script: Script,
}

impl NamedScript {
    fn new(name: &'static str, lua: &'static str) -> Self {
        let strict = std::env::var_os(STRICT_KEYS_VARIABLE).is_some();
        let script = if strict {
            Script::from_lua(format!(
                "local strict_keys_script = '{name}'\n{}{lua}",
                include_str!("../../../lua/lib/strict_keys.lua")
            ))
        } else {
            Script::from_lua(lua)
        };
        Self { name, script }
    }

    /// `EVALSHA`, and on `NOSCRIPT` (a restarted or failed-over Redis forgot its scripts)
    /// `SCRIPT LOAD` and once more.
    ///
    /// On a connected client of the pool, and failing at once when none is connected (Redis
    /// unreachable, or every connection reconnecting): fred's `Config::fail_fast` covers only the
    /// first connection, and its per-command `fail_fast` does not reach `EVALSHA` (fred 10.1 has
    /// no `LuaInterface` for `WithOptions`), so without this check a call made while Redis is down
    /// waits in the client's queue for the whole command timeout instead of failing at once.
    ///
    /// A call refused with `TRYAGAIN` is sent again for up to [`TRYAGAIN_PATIENCE`]: its
    /// application's slot is moving between cluster masters and holds some of the script's keys
    /// on each side, so Redis ran nothing (the refusal comes before the script), and the keys
    /// are usually together again within moments.
    pub async fn call<R: FromValue>(
        &self,
        redis: &Pool,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, DurableError> {
        let client = redis.next_connected();
        if !client.is_connected() {
            return Err(DurableError::Redis(Error::new(
                ErrorKind::Canceled,
                format!("no connection to Redis for {}", self.name),
            )));
        }
        // One loop for both refusals after which the same call is sent again, so the keys and
        // arguments are copied once per try (fred's `evalsha_with_reload` would copy them again).
        let (keys, args) = (MultipleKeys::from(keys), Value::Array(args));
        let started = Instant::now();
        let (mut pause, mut reloaded) = (TRYAGAIN_FIRST_PAUSE, false);
        loop {
            match self
                .script
                .evalsha(client, keys.clone(), args.clone())
                .await
            {
                Err(error) if !reloaded && error.details().starts_with("NOSCRIPT") => {
                    self.script.load(client).await?;
                    reloaded = true;
                }
                Err(error)
                    if error.details().starts_with("TRYAGAIN")
                        && started.elapsed() + pause < TRYAGAIN_PATIENCE =>
                {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                answer => return Ok(answer?),
            }
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

impl Scripts {
    pub fn new() -> Self {
        Self {
            intake: fenced!("intake.lua"),
            accept: fenced!("accept.lua"),
            release: fenced!("release.lua"),
            admit: fenced!("admit.lua"),
            land: fenced!("land.lua"),
            requeue: fenced!("requeue.lua"),
            renew: fenced!("renew.lua"),
            attempt_status: fenced!("attempt_status.lua"),
            start_tokens: fenced!("start_tokens.lua"),
            ticket: fenced!("ticket.lua"),
            waiting: fenced!("waiting.lua"),
            permit_holders: asking!("permit_holders.lua"),
            still_held: fenced!("still_held.lua"),
            ready: plain!("ready.lua"),
            rebuild: plain!("rebuild.lua"),
            app_limits: plain!("app_limits.lua"),
            usage: plain!("usage.lua"),
            queued_in_redis: plain!("queued_in_redis.lua"),
            metrics: asking!("metrics.lua"),
            control: plain!("control.lua"),
            status_board: asking!("status_board.lua"),
            cache_read: plain!("cache_read.lua"),
            cache_fill: plain!("cache_fill.lua"),
            cache_invalidate: plain!("cache_invalidate.lua"),
            origin_permit: plain!("origin_permit.lua"),
        }
    }
}
