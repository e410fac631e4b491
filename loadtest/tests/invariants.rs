//! Each invariant check can fail: a real namespace with real rows, then the record (or the
//! callers' view, or the observations) is made to contradict it, and the check must say so.

use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::CommandStatus;
use std::collections::{BTreeMap, HashMap};

use hyper::Method;
use serde_json::Value;
use sluice_gateway::config::GatewayConfig;
use sluice_loadtest::api::{Outcome, exchange};
use sluice_loadtest::bench_stack::{RunningGateway, Tenant};
use sluice_loadtest::driver::http_client;
use sluice_loadtest::invariants;
use sluice_loadtest::report::{Check, PeakOf, Peaks};
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
