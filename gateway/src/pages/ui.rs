//! The operator dashboard at `/ui/`: a few static files embedded in the binary.
//!
//! The page itself holds no secret: it asks the operator for a credential (kept in the browser's
//! `sessionStorage`), then reads `GET /v1/status` and steers `POST /v1/control` like any other
//! client. Every file is answered with `Cache-Control: no-cache` and a strict
//! `Content-Security-Policy` (same-origin only, no inline script), so the page can only talk to
//! this gateway.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue, LOCATION};
use hyper::{Response, StatusCode};

use crate::http::error::ApiError;
use crate::http::response::HttpResponse;

/// Same origin for everything; no inline script, no plugins, no framing, no form posts elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The embedded files: name under `/ui/`, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../ui/favicon.svg"),
    ),
];

/// Answers `GET /ui/{rest…}`: `/ui` redirects to `/ui/`, a known file is served, anything else
/// is `404 NOT_FOUND`.
pub fn serve(rest: &[&str]) -> Result<HttpResponse, ApiError> {
    match rest {
        [] => Ok(redirect("/ui/")),
        [name] => FILES
            .iter()
            .find(|(file, _, _)| file == name)
            .map(|(_, content_type, body)| {
                with_content_type(
                    StatusCode::OK,
                    content_type,
                    Bytes::from_static(body.as_bytes()),
                )
            })
            .ok_or_else(|| ApiError::not_found(format!("no dashboard file {name:?}"))),
        _ => Err(ApiError::not_found("no such dashboard file")),
    }
}

/// An answer of `content_type` with the dashboard's security and caching headers.
pub fn with_content_type(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    response
}

fn redirect(location: &'static str) -> HttpResponse {
    let mut response = with_content_type(
        StatusCode::MOVED_PERMANENTLY,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"moved to /ui/\n"),
    );
    response
        .headers_mut()
        .insert(LOCATION, HeaderValue::from_static(location));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(response: &'a HttpResponse, name: &str) -> &'a str {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    #[test]
    fn serves_the_files_with_their_types_and_strict_headers() {
        for (path, content_type) in [
            (vec![""], "text/html; charset=utf-8"),
            (vec!["app.js"], "text/javascript; charset=utf-8"),
            (vec!["style.css"], "text/css; charset=utf-8"),
            (vec!["favicon.svg"], "image/svg+xml"),
        ] {
            let response = serve(&path).expect("a known file");
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(header(&response, "content-type"), content_type);
            assert_eq!(header(&response, "cache-control"), "no-cache");
            assert_eq!(header(&response, "x-content-type-options"), "nosniff");
            let csp = header(&response, "content-security-policy");
            assert!(csp.starts_with("default-src 'self'"), "{csp}");
            assert!(!csp.contains("unsafe-inline"), "{csp}");
        }
    }

    #[test]
    fn redirects_the_bare_path_and_refuses_unknown_files() {
        let response = serve(&[]).expect("redirect");
        assert_eq!(response.status(), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(header(&response, "location"), "/ui/");
        assert!(serve(&["x"]).is_err());
        assert!(serve(&["..", "Cargo.toml"]).is_err());
        assert!(serve(&["app.js", ""]).is_err());
    }

    #[test]
    fn the_page_has_no_inline_script() {
        let html = include_str!("../../ui/index.html");
        for tag in html.split("<script").skip(1) {
            let open = tag.split('>').next().unwrap_or("");
            assert!(open.contains("src="), "inline script: <script{open}>");
        }
        for (at, _) in html.match_indices(" on") {
            let name: String = html[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let after = html[at + 1 + name.len()..].chars().next();
            assert!(after != Some('='), "inline event handler attribute {name}");
        }
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "external resource"
        );
    }
}
