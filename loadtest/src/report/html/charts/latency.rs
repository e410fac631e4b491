//! The latency chart: how long people waited for their final answer, with p50, p95 and p99
//! marked.

use super::frame::{Legend, Swatch, chart, empty_chart, x_axis, y_caption, y_grid};
use super::scale::{coord, frac, log_ticks, nice_ticks, px, py};
use super::{RIGHT, TOP, W};
use crate::report::Latency;
use crate::report::html::format::{count, duration_label, millis};

/// Time to the final answer on a log axis: the buckets are log-spaced, so equal-width bars show
/// both the fast bulk and the slow tail. Only non-empty buckets get a bar.
pub(super) fn latency_chart(latency: &Latency) -> String {
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
