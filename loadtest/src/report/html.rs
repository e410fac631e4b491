//! Renders a [`Report`](super::Report) as one self-contained HTML page (inline CSS and SVG, no
//! script, nothing fetched), so it can be mailed, archived or opened offline.
//!
//! Two rules keep the page valid whatever the run produced: every string taken from the report
//! goes through `esc` (codes, hostnames and settings are whatever the run saw), and every
//! number written into the SVG goes through `frac` and `coord`, so a degenerate run (no
//! arrivals, one sample, a zero-length axis) draws an empty-looking chart, never `NaN`.

use std::collections::BTreeMap;

use super::{
    Check, Endpoint, Latency, Machine, PeakOf, Peaks, People, ProcessUsage, Report, Second,
    StatusSample, Target,
};

/// The whole page.
pub fn render(report: &Report) -> String {
    let main = [
        outcomes(&report.people),
        targets(&report.targets),
        invariants(&report.invariants),
        charts(report),
        endpoints(&report.requests),
        peaks(&report.peaks),
        processes(&report.processes),
        settings(&report.settings),
    ]
    .concat();
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Sluice load run: {scenario}, {started}</title>\n<style>{STYLE}</style>\n</head>\n\
         <body>\n{header}<main>\n{main}</main>\n<footer>Written by sluice-loadtest. This page \
         is self-contained: no script, nothing fetched.</footer>\n</body>\n</html>\n",
        scenario = text_or(&report.scenario, "unnamed scenario"),
        started = text_or(&report.started_at, "start unknown"),
        header = header(report),
    )
}

/// Light by default, dark when the reader's system asks for it; charts take their colours from
/// the same variables so both schemes stay readable.
const STYLE: &str = "
:root{color-scheme:light dark;--bg:#f4f5f7;--card:#fff;--fg:#1c2128;--muted:#59636e;
--line:#c9ced6;--grid:#e6e9ee;--ok:#1a7f37;--ok-bg:#dafbe1;--bad:#cf222e;--bad-bg:#ffebe9;
--s1:#2f6fdb;--s2:#1f9d55;--s3:#d9731a;--s4:#8250df;--s5:#cf222e}
@media (prefers-color-scheme:dark){:root{--bg:#0f1217;--card:#181c23;--fg:#e6edf3;
--muted:#9aa5b1;--line:#3a424d;--grid:#262c35;--ok:#4ac26b;--ok-bg:#12301d;--bad:#ff7b72;
--bad-bg:#3d1518;--s1:#6ca4ff;--s2:#4ac26b;--s3:#f0a04b;--s4:#b48cff;--s5:#ff7b72}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
header.top,main,footer{max-width:1240px;margin:0 auto;padding:0 20px}
header.top{display:grid;grid-template-columns:1fr auto;gap:8px 24px;padding-top:24px;
align-items:start}
.kicker{margin:0;color:var(--muted);font-size:13px;text-transform:uppercase;letter-spacing:.06em}
h1{margin:2px 0 4px;font-size:30px;line-height:1.15;overflow-wrap:anywhere}
.when{margin:0;color:var(--muted);overflow-wrap:anywhere}
.verdict{border-radius:12px;padding:14px 22px;text-align:right}
.verdict strong{display:block;font-size:28px;line-height:1.1;letter-spacing:.01em}
.verdict span{font-size:13px}
.verdict.ok{background:var(--ok-bg);color:var(--ok)}
.verdict.bad{background:var(--bad-bg);color:var(--bad)}
.facts{grid-column:1/-1;display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));
gap:8px 20px;margin:8px 0 0;padding:14px 16px;background:var(--card);border:1px solid var(--line);
border-radius:10px}
.facts dt{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.05em}
.facts dd{margin:0;overflow-wrap:anywhere}
section{margin:28px 0}
h2{font-size:19px;margin:0 0 10px}
h3{font-size:14px;margin:0 0 6px;color:var(--muted);font-weight:600}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.figure{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.figure .label{display:block;color:var(--muted);font-size:13px}
.figure .value{display:block;font-size:26px;font-weight:650;font-variant-numeric:tabular-nums}
.figure .note{display:block;color:var(--muted);font-size:12px}
.figure.bad{border-color:var(--bad);background:var(--bad-bg)}
.figure.bad .value,.figure.bad .label{color:var(--bad)}
.codes{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:10px;
margin-top:12px}
.codes>div{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.scroll{overflow-x:auto;background:var(--card);border:1px solid var(--line);border-radius:10px}
.codes .scroll{border:0;border-radius:0}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:6px 12px;text-align:left;vertical-align:top;border-bottom:1px solid var(--grid)}
thead th{color:var(--muted);font-weight:600;font-size:13px;white-space:nowrap}
tbody tr:last-child>*{border-bottom:0}
.num{text-align:right;white-space:nowrap}
td.text{overflow-wrap:break-word}
td.json code{overflow-wrap:anywhere}
.status{white-space:nowrap}
code{font:13px/1.4 ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace}
.yes{color:var(--ok);font-weight:600;white-space:nowrap}
.no,.bad-text{color:var(--bad);font-weight:600;white-space:nowrap}
.warn{color:var(--bad);font-weight:600}
.chart h3{margin:12px 14px 0;color:var(--fg);font-size:15px}
.nodata{color:var(--muted);font-style:italic;margin:0;padding:18px 14px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));gap:14px}
.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:10px;
overflow-x:auto}
.chart svg{display:block;width:100%;min-width:520px;height:auto}
.chart text{fill:var(--muted);font-size:13px}
.chart .title{fill:var(--fg);font-size:15px;font-weight:600}
.grid{stroke:var(--grid)}
.axis{stroke:var(--line)}
.bar{fill:var(--s1)}
.s1{color:var(--s1)}.s2{color:var(--s2)}.s3{color:var(--s3)}.s4{color:var(--s4)}
.s5{color:var(--s5)}
.col,.dot,.swatch{fill:currentColor}
.line{fill:none;stroke:currentColor;stroke-width:2;stroke-linejoin:round}
.halo{stroke:var(--card);stroke-width:5}
.pct{stroke:currentColor;stroke-width:2;stroke-dasharray:5 3}
.chart text.mark{fill:var(--muted);font-weight:600}
.mark tspan{fill:currentColor}
footer{color:var(--muted);font-size:12px;padding-bottom:28px}
@media (max-width:640px){header.top{grid-template-columns:1fr}.verdict{text-align:left}
h1{font-size:24px}.figure .value{font-size:22px}}
";

