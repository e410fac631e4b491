//! Redis as Sluice uses it: one handle holding the connection pool and the scripts, with one
//! method per script. Code that talks to the projection takes this one value instead of a
//! pool and a script table side by side, and cannot run a script against another pool.

use std::sync::Arc;

use fred::prelude::*;

use super::Scripts;
use super::admission_keys::AdmissionKeys;
use crate::DurableError;

#[derive(Clone)]
pub struct Projection {
    pool: Pool,
    scripts: Arc<Scripts>,
    admission_keys: Arc<AdmissionKeys>,
}

/// `pub async fn <script>(keys, args)`: `EVALSHA` of `lua/<kind>/<script>.lua` on a connected client
/// of the pool (see [`super::scripts::NamedScript::call`]).
macro_rules! script_methods {
    ($($name:ident),* $(,)?) => {
        $(
            pub async fn $name<R: FromValue>(
                &self,
                keys: Vec<String>,
                args: Vec<Value>,
            ) -> Result<R, DurableError> {
                self.scripts.$name.call(&self.pool, keys, args).await
            }
        )*
    };
}

impl Projection {
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            scripts: Arc::new(Scripts::new()),
            admission_keys: Arc::default(),
        }
    }

    /// What each application's last admissions named, for the next one's `KEYS`.
    pub fn admission_keys(&self) -> &AdmissionKeys {
        &self.admission_keys
    }

    /// The pool, for the plain commands (`HGET`, `ZADD`, `SCAN`, pub/sub) that are no script.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    script_methods!(
        intake,
        accept,
        release,
        ticket,
        waiting,
        admit,
        land,
        requeue,
        renew,
        attempt_status,
        permit_holders,
        still_held,
        start_tokens,
        ready,
        rebuild,
        app_limits,
        usage,
        queued_in_redis,
        metrics,
        control,
        status_board,
        cache_read,
        cache_fill,
        cache_invalidate,
        origin_permit,
    );
}
