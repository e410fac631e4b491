//! `sluice-bench-table`: the efficiency table, each figure beside the baseline
//! measured in the same run, read from the reports `loadtest/bench.sh` has just written:
//! `sluice-bench-baselines --json` (intake decisions, polls, durable acceptances and the CPU each
//! answer cost), the drop's `report.json` (enqueue p99, offer read p50) and
//! `sluice-bench-connections --mode idle --json` (RSS with the idle connections open).
//!
//! It measures nothing itself: a figure whose report is missing is printed as missing (and the
//! exit status is 1), never guessed.

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::Value;
use sluice_loadtest::bench_stack::thousands;

#[derive(Debug, Parser)]
#[command(about = "The efficiency table: each figure beside its baseline from the same run")]
struct Args {
    /// `sluice-bench-baselines --json` output.
    #[arg(long)]
    baselines: PathBuf,
    /// The drop's `report.json` (`sluice-loadtest drop`).
    #[arg(long)]
    drop: PathBuf,
    /// `sluice-bench-connections --mode idle --json` output.
    #[arg(long)]
    connections: PathBuf,
}

/// One line of the table; `None` cells print as `–`.
struct Row {
    figure: String,
    sluice: String,
    baseline: String,
    ratio: String,
    goal: &'static str,
    met: Option<bool>,
}

fn main() {
    let args = Args::parse();
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    match read(&args.baselines) {
        Ok(report) => rows.extend(baseline_rows(&report)),
        Err(error) => missing.push(error),
    }
    match read(&args.drop) {
        Ok(report) => rows.extend(drop_rows(&report)),
        Err(error) => missing.push(error),
    }
    match read(&args.connections) {
        Ok(report) => rows.extend(connection_rows(&report)),
        Err(error) => missing.push(error),
    }
    println!("| figure | Sluice | baseline (same run) | ratio | goal | met |");
    println!("| --- | ---: | ---: | ---: | ---: | --- |");
    for row in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            row.figure,
            row.sluice,
            row.baseline,
            row.ratio,
            row.goal,
            match row.met {
                Some(true) => "yes",
                Some(false) => "no",
                None => "–",
            }
        );
    }
    if !missing.is_empty() {
        for error in &missing {
            eprintln!("missing: {error}");
        }
        std::process::exit(1);
    }
}

fn read(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The comparison whose measurement starts with `prefix` (the names `sluice-bench-baselines`
/// gives them).
fn comparison<'a>(report: &'a Value, prefix: &str) -> Option<&'a Value> {
    report["comparisons"].as_array()?.iter().find(|c| {
        c["measurement"]
            .as_str()
            .is_some_and(|m| m.starts_with(prefix))
    })
}

fn baseline_rows(report: &Value) -> Vec<Row> {
    let mut rows = Vec::new();
    let rate_row = |prefix: &str, figure: &str, goal: &'static str, target: f64| {
        let c = comparison(report, prefix)?;
        let ratio = c["ratio"].as_f64();
        Some(Row {
            figure: figure.into(),
            sluice: per_second(&c["sluice"]),
            baseline: per_second(&c["baseline"]),
            ratio: ratio.map_or("–".into(), |r| format!("{r:.2}×")),
            goal,
            met: ratio.map(|r| r >= target),
        })
    };
    rows.extend(rate_row(
        "intake decisions/s",
        "intake decisions/s (HTTP `429`) / raw `EVALSHA intake.lua`",
        "≥ 1.0×",
        1.0,
    ));
    rows.extend(rate_row(
        "ticket polls/s",
        "ticket polls/s / static hyper, same bytes",
        "≥ 0.6×",
        0.6,
    ));
    rows.extend(rate_row(
        "durable acceptances/s (HTTP 202 group commit vs naive",
        "durable acceptances/s / naive counter-row transaction",
        "≥ 10×",
        10.0,
    ));
    if let Some(c) = comparison(
        report,
        "durable acceptances/s (HTTP 202 group commit vs naive",
    ) {
        let sluice = cpu_total(&c["sluice"]);
        let naive = cpu_total(&c["baseline"]);
        rows.push(Row {
            figure: "CPU per durable acceptance (benchmark process with the gateway + Redis + \
                     PostgreSQL)"
                .into(),
            sluice: sluice.map_or("–".into(), |v| format!("{v:.0} µs")),
            baseline: naive.map_or("–".into(), |v| format!("{v:.0} µs")),
            ratio: match (sluice, naive) {
                (Some(s), Some(n)) if s > 0.0 => format!("{:.2}×", n / s),
                _ => "–".into(),
            },
            goal: "≤ 110 µs",
            met: sluice.map(|v| v <= 110.0),
        });
    }
    rows
}

fn per_second(side: &Value) -> String {
    side["median_per_second"]
        .as_f64()
        .map_or("–".into(), |v| format!("{}/s", thousands(v)))
}

/// CPU microseconds per answer across the three processes a side used.
fn cpu_total(side: &Value) -> Option<f64> {
    let cpu = &side["cpu_us_per_answer"];
    Some(cpu["this_process"].as_f64()? + cpu["redis"].as_f64()? + cpu["postgres"].as_f64()?)
}

fn drop_rows(report: &Value) -> Vec<Row> {
    let subjects = report["settings"]["subjects"]
        .as_u64()
        .map_or("the drop".to_string(), |n| format!("drop of {n}"));
    let target = |prefix: &str| {
        report["targets"].as_array().and_then(|targets| {
            targets
                .iter()
                .find(|t| t["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        })
    };
    let mut rows = Vec::new();
    for (prefix, figure, goal) in [
        ("p99 enqueue latency", "enqueue p99", "< 250 ms"),
        ("p50 offer read latency", "cached offer read p50", "< 20 ms"),
    ] {
        if let Some(t) = target(prefix) {
            rows.push(Row {
                figure: format!("{subjects}: {figure}"),
                sluice: t["measured"].as_str().unwrap_or("–").to_string(),
                baseline: "–".into(),
                ratio: "–".into(),
                goal,
                met: t["met"].as_bool(),
            });
        }
    }
    rows
}

fn connection_rows(report: &Value) -> Vec<Row> {
    let n = report["connections"].as_u64().unwrap_or(0);
    let first = |list: &str| report[list].as_array().and_then(|l| l.first()).cloned();
    let (Some(gateway), floor) = (first("gateways"), first("floors")) else {
        return Vec::new();
    };
    let open = gateway["rss_open_mib"].as_f64();
    let floor_open = floor.as_ref().and_then(|f| f["rss_open_mib"].as_f64());
    vec![Row {
        figure: format!(
            "gateway RSS with {n} idle keep-alive connections open (baseline: bare hyper-util)"
        ),
        sluice: open.map_or("–".into(), |v| format!("{v:.1} MiB")),
        baseline: floor_open.map_or("–".into(), |v| format!("{v:.1} MiB")),
        ratio: match (open, floor_open) {
            (Some(o), Some(f)) if f > 0.0 => format!("{:.2}×", o / f),
            _ => "–".into(),
        },
        goal: "≤ 64 MiB",
        met: open.map(|v| v <= 64.0),
    }]
}
