//! The timeline chart: arrivals, acceptances, refusals and completions per second of the run.

use super::frame::{Legend, Swatch, chart, empty_chart, x_axis, y_caption, y_grid};
use super::scale::{coord, frac, nice_ticks, px, py};
use super::{LEFT, RIGHT, W};
use crate::report::Second;
use crate::report::html::format::{count, decimal};

/// Load per second. With few seconds grouped bars read best (every value is visible); beyond
/// that they get too thin and lines take over.
pub(super) fn timeline_chart(timeline: &[Second]) -> String {
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
