//! Each invariant check can fail: a real namespace with real rows, then the record (or the
//! callers' view, or the observations) is made to contradict it, and the check must say so.

use sluice_durable::ids::CommandId;
use sluice_model::CommandStatus;
use std::collections::{BTreeMap, HashMap};

use hyper::Method;
use serde_json::Value;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_loadtest::api::{Outcome, exchange};
use sluice_loadtest::bench_stack::{RunningGateway, Tenant};
use sluice_loadtest::driver::http_client;
use sluice_loadtest::holders::{Answer, Choice, Held, Logged};
use sluice_loadtest::invariants;
use sluice_loadtest::report::{Check, PeakOf, Peaks};
use sluice_loadtest::sampler::PoolSamples;
use sluice_loadtest::servers::BackendSeen;
use sluice_testkit::{shared_postgres, shared_redis};
use uuid::Uuid;

const DECLARATION: &str = r#"
[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[quota_pool]]
code = "stock"
capacity = 5
"#;

fn verdict<'a>(checks: &'a [Check], name: &str) -> &'a Check {
    checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check named {name}: {checks:?}"))
}

/// Three accepted claims, left waiting (no executor).
async fn three_waiting() -> (Tenant, Vec<CommandId>) {
    let db = shared_postgres().fresh_database().await;
    let tenant = Tenant::create(&db, &shared_redis().url(), 4, DECLARATION)
        .await
        .expect("tenant");
    let gateway = RunningGateway::start(&tenant, GatewayConfig::default())
        .await
        .expect("gateway");
    let client = http_client(4);
    let mut ids = Vec::new();
    for i in 0..3 {
        let body = format!(
            r#"{{"request_key":"k{i}","subject":"s{i}","input":{{"offer":"{}"}}}}"#,
            Uuid::new_v4()
        );
        let answer = exchange(
            &client,
            Method::POST,
            &format!("{}/v1/commands/claim:enqueue", gateway.base),
            Some(&tenant.creds.credential),
            Some(body),
        )
        .await;
        let Outcome::Success { data, .. } = answer.outcome else {
            panic!("enqueue refused: {answer:?}");
        };
        let id = data
            .get("command_id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<CommandId>().ok())
            .expect("a command id");
        ids.push(id);
    }
    (tenant, ids)
}

#[tokio::test]
async fn command_checks_fail_when_the_record_and_the_callers_disagree() {
    let (tenant, ids) = three_waiting().await;
    let namespace = tenant.creds.namespace_id;
    let all: HashMap<CommandId, Option<CommandStatus>> = ids.iter().map(|id| (*id, None)).collect();
    let honest = invariants::commands(&tenant.pg, namespace, &all)
        .await
        .expect("checks");
    assert!(verdict(&honest, "every acceptance has its row").holds);
    assert!(verdict(&honest, "every row was answered to its caller").holds);
    assert!(verdict(&honest, "no subject twice").holds);
    assert!(
        !verdict(&honest, "every row is terminal").holds,
        "three rows wait: {honest:?}"
    );

    // A caller told of a command that has no row, a row no caller heard of, a status misread.
    let mut told: HashMap<CommandId, Option<CommandStatus>> = HashMap::new();
    told.insert(ids[0], Some(CommandStatus::Succeeded));
    told.insert(ids[1], None);
    told.insert(CommandId::new_v7(), None);
    let broken = invariants::commands(&tenant.pg, namespace, &told)
        .await
        .expect("checks");
    for name in [
        "every acceptance has its row",
        "every row was answered to its caller",
        "callers read the durable status",
    ] {
        assert!(!verdict(&broken, name).holds, "{name}: {broken:?}");
    }

    // One subject with a second row.
    sqlx::query("UPDATE commands SET subject = 's0' WHERE id = $1")
        .bind(ids[2])
        .execute(&tenant.pg)
        .await
        .expect("update");
    let twice = invariants::commands(&tenant.pg, namespace, &all)
        .await
        .expect("checks");
    assert!(!verdict(&twice, "no subject twice").holds, "{twice:?}");
    tenant.close().await.expect("close");
}

#[tokio::test]
async fn quota_checks_fail_when_counts_and_allocations_disagree() {
    let (tenant, _) = three_waiting().await;
    let namespace = tenant.creds.namespace_id;
    let honest = invariants::quota(&tenant.pg, namespace, "stock")
        .await
        .expect("checks");
    assert!(honest.iter().all(|c| c.holds), "{honest:?}");
    // The pool says one unit is allocated, but no allocation row and no succeeded command exist.
    sqlx::query("UPDATE quota_pools SET allocated = 1 WHERE namespace_id = $1")
        .bind(namespace)
        .execute(&tenant.pg)
        .await
        .expect("update");
    let broken = invariants::quota(&tenant.pg, namespace, "stock")
        .await
        .expect("checks");
    assert!(
        !verdict(&broken, "allocations within capacity").holds,
        "{broken:?}"
    );
    tenant.close().await.expect("close");
}

/// A reserved pool of 5 with four decided allocations written straight into PostgreSQL (no
/// executor): `a` confirmed, `b` released, `c` and `d` expired; the pool counts `a` alone.
async fn four_decided() -> (Tenant, [Uuid; 4]) {
    let declaration = DECLARATION.replace(
        r#"mode = "committed" }"#,
        r#"mode = "reserved", reservation_seconds = 60 }"#,
    );
    let db = shared_postgres().fresh_database().await;
    let tenant = Tenant::create(&db, &shared_redis().url(), 4, &declaration)
        .await
        .expect("tenant");
    let ids = [(); 4].map(|()| Uuid::new_v4());
    for (i, (id, state)) in ids
        .iter()
        .zip(["confirmed", "released", "expired", "expired"])
        .enumerate()
    {
        sqlx::query(
            "INSERT INTO allocations (id, namespace_id, pool, subject, command_id, state, expires_at)
             VALUES ($1, $2, 'stock', $3, $4, $5, now())",
        )
        .bind(id)
        .bind(tenant.creds.namespace_id)
        .bind(format!("s{i}"))
        .bind(Uuid::new_v4())
        .bind(state)
        .execute(&tenant.pg)
        .await
        .expect("allocation row");
    }
    sqlx::query("UPDATE quota_pools SET allocated = 1 WHERE namespace_id = $1")
        .bind(tenant.creds.namespace_id)
        .execute(&tenant.pg)
        .await
        .expect("pool counts");
    (tenant, ids)
}

fn held(allocation: Uuid, choice: Choice, answer: Option<Answer>) -> Held {
    Held {
        allocation,
        choice,
        answer,
        lost_attempt: false,
    }
}

fn decided(state: &str) -> Option<Answer> {
    Some(Answer::Decided {
        changed: true,
        state: state.into(),
    })
}

#[tokio::test]
async fn reserved_checks_fail_when_answers_rows_and_counts_disagree() {
    let (tenant, [a, b, c, d]) = four_decided().await;
    let namespace = tenant.creds.namespace_id;
    let samples = PoolSamples {
        samples: 3,
        capacity: 5,
        peak_held: 4,
        peak_reserved: 4,
        ..PoolSamples::default()
    };
    let honest = || Logged {
        held: vec![
            held(a, Choice::Confirm, decided("confirmed")),
            held(b, Choice::Release, decided("released")),
            held(
                c,
                Choice::Confirm,
                Some(Answer::Conflict {
                    state: Some("expired".into()),
                }),
            ),
            held(d, Choice::Lapse, None),
        ],
        without_allocation: 0,
    };
    let check = |logged: Logged, samples: PoolSamples| {
        let pg = tenant.pg.clone();
        async move {
            invariants::reserved(&pg, namespace, "stock", &logged, &samples)
                .await
                .expect("checks")
        }
    };
    let (checks, states) = check(honest(), samples.clone()).await;
    assert!(checks.iter().all(|c| c.holds), "{checks:?}");
    assert_eq!(
        (states.confirmed, states.released, states.expired),
        (1, 1, 2)
    );
    let quota = invariants::quota(&tenant.pg, namespace, "stock")
        .await
        .expect("checks");
    assert!(
        verdict(&quota, "allocations within capacity").holds,
        "{quota:?}"
    );

    let broken = |logged: Logged, samples: PoolSamples, name: &'static str| {
        let run = check(logged, samples);
        async move {
            let (checks, _) = run.await;
            assert!(!verdict(&checks, name).holds, "{name}: {checks:?}");
        }
    };
    // A confirm answered 200 whose row expired: the row contradicts the answer, and one more
    // confirm decided than confirmed rows.
    let mut logged = honest();
    logged.held[2] = held(c, Choice::Confirm, decided("confirmed"));
    broken(
        logged.clone(),
        samples.clone(),
        "every 200 to a confirm or release is the row's state",
    )
    .await;
    broken(
        logged,
        samples.clone(),
        "confirmed and released rows are as many as the 200s that decided them",
    )
    .await;
    // A 409 naming a state the row is not in.
    let mut logged = honest();
    logged.held[0] = held(
        a,
        Choice::Confirm,
        Some(Answer::Conflict {
            state: Some("expired".into()),
        }),
    );
    broken(
        logged,
        samples.clone(),
        "every 409 names the row's state (expired, or the other decision)",
    )
    .await;
    // A unit let lapse that is not expired; a winner's allocation with no row.
    let mut logged = honest();
    logged.held[3] = held(a, Choice::Lapse, None);
    broken(logged, samples.clone(), "every unit let lapse expired").await;
    let mut logged = honest();
    logged.held.push(held(Uuid::new_v4(), Choice::Lapse, None));
    broken(
        logged,
        samples.clone(),
        "every winner's allocation has its row",
    )
    .await;
    // A sample over capacity, or no sample at all.
    let over = PoolSamples {
        over_capacity: 1,
        first_over: Some((4, 2, 5)),
        ..samples.clone()
    };
    let name = "allocated + reserved within capacity at every sample (PostgreSQL, sampled)";
    broken(honest(), over, name).await;
    broken(honest(), PoolSamples::default(), name).await;

    // A reservation still held, counted by the pool, then not counted.
    sqlx::query(
        "UPDATE allocations SET state = 'reserved', expires_at = now() - interval '1 second'
          WHERE id = $1",
    )
    .bind(d)
    .execute(&tenant.pg)
    .await
    .expect("update");
    let left = invariants::await_settled(
        &tenant.pg,
        namespace,
        "stock",
        std::time::Duration::from_millis(300),
    )
    .await
    .expect("settled");
    assert_eq!(left, 1, "no sweeper runs: the wait ends at its deadline");
    broken(
        honest(),
        samples.clone(),
        "no reservation left once all had time to expire",
    )
    .await;
    broken(
        honest(),
        samples.clone(),
        "pool counts equal the allocation rows (allocated = confirmed, reserved = reserved)",
    )
    .await;
    tenant.close().await.expect("close");
}

