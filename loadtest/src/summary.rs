//! The report in a few lines of Markdown for the terminal (and the table of `docs/performance.md`).

use std::fmt::Write;

use crate::report::Report;

pub fn text(report: &Report) -> String {
    let p = &report.people;
    let mut out = String::new();
    let m = &report.machine;
    let _ = writeln!(
        out,
        "\n{} on {}: {} cpus ({}), load {:.2}, {:.1} s",
        report.scenario, report.stack, m.cpus, m.cpu_model, m.load_average, report.duration_seconds
    );
    let _ = writeln!(out, "\n| figure | value |\n| --- | ---: |");
    let sum = |map: &std::collections::BTreeMap<String, u64>| map.values().sum::<u64>();
    let codes = |map: &std::collections::BTreeMap<String, u64>| {
        map.iter()
            .map(|(code, n)| format!("{code} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rows = [
        ("arrived", p.arrived.to_string()),
        ("entered (offer read)", p.entered.to_string()),
        (
            "durably accepted",
            format!(
                "{} ({:.1} % of arrivals)",
                p.accepted,
                p.accepted as f64 * 100.0 / p.arrived.max(1) as f64
            ),
        ),
        ("succeeded", p.succeeded.to_string()),
        (
            "rejected",
            format!("{} ({})", sum(&p.rejected), codes(&p.rejected)),
        ),
        (
            "refused in the end",
            format!("{} ({})", sum(&p.refused), codes(&p.refused)),
        ),
        ("unknown outcomes", p.unknown.to_string()),
        (
            "explicit refusals (all attempts)",
            format!(
                "{} ({})",
                sum(&p.refusals_by_code),
                codes(&p.refusals_by_code)
            ),
        ),
        ("retries", p.retries.to_string()),
        (
            "final result p50 / p95 / p99 / max",
            format!(
                "{:.0} / {:.0} / {:.0} / {:.0} ms",
                report.final_latency.p50_ms,
                report.final_latency.p95_ms,
                report.final_latency.p99_ms,
                report.final_latency.max_ms
            ),
        ),
        (
            "peak arrivals in one second",
            report
                .timeline
                .iter()
                .map(|s| s.arrivals)
                .max()
                .unwrap_or(0)
                .to_string(),
        ),
        (
            "oldest unfinished (sampled)",
            format!("{:.1} s", report.peaks.oldest_unfinished_seconds),
        ),
        ("peak waiting", report.peaks.waiting.to_string()),
        (
            "peak application permits",
            report.peaks.application_in_flight.to_string(),
        ),
    ];
    for (name, value) in rows {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    // A 503's code is shared by several causes; its message names the one it was.
    for (message, n) in &p.unavailable_messages {
        let _ = writeln!(out, "| 503 answered \"{message}\" | {n} |");
    }
    let _ = writeln!(
        out,
        "\n| endpoint | requests | statuses | p50 ms | p99 ms | max ms |\n| --- | ---: | --- | ---: | ---: | ---: |"
    );
    for (name, e) in &report.requests {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {:.1} | {:.1} | {:.1} |",
            e.count,
            codes(&e.by_status),
            e.latency.p50_ms,
            e.latency.p99_ms,
            e.latency.max_ms
        );
    }
    let _ = writeln!(
        out,
        "\n| process | cpu avg % | cpu peak % | rss peak MiB |\n| --- | ---: | ---: | ---: |"
    );
    for u in &report.processes {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} |",
            u.name, u.cpu_average_percent, u.cpu_peak_percent, u.rss_peak_mib
        );
    }
    if let Some(waiting) = &report.waiting {
        let _ = writeln!(out, "\n| waiting | value |\n| --- | ---: |");
        for (name, value) in waiting.rows() {
            let _ = writeln!(out, "| {name} | {value} |");
        }
    }
    if let Some(reservations) = &report.reservations {
        let _ = writeln!(out, "\n| reservations | value |\n| --- | ---: |");
        for (name, value) in reservations.rows() {
            let _ = writeln!(out, "| {name} | {value} |");
        }
    }
    if let Some(room) = &report.room {
        let _ = writeln!(out, "\n| waiting room | value |\n| --- | ---: |");
        for (name, value) in room.rows() {
            let _ = writeln!(out, "| {name} | {value} |");
        }
    }
    if let Some(sigterm) = &report.sigterm {
        let _ = writeln!(out, "\n| SIGTERM under load | value |\n| --- | ---: |");
        for (name, value) in sigterm.rows() {
            let _ = writeln!(out, "| {name} | {value} |");
        }
        for failure in &sigterm.failures {
            let _ = writeln!(out, "| no answer | {failure} |");
        }
    }
    let _ = writeln!(
        out,
        "\n| target | measured | goal | met |\n| --- | ---: | --- | --- |"
    );
    for t in &report.targets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.name,
            t.measured,
            t.goal,
            if t.met { "yes" } else { "no" }
        );
    }
    let _ = writeln!(out, "\n| invariant | holds | detail |\n| --- | --- | --- |");
    for c in &report.invariants {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            c.name,
            if c.holds { "yes" } else { "NO" },
            c.detail
        );
    }
    out
}
