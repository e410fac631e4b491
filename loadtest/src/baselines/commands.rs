//! The declaration the pairs run against and the requests they send: one place for the command
//! names, the offer and the body format, so the gateway and the baselines are sent the same
//! bytes.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

/// The command refused by its empty intake bucket (pair 1).
pub(super) const DECIDE: &str = "decide";
/// The command every enqueue of which is accepted (pair 2).
pub(super) const CLAIM: &str = "claim";
/// The command whose waiting instances are polled (pair 3), apart so pair 2's row count is exact.
pub(super) const HOLD: &str = "hold";
/// The offer of every intake decision, so its content digest is one constant.
pub(super) const OFFER: &str = "7f1c2a4e-0b7d-4a4e-9d43-52f5a0c1e9b1";
/// The `Host` header of every request (connections are made to a socket address).
const HOST: &str = "127.0.0.1";

/// `decide` has an empty bucket (one token a second), `claim` and `hold` budgets no run reaches.
pub const DECLARATION: &str = concat!(
    r#"
[[command]]
code = "decide"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1, burst = 1, max_in_flight = 1000000 }
admission = { max_queue = 100000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[command]]
code = "hold"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 10000000, burst = 10000000, max_in_flight = 1000000 }
admission = { max_queue = 100000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[room]]
code = "lobby"
max_active = 1
pass_seconds = 86400

[[room]]
code = "crowd"
max_active = 1
pass_seconds = 86400
"#,
    crate::claim_declaration!()
);

/// Every enqueue of the run gets its own number: unique request keys and subjects across sides,
/// rounds and pairs.
static SEQUENCE: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_number() -> u64 {
    SEQUENCE.fetch_add(1, Ordering::Relaxed)
}

pub(super) fn request_key(n: u64) -> String {
    format!("r{n}")
}

pub(super) fn subject(n: u64) -> String {
    format!("user-{n}")
}

/// The enqueue body of number `n`: the same format for the gateway and the naive server.
pub(super) fn enqueue_body(n: u64, offer: &str) -> String {
    format!(
        r#"{{"request_key":"{}","subject":"{}","input":{{"offer":"{offer}"}}}}"#,
        request_key(n),
        subject(n)
    )
}

/// `POST /v1/rooms/{room}:join` by a new person each time, with a subject token of their own
/// (an hour long) signed with the tenant's subject key.
pub(super) fn new_person_joins(
    key: &sluice_store::tenancy::SubjectKeyOutput,
    room: &str,
) -> super::rounds::MakeRequest {
    let path = format!("/v1/rooms/{room}:join");
    let key = key.clone();
    std::sync::Arc::new(move || {
        let now = sluice_gateway::identity::auth::now_unix();
        let token = sluice_gateway::identity::subject_token::issue(
            &key.id,
            key.secret.as_bytes(),
            &format!("person-{}", next_number()),
            now,
            now + 3_600,
        );
        post(&path, &format!("Bearer {token}"), String::new())
    })
}

/// An authenticated JSON `POST`.
pub(super) fn post(path: &str, bearer: &str, body: String) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", HOST)
        .header("authorization", bearer)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a request of a static method, a valid path and valid headers")
}

/// An unauthenticated `GET` (a ticket is its own credential); fails only on an invalid path.
pub(super) fn get(path: &str) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
    Request::get(path)
        .header("host", HOST)
        .body(Full::new(Bytes::new()))
}
