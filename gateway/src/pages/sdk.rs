//! The browser module and the hosted waiting page, embedded in the binary.
//!
//! - `GET /sdk/v1/sluice.js` and `/sdk/v1/rooms.js`: the stable entries (claims; waiting
//!   rooms), cached five minutes, each one line re-exporting its content-hashed file
//!   (`sluice.<hash>.js`, `rooms.<hash>.js`, and `work.<hash>.js`, the proof-of-work solver that
//!   rooms import), whose name changes with its content and which is cached for a year
//!   (`immutable`): an application imports the stable path and a new release reaches its pages
//!   within minutes, while every page loads the module itself once. A hashed file imports the
//!   others by their hashed names, so the files a page loads are always of one release.
//! - `GET /sdk/v1/sluice-work.js`: the module worker that solves a room's proof of work for a
//!   page on this origin (the hosted pages' CSP allows `'self'` workers, never `blob:` ones);
//!   it imports the hashed solver, so the solver has one source. Pages on another origin may
//!   not start a worker from this URL: the module builds a Blob-URL worker from its own source.
//! - `GET /sdk/v1/react.js`: the React hook (it imports `react`, which the page resolves: an
//!   import map or a bundler); `GET /sdk/v1/{sluice,rooms,work,react}.d.ts`: the types;
//!   `GET /sdk/v1/wait/{wait.js,wait.css}`, `/sdk/v1/room/room.js` and `/sdk/v1/page-kit.js`
//!   (what both share): the hosted pages' own.
//! - All of these hold no secret and are served with `Access-Control-Allow-Origin: *`, so an
//!   application's pages on another origin can import them; the API calls the module makes keep
//!   the namespace's `allowed_origins`.
//! - `GET /wait/{namespace_id}/{command}`: the waiting page of a declared command, its texts,
//!   colours and return URLs from the declaration (a JSON block, never markup), under a strict
//!   `Content-Security-Policy` (same origin only, no inline script, no framing), no cookies and no
//!   third-party requests.
//! - `GET /room/{namespace_id}/{room}`: the hosted page of a declared room, the same way: its
//!   texts, colours and return URL from the room's `page`, the same policy except that forms
//!   may post to the return URL's origin (where the pass is handed over) and nowhere else.

use std::sync::LazyLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue,
    X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};
use serde::Serialize;
use sluice_durable::declaration::{RoomPageDecl, WaitingPageDecl};
use sluice_durable::ids::NamespaceId;

use crate::http::error::ApiError;
use crate::http::response::HttpResponse;
use crate::state::Gateway;

const MODULE_SOURCE: &str = include_str!("../../client/sluice.js");
const ROOMS_SOURCE: &str = include_str!("../../client/rooms.js");
const WORK_SOURCE: &str = include_str!("../../client/work.js");
const REACT_JS: &str = include_str!("../../client/react.js");
const TYPES: [(&str, &str); 4] = [
    ("sluice.d.ts", include_str!("../../client/sluice.d.ts")),
    ("rooms.d.ts", include_str!("../../client/rooms.d.ts")),
    ("work.d.ts", include_str!("../../client/work.d.ts")),
    ("react.d.ts", include_str!("../../client/react.d.ts")),
];
const WAIT_JS: &str = include_str!("../../client/wait/wait.js");
const WAIT_CSS: &str = include_str!("../../client/wait/wait.css");
const WAIT_HTML: &str = include_str!("../../client/wait/wait.html");
const ROOM_JS: &str = include_str!("../../client/room/room.js");
const PAGE_KIT: &str = include_str!("../../client/page-kit.js");
const ROOM_HTML: &str = include_str!("../../client/room/room.html");

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const SHORT_CACHE: &str = "public, max-age=300";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The hosted pages may load only this gateway's files and call only this gateway; where their
/// forms may post (`form-action`) is each page's own ([`page_policy`]).
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'";

/// A file of the module served under a content-hashed name: `<stem>.<first 16 hex digits of
/// its SHA-256>.js`, its imports of the other hashed files (`"./<stem>.js"`) rewritten to their
/// hashed names (so its hash covers theirs).
struct Hashed {
    stem: &'static str,
    name: String,
    text: String,
}

