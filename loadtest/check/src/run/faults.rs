//! Faults as the plan schedules them: begun, held, ended, and recorded with their real times.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::client::now_ms;
use crate::journal::FaultRecord;
use crate::plan::{Fault, FaultKind, LinkFault};
use crate::proxy::Mode;

/// Begins the fault, holds it, ends it (a flapping link flaps for the hold).
pub(super) async fn fault_op(shared: &Arc<Shared>, fault: &Fault) {
    let started_ms = now_ms();
    if let FaultKind::Link(link, LinkFault::Flap { period_ms }) = fault.kind {
        let proxy = shared.stack.lock().await.proxy(link);
        if let Some(proxy) = proxy {
            flap(&proxy, period_ms, fault.hold_ms).await;
        }
        shared.journal.with(|r| {
            r.faults.push(FaultRecord {
                kind: fault.kind,
                started_ms,
                ended_ms: now_ms(),
            })
        });
        return;
    }
    {
        let mut stack = shared.stack.lock().await;
        match stack.begin_fault(fault.kind).await {
            Ok(true) => {}
            // Another fault holds its store or process: this one is skipped, and not recorded.
            Ok(false) => return,
            Err(error) => {
                shared
                    .journal
                    .stray(format!("fault {:?} could not begin: {error}", fault.kind));
                return;
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(fault.hold_ms)).await;
    {
        let mut stack = shared.stack.lock().await;
        if let Err(error) = stack.end_fault(fault.kind).await {
            shared
                .journal
                .stray(format!("fault {:?} could not end: {error}", fault.kind));
        }
    }
    let ended_ms = now_ms();
    shared.journal.with(|r| {
        r.faults.push(FaultRecord {
            kind: fault.kind,
            started_ms,
            ended_ms,
        })
    });
}

/// Black holes of a tenth of each period, each ended by a reset once the store went quiet.
async fn flap(proxy: &crate::proxy::Proxy, period_ms: u64, hold_ms: u64) {
    let until = tokio::time::Instant::now() + Duration::from_millis(hold_ms);
    while tokio::time::Instant::now() < until {
        // The black hole opens right after an answer goes back (or after a tenth of the period
        // when none comes): the request a caller sends next is the one lost.
        proxy.set(Mode::BlackholeAfterAnswer);
        let armed_until = tokio::time::Instant::now() + Duration::from_millis(period_ms);
        while proxy.mode() == Mode::BlackholeAfterAnswer
            && tokio::time::Instant::now() < armed_until
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        proxy.set(Mode::Blackhole);
        tokio::time::sleep(Duration::from_millis((period_ms / 10).max(1))).await;
        proxy
            .reset_when_quiet(Duration::from_millis(100), Duration::from_secs(3))
            .await;
        proxy.set(Mode::Pass);
        tokio::time::sleep(Duration::from_millis(period_ms)).await;
    }
}
