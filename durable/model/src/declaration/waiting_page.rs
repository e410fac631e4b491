//! A command's `waiting_page`: what the gateway's hosted waiting page (`/wait/{namespace}/{command}`)
//! shows, and where it may hand the result back; and a room's `page`, what the hosted room page
//! (`/room/{namespace}/{room}`) shows and the one URL it hands an admitted person's pass to.
//!
//! Every field is optional; an undeclared page shows the defaults and returns nowhere. Texts are
//! shown as text (never HTML); colours are `#rrggbb`; `return_urls` are the only places the page
//! sends the browser to once the command ends (an absolute `http(s)` URL without a query or
//! fragment; a return URL given to the page must start with one of them), so the page can never
//! be used to redirect anywhere else.

use super::model::{RoomPageDecl, WaitingPageDecl};
use super::walk::{Obj, Result, as_str, char_len};
use crate::field_error::FieldError;

const KEYS: &[&str] = &[
    "title",
    "message",
    "accent_color",
    "background_color",
    "text_color",
    "return_urls",
];
/// A room's page: the same look, and one return URL where the pass is posted.
const ROOM_PAGE_KEYS: &[&str] = &[
    "title",
    "message",
    "accent_color",
    "background_color",
    "text_color",
    "return_url",
];
const MAX_TITLE_CHARS: usize = 120;
const MAX_MESSAGE_CHARS: usize = 500;
const MAX_RETURN_URLS: usize = 10;
const MAX_URL_LEN: usize = 500;

impl Default for WaitingPageDecl {
    fn default() -> Self {
        Self {
            title: "You are in line".into(),
            message: "Keep this page open: it updates by itself, and you keep your place if you reload it.".into(),
            accent_color: "#1a56db".into(),
            background_color: "#ffffff".into(),
            text_color: "#111827".into(),
            return_urls: Vec::new(),
        }
    }
}

impl Default for RoomPageDecl {
    fn default() -> Self {
        let command_page = WaitingPageDecl::default();
        Self {
            title: "Waiting room".into(),
            message: "Keep this page open: it updates by itself, and you keep your place if you reload it.".into(),
            accent_color: command_page.accent_color,
            background_color: command_page.background_color,
            text_color: command_page.text_color,
            return_url: None,
        }
    }
}

/// Parses the optional `waiting_page` table of a command.
pub(crate) fn parse_waiting_page(cmd: &Obj<'_>) -> Result<Option<WaitingPageDecl>> {
    let Some(page) = cmd.opt_table("waiting_page")? else {
        return Ok(None);
    };
    page.allow_only(KEYS)?;
    let defaults = WaitingPageDecl::default();
    Ok(Some(WaitingPageDecl {
        title: text(&page, "title", MAX_TITLE_CHARS, defaults.title)?,
        message: text(&page, "message", MAX_MESSAGE_CHARS, defaults.message)?,
        accent_color: colour(&page, "accent_color", defaults.accent_color)?,
        background_color: colour(&page, "background_color", defaults.background_color)?,
        text_color: colour(&page, "text_color", defaults.text_color)?,
        return_urls: parse_return_urls(&page)?,
    }))
}

/// Parses the optional `page` table of a room.
pub(crate) fn parse_room_page(room: &Obj<'_>) -> Result<Option<RoomPageDecl>> {
    let Some(page) = room.opt_table("page")? else {
        return Ok(None);
    };
    page.allow_only(ROOM_PAGE_KEYS)?;
    let defaults = RoomPageDecl::default();
    let return_url = match page.get("return_url") {
        None => None,
        Some(value) => {
            let path = page.field("return_url");
            let url = as_str(value, &path)?;
            check_return_url(url).map_err(|why| FieldError::new(&path, why))?;
            Some(url.to_owned())
        }
    };
    Ok(Some(RoomPageDecl {
        title: text(&page, "title", MAX_TITLE_CHARS, defaults.title)?,
        message: text(&page, "message", MAX_MESSAGE_CHARS, defaults.message)?,
        accent_color: colour(&page, "accent_color", defaults.accent_color)?,
        background_color: colour(&page, "background_color", defaults.background_color)?,
        text_color: colour(&page, "text_color", defaults.text_color)?,
        return_url,
    }))
}

/// A text shown as text: at most `max` characters, no control characters.
fn text(page: &Obj<'_>, key: &str, max: usize, default: String) -> Result<String> {
    match page.get(key) {
        None => Ok(default),
        Some(value) => {
            let text = as_str(value, &page.field(key))?;
            if char_len(text) > max || text.chars().any(char::is_control) {
                return Err(page.error(
                    key,
                    format!("must be at most {max} characters, no control characters"),
                ));
            }
            Ok(text.to_owned())
        }
    }
}

/// A colour `#rrggbb`, kept in lower case.
fn colour(page: &Obj<'_>, key: &str, default: String) -> Result<String> {
    match page.get(key) {
        None => Ok(default),
        Some(value) => {
            let text = as_str(value, &page.field(key))?;
            let hex = text.strip_prefix('#').unwrap_or_default();
            if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(page.error(key, "must be a colour #rrggbb"));
            }
            Ok(text.to_ascii_lowercase())
        }
    }
}

fn parse_return_urls(page: &Obj<'_>) -> Result<Vec<String>> {
    let items = page.opt_array("return_urls")?.unwrap_or_default();
    let path = page.field("return_urls");
    if items.len() > MAX_RETURN_URLS {
        return Err(FieldError::new(
            &path,
            format!("at most {MAX_RETURN_URLS} return URLs"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item_path = format!("{path}[{i}]");
            let url = as_str(item, &item_path)?;
            check_return_url(url).map_err(|why| FieldError::new(&item_path, why))?;
            Ok(url.to_owned())
        })
        .collect()
}

/// An absolute `http(s)` URL with a host, no credentials, query or fragment.
fn check_return_url(url: &str) -> std::result::Result<(), String> {
    if url.len() > MAX_URL_LEN || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "must be at most {MAX_URL_LEN} characters without spaces"
        ));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("must start with https:// or http://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err("must name a host, without credentials".into());
    }
    if url.contains(['?', '#']) {
        return Err("must have no query or fragment (the page adds the result as a query)".into());
    }
    match url.parse::<hyper::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err("is not a valid URL".into()),
    }
}
