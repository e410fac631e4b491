//! Rules for a command's `waiting_page`.

use super::super::{WaitingPageDecl, parse};
use super::{assert_refused, doc};

fn page(table: &str) -> Option<WaitingPageDecl> {
    match parse(&doc(&[("waiting_page", table)])) {
        Ok(model) => model.commands[0].waiting_page.clone(),
        Err(error) => panic!("must parse: {error}"),
    }
}

#[test]
fn an_undeclared_page_is_none_and_a_declared_one_fills_defaults() {
    let model = parse(&doc(&[])).expect("parses");
    assert_eq!(model.commands[0].waiting_page, None);
    let declared = page(r#"{ title = "Tickets", return_urls = ["https://shop.example/done"] }"#)
        .expect("declared");
    assert_eq!(declared.title, "Tickets");
    assert_eq!(declared.message, WaitingPageDecl::default().message);
    assert_eq!(declared.accent_color, "#1a56db");
    assert_eq!(declared.return_urls, ["https://shop.example/done"]);
    let coloured = page(r##"{ accent_color = "#ABCDEF" }"##).expect("declared");
    assert_eq!(coloured.accent_color, "#abcdef", "colours are normalized");
}

#[test]
fn bad_texts_colours_and_return_urls_are_refused_naming_the_field() {
    let long = format!("{{ title = \"{}\" }}", "t".repeat(121));
    let cases: Vec<(String, &str, &str)> = vec![
        (
            long,
            "command[0].waiting_page.title",
            "at most 120 characters",
        ),
        (
            "{ motto = \"x\" }".into(),
            "command[0].waiting_page.motto",
            "unknown field",
        ),
        (
            "{ accent_color = \"blue\" }".into(),
            "command[0].waiting_page.accent_color",
            "#rrggbb",
        ),
        (
            "{ text_color = \"#12345\" }".into(),
            "command[0].waiting_page.text_color",
            "#rrggbb",
        ),
        (
            "{ return_urls = [\"javascript:alert(1)\"] }".into(),
            "command[0].waiting_page.return_urls[0]",
            "https://",
        ),
        (
            "{ return_urls = [\"https://shop.example/done?x=1\"] }".into(),
            "command[0].waiting_page.return_urls[0]",
            "no query",
        ),
        (
            "{ return_urls = [\"https://user@shop.example/\"] }".into(),
            "command[0].waiting_page.return_urls[0]",
            "without credentials",
        ),
        (
            "{ return_urls = [\"https:///done\"] }".into(),
            "command[0].waiting_page.return_urls[0]",
            "must name a host",
        ),
    ];
    for (table, field, message) in cases {
        assert_refused(&doc(&[("waiting_page", &table)]), field, message);
    }
}
