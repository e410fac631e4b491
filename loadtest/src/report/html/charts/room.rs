//! The room's charts, drawn from its per-second timeline: places taken and admissions per
//! second beside the passes the origin witness would accept at that second (with `max_active`
//! as a line), and the positions people were told (median and largest).

use super::frame::{Legend, Swatch, chart, empty_chart, x_axis, y_caption, y_grid};
use super::scale::{coord, frac, nice_ticks, px, py};
use crate::report::RoomFigures;
use crate::report::html::format::decimal;

/// One line of a chart: its legend, colour class and (x, y) points.
type Series<'a> = (&'a str, &'static str, Vec<(f64, f64)>);

/// Both room charts, or nothing for a run without a room.
pub(super) fn room_charts(room: Option<&RoomFigures>) -> String {
    let Some(room) = room else {
        return String::new();
    };
    let at = |second: u64| second as f64;
    let seconds = &room.timeline;
    let flow = vec![
        (
            "places taken",
            "s1",
            seconds
                .iter()
                .map(|s| (at(s.second), s.joins as f64))
                .collect(),
        ),
        (
            "admissions",
            "s2",
            seconds
                .iter()
                .map(|s| (at(s.second), s.admissions as f64))
                .collect(),
        ),
        (
            "live passes at the origin",
            "s3",
            seconds
                .iter()
                .map(|s| (at(s.second), s.live_passes as f64))
                .collect(),
        ),
        (
            "max_active",
            "s5",
            seconds
                .iter()
                .map(|s| (at(s.second), f64::from(room.max_active)))
                .collect(),
        ),
    ];
    let positions = vec![
        (
            "median position told",
            "s1",
            seconds
                .iter()
                .filter_map(|s| Some((at(s.second), s.position_p50? as f64)))
                .collect(),
        ),
        (
            "largest position told",
            "s4",
            seconds
                .iter()
                .filter_map(|s| Some((at(s.second), s.position_max? as f64)))
                .collect(),
        ),
    ];
    format!(
        "{}{}",
        lines(
            "room-flow",
            "Room: per second",
            &flow,
            "places, admissions, passes"
        ),
        lines(
            "room-positions",
            "Room: positions told",
            &positions,
            "places ahead"
        ),
    )
}

/// A line chart of `series` over seconds since the first join.
fn lines(id: &str, title: &str, series: &[Series<'_>], caption: &str) -> String {
    let points = series.iter().flat_map(|(_, _, points)| points.iter());
    let (span, highest) = points.fold((0.0f64, 0.0f64), |(x, y), (px_, py_)| {
        (x.max(*px_), y.max(*py_))
    });
    if highest <= 0.0 {
        return empty_chart(title, "nothing to draw");
    }
    let y = nice_ticks(0.0, highest, 4.0, 1.0);
    let mut body = y_grid(&y);
    let span = span.max(1.0);
    for (_, class, points) in series {
        if points.is_empty() {
            continue;
        }
        let drawn: Vec<String> = points
            .iter()
            .map(|(x, v)| {
                format!(
                    "{},{}",
                    coord(px(frac(*x, 0.0, span))),
                    coord(py(frac(*v, y.lo, y.hi)))
                )
            })
            .collect();
        body.push_str(&format!(
            "<polyline class=\"line {class}\" points=\"{}\"/>\n",
            drawn.join(" ")
        ));
    }
    let x = nice_ticks(0.0, span, 8.0, 1.0);
    let ticks: Vec<(f64, String)> = x
        .values
        .iter()
        .filter(|t| **t <= span)
        .map(|t| (px(frac(*t, 0.0, span)), decimal(*t, 0)))
        .collect();
    body.push_str(&x_axis(&ticks, "seconds since the first join"));
    body.push_str(&y_caption(caption));
    let legend: Vec<Legend> = series
        .iter()
        .map(|(name, class, _)| Legend::new(name, class, Swatch::Line))
        .collect();
    chart(id, title, &legend, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RoomSecond;

    #[test]
    fn a_room_run_draws_both_charts_and_no_room_draws_none() {
        assert_eq!(room_charts(None), "");
        let room = RoomFigures {
            max_active: 10,
            timeline: vec![
                RoomSecond {
                    second: 0,
                    joins: 40,
                    admissions: 10,
                    live_passes: 10,
                    position_p50: Some(15),
                    position_max: Some(29),
                },
                RoomSecond {
                    second: 1,
                    joins: 0,
                    admissions: 5,
                    live_passes: 9,
                    position_p50: None,
                    position_max: None,
                },
            ],
            ..RoomFigures::default()
        };
        let html = room_charts(Some(&room));
        assert_eq!(html.matches("<polyline").count(), 6, "{html}");
        assert!(html.contains("live passes at the origin"));
        assert!(!html.contains("NaN"));
        let empty = room_charts(Some(&RoomFigures::default()));
        assert!(empty.contains("nothing to draw"), "{empty}");
    }
}