#[test]
fn limit_checks_fail_above_their_limits() {
    let mut peaks = Peaks::default();
    peaks.executing.insert(
        "claim".into(),
        PeakOf {
            peak: 64,
            limit: Some(64),
        },
    );
    assert!(invariants::executing_within_limits(&peaks).holds);
    // What Redis says of its permits is not the witness: a permit count above the limit in the
    // status board's samples does not decide the check either way.
    peaks.command_in_flight.insert(
        "claim".into(),
        PeakOf {
            peak: 65,
            limit: Some(64),
        },
    );
    assert!(invariants::executing_within_limits(&peaks).holds);
    peaks.executing.insert(
        "claim".into(),
        PeakOf {
            peak: 65,
            limit: Some(64),
        },
    );
    assert!(!invariants::executing_within_limits(&peaks).holds);
    assert!(
        !invariants::executing_within_limits(&Peaks::default()).holds,
        "no sample proves nothing"
    );

    let options = {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            options: sluice_loadtest::scenario::Options,
        }
        Cli::parse_from([
            "x",
            "backend",
            "--account-max-in-flight",
            "2",
            "--provider-per-second",
            "10",
        ])
        .options
    };
    let accepted: HashMap<CommandId, Option<CommandStatus>> =
        [(CommandId::new_v7(), Some(CommandStatus::Succeeded))].into();
    let seen = |account: i64, provider: u64, unsigned: u64| BackendSeen {
        requests: 1,
        unsigned,
        repeated: 0,
        account_peak: HashMap::from([("p0:a0".to_string(), account)]),
        provider_peak_per_second: HashMap::from([("p0".to_string(), provider)]),
    };
    let holds = |seen: &BackendSeen| -> BTreeMap<String, bool> {
        invariants::backend(&options, seen, &accepted)
            .into_iter()
            .map(|c| (c.name, c.holds))
            .collect()
    };
    assert!(holds(&seen(2, 22, 0)).values().all(|h| *h), "at the limits");
    let over = holds(&seen(3, 23, 1));
    assert_eq!(over.values().filter(|h| !**h).count(), 3, "{over:?}");
}

