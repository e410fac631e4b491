//! `GET /.well-known/jwks.json`: the public keys that verify waiting-room passes, as a plain
//! JWK Set (RFC 7517; no envelope, so any JWT library reads it as is). The live key and those
//! retired less than a pass's longest life ago are listed; an origin that meets an unknown
//! `kid` fetches the set again (it may be cached for a minute).

use hyper::StatusCode;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};

use crate::http::error::ApiError;
use crate::http::response::{HttpResponse, plain};
use crate::state::Gateway;

pub async fn serve(gateway: &Gateway) -> Result<HttpResponse, ApiError> {
    let keys = sluice_store::pass_keys::published(&gateway.pg).await?;
    let set = serde_json::json!({
        "keys": keys.iter().map(|key| key.jwk()).collect::<Vec<_>>(),
    });
    let mut response = plain(StatusCode::OK, set.to_string());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    Ok(response)
}
