//! The Lua scripts, compiled into the binary and called by `EVALSHA` with a `NOSCRIPT` reload.

use fred::prelude::*;
use fred::types::scripts::Script;

use crate::DurableError;

/// Every script Sluice runs. Cheap to clone; hashes are computed once.
#[derive(Clone)]
pub struct Scripts {
    pub intake: NamedScript,
    pub accept: NamedScript,
    pub release: NamedScript,
    pub finish_waiting: NamedScript,
    pub ticket: NamedScript,
    pub admit: NamedScript,
    pub finish: NamedScript,
    pub requeue: NamedScript,
    pub renew: NamedScript,
    pub lapsed: NamedScript,
    pub retake: NamedScript,
    pub app_limits: NamedScript,
    pub usage: NamedScript,
    pub projected: NamedScript,
    pub metrics: NamedScript,
    pub control: NamedScript,
    pub status: NamedScript,
    pub cache_read: NamedScript,
    pub cache_fill: NamedScript,
    pub cache_invalidate: NamedScript,
    pub origin_permit: NamedScript,
}

#[derive(Clone)]
pub struct NamedScript {
    pub name: &'static str,
    script: Script,
}

impl NamedScript {
    fn new(name: &'static str, lua: &'static str) -> Self {
        Self {
            name,
            script: Script::from_lua(lua),
        }
    }

    /// `EVALSHA`, and on `NOSCRIPT` (a restarted or failed-over Redis forgot its scripts)
    /// `SCRIPT LOAD` and once more.
    ///
    /// On a connected client of the pool, and failing at once when none is connected (Redis
    /// unreachable, or every connection reconnecting): fred's `Config::fail_fast` covers only the
    /// first connection, and its per-command `fail_fast` does not reach `EVALSHA` (fred 10.1 has
    /// no `LuaInterface` for `WithOptions`), so without this check a call made while Redis is down
    /// waits in the client's queue for the whole command timeout instead of failing at once.
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
                "no connection to Redis",
            )));
        }
        Ok(self.script.evalsha_with_reload(client, keys, args).await?)
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
            intake: NamedScript::new("intake.lua", include_str!("../../../lua/intake.lua")),
            accept: NamedScript::new("accept.lua", include_str!("../../../lua/accept.lua")),
            release: NamedScript::new("release.lua", include_str!("../../../lua/release.lua")),
            finish_waiting: NamedScript::new(
                "finish_waiting.lua",
                include_str!("../../../lua/finish_waiting.lua"),
            ),
            ticket: NamedScript::new("ticket.lua", include_str!("../../../lua/ticket.lua")),
            admit: NamedScript::new("admit.lua", include_str!("../../../lua/admit.lua")),
            finish: NamedScript::new("finish.lua", include_str!("../../../lua/finish.lua")),
            requeue: NamedScript::new("requeue.lua", include_str!("../../../lua/requeue.lua")),
            renew: NamedScript::new("renew.lua", include_str!("../../../lua/renew.lua")),
            lapsed: NamedScript::new("lapsed.lua", include_str!("../../../lua/lapsed.lua")),
            retake: NamedScript::new("retake.lua", include_str!("../../../lua/retake.lua")),
            app_limits: NamedScript::new(
                "app_limits.lua",
                include_str!("../../../lua/app_limits.lua"),
            ),
            usage: NamedScript::new("usage.lua", include_str!("../../../lua/usage.lua")),
            projected: NamedScript::new(
                "projected.lua",
                include_str!("../../../lua/projected.lua"),
            ),
            metrics: NamedScript::new("metrics.lua", include_str!("../../../lua/metrics.lua")),
            control: NamedScript::new("control.lua", include_str!("../../../lua/control.lua")),
            status: NamedScript::new("status.lua", include_str!("../../../lua/status.lua")),
            cache_read: NamedScript::new(
                "cache_read.lua",
                include_str!("../../../lua/cache_read.lua"),
            ),
            cache_fill: NamedScript::new(
                "cache_fill.lua",
                include_str!("../../../lua/cache_fill.lua"),
            ),
            cache_invalidate: NamedScript::new(
                "cache_invalidate.lua",
                include_str!("../../../lua/cache_invalidate.lua"),
            ),
            origin_permit: NamedScript::new(
                "origin_permit.lua",
                include_str!("../../../lua/origin_permit.lua"),
            ),
        }
    }
}