/// The waiting room's checks, each handed evidence of a violation (and, beside it, the same
/// evidence without the violation, so the failure is the violation's and not the fixture's).
mod room {
    use std::collections::HashSet;

    use sha2::{Digest, Sha256};
    use sluice_loadtest::invariants::room::{
        Exit, PlaceRow, Published, Told, Witnessed, capacity, fair_order, fair_start, freeing,
        nothing_lost, prequeue_positions,
    };
    use uuid::Uuid;

    const S: i64 = 1_000_000;
    /// A whole second of the database's clock, far from zero.
    const T0: i64 = 1_800_000_000;

    /// A person admitted with one place whose passes ran over [iat, exp].
    fn person(n: u64, prequeue: bool, iat: i64, exp: i64, exit: Exit) -> Witnessed {
        let join_id = Uuid::from_u64_pair(7, n);
        Witnessed {
            join_id,
            subject: format!("p{n}"),
            prequeue,
            join_sent_us: (n as i64) * 1_000,
            join_answered_us: (n as i64) * 1_000 + 500,
            jtis: HashSet::from([join_id]),
            first_iat: Some(iat),
            last_exp: Some(exp),
            exit,
        }
    }

    fn row(w: &Witnessed, seq: i64, joined_at_us: i64, admitted_at_us: Option<i64>) -> PlaceRow {
        PlaceRow {
            id: w.join_id,
            subject: w.subject.clone(),
            seq,
            prequeue: w.prequeue,
            state: "left".into(),
            joined_at_us,
            admitted_at_us,
            pass_until: None,
        }
    }

