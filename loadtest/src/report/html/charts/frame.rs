//! What every chart shares around its plot: the frame with title and legend, the "no data"
//! stand-in, the horizontal grid and the axes. One implementation keeps the three charts
//! consistent with each other.

use super::scale::{Ticks, coord, frac, py};
use super::{BOTTOM, H, LEFT, RIGHT, TOP, W};
use crate::report::html::format::{compact, esc};
use crate::report::html::markup::no_data;

/// How a legend entry shows its series: a box for bars, a line for lines, a dash for the
/// percentile marks, so the legend looks like what it explains.
#[derive(Clone, Copy)]
pub(super) enum Swatch {
    Box,
    Line,
    Dash,
}

/// One legend entry, drawn in the row under the chart's title.
pub(super) struct Legend {
    label: String,
    class: &'static str,
    swatch: Swatch,
}

impl Legend {
    pub(super) fn new(label: &str, class: &'static str, swatch: Swatch) -> Self {
        Self {
            label: label.to_string(),
            class,
            swatch,
        }
    }
}

/// Frames a chart: title, legend in one row under it, then the plot.
pub(super) fn chart(id: &str, title: &str, legend: &[Legend], body: &str) -> String {
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
pub(super) fn empty_chart(title: &str, why: &str) -> String {
    format!(
        "<figure class=\"chart\">\n<h3>{title}</h3>\n{}</figure>\n",
        no_data(why)
    )
}

/// Horizontal grid lines with their labels on the left.
pub(super) fn y_grid(ticks: &Ticks) -> String {
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
pub(super) fn x_axis(ticks: &[(f64, String)], caption: &str) -> String {
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

/// What the y axis measures, written up the left edge.
pub(super) fn y_caption(caption: &str) -> String {
    let middle = coord(TOP + (H - TOP - BOTTOM) / 2.0);
    format!(
        "<text x=\"14\" y=\"{middle}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 14 {middle})\">{}</text>\n",
        esc(caption)
    )
}
