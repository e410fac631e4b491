//! Routing by a plain `match` on method and path segments, and the envelope around every answer.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tracing::Instrument;

use uuid::Uuid;

use crate::auth::authenticate;
use crate::cors;
use crate::error::ApiError;
use crate::handlers::{self, Handled, application, commands, complete, enqueue, tickets};
use crate::response::{HttpResponse, failure, new_request_id, plain, success};
use crate::state::Gateway;
use crate::url::{decode_segment, parse_query};

/// The service function: never fails; every failure is an envelope with an error code.
pub async fn handle(
    gateway: Arc<Gateway>,
    request: Request<Incoming>,
) -> Result<HttpResponse, Infallible> {
    let request_id = new_request_id();
    let span = tracing::info_span!("request", %request_id, method = %request.method(), path = %request.uri().path());
    let origin = cors::origin(request.headers());
    let response = async {
        if request.method() == Method::OPTIONS {
            return cors::preflight(&gateway, origin.as_deref()).await;
        }
        let mut namespace = None;
        let answer = route(&gateway, request, &mut namespace).await;
        let mut response = match answer {
            Ok(Answer::Json(status, data)) => success(&request_id, status, data),
            Ok(Answer::Plain(response)) => response,
            Err(error) => {
                tracing::debug!(code = error.code.as_str(), message = %error.message, "refused");
                failure(&request_id, &error)
            }
        };
        cors::decorate(&gateway, &mut response, origin.as_deref(), namespace).await;
        response
    }
    .instrument(span)
    .await;
    Ok(response)
}

enum Answer {
    Json(StatusCode, serde_json::Value),
    Plain(HttpResponse),
}

fn json(handled: Handled) -> Result<Answer, ApiError> {
    handled.map(|(status, data)| Answer::Json(status, data))
}

/// Routes one request. `namespace` learns which namespace the request belongs to as soon as the
/// credential, token or ticket tells, so that even a refusal carries the right CORS headers.
async fn route(
    gateway: &Gateway,
    request: Request<Incoming>,
    namespace: &mut Option<Uuid>,
) -> Result<Answer, ApiError> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => Ok(Answer::Plain(plain(StatusCode::OK, "ok\n"))),
        (&Method::GET, ["readyz"]) => Ok(Answer::Plain(readiness(gateway).await)),
        (&Method::GET, ["v1", "tickets", ticket]) => {
            let claims = tickets::verify(gateway, ticket)?;
            *namespace = Some(claims.namespace_id);
            json(tickets::poll(gateway, &claims).await)
        }
        (&Method::POST, ["v1", "commands", action]) => {
            let action = decode_segment(action, "path")?;
            let (target, verb) = action.rsplit_once(':').ok_or_else(|| {
                ApiError::not_found(
                    "POST /v1/commands/{command}:enqueue, /v1/commands/{id}:cancel or /v1/commands/{id}:complete",
                )
            })?;
            match verb {
                "enqueue" => {
                    check_command_code(target)?;
                    let caller = authenticate(gateway, request.headers()).await?;
                    *namespace = Some(caller.namespace_id);
                    let (parts, body) = request.into_parts();
                    let body =
                        handlers::read_body(&parts.headers, body, gateway.config.max_body_bytes)
                            .await?;
                    json(enqueue::enqueue(gateway, target, caller, body).await)
                }
                "cancel" => {
                    let id = commands::parse_command_id(target)?;
                    let caller = authenticate(gateway, request.headers()).await?;
                    *namespace = Some(caller.namespace_id);
                    json(commands::cancel(gateway, &caller, id).await)
                }
                "complete" => {
                    let id = commands::parse_command_id(target)?;
                    let caller = authenticate(gateway, request.headers()).await?;
                    *namespace = Some(caller.namespace_id);
                    let (parts, body) = request.into_parts();
                    let body =
                        handlers::read_body(&parts.headers, body, gateway.config.max_body_bytes)
                            .await?;
                    json(complete::complete(gateway, &caller, id, body).await)
                }
                other => Err(ApiError::not_found(format!("no custom method :{other}"))),
            }
        }
        (&Method::GET, ["v1", "commands", id]) => {
            let id = commands::parse_command_id(id)?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(commands::get(gateway, &caller, id).await)
        }
        (&Method::GET, ["v1", "commands", command, "requests", key]) => {
            check_command_code(command)?;
            let key = decode_segment(key, "request_key")?;
            let query = parse_query(query.as_deref(), &["subject"])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(commands::by_request_key(gateway, &caller, command, &key, &query).await)
        }
        (&Method::GET, ["v1", "commands", command, "mine"]) => {
            check_command_code(command)?;
            let query = parse_query(query.as_deref(), &["resource_key", "cursor", "limit"])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(commands::mine(gateway, &caller, command, &query).await)
        }
        (&Method::GET, ["v1", "application", "resources"]) => {
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(application::read(gateway, &caller).await)
        }
        (&Method::POST, ["v1", "application", "resources:configure"]) => {
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body =
                handlers::read_body(&parts.headers, body, gateway.config.max_body_bytes).await?;
            json(application::configure(gateway, &caller, &parts.headers, &body).await)
        }
        _ => Err(ApiError::not_found(format!("no endpoint {method} {path}"))),
    }
}

/// Command codes are declared as `^[a-z][a-z0-9_-]*$`; anything else cannot exist.
fn check_command_code(code: &str) -> Result<(), ApiError> {
    let valid = !code.is_empty()
        && code.len() <= 64
        && code.starts_with(|c: char| c.is_ascii_lowercase())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no command {code:?}")))
    }
}

/// Ready only when PostgreSQL and Redis both answer.
async fn readiness(gateway: &Gateway) -> HttpResponse {
    let postgres = sqlx::query("SELECT 1").execute(&gateway.pg).await.is_ok();
    let redis = fred::interfaces::ClientLike::ping::<String>(gateway.redis.next(), None)
        .await
        .is_ok();
    match (postgres, redis) {
        (true, true) => plain(StatusCode::OK, "ready\n"),
        (false, _) => plain(StatusCode::SERVICE_UNAVAILABLE, "PostgreSQL unavailable\n"),
        (true, false) => plain(StatusCode::SERVICE_UNAVAILABLE, "Redis unavailable\n"),
    }
}
