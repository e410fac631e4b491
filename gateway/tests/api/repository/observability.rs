//! `deploy/observability/` is true to the code and to the docs: every `sluice_*` name in the
//! Grafana dashboard, the alert rules and their unit tests is a series of a real scrape of a
//! gateway process and an executor process (`sluice execute --metrics-listen`: the executor's
//! families are on its own endpoint, never the gateway's) after enqueues, executions, a room
//! join and a quota pool; every family those scrapes export has a place on the dashboard; and
//! every alert's runbook is a section of `docs/operations.md`.
//!
//! Names are compared with the scrapes' sample names exactly: a histogram is read through its
//! `_bucket`, `_sum` or `_count` series and a counter through its `_total` one, so a misspelt
//! name, a bare histogram family or a counter without `_total` fails, naming the file, the name
//! and the closest name the scrapes have. `deploy/observability/verify.sh` checks the same files
//! offline (promtool, the dashboard's shape); this test is what ties them to the code.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::execution::{all_terminal, status_counts};
use crate::operators::metrics::{Exposition, MetricsExecutor, scrape, scrape_until};
use crate::support::gateway_process::GatewayProcess;
use crate::support::*;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const DASHBOARD: &str = "deploy/observability/grafana/sluice.json";
const RULES: &str = "deploy/observability/prometheus/alerts.yml";
const RULE_TESTS: &str = "deploy/observability/prometheus/alerts_test.yml";
const OPERATIONS: &str = "docs/operations.md";

/// Enqueues of the test: all succeed (the pool holds 100 units).
const ENQUEUES: usize = 3;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A character that can be part of a Prometheus metric name.
fn name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// Every `sluice_…` name in `text` (one that starts where no name character precedes it).
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut names = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("sluice_") {
        let start = from + found;
        let mut end = start + "sluice_".len();
        while end < bytes.len() && name_char(bytes[end]) {
            end += 1;
        }
        if start == 0 || !name_char(bytes[start - 1]) {
            names.insert(text[start..end].to_string());
        }
        from = end;
    }
    names
}

/// The dashboard's query expressions: every panel's (rows' nested panels too) targets' `expr`
/// and every variable's query.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn panels(list: &Value, out: &mut Vec<String>) {
        for panel in list.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push(expr.to_string());
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for query in [
            &variable["query"]["query"],
            &variable["query"],
            &variable["definition"],
        ] {
            if let Some(query) = query.as_str() {
                out.push(query.to_string());
            }
        }
    }
    out
}

/// The family a used name belongs to in `scrapes`: the name itself (a gauge, or a counter's
/// `_total`), or a histogram's family for its `_bucket`, `_sum` or `_count`.
fn family_of(name: &str, scrapes: &[&Exposition]) -> Option<String> {
    if scrapes.iter().any(|s| s.family_type(name).is_some()) {
        return Some(name.to_string());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let family = name.strip_suffix(suffix)?;
        scrapes
            .iter()
            .any(|s| s.family_type(family) == Some("histogram"))
            .then(|| family.to_string())
    })
}

/// Why `name` is not a series of the scrapes, and the scraped name closest to it.
fn hint(name: &str, scrapes: &[&Exposition], scraped: &BTreeSet<String>) -> String {
    let why = match scrapes.iter().find_map(|s| s.family_type(name)) {
        Some("histogram") => "a histogram family: use its _bucket, _sum or _count series".into(),
        Some(kind) => format!("a {kind} family with no series"),
        None => "not exported".to_string(),
    };
    let closest = scraped
        .iter()
        .min_by_key(|candidate| edit_distance(name, candidate))
        .map(String::as_str)
        .unwrap_or("nothing");
    format!("{why}; the closest scraped name is {closest}")
}