// ---------------------------------------------------------------------------------------------
// Sections
// ---------------------------------------------------------------------------------------------

/// Scenario, machine and the verdict, so a reader knows at a glance what was run where and
/// whether it may be trusted.
fn header(report: &Report) -> String {
    let (class, verdict) = if report.invariants_hold {
        ("ok", "invariants hold")
    } else {
        ("bad", "INVARIANT VIOLATED")
    };
    let holding = report.invariants.iter().filter(|c| c.holds).count();
    let met = report.targets.iter().filter(|t| t.met).count();
    let summary = format!(
        "{holding} of {} checks hold · {met} of {} targets met",
        report.invariants.len(),
        report.targets.len()
    );
    format!(
        "<header class=\"top\">\n<div>\n<p class=\"kicker\">Sluice load run · capacity review</p>\n\
         <h1>{scenario}</h1>\n<p class=\"when\">started {started} · ran {duration}</p>\n</div>\n\
         <div class=\"verdict {class}\"><strong>{verdict}</strong><span>{summary}</span></div>\n\
         {machine}</header>\n",
        scenario = text_or(&report.scenario, "unnamed scenario"),
        started = text_or(&report.started_at, "at an unknown time"),
        duration = seconds(report.duration_seconds),
        machine = machine(&report.stack, &report.machine),
    )
}

fn machine(stack: &str, machine: &Machine) -> String {
    let facts = [
        ("Stack", text_or(stack, "—")),
        ("Host", text_or(&machine.hostname, "—")),
        (
            "CPU",
            format!(
                "{} × {}",
                count(machine.cpus as u64),
                text_or(&machine.cpu_model, "—")
            ),
        ),
        (
            "Memory",
            format!("{}\u{a0}GiB", decimal(machine.memory_gib, 1)),
        ),
        ("Kernel", text_or(&machine.kernel, "—")),
        (
            "Load average",
            format!("{} (1 min, at start)", decimal(machine.load_average, 2)),
        ),
    ];
    let items: String = facts
        .iter()
        .map(|(name, value)| format!("<div><dt>{name}</dt><dd>{value}</dd></div>\n"))
        .collect();
    format!("<dl class=\"facts\">\n{items}</dl>\n")
}