impl Hashed {
    fn new(stem: &'static str, source: &str, imports: &[&Hashed]) -> Hashed {
        let mut text = source.to_string();
        for import in imports {
            text = text.replace(
                &format!("\"./{}.js\"", import.stem),
                &format!("\"./{}\"", import.name),
            );
        }
        let digest = sluice_store::secrets::sha256(text.as_bytes());
        let name = format!("{stem}.{}.js", &hex::encode(digest)[..16]);
        Hashed { stem, name, text }
    }

    /// The stable entry's text: it only points at the hashed file.
    fn entry(&self) -> String {
        format!(
            "// Sluice browser module, stable entry: the code is in the content-hashed file.\nexport * from \"./{}\";\n",
            self.name
        )
    }
}

/// The client: commands, allocations and reads (no import).
static MODULE: LazyLock<Hashed> = LazyLock::new(|| Hashed::new("sluice", MODULE_SOURCE, &[]));
/// The proof-of-work solver (no import).
static WORK: LazyLock<Hashed> = LazyLock::new(|| Hashed::new("work", WORK_SOURCE, &[]));
/// Waiting rooms, on the client and the solver.
static ROOMS: LazyLock<Hashed> =
    LazyLock::new(|| Hashed::new("rooms", ROOMS_SOURCE, &[&MODULE, &WORK]));

static ENTRY: LazyLock<String> = LazyLock::new(|| MODULE.entry());
static ROOMS_ENTRY: LazyLock<String> = LazyLock::new(|| ROOMS.entry());

/// The solver's worker: the hashed solver's `serveWork`, in a module worker. Cached like the
/// stable entries, since it names the current hashed file.
static WORKER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "// Sluice proof-of-work solver, run as a module worker by rooms.js.\nimport {{ serveWork }} from \"./{}\";\nserveWork(self);\n",
        WORK.name
    )
});

/// The hashed client's name (the demo and the tests link it).
pub fn hashed_module_name() -> &'static str {
    &MODULE.name
}

/// Answers `GET /sdk/v1/{rest…}`.
pub fn serve(rest: &[&str]) -> Result<HttpResponse, ApiError> {
    let file = |content_type, cache, body: Bytes| Ok(public_file(content_type, cache, body));
    if let [name] = rest {
        let hashed: [&'static Hashed; 3] = [&MODULE, &ROOMS, &WORK];
        if let Some(hashed) = hashed.into_iter().find(|h| h.name == *name) {
            return file(
                JAVASCRIPT,
                IMMUTABLE,
                Bytes::from_static(hashed.text.as_bytes()),
            );
        }
        if let Some((_, types)) = TYPES.iter().find(|(file, _)| file == name) {
            return file(
                "application/typescript; charset=utf-8",
                SHORT_CACHE,
                Bytes::from_static(types.as_bytes()),
            );
        }
    }
    match rest {
        ["sluice.js"] => file(JAVASCRIPT, SHORT_CACHE, Bytes::from(ENTRY.as_bytes())),
        ["rooms.js"] => file(JAVASCRIPT, SHORT_CACHE, Bytes::from(ROOMS_ENTRY.as_bytes())),
        ["sluice-work.js"] => file(JAVASCRIPT, SHORT_CACHE, Bytes::from(WORKER.as_bytes())),
        ["react.js"] => file(
            JAVASCRIPT,
            SHORT_CACHE,
            Bytes::from_static(REACT_JS.as_bytes()),
        ),
        ["wait", "wait.js"] => file(
            JAVASCRIPT,
            SHORT_CACHE,
            Bytes::from_static(WAIT_JS.as_bytes()),
        ),
        ["page-kit.js"] => file(
            JAVASCRIPT,
            SHORT_CACHE,
            Bytes::from_static(PAGE_KIT.as_bytes()),
        ),
        ["room", "room.js"] => file(
            JAVASCRIPT,
            SHORT_CACHE,
            Bytes::from_static(ROOM_JS.as_bytes()),
        ),
        ["wait", "wait.css"] => file(
            "text/css; charset=utf-8",
            SHORT_CACHE,
            Bytes::from_static(WAIT_CSS.as_bytes()),
        ),
        _ => Err(ApiError::not_found(
            "no such file: /sdk/v1/sluice.js, /sdk/v1/rooms.js, /sdk/v1/react.js, /sdk/v1/sluice-work.js, /sdk/v1/{sluice,rooms,work,react}.d.ts",
        )),
    }
}

fn public_file(content_type: &'static str, cache: &'static str, body: Bytes) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// What the page's script reads from its JSON block.
#[derive(Serialize)]
struct PageConfig<'a> {
    namespace: NamespaceId,
    command: &'a str,
    #[serde(flatten)]
    page: &'a WaitingPageDecl,
}

