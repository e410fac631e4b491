//! Routing by a plain `match` on method and path segments, and the envelope around every answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{CACHE_CONTROL, HeaderValue};
use hyper::{Method, Request, StatusCode};
use tracing::{Instrument, Level};

use sluice_durable::ids::NamespaceId;

use crate::handlers::{
    self, Handled, application, commands, complete, control, enqueue, proof_of_work, quotas, reads,
    rooms, status_board, tickets,
};
use crate::http::cors;
use crate::http::error::{ApiError, ErrorCode};
use crate::http::health;
use crate::http::response::{HttpResponse, failure, plain, success};
use crate::http::url::{decode_segment, parse_query};
use crate::http::{route_names, trace_context};
use crate::identity::auth::authenticate;
use crate::identity::ticket::Ticket;
use crate::state::Gateway;

/// The path as logs show it: a ticket is a capability (whoever has it reads the command), so
/// its segment is never written to a log.
fn logged_path(path: &str) -> std::borrow::Cow<'_, str> {
    match path.strip_prefix("/v1/tickets/") {
        Some(ticket) if !ticket.is_empty() => "/v1/tickets/<ticket>".into(),
        _ => path.into(),
    }
}

/// The service function: never fails; every failure is an envelope with an error code.
///
/// Everything a request logs happens inside its `request` span (`request_id`, `trace_id`,
/// `method`, `path`), so every line carries the id the client gets in `X-Request-Id` (its own
/// when it sent a well-formed one) and the trace of its `traceparent`, on every answer
/// (probes and preflights too). The span is `info` so that `info` and `warn` lines inside it
/// keep the id at the default level.
pub async fn handle(
    gateway: Arc<Gateway>,
    request: Request<Incoming>,
) -> Result<HttpResponse, Infallible> {
    let started = Instant::now();
    let route_label = route_names::template(request.uri().path());
    let method = route_names::method(request.method());
    let request_id = trace_context::request_id(request.headers());
    let span = tracing::info_span!("request", %request_id, trace_id = tracing::field::Empty, method = %request.method(), path = %logged_path(request.uri().path()));
    span.record(
        "trace_id",
        trace_context::adopt(&span, request.headers()).as_str(),
    );
    let origin = cors::origin(request.headers());
    let response = async {
        let (mut response, code) = if request.method() == Method::OPTIONS {
            (cors::preflight(&gateway, origin.as_deref()).await, None)
        } else {
            let mut namespace = None;
            let answer = route(&gateway, request, &mut namespace).await;
            let (mut response, code) = match answer {
                Ok(Answer::Json(status, data)) => (success(&request_id, status, data), None),
                Ok(Answer::Cacheable(status, data, cache)) => {
                    let mut response = success(&request_id, status, data);
                    response
                        .headers_mut()
                        .insert(CACHE_CONTROL, HeaderValue::from_static(cache));
                    (response, None)
                }
                Ok(Answer::Plain(response)) => (response, None),
                Err(error) => {
                    // `detail`, not `message`: that name is the line's own message in JSON.
                    tracing::debug!(code = error.code.as_str(), detail = %error.message, "refused");
                    (failure(&request_id, &error), Some(error.code))
                }
            };
            cors::decorate(&gateway, &mut response, origin.as_deref(), namespace).await;
            (response, code)
        };
        let headers = response.headers_mut();
        if !headers.contains_key("x-request-id")
            && let Ok(value) = HeaderValue::from_str(&request_id)
        {
            headers.insert("x-request-id", value);
        }
        log_answer(response.status(), code, started);
        sluice_metrics::http_answered(
            route_label,
            method,
            response.status().as_u16(),
            started.elapsed(),
        );
        response
    }
    .instrument(span)
    .await;
    Ok(response)
}

/// The one completion line of a request (its span adds the id, method and path). Routine
/// answers are `debug`; `UNAVAILABLE` and `INTAKE_PAUSED` are refusals the API promises under
/// load, outages and pauses, so a storm of them stays at `info`; any other 5xx is a fault
/// worth a `warn`. Fields are plain numbers and static strings: nothing is formatted unless
/// the line is enabled.
fn log_answer(status: StatusCode, code: Option<ErrorCode>, started: Instant) {
    // Whole microseconds, so the JSON shows `0.256`, not `0.25647000000000003`.
    let latency_ms = started.elapsed().as_micros() as f64 / 1_000.0;
    let level = answer_level(status, code);
    let (status, code) = (status.as_u16(), code.map(ErrorCode::as_str));
    match level {
        Level::WARN => tracing::warn!(status, code, latency_ms, "answered"),
        Level::INFO => tracing::info!(status, code, latency_ms, "answered"),
        _ => tracing::debug!(status, code, latency_ms, "answered"),
    }
}