/// Where every arrival ended. Unknown outcomes are the figure a capacity review cares most
/// about (the target is 0), so it turns red as soon as there is one.
fn outcomes(people: &People) -> String {
    let rejected = sum(&people.rejected);
    let refused = sum(&people.refused);
    // No share of nothing: with no arrivals the note would only say "— of arrived".
    let share = |part: u64| match people.arrived {
        0 => String::new(),
        all => format!("{} of arrived", percent(part, all)),
    };
    let rate = percent(people.accepted, people.arrived);
    let figures: String = [
        ("arrived", count(people.arrived), String::new()),
        ("entered", count(people.entered), share(people.entered)),
        (
            "accepted (durable)",
            count(people.accepted),
            share(people.accepted),
        ),
        ("acceptance rate", rate, "accepted ÷ arrived".into()),
        (
            "succeeded",
            count(people.succeeded),
            share(people.succeeded),
        ),
        ("rejected", count(rejected), "accepted, then failed".into()),
        ("refused", count(refused), "never accepted".into()),
        ("unknown", count(people.unknown), "target 0".into()),
        ("retries", count(people.retries), "after a refusal".into()),
    ]
    .iter()
    .map(|(label, value, note)| {
        let bad = *label == "unknown" && people.unknown > 0;
        let class = if bad { "figure bad" } else { "figure" };
        let note = match note.as_str() {
            "" => String::new(),
            note => format!("<span class=\"note\">{note}</span>"),
        };
        format!(
            "<div class=\"{class}\"><span class=\"label\">{label}</span>\
             <span class=\"value\">{value}</span>{note}</div>\n"
        )
    })
    .collect();
    let ended = people
        .succeeded
        .saturating_add(rejected)
        .saturating_add(refused)
        .saturating_add(people.unknown);
    let mismatch = if ended == people.arrived {
        String::new()
    } else {
        format!(
            "<p class=\"warn\">Outcomes add up to {}, not the {} arrivals.</p>\n",
            count(ended),
            count(people.arrived)
        )
    };
    format!(
        "<section>\n<h2>Outcomes</h2>\n<div class=\"figures\">\n{figures}</div>\n{mismatch}\
         <div class=\"codes\">\n{}{}{}</div>\n</section>\n",
        by_code("Rejected by code", &people.rejected),
        by_code("Refused by code (final answer)", &people.refused),
        by_code("Refusals by code (every attempt)", &people.refusals_by_code),
    )
}

fn by_code(title: &str, codes: &BTreeMap<String, u64>) -> String {
    let total = sum(codes);
    let rows: Vec<String> = codes
        .iter()
        .map(|(code, n)| {
            format!(
                "<tr><td class=\"text\"><code>{}</code></td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>\n",
                esc(code),
                count(*n),
                percent(*n, total)
            )
        })
        .collect();
    format!(
        "<div>\n<h3>{title}</h3>\n{}</div>\n",
        table(
            &["code", "count", "share"],
            &[false, true, true],
            &rows,
            "<p class=\"nodata\">None.</p>\n"
        )
    )
}