/// Answers `GET /wait/{namespace_id}/{command}`: `404` unless the namespace declares it.
pub async fn waiting_page(
    gateway: &Gateway,
    namespace: &str,
    command: &str,
) -> Result<HttpResponse, ApiError> {
    let not_found = || ApiError::not_found("no such waiting page");
    let namespace_id: NamespaceId = namespace.parse().map_err(|_| not_found())?;
    let config = gateway
        .namespace(namespace_id)
        .await
        .map_err(|_| not_found())?;
    let decl = config.declaration.command(command).ok_or_else(not_found)?;
    let defaults = WaitingPageDecl::default();
    let page = decl.waiting_page.as_ref().unwrap_or(&defaults);
    let config = PageConfig {
        namespace: namespace_id,
        command: &decl.code,
        page,
    };
    let policy = page_policy(None)
        .map_err(|e| ApiError::unavailable(format!("the page could not be rendered: {e}")))?;
    hosted_page(WAIT_HTML, &config, policy)
}

/// What the room page's script reads from its JSON block.
#[derive(Serialize)]
struct RoomPageConfig<'a> {
    namespace: NamespaceId,
    room: &'a str,
    #[serde(flatten)]
    page: &'a RoomPageDecl,
}

/// Answers `GET /room/{namespace_id}/{room}`: `404` unless the namespace declares the room.
pub async fn room_page(
    gateway: &Gateway,
    namespace: &str,
    room: &str,
) -> Result<HttpResponse, ApiError> {
    let not_found = || ApiError::not_found("no such room page");
    let namespace_id: NamespaceId = namespace.parse().map_err(|_| not_found())?;
    let config = gateway
        .namespace(namespace_id)
        .await
        .map_err(|_| not_found())?;
    let decl = config
        .declaration
        .rooms
        .iter()
        .find(|r| r.code == room)
        .ok_or_else(not_found)?;
    let defaults = RoomPageDecl::default();
    let page = decl.page.as_ref().unwrap_or(&defaults);
    let policy = page_policy(page.return_url.as_deref())
        .map_err(|e| ApiError::unavailable(format!("the page could not be rendered: {e}")))?;
    let config = RoomPageConfig {
        namespace: namespace_id,
        room: &decl.code,
        page,
    };
    hosted_page(ROOM_HTML, &config, policy)
}

/// A hosted page's `Content-Security-Policy`: forms may post to the return URL's origin only
/// (the declaration checked it is an absolute `http(s)` URL with a host), or nowhere.
fn page_policy(return_url: Option<&str>) -> Result<HeaderValue, String> {
    let form_action = match return_url {
        None => "'none'".to_string(),
        Some(url) => {
            let uri: hyper::Uri = url.parse().map_err(|e| format!("return_url: {e}"))?;
            let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
                return Err("return_url names no origin".into());
            };
            format!("{scheme}://{}", authority.as_str())
        }
    };
    HeaderValue::from_str(&format!("{PAGE_POLICY}; form-action {form_action}"))
        .map_err(|e| e.to_string())
}