/// Levenshtein distance, for the hint only.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// GitHub's anchor of a Markdown heading: lowercased, characters other than letters, digits,
/// spaces, `-` and `_` dropped, spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_use_only_what_a_real_scrape_exports() {
    let declaration = format!(
        "{CLAIM_DECLARATION}\n[[room]]\ncode = \"doors\"\nmax_active = 2\npass_seconds = 600\n"
    );
    let stack = Stack::with_declaration(&declaration).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = GatewayProcess::start(&stack, dir.path(), "gateway").await;
    let credential = stack.credential();
    let offer = offer();
    for i in 0..ENQUEUES {
        let body = json!({
            "request_key": format!("k-{i}"),
            "subject": format!("buyer-{i}"),
            "input": {"offer": offer},
        });
        let reply = gateway
            .post("/v1/commands/claim:enqueue", &credential, &body)
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let joined = crate::rooms::kit::join(&stack, "doors", "visitor").await;
    assert!(joined.status.is_success(), "{:?}", joined.body);

    let executor = MetricsExecutor::start(&stack, dir.path()).await;
    assert!(
        all_terminal(&stack, Duration::from_secs(20)).await,
        "every command lands: {:?}\n{}",
        status_counts(&stack).await,
        executor.process.log_text()
    );
    let executed = scrape_until(&executor.base, |e| {
        e.value("sluice_executions_total", &[("status", "succeeded")]) == ENQUEUES as f64
    })
    .await;
    let served = scrape(&gateway.admin_base, "/metrics").await;
    let scrapes = [&served, &executed];
    let scraped: BTreeSet<String> = scrapes.iter().flat_map(|s| s.sample_names()).collect();
    // What the files are checked against has what each panel row shows.
    for name in [
        "sluice_intake_decisions_total",
        "sluice_acceptance_duration_seconds_bucket",
        "sluice_queue_depth",
        "sluice_executions_total",
        "sluice_handler_duration_seconds_bucket",
        "sluice_projection_generation",
        "sluice_room_waiting",
        "sluice_quota_pool_units",
        "sluice_cache_events_total",
    ] {
        assert!(
            scraped.contains(name),
            "no {name} in the scrapes: {scraped:?}"
        );
    }

    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(
        queries.len() >= 30,
        "the dashboard's expressions are found: {queries:?}"
    );
    let on_dashboard: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let mut misses = Vec::new();
    for (file, names) in [
        (DASHBOARD, metric_names(&read(DASHBOARD))),
        (RULES, metric_names(&read(RULES))),
        (RULE_TESTS, metric_names(&read(RULE_TESTS))),
    ] {
        assert!(names.len() >= 5, "{file} names its metrics: {names:?}");
        for name in names.iter().filter(|name| !scraped.contains(*name)) {
            misses.push(format!(
                "{file}: {name} ({})",
                hint(name, &scrapes, &scraped)
            ));
        }
    }
    assert!(
        misses.is_empty(),
        "names that a real scrape of a gateway and an executor does not have:\n  {}\nscraped: {scraped:?}",
        misses.join("\n  ")
    );

    // The other way round: every family exported has a panel.
    let shown: BTreeSet<String> = on_dashboard
        .iter()
        .filter_map(|name| family_of(name, &scrapes))
        .collect();
    let exported: BTreeSet<String> = scrapes
        .iter()
        .flat_map(|s| s.families())
        .filter(|family| family.starts_with("sluice_"))
        .collect();
    let unshown: Vec<&String> = exported.difference(&shown).collect();
    assert!(
        unshown.is_empty(),
        "families exported but on no panel of {DASHBOARD} (add a panel or a query): {unshown:?}"
    );

    // Every alert has a runbook, and each runbook is a section of docs/operations.md.
    let rules = read(RULES);
    let alerts = rules
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    let runbooks: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("runbook:"))
        .map(|v| v.trim().trim_matches('"'))
        .collect();
    assert!(alerts >= 10, "{RULES} has its alerts: {alerts}");
    assert_eq!(runbooks.len(), alerts, "one runbook per alert in {RULES}");
    let sections: BTreeSet<String> = read(OPERATIONS)
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(anchor)
        .collect();
    for runbook in runbooks {
        let section = runbook
            .strip_prefix(&format!("{OPERATIONS}#"))
            .unwrap_or_else(|| panic!("{RULES}: runbook {runbook} is not {OPERATIONS}#…"));
        assert!(
            sections.contains(section),
            "{RULES}: runbook {runbook} names no section of {OPERATIONS}: {sections:?}"
        );
    }
}

#[test]
fn names_are_found_where_a_name_starts() {
    let names = metric_names(
        r#"sum(rate(sluice_a_total[5m])) / x_sluice_b + {"expr": "sluice_c_bucket{le=\"1\"}"} sluice_"#,
    );
    let expected: BTreeSet<String> = ["sluice_", "sluice_a_total", "sluice_c_bucket"]
        .map(String::from)
        .into();
    assert_eq!(names, expected);
    assert_eq!(
        anchor("Runbook: lease rescues and needs_review"),
        "runbook-lease-rescues-and-needs_review"
    );
    assert_eq!(edit_distance("sluice_queue_dept", "sluice_queue_depth"), 1);
}
