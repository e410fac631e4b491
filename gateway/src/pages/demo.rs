//! `sluice dev`'s demo sale page (`/demo/`): the whole browser flow within a minute of the first
//! command. Served only by `sluice dev` (a gateway started any other way answers `404`), because
//! `/demo/token` mints a subject token for any subject, which only an application's own backend
//! may do. The page itself is an ordinary client of the module.

use bytes::Bytes;
use hyper::StatusCode;
use serde::Serialize;
use sluice_durable::ids::NamespaceId;
use sluice_store::secrets::Redacted;

use crate::http::error::ApiError;
use crate::http::response::HttpResponse;
use crate::http::url::{parse_query, query_value};
use crate::pages::ui::with_content_type;

const INDEX: &str = include_str!("../../client/demo/index.html");
const SCRIPT: &str = include_str!("../../client/demo/demo.js");

/// What the demo needs of the dev namespace.
#[derive(Debug, Clone)]
pub struct Demo {
    pub namespace_id: NamespaceId,
    pub subject_key_id: String,
    pub subject_key: Redacted<String>,
}

#[derive(Serialize)]
struct Token {
    token: String,
}

#[derive(Serialize)]
struct Namespace {
    namespace_id: NamespaceId,
}

/// Answers `GET /demo/{rest…}`.
pub fn serve(demo: &Demo, rest: &[&str], query: Option<&str>) -> Result<HttpResponse, ApiError> {
    match rest {
        [] | [""] | ["index.html"] => Ok(with_content_type(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(INDEX.as_bytes()),
        )),
        ["demo.js"] => Ok(with_content_type(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            Bytes::from_static(SCRIPT.as_bytes()),
        )),
        ["namespace"] => json(&Namespace {
            namespace_id: demo.namespace_id,
        }),
        ["token"] => {
            let query = parse_query(query, &["subject"])?;
            let subject = query_value(&query, "subject")
                .ok_or_else(|| ApiError::invalid("subject", "is required"))?;
            crate::http::strict_json::validate_subject(subject, "subject")?;
            let now = crate::identity::auth::now_unix();
            let token = crate::identity::subject_token::issue(
                &demo.subject_key_id,
                demo.subject_key.expose().as_bytes(),
                subject,
                now,
                now + 3600,
            );
            json(&Token { token })
        }
        _ => Err(ApiError::not_found("no such demo file")),
    }
}

fn json<T: Serialize>(value: &T) -> Result<HttpResponse, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| ApiError::unavailable(e.to_string()))?;
    let mut response = with_content_type(StatusCode::OK, "application/json", Bytes::from(body));
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}