fn targets(targets: &[Target]) -> String {
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

fn invariants(checks: &[Check]) -> String {
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

fn endpoints(requests: &BTreeMap<String, Endpoint>) -> String {
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
fn peaks(peaks: &Peaks) -> String {
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

fn processes(processes: &[ProcessUsage]) -> String {
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
fn settings(settings: &BTreeMap<String, serde_json::Value>) -> String {
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

fn section(title: &str, body: &str) -> String {
    format!("<section>\n<h2>{title}</h2>\n{body}</section>\n")
}

/// A scrollable table (wide tables scroll on their own instead of widening the page), or the
/// `empty` note when there are no rows.
fn table(head: &[&str], numeric: &[bool], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return empty.to_string();
    }
    let head: String = head
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let class = if numeric.get(i).copied().unwrap_or(false) {
                " class=\"num\""
            } else {
                ""
            };
            format!("<th scope=\"col\"{class}>{name}</th>")
        })
        .collect();
    format!(
        "<div class=\"scroll\">\n<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{}</tbody>\n\
         </table>\n</div>\n",
        rows.concat()
    )
}

fn no_data(what: &str) -> String {
    format!("<p class=\"nodata\">No data: {what}.</p>\n")
}

fn mark(ok: bool, yes: &str, no: &str) -> String {
    if ok {
        format!("<span class=\"yes\">✓ {yes}</span>")
    } else {
        format!("<span class=\"no\">✗ {no}</span>")
    }
}

// ---------------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------------

/// The SVG coordinate system every chart shares; CSS scales it to the column width.
const W: f64 = 640.0;
const H: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 66.0;
const BOTTOM: f64 = 52.0;

fn charts(report: &Report) -> String {
    format!(
        "<section>\n<h2>Charts</h2>\n<div class=\"charts\">\n{}{}{}</div>\n</section>\n",
        latency_chart(&report.final_latency),
        timeline_chart(&report.timeline),
        status_chart(&report.peaks.series),
    )
}

/// Time to the final answer on a log axis: the buckets are log-spaced, so equal-width bars show
/// both the fast bulk and the slow tail. Only non-empty buckets get a bar.
fn latency_chart(latency: &Latency) -> String {
    const TITLE: &str = "Time to the final answer";
    let buckets: Vec<(f64, u64)> = latency
        .buckets
        .iter()
        .filter(|b| b.upper_ms.is_finite() && b.upper_ms > 0.0)
        .map(|b| (b.upper_ms.log10(), b.count))
        .collect();
    if buckets.iter().all(|(_, n)| *n == 0) {
        return empty_chart(TITLE, "no final answers were recorded");
    }
    // The first bucket has no previous upper bound: give it the same log width as the next.
    let width = match buckets.as_slice() {
        [(a, _), (b, _), ..] if b > a => b - a,
        _ => 0.25,
    };
    let lo = buckets.first().map_or(0.0, |(upper, _)| upper - width);
    let hi = buckets.last().map_or(1.0, |(upper, _)| *upper);
    let highest = buckets.iter().map(|(_, n)| *n).max().unwrap_or(0);
    // Headroom above the tallest bar keeps the percentile labels clear of the bars.
    let y = nice_ticks(0.0, highest as f64 * 1.2, 4.0, 1.0);
    let mut body = y_grid(&y);
    let mut lower = lo;
    for (upper, n) in &buckets {
        if *n > 0 {
            let x0 = px(frac(lower, lo, hi)) + 1.0;
            let x1 = px(frac(*upper, lo, hi)) - 1.0;
            let top = py(frac(*n as f64, y.lo, y.hi));
            body.push_str(&format!(
                "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">\
                 <title>{} to {}: {}</title></rect>\n",
                coord(x0),
                coord(top),
                coord((x1 - x0).max(1.0)),
                coord(py(0.0) - top),
                duration_label(10f64.powf(lower)),
                duration_label(10f64.powf(*upper)),
                count(*n)
            ));
        }
        lower = *upper;
    }
    let ticks: Vec<(f64, String)> = log_ticks(lo, hi)
        .into_iter()
        .map(|t| (px(frac(t, lo, hi)), duration_label(10f64.powf(t))))
        .collect();
    body.push_str(&x_axis(
        &ticks,
        "time from arrival to final answer (log scale)",
    ));
    body.push_str(&y_caption("final answers"));
    let (marks, lines) = percentile_marks(latency, lo, hi);
    body.push_str(&lines);
    let mut legend = vec![Legend::new("final answers", "s1", Swatch::Box)];
    legend.extend(marks);
    chart("latency", TITLE, &legend, &body)
}

/// p50, p95 and p99 as vertical lines on the latency chart's log axis, with their legend
/// entries. Lines closer than a label's width share one label (`p95/p99`), so the labels fit in
/// one row in the headroom above the bars and never collide.
fn percentile_marks(latency: &Latency, lo: f64, hi: f64) -> (Vec<Legend>, String) {
    const APART: f64 = 36.0;
    let mut marks: Vec<(&str, f64, &'static str, f64)> = [
        ("p50", latency.p50_ms, "s2"),
        ("p95", latency.p95_ms, "s3"),
        ("p99", latency.p99_ms, "s5"),
    ]
    .into_iter()
    .filter(|(_, ms, _)| ms.is_finite() && *ms > 0.0)
    .map(|(name, ms, class)| (name, ms, class, px(frac(ms.log10(), lo, hi))))
    .collect();
    marks.sort_by(|a, b| a.3.total_cmp(&b.3));
    let legend = marks
        .iter()
        .map(|(name, ms, class, _)| {
            Legend::new(&format!("{name} {}", millis(*ms)), class, Swatch::Dash)
        })
        .collect();
    let (top, bottom) = (coord(TOP), coord(py(0.0)));
    let mut svg = String::new();
    for (_, _, class, x) in &marks {
        let x = coord(*x);
        svg.push_str(&format!(
            "<g class=\"{class}\"><line class=\"halo\" x1=\"{x}\" x2=\"{x}\" y1=\"{top}\" \
             y2=\"{bottom}\"/><line class=\"pct\" x1=\"{x}\" x2=\"{x}\" y1=\"{top}\" \
             y2=\"{bottom}\"/></g>\n"
        ));
    }
    // Groups of (first x, last x, names), left to right.
    let mut groups: Vec<(f64, f64, Vec<String>)> = Vec::new();
    for (name, _, class, x) in &marks {
        let name = format!("<tspan class=\"{class}\">{name}</tspan>");
        match groups.last_mut() {
            Some((_, last, names)) if x - *last < APART => {
                *last = *x;
                names.push(name);
            }
            _ => groups.push((*x, *x, vec![name])),
        }
    }
    for (first, last, names) in groups {
        // Right of the group's lines, or left of them near the right edge.
        let (x, anchor) = if last > W - RIGHT - 60.0 {
            (first - 5.0, "end")
        } else {
            (last + 5.0, "start")
        };
        svg.push_str(&format!(
            "<text class=\"mark\" x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>\n",
            coord(x),
            coord(TOP + 12.0),
            names.join("/")
        ));
    }
    (legend, svg)
}

/// Load per second. With few seconds grouped bars read best (every value is visible); beyond
/// that they get too thin and lines take over.
fn timeline_chart(timeline: &[Second]) -> String {
    const TITLE: &str = "Per second";
    const BARS_UP_TO: u64 = 30;
    type Pick = fn(&Second) -> u64;
    let series: [(&str, &str, Pick); 4] = [
        ("arrivals", "s1", |s| s.arrivals),
        ("acceptances", "s2", |s| s.acceptances),
        ("refusals", "s3", |s| s.refusals),
        ("completions", "s4", |s| s.completions),
    ];
    let highest = timeline
        .iter()
        .flat_map(|s| series.iter().map(move |(_, _, pick)| pick(s)))
        .max()
        .unwrap_or(0);
    if highest == 0 {
        return empty_chart(TITLE, "nothing arrived");
    }
    let mut seconds: Vec<&Second> = timeline.iter().collect();
    seconds.sort_by_key(|s| s.second);
    let last = seconds.last().map_or(0, |s| s.second);
    let y = nice_ticks(0.0, highest as f64, 4.0, 1.0);
    let mut body = y_grid(&y);
    let bars = last < BARS_UP_TO;
    let swatch = if bars { Swatch::Box } else { Swatch::Line };
    let ticks: Vec<(f64, String)> = if bars {
        let slots = (last + 1) as f64;
        let slot = (W - LEFT - RIGHT) / slots;
        let bar = slot * 0.8 / series.len() as f64;
        for s in &seconds {
            for (i, (name, class, pick)) in series.iter().enumerate() {
                let n = pick(s);
                if n == 0 {
                    continue;
                }
                let x = LEFT + slot * (s.second as f64 + 0.1) + bar * i as f64;
                let top = py(frac(n as f64, y.lo, y.hi));
                body.push_str(&format!(
                    "<rect class=\"col {class}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">\
                     <title>second {}: {} {name}</title></rect>\n",
                    coord(x),
                    coord(top),
                    coord(bar),
                    coord(py(0.0) - top),
                    s.second,
                    count(n)
                ));
            }
        }
        let every = (last / 12 + 1).max(1);
        (0..=last)
            .filter(|s| s % every == 0)
            .map(|s| (LEFT + slot * (s as f64 + 0.5), s.to_string()))
            .collect()
    } else {
        let span = last as f64;
        for (_, class, pick) in &series {
            let points: Vec<String> = seconds
                .iter()
                .map(|s| {
                    format!(
                        "{},{}",
                        coord(px(frac(s.second as f64, 0.0, span))),
                        coord(py(frac(pick(s) as f64, y.lo, y.hi)))
                    )
                })
                .collect();
            body.push_str(&format!(
                "<polyline class=\"line {class}\" points=\"{}\"/>\n",
                points.join(" ")
            ));
        }
        let x = nice_ticks(0.0, span, 8.0, 1.0);
        x.values
            .iter()
            .filter(|t| **t <= span)
            .map(|t| (px(frac(*t, 0.0, span)), decimal(*t, 0)))
            .collect()
    };
    body.push_str(&x_axis(&ticks, "seconds since the first arrival"));
    body.push_str(&y_caption("per second"));
    let legend: Vec<Legend> = series
        .iter()
        .map(|(name, class, _)| Legend::new(name, class, swatch))
        .collect();
    chart("timeline", TITLE, &legend, &body)
}

/// What `GET /v1/status` said during the run: how much work was running, waiting and not yet
/// finished.
fn status_chart(samples: &[StatusSample]) -> String {
    const TITLE: &str = "Work in the stack";
    type Pick = fn(&StatusSample) -> i64;
    let series: [(&str, &str, Pick); 3] = [
        ("application in flight", "s1", |s| s.application_in_flight),
        ("waiting", "s3", |s| s.waiting),
        ("unfinished", "s4", |s| s.unfinished),
    ];
    if samples.is_empty() {
        return empty_chart(TITLE, "the status endpoint was never sampled");
    }
    let mut samples: Vec<&StatusSample> = samples.iter().collect();
    samples.sort_by_key(|s| s.at_ms);
    let values = || {
        samples
            .iter()
            .flat_map(|s| series.iter().map(move |(_, _, pick)| pick(s)))
    };
    let lowest = values().min().unwrap_or(0).min(0);
    let highest = values().max().unwrap_or(0).max(1);
    let y = nice_ticks(lowest as f64, highest as f64, 4.0, 1.0);
    let span = samples.last().map_or(0.0, |s| s.at_ms as f64 / 1000.0);
    let x = nice_ticks(0.0, span.max(0.001), 8.0, 0.001);
    let mut body = y_grid(&y);
    let dots = samples.len() <= 40;
    for (_, class, pick) in &series {
        let points: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| {
                (
                    px(frac(s.at_ms as f64 / 1000.0, x.lo, x.hi)),
                    py(frac(pick(s) as f64, y.lo, y.hi)),
                )
            })
            .collect();
        let line: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{},{}", coord(*x), coord(*y)))
            .collect();
        body.push_str(&format!(
            "<polyline class=\"line {class}\" points=\"{}\"/>\n",
            line.join(" ")
        ));
        if dots {
            for (cx, cy) in &points {
                body.push_str(&format!(
                    "<circle class=\"dot {class}\" cx=\"{}\" cy=\"{}\" r=\"2.5\"/>\n",
                    coord(*cx),
                    coord(*cy)
                ));
            }
        }
    }
    let ticks: Vec<(f64, String)> = x
        .values
        .iter()
        .map(|t| (px(frac(*t, x.lo, x.hi)), trim(&format!("{t:.3}"))))
        .collect();
    body.push_str(&x_axis(&ticks, "seconds since the first arrival"));
    body.push_str(&y_caption("commands"));
    let legend: Vec<Legend> = series
        .iter()
        .map(|(name, class, _)| Legend::new(name, class, Swatch::Line))
        .collect();
    chart("status", TITLE, &legend, &body)
}

#[derive(Clone, Copy)]
enum Swatch {
    Box,
    Line,
    Dash,
}

struct Legend {
    label: String,
    class: &'static str,
    swatch: Swatch,
}

impl Legend {
    fn new(label: &str, class: &'static str, swatch: Swatch) -> Self {
        Self {
            label: label.to_string(),
            class,
            swatch,
        }
    }
}

/// Frames a chart: title, legend in one row under it, then the plot.
fn chart(id: &str, title: &str, legend: &[Legend], body: &str) -> String {
    let mut items = String::new();
    let mut x = 14.0;
    let y = 46.0;
    for item in legend {
        let swatch = match item.swatch {
            Swatch::Box => format!(
                "<rect class=\"swatch\" x=\"{}\" y=\"{}\" width=\"12\" height=\"12\"/>",
                coord(x),
                coord(y - 10.0)
            ),
            Swatch::Line | Swatch::Dash => format!(
                "<line class=\"{}\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>",
                if matches!(item.swatch, Swatch::Dash) {
                    "pct"
                } else {
                    "line"
                },
                coord(x),
                coord(x + 16.0),
                coord(y - 4.0),
                coord(y - 4.0)
            ),
        };
        items.push_str(&format!(
            "<g class=\"{}\">{swatch}<text x=\"{}\" y=\"{}\">{}</text></g>\n",
            item.class,
            coord(x + 21.0),
            coord(y),
            esc(&item.label)
        ));
        // An estimate of the label's width: good enough to keep short labels apart.
        x += 21.0 + 6.9 * item.label.chars().count() as f64 + 16.0;
    }
    format!(
        "<figure class=\"chart\">\n<svg viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-labelledby=\"chart-{id}\">\n<title id=\"chart-{id}\">{title}</title>\n\
         <text class=\"title\" x=\"14\" y=\"22\">{title}</text>\n{items}{body}</svg>\n</figure>\n"
    )
}

/// A chart with nothing to draw says so instead of drawing empty axes.
fn empty_chart(title: &str, why: &str) -> String {
    format!(
        "<figure class=\"chart\">\n<h3>{title}</h3>\n{}</figure>\n",
        no_data(why)
    )
}

/// Horizontal grid lines with their labels on the left.
fn y_grid(ticks: &Ticks) -> String {
    let largest = ticks.lo.abs().max(ticks.hi.abs());
    ticks
        .values
        .iter()
        .map(|v| {
            let y = coord(py(frac(*v, ticks.lo, ticks.hi)));
            format!(
                "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>\
                 <text x=\"{}\" y=\"{y}\" dy=\"4\" text-anchor=\"end\">{}</text>\n",
                W - RIGHT,
                LEFT - 8.0,
                compact(*v, largest)
            )
        })
        .collect()
}

/// The baseline, tick marks and labels at the given x positions, and what the axis measures.
fn x_axis(ticks: &[(f64, String)], caption: &str) -> String {
    let base = coord(py(0.0));
    let mut out = format!(
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{base}\" y2=\"{base}\"/>\n",
        W - RIGHT
    );
    for (x, label) in ticks {
        let x = coord(*x);
        out.push_str(&format!(
            "<line class=\"axis\" x1=\"{x}\" x2=\"{x}\" y1=\"{base}\" y2=\"{}\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            coord(py(0.0) + 5.0),
            coord(py(0.0) + 20.0),
            esc(label)
        ));
    }
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        coord(LEFT + (W - LEFT - RIGHT) / 2.0),
        coord(H - 8.0),
        esc(caption)
    ));
    out
}

