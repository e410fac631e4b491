//! The sections that are one table each: targets, invariants, requests per endpoint, peaks,
//! processes and settings. Each says so in words when it has no rows, rather than showing an
//! empty table.

use std::collections::BTreeMap;

use super::format::{count, decimal, esc, millis, seconds, signed};
use super::markup::{mark, no_data, section, table};
use crate::report::{
    Check, Endpoint, PeakOf, Peaks, ProcessUsage, Reservations, RoomFigures, Target, Waiting,
};

/// The documented targets (docs/performance.md) against what was measured: reported, not enforced, so a missed one is
/// marked rather than failing the run.
pub(super) fn targets(targets: &[Target]) -> String {
    let rows: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td>{}</td></tr>\n",
                esc(&t.name),
                esc(&t.measured),
                esc(&t.goal),
                mark(t.met, "met", "missed")
            )
        })
        .collect();
    section(
        "Targets",
        &table(
            &["target", "measured", "goal", "met"],
            &[false, true, true, false],
            &rows,
            &no_data("no targets were given"),
        ),
    )
}

/// How the waiters were told and polled: the first ETA against the actual start, polls against
/// the advice, and the order of starts within each resource.
pub(super) fn waiting(waiting: Option<&Waiting>) -> String {
    let rows: Vec<String> = waiting
        .map(Waiting::rows)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| {
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td></tr>\n",
                esc(name),
                esc(&value)
            )
        })
        .collect();
    section(
        "Waiting",
        &table(
            &["figure", "value"],
            &[false, true],
            &rows,
            &no_data("no waiting figures in this report"),
        ),
    )
}

/// What became of the reserved units of a `--mode reserved` sale; nothing for other runs, which
/// have none.
pub(super) fn reservations(reservations: Option<&Reservations>) -> String {
    let Some(reservations) = reservations else {
        return String::new();
    };
    let rows: Vec<String> = reservations
        .rows()
        .into_iter()
        .map(|(name, value)| {
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td></tr>\n",
                esc(name),
                esc(&value)
            )
        })
        .collect();
    section(
        "Reservations",
        &table(&["figure", "value"], &[false, true], &rows, ""),
    )
}

/// The waiting room's figures of a `room` run; nothing for other runs.
pub(super) fn room(room: Option<&RoomFigures>) -> String {
    let Some(room) = room else {
        return String::new();
    };
    let rows: Vec<String> = room
        .rows()
        .into_iter()
        .map(|(name, value)| {
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td></tr>\n",
                esc(name),
                esc(&value)
            )
        })
        .collect();
    section(
        "Waiting room",
        &table(&["figure", "value"], &[false, true], &rows, ""),
    )
}

/// Every invariant checked after the run with the numbers behind it, so a reader can see why
/// the verdict is what it is.
pub(super) fn invariants(checks: &[Check]) -> String {
    let rows: Vec<String> = checks
        .iter()
        .map(|c| {
            format!(
                "<tr><td class=\"text\">{}</td><td>{}</td><td class=\"text\">{}</td></tr>\n",
                esc(&c.name),
                mark(c.holds, "holds", "violated"),
                esc(&c.detail)
            )
        })
        .collect();
    section(
        "Invariants",
        &table(
            &["invariant", "holds", "detail"],
            &[false, false, false],
            &rows,
            &no_data("no invariants were checked"),
        ),
    )
}

/// Requests per endpoint with their statuses and latency percentiles, so a slow or failing
/// endpoint can be told from the rest. Transport errors and 5xx are marked.
pub(super) fn endpoints(requests: &BTreeMap<String, Endpoint>) -> String {
    let rows: Vec<String> = requests
        .iter()
        .map(|(name, e)| {
            let statuses: Vec<String> = e
                .by_status
                .iter()
                .map(|(status, n)| {
                    let failed = status == "error" || status.starts_with('5');
                    let class = if failed { " class=\"bad-text\"" } else { "" };
                    format!(
                        "<span class=\"status\"><code{class}>{}</code>\u{a0}×\u{a0}{}</span>",
                        esc(status),
                        count(*n)
                    )
                })
                .collect();
            let l = &e.latency;
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td><td>{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>\n",
                esc(name),
                count(e.count),
                statuses.join(", "),
                millis(l.p50_ms),
                millis(l.p95_ms),
                millis(l.p99_ms),
                millis(l.max_ms)
            )
        })
        .collect();
    section(
        "Requests per endpoint",
        &table(
            &[
                "endpoint", "requests", "statuses", "p50", "p95", "p99", "max",
            ],
            &[false, true, false, true, true, true, true],
            &rows,
            &no_data("no requests were sent"),
        ),
    )
}

