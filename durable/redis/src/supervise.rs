//! Keeps every client of the Redis pool routed.
//!
//! A fred client's commands go through one router task, which reconnects by itself under the
//! reconnect policy. On some errors fred ends that task instead, and from then on the client
//! never reconnects and every command on it waits out its timeout: a gateway would answer
//! `503` on that connection until restarted. Unpatched fred 10.1.0 did so on an `ASK` it could
//! not follow while a cluster slot migrated (the patch in `vendor/fred` fixes that path; this
//! guards the others). So each client's router is watched, and one that ended with an error is
//! started again (`init`, as at start-up), with a pause that doubles from 100 ms to 2 s while it
//! cannot connect. A router that ended without an error was closed on purpose (`QUIT`) and
//! stays so.

use std::time::Duration;

use fred::prelude::*;
use fred::types::ConnectHandle;

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Connects every client of `pool`, all at once (all or none: on an error the connected ones
/// are closed), and watches each one's router from then on.
pub(super) async fn init_watched(pool: &Pool) -> Result<(), Error> {
    let mut connecting = tokio::task::JoinSet::new();
    for client in pool.clients() {
        let client = client.clone();
        connecting.spawn(async move {
            let router = client.init().await;
            (client, router)
        });
    }
    let (mut routed, mut failure) = (Vec::with_capacity(pool.clients().len()), None);
    while let Some(joined) = connecting.join_next().await {
        match joined {
            Ok((client, Ok(router))) => routed.push((client, router)),
            Ok((_, Err(error))) => failure = Some(error),
            Err(join) => failure = Some(Error::new(ErrorKind::Unknown, join.to_string())),
        }
    }
    if let Some(error) = failure {
        for (client, _) in &routed {
            let _ = client.quit().await;
        }
        return Err(error);
    }
    for (client, router) in routed {
        tokio::spawn(watch(client, router));
    }
    Ok(())
}

async fn watch(client: Client, mut router: ConnectHandle) {
    loop {
        let ended = match router.await {
            Ok(result) => result,
            Err(join) => Err(Error::new(ErrorKind::Unknown, join.to_string())),
        };
        let error = match ended {
            Ok(()) => return,
            Err(error) if error.is_canceled() => return,
            Err(error) => error,
        };
        // Counted as what it is, a Redis failure (`sluice_storage_errors{store="redis"}`).
        sluice_metrics::storage_error(&crate::DurableError::Redis(error.clone()));
        tracing::warn!(client = %client.id(), %error, "a Redis client's router ended; starting it again");
        let mut pause = FIRST_PAUSE;
        router = loop {
            match client.init().await {
                Ok(router) => break router,
                Err(error) => {
                    tracing::debug!(client = %client.id(), %error, "Redis client not connected yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        };
    }
}
