//! From values to SVG coordinates: where a value falls on the plot, how a coordinate is written,
//! and which ticks an axis gets. Every number a chart draws passes through here, which is what
//! keeps `NaN` and `inf` out of the SVG.

use super::{BOTTOM, H, LEFT, RIGHT, TOP, W};
use crate::report::html::format::trim;

/// x of a fraction of the plot's width.
pub(super) fn px(f: f64) -> f64 {
    LEFT + f * (W - LEFT - RIGHT)
}

/// y of a fraction of the plot's height (0 at the bottom).
pub(super) fn py(f: f64) -> f64 {
    H - BOTTOM - f * (H - TOP - BOTTOM)
}

/// Where `v` falls between `lo` and `hi`, clamped to the plot; 0 for an empty or broken range,
/// which is what keeps `NaN` out of the SVG.
pub(super) fn frac(v: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    let f = (v - lo) / span;
    if span > 0.0 && f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// One decimal is finer than a pixel; non-finite numbers never reach the page.
pub(super) fn coord(v: f64) -> String {
    if v.is_finite() {
        trim(&format!("{v:.1}"))
    } else {
        "0".into()
    }
}

/// An axis's range and the values it is ticked at; the range is what values are scaled against.
pub(super) struct Ticks {
    pub(super) lo: f64,
    pub(super) hi: f64,
    pub(super) values: Vec<f64>,
}

/// Round ticks (1, 2 or 5 times a power of ten, at least `min_step` apart) covering `lo..=hi`
/// with about `target` intervals; the axis then spans exactly the first to the last tick.
pub(super) fn nice_ticks(lo: f64, hi: f64, target: f64, min_step: f64) -> Ticks {
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
pub(super) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
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
