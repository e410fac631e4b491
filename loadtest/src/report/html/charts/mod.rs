//! The charts section: inline SVG charts drawn from the report's own numbers, no script (and
//! for a room run, `room`: its flow and the positions told).
//!
//! `latency` (time to the final answer), `timeline` (load per second) and `work` (what the
//! status endpoint reported) each build only their plot; `frame` draws what they share (title,
//! legend, grid, axes) and `scale` maps values to SVG coordinates, so the three charts look
//! alike and no broken number reaches the SVG.

mod frame;
mod latency;
mod room;
mod scale;
mod timeline;
mod work;

use crate::report::Report;
use latency::latency_chart;
use room::room_charts;
use timeline::timeline_chart;
use work::status_chart;

/// The SVG coordinate system every chart shares; CSS scales it to the column width. The margins
/// leave room for the title and legend (`TOP`), the y labels (`LEFT`) and the x labels and
/// caption (`BOTTOM`).
const W: f64 = 640.0;
const H: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 66.0;
const BOTTOM: f64 = 52.0;

/// The three charts side by side (they wrap to one column on a narrow screen), in the order a
/// reader asks: how long people waited, when the load came, how the stack coped.
pub(super) fn charts(report: &Report) -> String {
    format!(
        "<section>\n<h2>Charts</h2>\n<div class=\"charts\">\n{}{}{}{}</div>\n</section>\n",
        latency_chart(&report.final_latency),
        timeline_chart(&report.timeline),
        status_chart(&report.peaks.series),
        room_charts(report.room.as_ref()),
    )
}
