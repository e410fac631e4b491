//! The outcomes section: the key figures of a run and the codes behind its rejections and
//! refusals.

use std::collections::BTreeMap;

use super::format::{count, esc, percent, sum};
use super::markup::table;
use crate::report::People;

/// Where every arrival ended. Unknown outcomes are the figure a capacity review cares most
/// about (the target is 0), so it turns red as soon as there is one.
pub(super) fn outcomes(people: &People) -> String {
    let rejected = sum(&people.rejected);
    let refused = sum(&people.refused);
    // No share of nothing: with no arrivals the note would only say "— of arrived".
    let share = |part: u64| match people.arrived {
        0 => String::new(),
        all => format!("{} of arrived", percent(part, all)),
    };
    let rate = percent(people.accepted, people.arrived);
    let figures: String = [
        ("arrived", count(people.arrived), String::new()),
        ("entered", count(people.entered), share(people.entered)),
        (
            "accepted (durable)",
            count(people.accepted),
            share(people.accepted),
        ),
        ("acceptance rate", rate, "accepted ÷ arrived".into()),
        (
            "succeeded",
            count(people.succeeded),
            share(people.succeeded),
        ),
        ("rejected", count(rejected), "accepted, then failed".into()),
        ("refused", count(refused), "never accepted".into()),
        ("unknown", count(people.unknown), "target 0".into()),
        ("retries", count(people.retries), "after a refusal".into()),
    ]
    .iter()
    .map(|(label, value, note)| {
        let bad = *label == "unknown" && people.unknown > 0;
        let class = if bad { "figure bad" } else { "figure" };
        let note = match note.as_str() {
            "" => String::new(),
            note => format!("<span class=\"note\">{note}</span>"),
        };
        format!(
            "<div class=\"{class}\"><span class=\"label\">{label}</span>\
             <span class=\"value\">{value}</span>{note}</div>\n"
        )
    })
    .collect();
    let ended = people
        .succeeded
        .saturating_add(rejected)
        .saturating_add(refused)
        .saturating_add(people.unknown);
    let mismatch = if ended == people.arrived {
        String::new()
    } else {
        format!(
            "<p class=\"warn\">Outcomes add up to {}, not the {} arrivals.</p>\n",
            count(ended),
            count(people.arrived)
        )
    };
    format!(
        "<section>\n<h2>Outcomes</h2>\n<div class=\"figures\">\n{figures}</div>\n{mismatch}\
         <div class=\"codes\">\n{}{}{}{}</div>\n</section>\n",
        by_code("Rejected by code", &people.rejected),
        by_code("Refused by code (final answer)", &people.refused),
        by_code("Refusals by code (every attempt)", &people.refusals_by_code),
        // A 503's code is shared by several causes; its message names the one it was.
        if people.unavailable_messages.is_empty() {
            String::new()
        } else {
            by_code("503 answers by message", &people.unavailable_messages)
        },
    )
}

/// One breakdown by error code with each code's share, so a single dominant cause stands out.
fn by_code(title: &str, codes: &BTreeMap<String, u64>) -> String {
    let total = sum(codes);
    let rows: Vec<String> = codes
        .iter()
        .map(|(code, n)| {
            format!(
                "<tr><td class=\"text\"><code>{}</code></td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>\n",
                esc(code),
                count(*n),
                percent(*n, total)
            )
        })
        .collect();
    format!(
        "<div>\n<h3>{title}</h3>\n{}</div>\n",
        table(
            &["code", "count", "share"],
            &[false, true, true],
            &rows,
            "<p class=\"nodata\">None.</p>\n"
        )
    )
}
