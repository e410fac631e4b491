//! The waiting figures of a run (`sluice_loadtest::waiting`): the ETA error, the poll pace and
//! the order inversions, computed from recorded waits and rows as PostgreSQL would hold them.

use std::collections::HashMap;
use std::time::Duration;

use sluice_durable::ids::CommandId;
use sluice_loadtest::record::Wait;
use sluice_loadtest::waiting::{Started, figures, inversions};

fn row(resource: &str, seq: i64, started: Option<f64>) -> Started {
    Started {
        command: "claim".into(),
        resource_key: resource.into(),
        queue_seq: seq,
        started_ms: started,
    }
}

fn id(n: u128) -> CommandId {
    CommandId::from(uuid::Uuid::from_u128(n))
}

#[test]
fn inversions_count_pairs_within_a_resource_only() {
    // (id, resource, seq, accepted at, started at)
    let commands = [
        (1, "a", 1, Some(0), Some(10.0)),
        (2, "a", 2, Some(0), Some(30.0)),
        (3, "a", 3, Some(0), Some(20.0)),
        (4, "a", 4, None, Some(5.0)),
        (5, "a", 5, Some(0), None),
        // Answered at 25, after 3 started at 20: it was not waiting ahead of 3 then.
        (6, "c", 1, Some(25), Some(40.0)),
        (7, "c", 2, Some(0), Some(20.0)),
        // Another resource's order says nothing about a's; ties are not inversions.
        (8, "b", 0, Some(0), Some(1_000.0)),
        (9, "b", 9, Some(0), Some(1_000.0)),
    ];
    let mut rows = HashMap::new();
    let mut accepted = HashMap::new();
    for (n, resource, seq, at, started) in commands {
        rows.insert(id(n), row(resource, seq, started));
        if let Some(at) = at {
            accepted.insert(id(n), at);
        }
    }
    // a: 4 (never answered) overtakes 1, 2 and 3; 3 overtakes 2.
    assert_eq!(inversions(&rows, &accepted), (4, 3));
    let in_order = HashMap::from([
        (id(1), row("a", 1, Some(1.0))),
        (id(2), row("a", 2, Some(2.0))),
    ]);
    assert_eq!(inversions(&in_order, &accepted), (0, 0));
}

#[test]
fn eta_error_is_relative_to_the_actual_wait() {
    let mut waits = HashMap::new();
    let mut rows = HashMap::new();
    // Told 4 s at t = 1,000 ms, started at 3,000: 2 s of actual wait, error 100 %.
    waits.insert(
        id(1),
        Wait {
            accepted_ms: 500,
            first_eta: Some((4, 1_000)),
            polls: 2,
            advised: Duration::from_secs(2),
            early: 0,
            span: Duration::from_secs(3),
        },
    );
    rows.insert(id(1), row("a", 1, Some(3_000.0)));
    // Told 2 s, started 2 s later: exact.
    waits.insert(
        id(2),
        Wait {
            accepted_ms: 600,
            first_eta: Some((2, 1_000)),
            polls: 1,
            advised: Duration::from_secs(1),
            early: 1,
            span: Duration::from_secs(1),
        },
    );
    rows.insert(id(2), row("a", 2, Some(3_000.0)));
    // Never told an ETA: polled, but no error.
    waits.insert(
        id(3),
        Wait {
            polls: 1,
            advised: Duration::from_secs(1),
            span: Duration::from_secs(2),
            ..Wait::default()
        },
    );
    rows.insert(id(3), row("a", 3, Some(3_500.0)));
    let w = figures(&waits, &rows);
    assert_eq!(w.told, 2);
    assert_eq!(w.eta_error_p50, 0.0);
    assert_eq!(w.eta_error_p90, 1.0);
    assert_eq!(w.eta_error_beyond_rounding_p90, 0.75);
    assert_eq!(w.eta_ratio_p90, 2.0);
    assert_eq!(w.waiters_polling, 3);
    assert_eq!(w.polls_sooner_than_advised, 1);
    // 2 polls in 3 s = 40/min; 1 in 1 s = 60; 1 in 2 s = 30.
    assert_eq!(w.polls_per_minute_p50, 40.0);
    assert_eq!(w.polls_per_minute_p90, 60.0);
    assert_eq!(w.advised_polls_per_minute_p90, 60.0);
    assert_eq!((w.started, w.inversions, w.overtaken), (3, 0, 0));
}
