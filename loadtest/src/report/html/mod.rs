//! Renders a [`Report`] as one self-contained HTML page (inline CSS and SVG, no script, nothing
//! fetched), so it can be mailed, archived or opened offline.
//!
//! Two rules keep the page valid whatever the run produced: every string taken from the report
//! goes through `format::esc` (codes, hostnames and settings are whatever the run saw), and every
//! number written into the SVG goes through `charts::scale::frac` and `charts::scale::coord`, so
//! a degenerate run (no arrivals, one sample, a zero-length axis) draws an empty-looking chart,
//! never `NaN`.
//!
//! One module per part of the page, so a change to one chart or table is read and reviewed on
//! its own: `header` (what ran where, and the verdict), `outcomes` (where every arrival ended),
//! `tables` (targets, waiting, reservations, room, invariants, endpoints, peaks, processes,
//! settings) and `charts` (the SVG charts), built from `markup` (the HTML blocks they share),
//! `format` (numbers for people, and escaping) and `style` (the CSS). This module only puts
//! the parts in their order.

mod charts;
mod format;
mod header;
mod markup;
mod outcomes;
mod style;
mod tables;

use crate::report::Report;
use charts::charts;
use format::text_or;
use header::header;
use outcomes::outcomes;
use style::STYLE;
use tables::{
    endpoints, invariants, peaks, processes, reservations, room, settings, targets, waiting,
};

/// The whole page: the verdict first, then the figures a capacity review asks about, then the
/// charts and the detail behind them.
pub fn render(report: &Report) -> String {
    let main = [
        outcomes(&report.people),
        targets(&report.targets),
        waiting(report.waiting.as_ref()),
        reservations(report.reservations.as_ref()),
        room(report.room.as_ref()),
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