/// The level of a completion line; see [`log_answer`].
fn answer_level(status: StatusCode, code: Option<ErrorCode>) -> Level {
    if !status.is_server_error() {
        Level::DEBUG
    } else if matches!(code, Some(ErrorCode::Unavailable | ErrorCode::IntakePaused)) {
        Level::INFO
    } else {
        Level::WARN
    }
}

/// The two doors of `POST /v1/rooms/{room}:…`.
enum RoomDoor {
    Join,
    Challenge,
}

enum Answer {
    Json(StatusCode, serde_json::Value),
    /// A JSON answer a cache may keep as `Cache-Control` says (others are `no-store`).
    Cacheable(StatusCode, serde_json::Value, &'static str),
    Plain(HttpResponse),
}

fn json(handled: Handled) -> Result<Answer, ApiError> {
    handled.map(|(status, data)| Answer::Json(status, data))
}

/// Routes one request. `namespace` learns which namespace the request belongs to as soon as the
/// credential, token or ticket tells, so that even a refusal carries the right CORS headers.
///
/// The handlers of rare requests (operators, reads of one command, the waiting page) are boxed:
/// this future is as large as its largest arm, and hyper boxes (copies) it once per request, so
/// an unboxed status board would make every ticket poll and enqueue copy its kilobytes too.
async fn route(
    gateway: &Gateway,
    request: Request<Incoming>,
    namespace: &mut Option<NamespaceId>,
) -> Result<Answer, ApiError> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().map(str::to_string);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // Before authentication: a wrong method costs no lookup, and is the same answer for all.
    if let Some(allow) = allowed_methods(&segments)
        && !allow.split(", ").any(|m| m == method.as_str())
    {
        return Err(ApiError::method_not_allowed(
            method.as_str(),
            &logged_path(&path),
            allow,
        ));
    }
    match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => Ok(Answer::Plain(plain(StatusCode::OK, "ok\n"))),
        // No I/O: `/metrics` and the detailed readiness are on the admin listener.
        (&Method::GET, ["readyz"]) => Ok(Answer::Plain(health::public_readiness(gateway))),
        (&Method::GET, ["v1", "tickets", ticket]) => {
            let ticket = tickets::verify(gateway, ticket)?;
            *namespace = Some(ticket.namespace_id());
            match ticket {
                Ticket::Command(claims) => {
                    let (status, data) = tickets::poll(gateway, &claims).await?;
                    let cache = tickets::cache_control(&data);
                    Ok(Answer::Cacheable(status, data, cache))
                }
                Ticket::Place(claims) => {
                    let (status, data) = Box::pin(rooms::poll(gateway, &claims)).await?;
                    let cache = rooms::cache_control(&data);
                    Ok(Answer::Cacheable(status, data, cache))
                }
            }
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
                    let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
                    json(enqueue::enqueue(gateway, target, caller, &parts.headers, body).await)
                }
                "cancel" => {
                    let id = commands::parse_command_id(target)?;
                    let caller = authenticate(gateway, request.headers()).await?;
                    *namespace = Some(caller.namespace_id);
                    json(Box::pin(commands::cancel(gateway, &caller, id)).await)
                }
                "complete" => {
                    let id = commands::parse_command_id(target)?;
                    let caller = authenticate(gateway, request.headers()).await?;
                    *namespace = Some(caller.namespace_id);
                    let (parts, body) = request.into_parts();
                    let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
                    json(Box::pin(complete::complete(gateway, &caller, id, body)).await)
                }
                other => Err(ApiError::not_found(format!("no custom method :{other}"))),
            }
        }
        (&Method::GET, ["v1", "commands", id]) => {
            let id = commands::parse_command_id(id)?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(commands::get(gateway, &caller, id)).await)
        }
        (&Method::GET, ["v1", "commands", command, "requests", key]) => {
            check_command_code(command)?;
            let key = decode_segment(key, "request_key")?;
            let query = parse_query(query.as_deref(), &["subject"])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(
                Box::pin(commands::by_request_key(
                    gateway, &caller, command, &key, &query,
                ))
                .await,
            )
        }
        (&Method::GET, ["v1", "commands", command, "mine"]) => {
            check_command_code(command)?;
            let query = parse_query(query.as_deref(), &["resource_key", "cursor", "limit"])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(commands::mine(gateway, &caller, command, &query)).await)
        }
        (&Method::GET, ["v1", "application", "resources"]) => {
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(application::read(gateway, &caller)).await)
        }
        (&Method::POST, ["v1", "application", "resources:configure"]) => {
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            json(
                Box::pin(application::configure(
                    gateway,
                    &caller,
                    &parts.headers,
                    &body,
                ))
                .await,
            )
        }
        (&Method::GET, ["v1", "quota-pools", pool]) => {
            let pool = decode_segment(pool, "pool")?;
            quotas::check_pool_code(&pool)?;
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(quotas::read_pool(gateway, &caller, &pool)).await)
        }
        (&Method::POST, ["v1", "quota-pools", action]) => {
            let action = decode_segment(action, "path")?;
            let Some(pool) = action.strip_suffix(":configure") else {
                return Err(ApiError::not_found("POST /v1/quota-pools/{pool}:configure"));
            };
            quotas::check_pool_code(pool)?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            json(
                Box::pin(quotas::configure_pool(
                    gateway,
                    &caller,
                    pool,
                    &parts.headers,
                    &body,
                ))
                .await,
            )
        }
        (&Method::GET, ["v1", "allocations", id]) => {
            let id = quotas::parse_allocation_id(id)?;
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(quotas::get_allocation(gateway, &caller, id)).await)
        }
        (&Method::POST, ["v1", "allocations", action]) => {
            let action = decode_segment(action, "path")?;
            let (id, verb) = action.rsplit_once(':').ok_or_else(|| {
                ApiError::not_found(
                    "POST /v1/allocations/{id}:confirm or /v1/allocations/{id}:release",
                )
            })?;
            let action = match verb {
                "confirm" => sluice_durable::quotas::allocations::Action::Confirm,
                "release" => sluice_durable::quotas::allocations::Action::Release,
                other => return Err(ApiError::not_found(format!("no custom method :{other}"))),
            };
            let id = quotas::parse_allocation_id(id)?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            json(Box::pin(quotas::decide(gateway, &caller, id, action, &body)).await)
        }
        (&Method::POST, ["v1", "rooms", action]) => {
            let action = decode_segment(action, "path")?;
            let (room, door) = match action.rsplit_once(':') {
                Some((room, "join")) => (room, RoomDoor::Join),
                Some((room, "challenge")) => (room, RoomDoor::Challenge),
                _ => {
                    return Err(ApiError::not_found(
                        "POST /v1/rooms/{room}:join or /v1/rooms/{room}:challenge",
                    ));
                }
            };
            rooms::check_room_code(room)?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            let headers = &parts.headers;
            json(match door {
                RoomDoor::Join => {
                    Box::pin(rooms::join(gateway, &caller, room, headers, &body)).await
                }
                RoomDoor::Challenge => {
                    Box::pin(proof_of_work::challenge(
                        gateway, &caller, room, headers, &body,
                    ))
                    .await
                }
            })
        }
        (&Method::GET, ["v1", "rooms", room]) => {
            let room = decode_segment(room, "room")?;
            rooms::check_room_code(&room)?;
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(rooms::read(gateway, &caller, &room)).await)
        }
        (&Method::GET, ["v1", "rooms", room, "prequeue"]) => {
            let room = decode_segment(room, "room")?;
            rooms::check_room_code(&room)?;
            let query = parse_query(query.as_deref(), &["cursor", "limit"])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(rooms::prequeue(gateway, &caller, &room, &query)).await)
        }
        (&Method::POST, ["v1", action]) if action.starts_with("passes") => {
            let action = decode_segment(action, "path")?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            match action.as_str() {
                "passes:heartbeat" => {
                    json(Box::pin(rooms::heartbeat(gateway, &caller, &parts.headers, &body)).await)
                }
                "passes:leave" => {
                    json(Box::pin(rooms::leave(gateway, &caller, &parts.headers, &body)).await)
                }
                _ => Err(ApiError::not_found(
                    "POST /v1/passes:heartbeat or /v1/passes:leave",
                )),
            }
        }
        (&Method::GET, [".well-known", "jwks.json"]) => {
            parse_query(query.as_deref(), &[])?;
            Box::pin(crate::rooms::jwks::serve(gateway))
                .await
                .map(Answer::Plain)
        }
        (&Method::GET, ["ui", rest @ ..]) => crate::pages::ui::serve(rest).map(Answer::Plain),
        (&Method::GET, ["sdk", "v1", rest @ ..]) => {
            crate::pages::sdk::serve(rest).map(Answer::Plain)
        }
        (&Method::GET, ["wait", namespace, command]) => {
            Box::pin(crate::pages::sdk::waiting_page(gateway, namespace, command))
                .await
                .map(Answer::Plain)
        }
        (&Method::GET, ["room", namespace, room]) => {
            Box::pin(crate::pages::sdk::room_page(gateway, namespace, room))
                .await
                .map(Answer::Plain)
        }
        (&Method::GET, ["demo", rest @ ..]) => match gateway.demo.get() {
            Some(demo) => {
                crate::pages::demo::serve(demo, rest, query.as_deref()).map(Answer::Plain)
            }
            None => Err(ApiError::not_found(
                "the demo sale is served by `sluice dev` only",
            )),
        },
        (&Method::GET, ["v1", "reads", name]) => {
            let name = decode_segment(name, "name")?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(reads::read(gateway, &caller, &name, query.as_deref()).await)
        }
        (&Method::POST, ["v1", "reads", action]) => {
            let action = decode_segment(action, "path")?;
            let Some(name) = action.strip_suffix(":invalidate") else {
                return Err(ApiError::not_found("POST /v1/reads/{name}:invalidate"));
            };
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            json(
                Box::pin(reads::invalidate(
                    gateway,
                    &caller,
                    name,
                    &parts.headers,
                    &body,
                ))
                .await,
            )
        }
        (&Method::POST, ["v1", "control"]) => {
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            let (parts, body) = request.into_parts();
            let body = handlers::read_body(&parts.headers, body, &gateway.config).await?;
            json(Box::pin(control::control(gateway, &caller, &parts.headers, &body)).await)
        }
        (&Method::GET, ["v1", "status"]) => {
            parse_query(query.as_deref(), &[])?;
            let caller = authenticate(gateway, request.headers()).await?;
            *namespace = Some(caller.namespace_id);
            json(Box::pin(status_board::status(gateway, &caller)).await)
        }
        _ => Err(ApiError::not_found(format!("no endpoint {method} {path}"))),
    }
}

