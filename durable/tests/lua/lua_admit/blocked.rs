//! Blocked resources never delay another command or namespace, and rotate until a free one is reached.

use super::*;

/// What keeps every resource of the `hog` command from starting in the starvation tests below.
#[derive(Debug, Clone, Copy)]
enum Blocker {
    /// Its `max_in_flight` (1) is held.
    Permits,
    /// Its start bucket is empty.
    Tokens,
    /// Every head shares one limit key whose only permit is held.
    LimitKey,
    /// No executor can run it: no `cfg` entry.
    Configuration,
}

/// Blocked resources of one command, however many, never delay another command or another
/// namespace: with 1,000 resources of `hog` blocked (by permits, tokens, a limit key, or its
/// configuration) ahead of them in turn order, the first `admit.lua` call starts the waiting
/// head of another command and the one of another namespace, and looks at no more of `hog`'s
/// resources than its scan limit allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_number_of_blocked_resources_delays_another_command_or_namespace() {
    const BLOCKED: usize = 1_000;
    const SCAN: u32 = 64;
    for blocker in [
        Blocker::Permits,
        Blocker::Tokens,
        Blocker::LimitKey,
        Blocker::Configuration,
    ] {
        let bench = Bench::new().await;
        let ns = bench.namespace;
        let hog_spec = match blocker {
            Blocker::Permits => Some("1 1000000 1000000 0"),
            Blocker::Tokens => Some("1000 1 1 0"),
            Blocker::LimitKey => Some("1000 1000000 1000000 0"),
            Blocker::Configuration => None,
        };
        let mut commands = vec![("quick", "1000 1000000 1000000 0")];
        commands.extend(hog_spec.map(|spec| ("hog", spec)));
        bench.configure(&commands, &[("acct:{a}", "1 0 0")]).await;
        // Another namespace's command, configured in the same `cfg` hash.
        let other_ns = NamespaceId::new_v7();
        let _: () = bench
            .redis
            .pool()
            .next()
            .hset(
                bench.keys.admission_config(),
                (format!("{other_ns}:quick"), "1000 1000000 1000000 0"),
            )
            .await
            .expect("cfg of the other namespace");
        let lim = match blocker {
            Blocker::LimitKey => vec![(
                "lim".to_string(),
                serde_json::json!([["acct:{a}", "acct:x"]]).to_string(),
            )],
            _ => vec![],
        };
        for i in 0..BLOCKED {
            let mut fields = vec![("status".to_string(), "accepted".to_string())];
            fields.extend(lim.clone());
            bench
                .queue_command(
                    "hog",
                    &format!("r{i:04}"),
                    bench.next_seq(),
                    fields,
                    vec![format!("waiting:{ns}"), format!("queued:{ns}:hog")],
                )
                .await;
        }
        // What holds them back.
        let client = bench.redis.pool().next();
        match blocker {
            Blocker::Permits => {
                bench
                    .hold_forever(&bench.keys.command_leases(ns, "hog"))
                    .await
            }
            Blocker::Tokens => {
                // Last refilled in 2100: no token accrues during the test.
                let _: () = client
                    .hset(
                        bench.command_bucket("hog"),
                        [("tokens", "0"), ("ts", "4102444800000")],
                    )
                    .await
                    .expect("an empty bucket");
            }
            Blocker::LimitKey => {
                bench
                    .hold_forever(&bench.keys.limit_leases(ns, "acct:x"))
                    .await
            }
            Blocker::Configuration => {}
        }
        // The two heads that can start, last in turn order (hog's resources came first).
        let quick = bench.queue_accepted("quick", "q", 1).await[0];
        let other = CommandId::new_v7();
        let other_suffix = AppKeys::queue_suffix(other_ns, "quick", "q");
        let _: i64 = client
            .zadd(
                bench.keys.queue_by_suffix(&other_suffix),
                None,
                None,
                false,
                false,
                (1.0, other.to_string()),
            )
            .await
            .expect("queue of the other namespace");
        let _: i64 = client
            .zadd(
                bench.keys.resource_ready(other_ns, "quick"),
                None,
                None,
                false,
                false,
                (1.0, other_suffix.as_str()),
            )
            .await
            .expect("its ready resource");
        let _: i64 = client
            .zadd(
                bench.keys.ready(),
                None,
                None,
                false,
                false,
                (1.0, format!("{other_ns}:quick")),
            )
            .await
            .expect("its ready command");
        let hog_before = bench.zscores(&bench.keys.resource_ready(ns, "hog")).await;

        let heads = bench
            .admitted_heads(AdmitLimits {
                min_generation: 1,
                max_heads: 10,
                scan_limit: SCAN,
                lease_ms: LONG_LEASE_MS,
                lookahead: 16,
            })
            .await;
        let started: HashSet<CommandId> = ids(&heads).into_iter().collect();
        assert_eq!(
            started,
            HashSet::from([quick, other]),
            "{blocker:?}: the first call starts both other heads"
        );
        let hog_after = bench.zscores(&bench.keys.resource_ready(ns, "hog")).await;
        let looked_at = hog_before
            .iter()
            .filter(|(member, score)| hog_after.get(*member) != Some(score))
            .count();
        assert!(
            looked_at <= SCAN as usize,
            "{blocker:?}: the call looked at {looked_at} of hog's resources, more than its scan limit"
        );
        assert_eq!(
            bench.queued("hog").await,
            BLOCKED as i64,
            "{blocker:?}: nothing of hog started"
        );
    }
}

/// Blocked resources rotate: with 300 resources of one command blocked by a limit key and one
/// free resource behind them, repeated calls reach the free one within a bounded number of calls
/// (the scan limit's share per call), where a window that never moves would never reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_resources_of_a_command_rotate_until_a_free_one_is_reached() {
    let bench = Bench::new().await;
    let ns = bench.namespace;
    bench
        .configure(
            &[("job", "1000 1000000 1000000 0")],
            &[("acct:{a}", "1 0 0")],
        )
        .await;
    let lim = serde_json::json!([["acct:{a}", "acct:x"]]).to_string();
    for i in 0..300 {
        bench
            .queue_command(
                "job",
                &format!("r{i:03}"),
                bench.next_seq(),
                vec![
                    ("status".to_string(), "accepted".to_string()),
                    ("lim".to_string(), lim.clone()),
                ],
                vec![format!("waiting:{ns}"), format!("queued:{ns}:job")],
            )
            .await;
    }
    bench
        .hold_forever(&bench.keys.limit_leases(ns, "acct:x"))
        .await;
    let free = bench.queue_accepted("job", "z-free", 1).await[0];
    let limits = AdmitLimits {
        min_generation: 1,
        max_heads: 10,
        scan_limit: 64,
        lease_ms: LONG_LEASE_MS,
        lookahead: 1,
    };
    let mut calls = 0;
    let started = loop {
        calls += 1;
        let heads = bench.admitted_heads(limits).await;
        if !heads.is_empty() {
            break heads;
        }
        assert!(
            calls < 10,
            "the free resource was not reached in {calls} calls"
        );
    };
    assert_eq!(ids(&started), vec![free]);
    assert!(calls <= 301 / 64 + 1, "reached after {calls} calls");
}