fn y_caption(caption: &str) -> String {
    let middle = coord(TOP + (H - TOP - BOTTOM) / 2.0);
    format!(
        "<text x=\"14\" y=\"{middle}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 14 {middle})\">{}</text>\n",
        esc(caption)
    )
}

/// x of a fraction of the plot's width.
fn px(f: f64) -> f64 {
    LEFT + f * (W - LEFT - RIGHT)
}

/// y of a fraction of the plot's height (0 at the bottom).
fn py(f: f64) -> f64 {
    H - BOTTOM - f * (H - TOP - BOTTOM)
}

/// Where `v` falls between `lo` and `hi`, clamped to the plot; 0 for an empty or broken range,
/// which is what keeps `NaN` out of the SVG.
fn frac(v: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    let f = (v - lo) / span;
    if span > 0.0 && f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// One decimal is finer than a pixel; non-finite numbers never reach the page.
fn coord(v: f64) -> String {
    if v.is_finite() {
        trim(&format!("{v:.1}"))
    } else {
        "0".into()
    }
}

struct Ticks {
    lo: f64,
    hi: f64,
    values: Vec<f64>,
}

/// Round ticks (1, 2 or 5 times a power of ten, at least `min_step` apart) covering `lo..=hi`
/// with about `target` intervals; the axis then spans exactly the first to the last tick.
fn nice_ticks(lo: f64, hi: f64, target: f64, min_step: f64) -> Ticks {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let raw = (hi - lo) / target.max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = match raw / magnitude {
        r if r <= 1.0 => 1.0,
        r if r <= 2.0 => 2.0,
        r if r <= 5.0 => 5.0,
        _ => 10.0,
    } * magnitude;
    let step = step.max(min_step);
    let first = (lo / step).floor() as i64;
    let last = ((hi / step).ceil() as i64).max(first + 1);
    let values: Vec<f64> = (first..=last).map(|i| i as f64 * step).collect();
    Ticks {
        lo: first as f64 * step,
        hi: last as f64 * step,
        values,
    }
}

/// Ticks for a log10 axis: powers of ten, plus 2× and 5× when the axis spans less than two
/// decades (otherwise a narrow distribution would show no tick at all).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return Vec::new();
    }
    let steps: &[f64] = if hi - lo < 2.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    for decade in (lo.floor() as i32)..=(hi.ceil() as i32) {
        for step in steps {
            let t = f64::from(decade) + step.log10();
            if t >= lo - 1e-9 && t <= hi + 1e-9 {
                ticks.push(t);
            }
        }
    }
    ticks
}

