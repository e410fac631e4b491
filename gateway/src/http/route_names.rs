//! The template of the route a path reaches, as `docs/openapi.json` writes it
//! (`/v1/tickets/{ticket}`): the `route` label of the HTTP metrics. A raw path would make a
//! series per ticket, command id or room; a template keeps their number fixed whatever callers
//! send. Computed from the path alone, without allocating, before the router runs.

/// The template of `path`, `other` for a path no route serves.
pub fn template(path: &str) -> &'static str {
    const MOST: usize = 5;
    let mut segments = [""; MOST];
    let mut count = 0;
    for segment in path.trim_start_matches('/').split('/') {
        if count == MOST {
            return first_segment_template(&segments);
        }
        segments[count] = segment;
        count += 1;
    }
    match &segments[..count] {
        ["healthz"] => "/healthz",
        ["readyz"] => "/readyz",
        [".well-known", "jwks.json"] => "/.well-known/jwks.json",
        ["v1", "tickets", _] => "/v1/tickets/{ticket}",
        ["v1", "commands", last] => match verb(last) {
            None => "/v1/commands/{command_id}",
            Some("enqueue") => "/v1/commands/{command}:enqueue",
            Some("cancel") => "/v1/commands/{command_id}:cancel",
            Some("complete") => "/v1/commands/{command_id}:complete",
            Some(_) => "other",
        },
        ["v1", "commands", _, "requests", _] => "/v1/commands/{command}/requests/{request_key}",
        ["v1", "commands", _, "mine"] => "/v1/commands/{command}/mine",
        ["v1", "application", "resources"] => "/v1/application/resources",
        ["v1", "application", "resources:configure"] => "/v1/application/resources:configure",
        ["v1", "reads", last] => match verb(last) {
            None => "/v1/reads/{name}",
            Some("invalidate") => "/v1/reads/{name}:invalidate",
            Some(_) => "other",
        },
        ["v1", "control"] => "/v1/control",
        ["v1", "status"] => "/v1/status",
        ["v1", "quota-pools", last] => match verb(last) {
            None => "/v1/quota-pools/{pool}",
            Some("configure") => "/v1/quota-pools/{pool}:configure",
            Some(_) => "other",
        },
        ["v1", "allocations", last] => match verb(last) {
            None => "/v1/allocations/{allocation_id}",
            Some("confirm") => "/v1/allocations/{allocation_id}:confirm",
            Some("release") => "/v1/allocations/{allocation_id}:release",
            Some(_) => "other",
        },
        ["v1", "rooms", last] => match verb(last) {
            None => "/v1/rooms/{room}",
            Some("join") => "/v1/rooms/{room}:join",
            Some("challenge") => "/v1/rooms/{room}:challenge",
            Some(_) => "other",
        },
        ["v1", "rooms", _, "prequeue"] => "/v1/rooms/{room}/prequeue",
        ["v1", "passes:heartbeat"] => "/v1/passes:heartbeat",
        ["v1", "passes:leave"] => "/v1/passes:leave",
        ["wait", _, _] => "/wait/{namespace}/{command}",
        ["room", _, _] => "/room/{namespace}/{room}",
        _ => first_segment_template(&segments),
    }
}

/// The static trees, whatever their depth.
fn first_segment_template(segments: &[&str]) -> &'static str {
    match segments {
        ["ui", ..] => "/ui/{file}",
        ["sdk", "v1", ..] => "/sdk/v1/{file}",
        ["demo", ..] => "/demo/{file}",
        _ => "other",
    }
}

/// The custom method of a last segment (`claim:enqueue` → `enqueue`), its colon possibly
/// percent-encoded as the router accepts it.
fn verb(segment: &str) -> Option<&str> {
    if let Some((_, verb)) = segment.rsplit_once(':') {
        return Some(verb);
    }
    let at = segment.to_ascii_lowercase().rfind("%3a")?;
    Some(&segment[at + 3..])
}

/// The `method` label: the methods the gateway serves, `other` for anything else (a label
/// value per made-up method would be unbounded).
pub fn method(method: &hyper::Method) -> &'static str {
    match *method {
        hyper::Method::GET => "GET",
        hyper::Method::POST => "POST",
        hyper::Method::OPTIONS => "OPTIONS",
        hyper::Method::HEAD => "HEAD",
        hyper::Method::PUT => "PUT",
        hyper::Method::DELETE => "DELETE",
        hyper::Method::PATCH => "PATCH",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path of `docs/openapi.json`, its placeholders filled in, has itself as template.
    #[test]
    fn every_documented_path_is_its_own_template() {
        let openapi: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/openapi.json")).expect("openapi");
        let paths = openapi["paths"].as_object().expect("paths");
        assert!(paths.len() > 20);
        for documented in paths.keys() {
            let concrete = documented
                .split('/')
                .map(|segment| match (segment.find('{'), segment.find('}')) {
                    (Some(open), Some(close)) => format!(
                        "{}{}{}",
                        &segment[..open],
                        "x0b0c8f5e",
                        &segment[close + 1..]
                    ),
                    _ => segment.to_string(),
                })
                .collect::<Vec<_>>()
                .join("/");
            assert_eq!(template(&concrete), documented, "{concrete}");
        }
    }

    #[test]
    fn what_no_route_serves_is_other_and_pages_are_their_trees() {
        for path in [
            "/",
            "/v1/nowhere",
            "/v1/commands/claim:frobnicate",
            "/v1/tickets/a/b",
            "/a/b/c/d/e/f/g",
        ] {
            assert_eq!(template(path), "other", "{path}");
        }
        assert_eq!(
            template("/v1/commands/claim%3Aenqueue"),
            "/v1/commands/{command}:enqueue"
        );
        assert_eq!(template("/ui/dashboard.js"), "/ui/{file}");
        assert_eq!(template("/sdk/v1/room/room.js"), "/sdk/v1/{file}");
        assert_eq!(template("/demo/a/b/c/d/e/f"), "/demo/{file}");
        assert_eq!(template("/wait/shop/claim"), "/wait/{namespace}/{command}");
        assert_eq!(
            method(&hyper::Method::from_bytes(b"BREW").expect("a method")),
            "other"
        );
    }
}