    #[test]
    fn capacity_fails_when_the_witness_saw_more_live_passes_than_max_active() {
        // Back to back: one place's pass is accepted through its exp second, the next's iat
        // is the second after.
        let back_to_back = [
            person(1, false, T0, T0 + 5, Exit::Left),
            person(2, false, T0 + 6, T0 + 11, Exit::Left),
        ];
        assert!(capacity(&back_to_back, 1).holds);
        // The second admitted within the first's exp second: two live at once.
        let overlapping = [
            person(1, false, T0, T0 + 5, Exit::Left),
            person(2, false, T0 + 5, T0 + 10, Exit::Left),
        ];
        let check = capacity(&overlapping, 1);
        assert!(!check.holds, "{check:?}");
        assert!(check.detail.contains("at most 2 places"), "{check:?}");
    }

    #[test]
    fn nothing_lost_fails_on_a_lost_place_a_foreign_pass_or_a_subject_twice() {
        let people = [
            person(1, false, T0, T0 + 5, Exit::Left),
            person(2, false, T0, T0 + 5, Exit::Left),
        ];
        let rows: Vec<PlaceRow> = people
            .iter()
            .enumerate()
            .map(|(i, w)| row(w, i as i64 + 1, T0 * S, Some(T0 * S)))
            .collect();
        assert!(nothing_lost(&people, &rows).iter().all(|c| c.holds));

        let holds = |people: &[Witnessed], rows: &[PlaceRow]| -> Vec<bool> {
            nothing_lost(people, rows).iter().map(|c| c.holds).collect()
        };
        // A place answered 202 has no row.
        assert_eq!(holds(&people, &rows[..1]), [false, true]);
        // A row was never admitted.
        let mut never = rows.clone();
        never[1].admitted_at_us = None;
        assert_eq!(holds(&people, &never), [false, true]);
        // A person was handed another place's pass.
        let mut foreign = people.clone();
        foreign[0].jtis.insert(foreign[1].join_id);
        assert_eq!(holds(&foreign, &rows), [false, true]);
        // A row no person was answered.
        let mut extra = rows.clone();
        let mut stranger = extra[0].clone();
        stranger.id = Uuid::from_u64_pair(9, 9);
        stranger.subject = "stranger".into();
        extra.push(stranger);
        assert_eq!(holds(&people, &extra), [false, true]);
        // One subject holds two places.
        let mut twice = rows.clone();
        twice[1].subject = twice[0].subject.clone();
        assert_eq!(holds(&people, &twice), [true, false]);
    }