/// The stack's own view of its load. A peak above its declared limit is the one thing here that
/// should never happen, so it is marked.
pub(super) fn peaks(peaks: &Peaks) -> String {
    let row = |what: String, peak: String, limit: Option<i64>, over: bool| {
        let class = if over { " bad-text" } else { "" };
        format!(
            "<tr><td class=\"text\">{what}</td><td class=\"num{class}\">{peak}</td>\
             <td class=\"num\">{}</td></tr>\n",
            limit.map(signed).unwrap_or_else(|| "—".into())
        )
    };
    let limited = |kind: &str, name: &str, p: &PeakOf| {
        let over = p.limit.is_some_and(|limit| p.peak > limit);
        row(
            format!("{kind} <code>{}</code>", esc(name)),
            signed(p.peak),
            p.limit,
            over,
        )
    };
    let mut rows = vec![row(
        "application in flight".into(),
        signed(peaks.application_in_flight),
        None,
        false,
    )];
    rows.extend(
        peaks
            .command_in_flight
            .iter()
            .map(|(name, p)| limited("in flight, command", name, p)),
    );
    rows.extend(
        peaks
            .limit_keys
            .iter()
            .map(|(name, p)| limited("in flight, limit key", name, p)),
    );
    rows.push(row("waiting".into(), signed(peaks.waiting), None, false));
    rows.push(row(
        "unfinished".into(),
        signed(peaks.unfinished),
        None,
        false,
    ));
    rows.push(row(
        "oldest unfinished command".into(),
        seconds(peaks.oldest_unfinished_seconds),
        None,
        false,
    ));
    let body = if peaks.samples == 0 {
        no_data("the status endpoint was never sampled")
    } else {
        table(&["what", "peak", "limit"], &[false, true, true], &rows, "")
    };
    format!(
        "<section>\n<h2>Peaks <small class=\"when\">from {} samples of the status endpoint\
         </small></h2>\n{body}</section>\n",
        count(peaks.samples)
    )
}

/// CPU and memory of the stack's processes, so a run limited by the machine is not mistaken
/// for one limited by the stack.
pub(super) fn processes(processes: &[ProcessUsage]) -> String {
    let rows: Vec<String> = processes
        .iter()
        .map(|p| {
            format!(
                "<tr><td class=\"text\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>\n",
                esc(&p.name),
                p.pid,
                decimal(p.cpu_average_percent, 1),
                decimal(p.cpu_peak_percent, 1),
                decimal(p.rss_peak_mib, 1),
                count(p.samples)
            )
        })
        .collect();
    section(
        "Processes",
        &table(
            &[
                "process",
                "pid",
                "CPU avg %",
                "CPU peak %",
                "RSS peak MiB",
                "samples",
            ],
            &[false, true, true, true, true, true],
            &rows,
            &no_data("no processes were sampled"),
        ),
    )
}

/// The options as given, verbatim JSON, so the run can be reproduced from the page alone.
pub(super) fn settings(settings: &BTreeMap<String, serde_json::Value>) -> String {
    let rows: Vec<String> = settings
        .iter()
        .map(|(key, value)| {
            format!(
                "<tr><td class=\"text\"><code>{}</code></td><td class=\"json\"><code>{}</code>\
                 </td></tr>\n",
                esc(key),
                esc(&value.to_string())
            )
        })
        .collect();
    section(
        "Settings",
        &table(
            &["setting", "value"],
            &[false, false],
            &rows,
            &no_data("no settings were recorded"),
        ),
    )
}
