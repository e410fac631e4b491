//! The capacity-review page (`report::html::render`): figures formatted for people, one SVG per
//! chart built from the report's own numbers, hostile strings escaped, degenerate runs rendered
//! without `NaN`, and (in Debian's headless Chromium, through `report_page.mjs`) a layout that
//! fits a desktop and a phone. The sample page and its screenshots land in
//! `target/test-artifacts/`.
//!
//! The browser test needs `/usr/bin/chromium`, `node` and `npm ci` in `gateway/tests/ui`
//! (deploy/test.sh does all three).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use sluice_loadtest::report::html::render;
use sluice_loadtest::report::{
    Check, Endpoint, Latency, Machine, PeakOf, Peaks, People, ProcessUsage, Report, Reservations,
    Second, StatusSample, Target, Waiting,
};

const HOSTILE: &str = "<script>alert(1)</script>";
const HOSTILE_ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";
const READ_BUDGET_SPENT: &str = "the command read budget of this gateway is spent; retry shortly";
const CHROMIUM: &str = "/usr/bin/chromium";

/// Final answers in µs: 6,000 at 2 ms, 3,000 at 20 ms, 900 at 150 ms, 100 at 1.2 s: four
/// buckets far apart on the log axis, with empty buckets between them.
fn final_answers() -> Histogram<u64> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("histogram");
    for (value_us, n) in [
        (2_000, 6_000),
        (20_000, 3_000),
        (150_000, 900),
        (1_200_000, 100),
    ] {
        histogram.record_n(value_us, n).expect("in range");
    }
    histogram
}

fn endpoint(count: u64, by_status: &[(&str, u64)], p50_us: u64) -> Endpoint {
    let mut histogram = Histogram::<u64>::new(3).expect("histogram");
    histogram.record_n(p50_us, count / 2).expect("in range");
    histogram
        .record_n(p50_us * 4, count - count / 2)
        .expect("in range");
    Endpoint {
        count,
        by_status: by_status.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        latency: Latency::from_micros(&histogram),
    }
}

fn machine(hostname: &str) -> Machine {
    Machine {
        hostname: hostname.into(),
        cpus: 16,
        cpu_model: "AMD EPYC 7B13".into(),
        memory_gib: 62.8,
        kernel: "6.1.0-31-amd64".into(),
        load_average: 0.42,
    }
}