    /// Four pre-queue places and two later arrivals, admitted as the seed orders them.
    fn fair_fixture() -> (Published, Vec<Witnessed>, Vec<PlaceRow>) {
        let seed = [42u8; 32];
        let early: Vec<Witnessed> = (1..=4)
            .map(|n| person(n, true, T0, T0 + 5, Exit::Left))
            .collect();
        let ids: Vec<Uuid> = early.iter().map(|w| w.join_id).collect();
        let order = fair_order(&seed, &ids);
        let mut rows = Vec::new();
        for (rank, id) in order.iter().enumerate() {
            let w = early
                .iter()
                .find(|w| w.join_id == *id)
                .expect("a pre-queue place");
            let seq = early.iter().position(|e| e.join_id == *id).expect("seq") as i64 + 1;
            rows.push(row(w, seq, T0 * S, Some((T0 + 10 + rank as i64) * S)));
        }
        let mut late = Vec::new();
        for n in 5..=6 {
            let mut w = person(n, false, T0, T0 + 5, Exit::Left);
            // The second was sent only after the first was answered.
            w.join_sent_us = (T0 + n as i64) * S;
            w.join_answered_us = w.join_sent_us + 1_000;
            rows.push(row(
                &w,
                n as i64,
                (T0 + n as i64) * S,
                Some((T0 + 20 + n as i64) * S),
            ));
            late.push(w);
        }
        let published = Published {
            commitment: Some(hex::encode(Sha256::digest(seed))),
            seed_before: None,
            seed: Some(hex::encode(seed)),
            prequeue_ids: ids,
            complete: true,
        };
        (published, [early, late].concat(), rows)
    }

    #[test]
    fn prequeue_positions_fail_off_the_seeds_rank_less_those_admitted() {
        let (published, _, rows) = fair_fixture();
        let order = fair_order(&[42u8; 32], &published.prequeue_ids);
        // Rank 2, asked at T0 + 10.4 s: the first (rank 0) was admitted at T0 + 10 s, nobody
        // five seconds before, so 1 or 2 places ahead.
        let told = |position| Told {
            join_id: order[2],
            sent_us: (T0 + 10) * S + 400_000,
            answered_us: (T0 + 10) * S + 500_000,
            position,
        };
        for position in [1, 2] {
            let check = prequeue_positions(&published, &[told(position)], &rows);
            assert!(
                check.holds && check.detail.starts_with("1 positions"),
                "{check:?}"
            );
        }
        for position in [0, 3] {
            let check = prequeue_positions(&published, &[told(position)], &rows);
            assert!(!check.holds && check.detail.contains("rank 2"), "{check:?}");
        }
        // A place not in the published pre-queue is not judged.
        let stranger = Told {
            join_id: Uuid::from_u64_pair(9, 9),
            ..told(99)
        };
        let check = prequeue_positions(&published, &[stranger], &rows);
        assert!(
            check.holds && check.detail.starts_with("0 positions"),
            "{check:?}"
        );
    }

    #[test]
    fn fair_start_fails_on_a_broken_commitment_or_order() {
        let (published, people, rows) = fair_fixture();
        let check = fair_start(&published, &people, &rows);
        assert!(check.holds, "{check:?}");

        // The seed revealed is not the one committed to.
        let mut other = published.clone();
        other.seed = Some(hex::encode([43u8; 32]));
        assert!(!fair_start(&other, &people, &rows).holds);
        // The seed was public before the start.
        let mut early = published.clone();
        early.seed_before = published.seed.clone();
        assert!(!fair_start(&early, &people, &rows).holds);
        // Two pre-queue places admitted the other way round.
        let mut swapped = rows.clone();
        let (a, b) = (swapped[0].admitted_at_us, swapped[1].admitted_at_us);
        swapped[0].admitted_at_us = b;
        swapped[1].admitted_at_us = a;
        let check = fair_start(&published, &people, &swapped);
        assert!(
            !check.holds && check.detail.contains("pre-queue: 1 admitted"),
            "{check:?}"
        );
        // A later arrival admitted before the last of the pre-queue.
        let mut jumped = rows.clone();
        jumped[4].admitted_at_us = Some((T0 + 11) * S);
        assert!(!fair_start(&published, &people, &jumped).holds);
        // The later arrivals admitted out of arrival order.
        let mut reversed = rows.clone();
        reversed[4].admitted_at_us = Some((T0 + 30) * S);
        assert!(!fair_start(&published, &people, &reversed).holds);
        // A seq contradicting the people: answered before the other was sent, yet later.
        let mut reseq = rows.clone();
        reseq[4].seq = 6;
        reseq[5].seq = 5;
        reseq[4].admitted_at_us = Some((T0 + 27) * S);
        let check = fair_start(&published, &people, &reseq);
        assert!(
            !check.holds && check.detail.contains("later seq"),
            "{check:?}"
        );
        // A published pre-queue missing a place answered prequeue.
        let mut short = published.clone();
        short.prequeue_ids.pop();
        assert!(!fair_start(&short, &people, &rows).holds);
    }