/// A hosted page: `html` with its configuration as a JSON block, under `policy`.
fn hosted_page(
    html: &str,
    config: &impl Serialize,
    policy: HeaderValue,
) -> Result<HttpResponse, ApiError> {
    let json = serde_json::to_string(config)
        .map_err(|e| ApiError::unavailable(format!("the page could not be rendered: {e}")))?;
    // Inside <script type="application/json"> only `</` could end the block: `<` is escaped.
    let html = html.replace("{{CONFIG}}", &json.replace('<', "\\u003c"));
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(HeaderName::from_static("content-security-policy"), policy);
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_at_the_hashed_file_and_both_are_public() {
        let entry = serve(&["sluice.js"]).expect("entry");
        assert_eq!(entry.headers()[CACHE_CONTROL], SHORT_CACHE);
        assert_eq!(entry.headers()[ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(ENTRY.contains(hashed_module_name()));
        let hashed = serve(&[hashed_module_name()]).expect("hashed");
        assert_eq!(hashed.headers()[CACHE_CONTROL], IMMUTABLE);
        assert!(
            serve(&["sluice.0000000000000000.js"]).is_err(),
            "another hash is not served"
        );
        assert!(hashed_module_name().starts_with("sluice.") && hashed_module_name().len() == 26);
    }

    #[test]
    fn the_room_pages_forms_may_post_to_the_return_urls_origin_only() {
        let policy = page_policy(Some("https://shop.example:8443/enter/here")).expect("policy");
        let text = policy.to_str().expect("text");
        assert!(
            text.ends_with("; form-action https://shop.example:8443"),
            "{text}"
        );
        assert!(!text.contains("/enter"));
        assert_eq!(text.matches("form-action").count(), 1);
        let none = page_policy(None).expect("policy");
        assert!(
            none.to_str()
                .expect("text")
                .ends_with("; form-action 'none'")
        );
        assert!(page_policy(Some("/relative")).is_err());
    }

    #[test]
    fn the_worker_runs_the_hashed_solver() {
        let worker = serve(&["sluice-work.js"]).expect("worker");
        assert_eq!(worker.headers()[CACHE_CONTROL], SHORT_CACHE);
        assert_eq!(worker.headers()[CONTENT_TYPE], JAVASCRIPT);
        assert!(WORKER.contains(&format!("from \"./{}\"", WORK.name)));
        assert!(WORK.text.contains("export function serveWork(scope)"));
        assert!(
            !MODULE.text.contains("serveWork"),
            "the client has no solver"
        );
    }

    #[test]
    fn the_rooms_entry_imports_the_hashed_files_of_its_release() {
        let entry = serve(&["rooms.js"]).expect("rooms entry");
        assert_eq!(entry.headers()[CACHE_CONTROL], SHORT_CACHE);
        assert!(ROOMS_ENTRY.contains(&format!("from \"./{}\"", ROOMS.name)));
        for import in [&MODULE, &WORK] {
            assert!(
                ROOMS.text.contains(&format!("from \"./{}\"", import.name)),
                "rooms imports {}",
                import.name
            );
            assert!(
                !ROOMS.text.contains(&format!("\"./{}.js\"", import.stem)),
                "no stable name of {} is left",
                import.stem
            );
        }
        for hashed in [&ROOMS, &WORK] {
            let reply = serve(&[hashed.name.as_str()]).expect("hashed");
            assert_eq!(reply.headers()[CACHE_CONTROL], IMMUTABLE);
        }
        assert!(
            !MODULE
                .text
                .lines()
                .any(|line| line.starts_with("import ") || line.starts_with("export * from")),
            "the client imports nothing"
        );
        assert!(serve(&["rooms.0000000000000000.js"]).is_err());
    }

    #[test]
    fn the_types_and_the_react_hook_are_served() {
        for name in ["sluice.d.ts", "rooms.d.ts", "work.d.ts", "react.d.ts"] {
            let reply = serve(&[name]).unwrap_or_else(|_| panic!("{name}"));
            assert_eq!(
                reply.headers()[CONTENT_TYPE],
                "application/typescript; charset=utf-8"
            );
        }
        let react = serve(&["react.js"]).expect("react.js");
        assert_eq!(react.headers()[ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(REACT_JS.contains("export function useSluiceCommand("));
    }
}