/// A drop of 10,000 people on 1,000 seats over 12 seconds, with a hostile string in a rejection
/// code, a setting and the hostname.
fn sample() -> Report {
    let people = People {
        arrived: 10_000,
        entered: 9_800,
        accepted: 1_000,
        succeeded: 990,
        rejected: BTreeMap::from([("SOLD_OUT".into(), 6), (HOSTILE.into(), 4)]),
        refused: BTreeMap::from([
            ("RATE_LIMITED".into(), 8_500),
            ("CAPACITY_EXHAUSTED".into(), 497),
        ]),
        unknown: 3,
        refusals_by_code: BTreeMap::from([
            ("RATE_LIMITED".into(), 23_456),
            ("CAPACITY_EXHAUSTED".into(), 497),
        ]),
        retries: 14_956,
        unavailable_messages: BTreeMap::from([(READ_BUDGET_SPENT.into(), 3)]),
    };
    let timeline = (0..12)
        .map(|second| Second {
            second,
            arrivals: [9_000, 1_000].get(second as usize).copied().unwrap_or(0),
            acceptances: if second < 3 {
                [600, 300, 100][second as usize]
            } else {
                0
            },
            refusals: if second < 6 { 4_000 / (second + 1) } else { 0 },
            completions: if second >= 1 { 100 + second * 10 } else { 0 },
        })
        .collect();
    let series = (0..25)
        .map(|i| StatusSample {
            at_ms: i * 500,
            application_in_flight: (i as i64 * 7).min(64),
            waiting: (900 - i as i64 * 40).max(0),
            unfinished: (1_000 - i as i64 * 42).max(0),
        })
        .collect();
    Report {
        scenario: "drop".into(),
        started_at: "2026-05-04T09:30:00Z".into(),
        duration_seconds: 12.345,
        machine: machine("bench-1 & <b>co</b>"),
        stack: "sluice dev (gateway and executor in one process)".into(),
        settings: BTreeMap::from([
            ("subjects".into(), json!(10_000)),
            ("capacity".into(), json!(1_000)),
            ("deadline_ms".into(), json!(30_000)),
            ("note".into(), json!(HOSTILE)),
            ("rate".into(), json!({"per_second": 500, "burst": 100})),
        ]),
        people,
        requests: BTreeMap::from([
            (
                "read offer".into(),
                endpoint(10_000, &[("200", 9_800), ("error", 200)], 800),
            ),
            (
                "enqueue".into(),
                endpoint(25_953, &[("202", 1_000), ("429", 24_953)], 3_000),
            ),
            (
                "poll ticket".into(),
                endpoint(4_321, &[("200", 4_321)], 1_500),
            ),
        ]),
        final_latency: Latency::from_micros(&final_answers()),
        timeline,
        peaks: Peaks {
            samples: 25,
            application_in_flight: 64,
            command_in_flight: BTreeMap::from([(
                "claim".into(),
                PeakOf {
                    peak: 64,
                    limit: Some(64),
                },
            )]),
            waiting: 900,
            unfinished: 1_000,
            oldest_unfinished_seconds: 11.5,
            limit_keys: BTreeMap::from([(
                "offer:42".into(),
                PeakOf {
                    peak: 65,
                    limit: Some(64),
                },
            )]),
            executing: BTreeMap::from([(
                "claim".into(),
                PeakOf {
                    peak: 64,
                    limit: Some(64),
                },
            )]),
            series,
        },
        processes: vec![
            ProcessUsage {
                name: "sluice dev".into(),
                pid: 4242,
                cpu_average_percent: 183.26,
                cpu_peak_percent: 412.0,
                rss_peak_mib: 1_234.5,
                samples: 49,
            },
            ProcessUsage {
                name: "redis-server".into(),
                pid: 777,
                cpu_average_percent: 35.0,
                cpu_peak_percent: 61.2,
                rss_peak_mib: 48.1,
                samples: 49,
            },
        ],
        invariants: vec![
            Check {
                name: "no oversell".into(),
                holds: true,
                detail: "1,000 allocations of capacity 1,000".into(),
            },
            Check {
                name: "every acceptance durable".into(),
                holds: true,
                detail: "1,000 accepted, 1,000 rows".into(),
            },
        ],
        waiting: Some(Waiting {
            told: 812,
            eta_error_p50: 0.12,
            eta_error_p90: 0.3449,
            eta_ratio_p50: 1.05,
            polls_per_minute_p50: 41.34,
            advised_polls_per_minute_p50: 42.0,
            inversions: 0,
            started: 1_000,
            ..Waiting::default()
        }),
        reservations: Some(Reservations {
            reservation_seconds: 5,
            reserved: 1_000,
            confirmed: 600,
            released: 100,
            expired: 300,
            confirm_latency: Latency {
                p50_ms: 4.3,
                p99_ms: 31.0,
                max_ms: 40.0,
                ..Latency::default()
            },
            pool_samples: 240,
            capacity: 1_000,
            peak_held: 1_000,
            peak_reserved: 1_000,
            ..Reservations::default()
        }),
        room: None,
        sigterm: None,
        targets: vec![
            Target {
                name: "unknown outcomes".into(),
                measured: "3".into(),
                goal: "0".into(),
                met: false,
            },
            Target {
                name: "p99 final answer".into(),
                measured: "150 ms".into(),
                goal: "≤ 2 s".into(),
                met: true,
            },
        ],
        invariants_hold: true,
    }
}

/// A run where nothing arrived and nothing was sampled.
fn empty() -> Report {
    Report {
        scenario: String::new(),
        started_at: String::new(),
        duration_seconds: 0.0,
        machine: machine(""),
        stack: String::new(),
        settings: BTreeMap::new(),
        people: People::default(),
        requests: BTreeMap::new(),
        final_latency: Latency::default(),
        timeline: Vec::new(),
        peaks: Peaks::default(),
        processes: Vec::new(),
        invariants: Vec::new(),
        waiting: None,
        reservations: None,
        room: None,
        sigterm: None,
        targets: Vec::new(),
        invariants_hold: true,
    }
}

