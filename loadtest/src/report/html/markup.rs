//! The HTML building blocks every section shares (a titled section, a scrollable table, a
//! "no data" note, a ✓/✗ mark), so the sections look and behave alike.

/// A titled section: the page's outline is its `<h2>` headings.
pub(super) fn section(title: &str, body: &str) -> String {
    format!("<section>\n<h2>{title}</h2>\n{body}</section>\n")
}

/// A scrollable table (wide tables scroll on their own instead of widening the page), or the
/// `empty` note when there are no rows.
pub(super) fn table(head: &[&str], numeric: &[bool], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return empty.to_string();
    }
    let head: String = head
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let class = if numeric.get(i).copied().unwrap_or(false) {
                " class=\"num\""
            } else {
                ""
            };
            format!("<th scope=\"col\"{class}>{name}</th>")
        })
        .collect();
    format!(
        "<div class=\"scroll\">\n<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{}</tbody>\n\
         </table>\n</div>\n",
        rows.concat()
    )
}

/// Said in words where a table or chart would be empty, so an empty run does not read as a
/// rendering bug.
pub(super) fn no_data(what: &str) -> String {
    format!("<p class=\"nodata\">No data: {what}.</p>\n")
}

/// ✓ or ✗ with a word: colour alone would be lost on some readers and in print.
pub(super) fn mark(ok: bool, yes: &str, no: &str) -> String {
    if ok {
        format!("<span class=\"yes\">✓ {yes}</span>")
    } else {
        format!("<span class=\"no\">✗ {no}</span>")
    }
}