    #[test]
    fn freeing_fails_when_an_abandoned_slot_stays_empty_with_people_waiting() {
        // max_active 1: an abandoner holds [T0, T0+5]; the next person waits from T0+1.
        let abandoner = person(1, false, T0, T0 + 5, Exit::Abandoned);
        let next = person(2, false, T0 + 6, T0 + 11, Exit::Left);
        let rows_admitted_at = |at_us: i64| {
            vec![
                row(&abandoner, 1, T0 * S, Some(T0 * S)),
                row(&next, 2, (T0 + 1) * S, Some(at_us)),
            ]
        };
        let people = [abandoner.clone(), next.clone()];
        // Admitted one tick after the grace: 1.2 s after the exp.
        let (check, delays) = freeing(
            &people,
            &rows_admitted_at((T0 + 6) * S + 200_000),
            1,
            0,
            false,
        );
        assert!(check.holds, "{check:?}");
        assert_eq!(delays, [1_200_000]);
        // Admitted four seconds late.
        let (check, delays) = freeing(&people, &rows_admitted_at((T0 + 10) * S), 1, 0, false);
        assert!(!check.holds, "{check:?}");
        assert_eq!(delays, [5_000_000]);
        // Never admitted.
        let mut rows = rows_admitted_at(0);
        rows[1].admitted_at_us = None;
        let never = Witnessed {
            first_iat: None,
            last_exp: None,
            jtis: HashSet::new(),
            exit: Exit::NotAdmitted,
            ..next
        };
        let (check, _) = freeing(&[abandoner, never], &rows, 1, 0, false);
        assert!(!check.holds, "{check:?}");
    }

    #[test]
    fn freeing_counts_slots_taken_by_passes_their_holders_never_saw() {
        // max_active 1: an abandoner holds [T0, T0+5]; the slot goes at T0+6.2 to a place whose
        // holder never sees its pass (PostgreSQL's exp T0+16), then at T0+17.2 to the next.
        let abandoner = person(1, false, T0, T0 + 5, Exit::Abandoned);
        let unseen = Witnessed {
            first_iat: None,
            last_exp: None,
            jtis: HashSet::new(),
            exit: Exit::NotAdmitted,
            ..person(2, false, T0 + 6, T0 + 16, Exit::Left)
        };
        let next = person(3, false, T0 + 17, T0 + 20, Exit::Left);
        let mut rows = vec![
            row(&abandoner, 1, T0 * S, Some(T0 * S)),
            row(&unseen, 2, (T0 + 1) * S, Some((T0 + 6) * S + 200_000)),
            row(&next, 3, (T0 + 1) * S, Some((T0 + 17) * S + 200_000)),
        ];
        rows[1].pass_until = Some(T0 + 16);
        let people = [abandoner.clone(), unseen.clone(), next.clone()];
        let (check, delays) = freeing(&people, &rows, 1, 0, false);
        assert!(check.holds, "{check:?}");
        assert_eq!(delays, [1_200_000]);
        // Without PostgreSQL's record of that pass, the slot looks empty for 12 s.
        rows[1].pass_until = None;
        let (check, _) = freeing(&people, &rows, 1, 0, false);
        assert!(!check.holds, "{check:?}");
        // A heartbeat PostgreSQL committed whose answer the abandoner never read holds the
        // slot until its exp: the refill is measured from there.
        rows[1].pass_until = Some(T0 + 16);
        rows[0].pass_until = Some(T0 + 6);
        rows[1].admitted_at_us = Some((T0 + 7) * S + 200_000);
        let (check, delays) = freeing(&people, &rows, 1, 0, false);
        assert!(check.holds, "{check:?}");
        assert_eq!(delays, [1_200_000]);
    }
}