/// `NaN`, `inf` and `infinity` as words: what a float that escaped a guard would print as.
fn non_finite_words(page: &str) -> Vec<&str> {
    page.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| ["nan", "inf", "infinity"].contains(&w.to_ascii_lowercase().as_str()))
        .collect()
}

/// Nothing that runs or is fetched: no script, no URL, no external resource of any kind.
fn assert_self_contained(page: &str) {
    let lower = page.to_ascii_lowercase();
    for forbidden in [
        "<script", "http://", "https://", " src=", "href=", "url(", "@import", "<link", "<iframe",
        "<object", "<embed", " on",
    ] {
        // ` on` would also catch prose; only event-handler attributes (` onload=`…) matter.
        if forbidden == " on" {
            let handlers = lower
                .match_indices(" on")
                .filter(|(at, _)| {
                    let rest = &lower[at + 3..];
                    let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
                    rest[name.len()..].starts_with('=')
                })
                .count();
            assert_eq!(handlers, 0, "the page has an event-handler attribute");
        } else {
            assert!(
                !lower.contains(forbidden),
                "the page contains {forbidden:?}"
            );
        }
    }
    assert_eq!(
        non_finite_words(page),
        Vec::<&str>::new(),
        "non-finite numbers"
    );
}

/// Every element opened is closed in order (HTML void elements and self-closed SVG elements
/// aside), so a stray `<` from the report or a mismatched tag in the renderer shows up here.
fn assert_balanced(page: &str) {
    const VOID: &[&str] = &["meta", "br", "hr", "img", "input", "link", "wbr"];
    let mut open: Vec<String> = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find('<') {
        let end = rest[start..]
            .find('>')
            .map(|e| start + e)
            .expect("every tag is closed by '>'");
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        let (closing, body) = match tag.strip_prefix('/') {
            Some(body) => (true, body),
            None => (false, tag),
        };
        let name = body.split_whitespace().next().unwrap_or("").to_string();
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "bad tag <{tag}>"
        );
        if closing {
            let top = open.pop();
            assert_eq!(
                top.as_deref(),
                Some(name.as_str()),
                "</{name}> closes {top:?}"
            );
        } else if !VOID.contains(&name.as_str()) {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
}

/// The part of `page` after `start` and before the next `end`.
fn between<'a>(page: &'a str, start: &str, end: &str) -> &'a str {
    let from = page
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"));
    let rest = &page[from + start.len()..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

use sluice_testkit::artifacts_dir;

/// Writes the sample page; through a temporary file and a rename, so a test reading it while
/// another writes it never sees half a page.
fn write_sample_page() -> PathBuf {
    let dir = artifacts_dir();
    let path = dir.join("loadtest-report.html");
    let partial = dir.join(format!(
        "loadtest-report.html.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&partial, render(&sample())).expect("write the sample page");
    std::fs::rename(&partial, &path).expect("move the sample page in place");
    path
}

#[test]
fn sample_page_shows_the_run_formatted_for_people() {
    let page = render(&sample());
    write_sample_page();

    assert_self_contained(&page);
    assert_balanced(&page);
    assert!(page.starts_with("<!doctype html>"));
    // Header: verdict, scenario, machine, duration.
    assert!(page.contains("<div class=\"verdict ok\"><strong>invariants hold</strong>"));
    assert!(!page.contains("INVARIANT VIOLATED"));
    assert!(page.contains("<h1>drop</h1>"));
    assert!(page.contains("2026-05-04T09:30:00Z"));
    assert!(page.contains("16 × AMD EPYC 7B13"));
    assert!(page.contains("62.8\u{a0}GiB"));
    assert!(page.contains("ran 12.35\u{a0}s") || page.contains("ran 12.3\u{a0}s"));
    // Key figures with thousands separators, and the acceptance rate.
    for (label, value) in [
        ("arrived", "10,000"),
        ("entered", "9,800"),
        ("accepted (durable)", "1,000"),
        ("succeeded", "990"),
        ("rejected", "10"),
        ("refused", "8,997"),
        ("retries", "14,956"),
        ("acceptance rate", "10\u{a0}%"),
    ] {
        let figure =
            format!("<span class=\"label\">{label}</span><span class=\"value\">{value}</span>");
        assert!(page.contains(&figure), "missing figure {figure}");
    }
    // Unknown outcomes above the target of 0 are red.
    assert!(page.contains(
        "<div class=\"figure bad\"><span class=\"label\">unknown</span><span class=\"value\">3</span>"
    ));
    assert!(
        !page.contains("Outcomes add up"),
        "the sample's outcomes do add up"
    );
    // Codes with their counts, the endpoint table, the percentiles in ms.
    assert!(page.contains("<code>RATE_LIMITED</code></td><td class=\"num\">8,500</td>"));
    assert!(page.contains("<code>RATE_LIMITED</code></td><td class=\"num\">23,456</td>"));
    // What the gateway's 503s said, by message.
    assert!(page.contains("<h3>503 answers by message</h3>"));
    assert!(page.contains(&format!(
        "<code>{READ_BUDGET_SPENT}</code></td><td class=\"num\">3</td>"
    )));
    assert!(page.contains("<code>429</code>\u{a0}×\u{a0}24,953"));
    assert!(page.contains("<code class=\"bad-text\">error</code>\u{a0}×\u{a0}200"));
    assert!(page.contains("25,953"));
    let final_latency = &sample().final_latency;
    assert_eq!(final_latency.p50_ms, 2.0);
    assert!(page.contains("p50 2\u{a0}ms"), "p50 in the latency legend");
    assert!(
        page.contains("p95 150\u{a0}ms"),
        "p95 in the latency legend"
    );
    // Tables: targets, invariants, peaks (over the limit marked), processes, settings.
    assert!(page.contains("<td class=\"text\">p99 final answer</td>"));
    assert!(page.contains("<span class=\"no\">✗ missed</span>"));
    assert!(page.contains("<span class=\"yes\">✓ holds</span>"));
    assert!(page.contains(
        "in flight, limit key <code>offer:42</code></td><td class=\"num bad-text\">65</td>"
    ));
    assert!(page.contains("in flight, command <code>claim</code></td><td class=\"num\">64</td>"));
    assert!(page.contains("<td class=\"num\">11.5\u{a0}s</td>"));
    assert!(page.contains("<td class=\"num\">183.3</td><td class=\"num\">412</td>"));
    assert!(page.contains("<td class=\"num\">1,234.5</td>"));
    assert!(page.contains("<code>{&quot;burst&quot;:100,&quot;per_second&quot;:500}</code>"));
    // The waiting figures, in percent and per minute.
    assert!(page.contains("<td class=\"num\">12 % / 34 %</td>"));
    assert!(page.contains("41.3 / 0.0 (advised 42.0 / 0.0, 0 waiters)"));
    assert!(page.contains("<td class=\"num\">0, 0 of 1000 started</td>"));
    // The reserved units' final states and the confirm latency.
    assert!(
        page.contains("<h2>Reservations"),
        "a reserved run has its section"
    );
    assert!(page.contains("<td class=\"num\">600 / 100 / 300 / 0</td>"));
    assert!(page.contains("<td class=\"num\">4.3 / 31.0 / 40.0 ms</td>"));
    // One SVG per chart, and no "no data" note.
    assert_eq!(page.matches("<svg").count(), 3);
    assert_eq!(page.matches("class=\"nodata\"").count(), 0);
}

#[test]
fn strings_from_the_report_are_escaped() {
    let page = render(&sample());
    assert!(!page.to_ascii_lowercase().contains("<script"));
    assert!(!page.contains("<b>co</b>"));
    assert!(page.contains("bench-1 &amp; &lt;b&gt;co&lt;/b&gt;"));
    // In the rejected codes, and in the setting (JSON-quoted).
    assert!(page.contains(&format!("<code>{HOSTILE_ESCAPED}</code>")));
    assert!(page.contains(&format!("<code>&quot;{HOSTILE_ESCAPED}&quot;</code>")));
    // Every occurrence is the escaped one.
    assert_eq!(
        page.matches("alert(1)").count(),
        page.matches(HOSTILE_ESCAPED).count()
    );
    assert_eq!(page.matches(HOSTILE_ESCAPED).count(), 2);

    let mut quoted = sample();
    quoted.scenario = "a \"quoted\" 'scenario'".into();
    let page = render(&quoted);
    assert!(page.contains("<h1>a &quot;quoted&quot; &#39;scenario&#39;</h1>"));
    assert_balanced(&page);
}

#[test]
fn latency_chart_has_one_bar_per_non_empty_bucket() {
    let report = sample();
    let buckets = &report.final_latency.buckets;
    let non_empty = buckets.iter().filter(|b| b.count > 0).count();
    assert_eq!(
        non_empty, 4,
        "the four recorded values fall in four buckets"
    );
    assert!(buckets.len() > 8, "with empty buckets between them");

    let page = render(&report);
    let chart = between(&page, "aria-labelledby=\"chart-latency\"", "</svg>");
    assert_eq!(chart.matches("<rect class=\"bar\"").count(), non_empty);
    assert_eq!(page.matches("<rect class=\"bar\"").count(), non_empty);
    // Log ticks labelled in the unit that fits, and p50/p95/p99 as vertical lines.
    for tick in [">1\u{a0}ms<", ">10\u{a0}ms<", ">100\u{a0}ms<", ">1\u{a0}s<"] {
        assert!(chart.contains(tick), "missing tick {tick}");
    }
    assert_eq!(
        chart.matches("<line class=\"pct\"").count(),
        3 + 3,
        "lines and swatches"
    );
    for mark in [">p50<", ">p95<", ">p99<"] {
        assert!(chart.contains(mark), "missing percentile mark {mark}");
    }
    // Bars are tallest for the most common bucket: 6,000 at 2 ms.
    let heights: Vec<f64> = chart
        .match_indices("<rect class=\"bar\"")
        .map(|(at, _)| {
            let rest = &chart[at..];
            let h = &rest[rest.find("height=\"").unwrap() + 8..];
            h[..h.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    let tallest = heights.iter().cloned().fold(0.0, f64::max);
    assert_eq!(heights[0], tallest, "heights {heights:?}");
    assert!(
        heights.windows(2).all(|w| w[0] > w[1]),
        "heights {heights:?}"
    );
}

#[test]
fn timeline_uses_bars_for_a_short_run_and_lines_for_a_long_one() {
    let report = sample();
    let page = render(&report);
    let chart = between(&page, "aria-labelledby=\"chart-timeline\"", "</svg>");
    let values: usize = report
        .timeline
        .iter()
        .map(|s| {
            [s.arrivals, s.acceptances, s.refusals, s.completions]
                .iter()
                .filter(|n| **n > 0)
                .count()
        })
        .sum();
    assert_eq!(chart.matches("<rect class=\"col ").count(), values);
    assert_eq!(chart.matches("<polyline").count(), 0);
    for name in ["arrivals", "acceptances", "refusals", "completions"] {
        assert!(chart.contains(&format!(">{name}</text>")), "legend {name}");
    }

    let mut long = sample();
    long.timeline = (0..600)
        .map(|second| Second {
            second,
            arrivals: 100 + second % 7,
            acceptances: 90,
            refusals: second % 3,
            completions: 95,
        })
        .collect();
    let page = render(&long);
    assert_self_contained(&page);
    let chart = between(&page, "aria-labelledby=\"chart-timeline\"", "</svg>");
    assert_eq!(chart.matches("<rect class=\"col ").count(), 0);
    assert_eq!(chart.matches("<polyline class=\"line ").count(), 4);
    let points = between(chart, "<polyline class=\"line s1\" points=\"", "\"/>");
    assert_eq!(points.split(' ').count(), 600, "one point per second");
    assert!(
        chart.contains(">600<") || chart.contains(">500<"),
        "x ticks in seconds"
    );
}

#[test]
fn status_chart_draws_three_series_over_time() {
    let report = sample();
    let page = render(&report);
    let chart = between(&page, "aria-labelledby=\"chart-status\"", "</svg>");
    assert_eq!(chart.matches("<polyline class=\"line ").count(), 3);
    for name in ["application in flight", "waiting", "unfinished"] {
        assert!(chart.contains(&format!(">{name}</text>")), "legend {name}");
    }
    let points = between(chart, "<polyline class=\"line s1\" points=\"", "\"/>");
    assert_eq!(points.split(' ').count(), report.peaks.series.len());
    // 25 samples 500 ms apart: 12 s, ticked every 2 s.
    for tick in [">0<", ">2<", ">12<"] {
        assert!(chart.contains(tick), "missing tick {tick}");
    }
}

#[test]
fn empty_report_says_no_data_instead_of_drawing() {
    let page = render(&empty());
    assert_self_contained(&page);
    assert_balanced(&page);
    assert_eq!(page.matches("<svg").count(), 0);
    for note in [
        "No data: no final answers were recorded.",
        "No data: nothing arrived.",
        "No data: the status endpoint was never sampled.",
        "No data: no requests were sent.",
        "No data: no processes were sampled.",
        "No data: no settings were recorded.",
    ] {
        assert!(page.contains(note), "missing {note:?}");
    }
    assert!(page.contains("<span class=\"label\">arrived</span><span class=\"value\">0</span>"));
    assert!(
        page.contains("<span class=\"label\">acceptance rate</span><span class=\"value\">—</span>")
    );
    assert!(page.contains("<div class=\"figure\"><span class=\"label\">unknown</span>"));
    assert!(
        !page.contains("<h2>Reservations"),
        "a run without reserved units has no section for them"
    );
}

#[test]
fn degenerate_numbers_never_reach_the_page() {
    let mut report = sample();
    report.duration_seconds = f64::INFINITY;
    report.machine.memory_gib = f64::NAN;
    report.final_latency.p50_ms = f64::NAN;
    report.final_latency.p99_ms = f64::NEG_INFINITY;
    report.final_latency.buckets.truncate(1);
    if let Some(bucket) = report.final_latency.buckets.first_mut() {
        bucket.count = 5;
    }
    report.timeline.truncate(1);
    report.peaks.series.truncate(1);
    report.peaks.series[0].at_ms = 0;
    report.processes[0].cpu_peak_percent = f64::NAN;
    report.requests.insert("empty".into(), Endpoint::default());
    let page = render(&report);
    assert_self_contained(&page);
    assert_balanced(&page);
    assert_eq!(page.matches("<svg").count(), 3);
    assert_eq!(page.matches("<rect class=\"bar\"").count(), 1);
}

#[test]
fn violated_invariant_is_the_verdict() {
    let mut report = sample();
    report.invariants.push(Check {
        name: "no oversell".into(),
        holds: false,
        detail: "1,001 allocations of capacity 1,000".into(),
    });
    report.invariants_hold = false;
    let page = render(&report);
    assert!(page.contains("<div class=\"verdict bad\"><strong>INVARIANT VIOLATED</strong>"));
    assert!(!page.contains("invariants hold"));
    assert!(page.contains("2 of 3 checks hold"));
    assert!(page.contains("<span class=\"no\">✗ violated</span>"));
}

/// Fails with what to do when the browser side is not installed.
fn require_browser_tools(ui_dir: &Path) {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: `apt-get install -y chromium` (deploy/test.sh does it)"
    );
    assert!(
        ui_dir
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is not installed: run `npm ci` in gateway/tests/ui (deploy/test.sh does it)"
    );
}

#[test]
fn sample_page_fits_desktop_and_phone_in_chromium() {
    let page = write_sample_page();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    require_browser_tools(&manifest.join("../gateway/tests/ui"));
    let shots = ["loadtest-report.png", "loadtest-report-phone.png"];
    for shot in shots {
        let _ = std::fs::remove_file(artifacts_dir().join(shot));
    }
    let mut child = Command::new("node")
        .arg(manifest.join("tests/report_page.mjs"))
        .arg(&page)
        .arg(artifacts_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node (install nodejs: deploy/test.sh does it)");
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("wait for node").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("read node's output");
    let transcript = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("---- report_page.mjs ----\n{transcript}---- end ----");
    assert!(
        output.status.success(),
        "report_page.mjs failed:\n{transcript}"
    );
    assert!(transcript.contains("report_page: PASS"));
    for shot in shots {
        let size = std::fs::metadata(artifacts_dir().join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 10_000, "{shot} is missing or empty ({size} bytes)");
    }
}