// ---------------------------------------------------------------------------------------------
// Numbers for humans
// ---------------------------------------------------------------------------------------------

fn sum(codes: &BTreeMap<String, u64>) -> u64 {
    codes.values().fold(0, |a, n| a.saturating_add(*n))
}

/// `1234567` → `1,234,567`.
fn count(n: u64) -> String {
    group(&n.to_string())
}

fn signed(n: i64) -> String {
    if n < 0 {
        format!("−{}", count(n.unsigned_abs()))
    } else {
        count(n.unsigned_abs())
    }
}

/// Thousands separators in the integer part of a plain decimal number.
fn group(number: &str) -> String {
    let (sign, rest) = match number.strip_prefix('-') {
        Some(rest) => ("−", rest),
        None => ("", number),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let mut grouped = String::new();
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// Drops trailing zeros after the decimal point: `2.50` → `2.5`, `3.0` → `3`.
fn trim(number: &str) -> String {
    if number.contains('.') {
        let t = number.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" { "0".into() } else { t.into() }
    } else {
        number.into()
    }
}

/// At most `places` decimals, grouped: `1234.5` → `1,234.5`.
fn decimal(v: f64, places: usize) -> String {
    if v.is_finite() {
        group(&trim(&format!("{v:.places$}")))
    } else {
        "—".into()
    }
}

/// Milliseconds to three significant digits (at most three decimals): `0.123`, `4.56`, `78.9`,
/// `1,234`.
fn millis(ms: f64) -> String {
    let places = match ms.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    if ms.is_finite() {
        format!("{}\u{a0}ms", decimal(ms, places))
    } else {
        "—".into()
    }
}

fn seconds(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "—".into();
    }
    if s < 60.0 {
        let places = if s >= 10.0 { 1 } else { 2 };
        return format!("{}\u{a0}s", decimal(s, places));
    }
    let whole = s.round() as u64;
    format!("{}\u{a0}min {}\u{a0}s", count(whole / 60), whole % 60)
}

/// `part` as a share of `whole`; a dash when there is no whole to share, and never a rounded
/// 0 % or 100 % that hides a few.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "—".into();
    }
    let p = part as f64 / whole as f64 * 100.0;
    if p > 0.0 && p < 0.1 {
        "&lt;\u{a0}0.1\u{a0}%".into()
    } else if p > 99.9 && p < 100.0 {
        "&gt;\u{a0}99.9\u{a0}%".into()
    } else {
        format!("{}\u{a0}%", decimal(p, 1))
    }
}