/// The methods a path is served with (its `Allow`), or `None` when the router alone decides
/// (no such path: `404`). Every other method on an existing path is `405` (OPTIONS, the CORS
/// preflight, is answered before routing, on any path). A last segment ending in a custom
/// method (`claim:enqueue`, `{id}:cancel`, `{name}:invalidate`) is served with `POST` only; one
/// without a colon names a resource, read with `GET`; one with an unknown verb is left to the
/// router (`POST …:frobnicate` is `404` naming the verb). Keep in step with [`route`]:
/// `router::tests` checks every documented operation.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    const COMMAND_VERBS: &[&str] = &["enqueue", "cancel", "complete"];
    let by_verb = |segment: &str, verbs: &[&str]| {
        let decoded = decode_segment(segment, "path").unwrap_or_else(|_| segment.to_owned());
        match decoded.rsplit_once(':') {
            None => Some("GET"),
            Some((_, verb)) if verbs.contains(&verb) => Some("POST"),
            Some(_) => None,
        }
    };
    match segments {
        ["healthz"] | ["readyz"] | ["ui", ..] | [".well-known", "jwks.json"] => Some("GET"),
        ["sdk", "v1", ..] | ["wait", _, _] | ["room", _, _] | ["demo", ..] => Some("GET"),
        ["v1", "tickets", _] => Some("GET"),
        ["v1", "commands", last] => by_verb(last, COMMAND_VERBS),
        ["v1", "reads", last] => by_verb(last, &["invalidate"]),
        ["v1", "quota-pools", last] => by_verb(last, &["configure"]),
        ["v1", "allocations", last] => by_verb(last, &["confirm", "release"]),
        ["v1", "rooms", last] => by_verb(last, &["join", "challenge"]),
        ["v1", "rooms", _, "prequeue"] => Some("GET"),
        ["v1", "passes:heartbeat" | "passes:leave"] => Some("POST"),
        ["v1", "commands", _, "requests", _] | ["v1", "commands", _, "mine"] => Some("GET"),
        ["v1", "application", "resources"] | ["v1", "status"] => Some("GET"),
        ["v1", "application", "resources:configure"] | ["v1", "control"] => Some("POST"),
        _ => None,
    }
}

