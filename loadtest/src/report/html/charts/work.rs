//! The work chart: what the stack's status endpoint reported while the run went on.

use super::frame::{Legend, Swatch, chart, empty_chart, x_axis, y_caption, y_grid};
use super::scale::{coord, frac, nice_ticks, px, py};
use crate::report::StatusSample;
use crate::report::html::format::trim;

/// What `GET /v1/status` said during the run: how much work was running, waiting and not yet
/// finished.
pub(super) fn status_chart(samples: &[StatusSample]) -> String {
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
