//! CORS: each namespace lists the browser origins allowed to call it.
//!
//! A preflight carries no credential, so it is answered for any origin that some namespace
//! allows; the real request is then answered with `Access-Control-Allow-Origin` only if the
//! origin is allowed by the namespace the request turned out to belong to. Nothing here relaxes
//! authentication: bearer credentials and tickets are never ambient.

use hyper::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, HeaderValue, VARY,
};
use hyper::{HeaderMap, StatusCode};
use sluice_durable::ids::NamespaceId;

use crate::http::response::{HttpResponse, plain};
use crate::state::Gateway;

/// The `Origin` of a browser request, if any.
pub fn origin(headers: &HeaderMap) -> Option<String> {
    headers
        .get(hyper::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Answers an `OPTIONS` preflight.
pub async fn preflight(gateway: &Gateway, origin: Option<&str>) -> HttpResponse {
    let mut response = plain(StatusCode::NO_CONTENT, "");
    let headers = response.headers_mut();
    headers.insert(VARY, HeaderValue::from_static("Origin"));
    let Some(origin) = origin else {
        return response;
    };
    if gateway.origin_allowed_anywhere(origin).await
        && let Ok(value) = HeaderValue::from_str(origin)
    {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        headers.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, idempotency-key"),
        );
        headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    }
    response
}

/// Adds the CORS headers to a real answer when the namespace allows the origin.
pub async fn decorate(
    gateway: &Gateway,
    response: &mut HttpResponse,
    origin: Option<&str>,
    namespace_id: Option<NamespaceId>,
) {
    let (Some(origin), Some(namespace_id)) = (origin, namespace_id) else {
        return;
    };
    response
        .headers_mut()
        .insert(VARY, HeaderValue::from_static("Origin"));
    let Ok(config) = gateway.namespace(namespace_id).await else {
        return;
    };
    if !config
        .declaration
        .namespace
        .allowed_origins
        .iter()
        .any(|o| o == origin)
    {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(origin) {
        let headers = response.headers_mut();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("x-request-id, retry-after"),
        );
    }
}