/// Command codes are declared as `^[a-z][a-z0-9_-]*$`; anything else cannot exist.
fn check_command_code(code: &str) -> Result<(), ApiError> {
    handlers::check_declared_code("command", code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of `docs/openapi.json` (as `gateway/tests/api/repository/openapi.rs` lists them),
    /// with a concrete path: its method is allowed, every other one is not.
    #[test]
    fn every_path_allows_exactly_its_documented_methods() {
        let id = "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10";
        let cases: &[(&str, &str)] = &[
            ("POST", "/v1/commands/claim:enqueue"),
            ("POST", "/v1/commands/claim%3Aenqueue"),
            ("GET", "/v1/tickets/abc"),
            ("GET", &format!("/v1/commands/{id}")),
            ("GET", "/v1/commands/claim/requests/key-1"),
            ("GET", "/v1/commands/claim/mine"),
            ("POST", &format!("/v1/commands/{id}:cancel")),
            ("POST", &format!("/v1/commands/{id}:complete")),
            ("GET", "/v1/application/resources"),
            ("POST", "/v1/application/resources:configure"),
            ("GET", "/v1/reads/offer"),
            ("POST", "/v1/reads/offer:invalidate"),
            ("POST", "/v1/control"),
            ("GET", "/v1/status"),
            ("GET", "/v1/quota-pools/offer-stock"),
            ("POST", "/v1/quota-pools/offer-stock:configure"),
            ("GET", &format!("/v1/allocations/{id}")),
            ("POST", &format!("/v1/allocations/{id}:confirm")),
            ("POST", &format!("/v1/allocations/{id}:release")),
            ("POST", "/v1/rooms/doors:join"),
            ("GET", "/v1/rooms/doors"),
            ("GET", "/v1/rooms/doors/prequeue"),
            ("POST", "/v1/passes:heartbeat"),
            ("POST", "/v1/passes:leave"),
            ("GET", "/healthz"),
            ("GET", "/readyz"),
            ("GET", "/.well-known/jwks.json"),
            ("GET", "/ui/index.html"),
            ("GET", "/sdk/v1/sluice.js"),
            ("GET", "/wait/0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10/claim"),
            ("GET", "/demo/"),
        ];
        for (method, path) in cases {
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            assert_eq!(allowed_methods(&segments), Some(*method), "{method} {path}");
        }
        for path in [
            "/",
            "/v1",
            "/v1/commands",
            "/v1/nothing",
            "/v1/commands/a/b",
            "/metrics",
            // An unknown custom method: the router's own 404 names it.
            "/v1/commands/claim:frobnicate",
            "/v1/reads/offer:refresh",
            "/v1/rooms/doors:enter",
            "/v1/passes:renew",
            "/v1/allocations/x:configure",
            "/v1/quota-pools/stock:confirm",
        ] {
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            assert_eq!(allowed_methods(&segments), None, "{path} is not a path");
        }
    }

    #[test]
    fn tickets_never_reach_the_logs() {
        assert_eq!(logged_path("/v1/tickets/abc.def"), "/v1/tickets/<ticket>");
        assert_eq!(logged_path("/v1/tickets/"), "/v1/tickets/");
        assert_eq!(logged_path("/v1/status"), "/v1/status");
    }

    #[test]
    fn completion_lines_stay_quiet_for_routine_answers_and_expected_refusals() {
        let cases = [
            (StatusCode::OK, None, Level::DEBUG),
            (StatusCode::ACCEPTED, None, Level::DEBUG),
            (
                StatusCode::NOT_FOUND,
                Some(ErrorCode::NotFound),
                Level::DEBUG,
            ),
            (
                StatusCode::TOO_MANY_REQUESTS,
                Some(ErrorCode::RateLimited),
                Level::DEBUG,
            ),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some(ErrorCode::Unavailable),
                Level::INFO,
            ),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some(ErrorCode::IntakePaused),
                Level::INFO,
            ),
            // A probe's 503 or any 5xx without an expected code is a fault.
            (StatusCode::SERVICE_UNAVAILABLE, None, Level::WARN),
            (StatusCode::INTERNAL_SERVER_ERROR, None, Level::WARN),
        ];
        for (status, code, level) in cases {
            assert_eq!(answer_level(status, code), level, "{status} {code:?}");
        }
    }
}