/// Axis labels stay short, in one unit for the whole axis: `950`, `5k 10k`, `1.5M`.
fn compact(v: f64, largest: f64) -> String {
    match largest {
        _ if v == 0.0 => "0".into(),
        l if l >= 1e6 => format!("{}M", decimal(v / 1e6, 1)),
        l if l >= 1e4 => format!("{}k", decimal(v / 1e3, 1)),
        _ => decimal(v, 2),
    }
}

/// A latency for an axis or a tooltip, in the unit that keeps the number short: `100 µs`,
/// `5 ms`, `10 s`.
fn duration_label(ms: f64) -> String {
    // Powers of ten come back from `powf` a hair off (999.9999…): round before picking the unit.
    let ms = (ms * 1e6).round() / 1e6;
    let (value, unit) = match ms {
        m if m >= 1000.0 => (m / 1000.0, "s"),
        m if m < 1.0 => (m * 1000.0, "µs"),
        m => (m, "ms"),
    };
    let places = if value >= 10.0 { 0 } else { 1 };
    format!("{}\u{a0}{unit}", decimal(value, places))
}

/// Escaped `text`, or `missing` (trusted HTML) when there is none: an empty heading or cell reads
/// as a rendering bug.
fn text_or(text: &str, missing: &str) -> String {
    if text.trim().is_empty() {
        missing.to_string()
    } else {
        esc(text)
    }
}

/// HTML-escapes text from the report, attributes included.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
