//! Numbers formatted for people (thousands separators, units that fit, no `NaN`) and HTML
//! escaping: every figure and every string from the report reaches the page through here, so
//! the whole page follows one set of rules.

use std::collections::BTreeMap;

/// Adds up per-code counts; saturating, since a wrapped total would be a wrong figure on the page.
pub(super) fn sum(codes: &BTreeMap<String, u64>) -> u64 {
    codes.values().fold(0, |a, n| a.saturating_add(*n))
}

/// `1234567` → `1,234,567`.
pub(super) fn count(n: u64) -> String {
    group(&n.to_string())
}

/// A count that may be negative (gauges read from the stack), with a true minus sign.
pub(super) fn signed(n: i64) -> String {
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
pub(super) fn trim(number: &str) -> String {
    if number.contains('.') {
        let t = number.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" { "0".into() } else { t.into() }
    } else {
        number.into()
    }
}

/// At most `places` decimals, grouped: `1234.5` → `1,234.5`.
pub(super) fn decimal(v: f64, places: usize) -> String {
    if v.is_finite() {
        group(&trim(&format!("{v:.places$}")))
    } else {
        "—".into()
    }
}

/// Milliseconds to three significant digits (at most three decimals): `0.123`, `4.56`, `78.9`,
/// `1,234`.
pub(super) fn millis(ms: f64) -> String {
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

/// A duration in the unit a person reads: `12.3 s`, or `2 min 5 s` past a minute.
pub(super) fn seconds(s: f64) -> String {
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
pub(super) fn percent(part: u64, whole: u64) -> String {
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
pub(super) fn compact(v: f64, largest: f64) -> String {
    match largest {
        _ if v == 0.0 => "0".into(),
        l if l >= 1e6 => format!("{}M", decimal(v / 1e6, 1)),
        l if l >= 1e4 => format!("{}k", decimal(v / 1e3, 1)),
        _ => decimal(v, 2),
    }
}

/// A latency for an axis or a tooltip, in the unit that keeps the number short: `100 µs`,
/// `5 ms`, `10 s`.
pub(super) fn duration_label(ms: f64) -> String {
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
pub(super) fn text_or(text: &str, missing: &str) -> String {
    if text.trim().is_empty() {
        missing.to_string()
    } else {
        esc(text)
    }
}

/// HTML-escapes text from the report, attributes included.
pub(super) fn esc(text: &str) -> String {
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
