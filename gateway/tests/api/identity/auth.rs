//! Tampered, truncated, expired and other-key tickets and subject tokens: 401. Credentials
//! without the scope and subjects touching other subjects' commands: 403.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use hyper::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use sluice_durable::ids::CommandId;
use sluice_gateway::identity::auth::now_unix;
use sluice_gateway::identity::subject_token;
use sluice_gateway::identity::ticket::{TicketClaims, TicketKeys};
use sluice_store::secrets;
use uuid::Uuid;

use crate::support::*;

const ENQUEUE: &str = "/v1/commands/claim:enqueue";

/// An enqueue body without `subject`: a subject token supplies it.
fn own_body() -> String {
    json!({"request_key": key(), "input": {"offer": offer()}}).to_string()
}

/// Enqueues one command with the credential and returns its receipt data.
async fn enqueued(stack: &Stack, subject: &str) -> Value {
    let reply = stack.enqueue(subject, &key(), &offer()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    reply.data().clone()
}

fn assert_unauthenticated(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.code(), "UNAUTHENTICATED", "{what}: {:?}", reply.body);
}

fn assert_denied(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::FORBIDDEN,
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(
        reply.code(),
        "PERMISSION_DENIED",
        "{what}: {:?}",
        reply.body
    );
}

/// The stack's own ticket keys, and the claims of a ticket they issued.
fn own_claims(stack: &Stack, ticket: &str) -> (TicketKeys, TicketClaims) {
    let keys = TicketKeys::parse(&stack.ticket_spec).expect("the stack's ticket spec");
    let claims = keys
        .verify(ticket, now_unix())
        .expect("the stack's ticket verifies");
    (keys, claims)
}

/// Replaces the character at `index` with another base64url character.
fn flip(ticket: &str, index: usize) -> String {
    let mut chars: Vec<char> = ticket.chars().collect();
    chars[index] = if chars[index] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

/// The namespace's subject key: its secret as shown (the documented HS256 key).
fn subject_secret(stack: &Stack) -> Vec<u8> {
    stack.creds.subject_key.secret.as_bytes().to_vec()
}

/// A token with the namespace's key id and secret and the given times.
fn token_at(stack: &Stack, subject: &str, iat: i64, exp: i64) -> String {
    subject_token::issue(
        &stack.creds.subject_key.id,
        &subject_secret(stack),
        subject,
        iat,
        exp,
    )
}

/// A credential of the stack's namespace with exactly `scopes`, optionally already revoked.
async fn credential_with(stack: &Stack, scopes: &[&str], revoked: bool) -> String {
    let secret = secrets::new_credential_secret();
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    sqlx::query(
        "INSERT INTO credentials (id, namespace_id, secret_sha256, scopes, label, revoked_at)
         VALUES ($1, $2, $3, $4, 'test', CASE WHEN $5 THEN now() END)",
    )
    .bind(Uuid::now_v7())
    .bind(stack.creds.namespace_id)
    .bind(secrets::credential_hash(&secret).to_vec())
    .bind(&scopes)
    .bind(revoked)
    .execute(&stack.pg)
    .await
    .expect("insert credential");
    secret
}

async fn row_subject(stack: &Stack, command_id: &str) -> String {
    let id = Uuid::parse_str(command_id).expect("command id");
    sqlx::query_scalar("SELECT subject FROM commands WHERE id = $1")
        .bind(id)
        .fetch_one(&stack.pg)
        .await
        .expect("the command's row")
}

/// A fresh enqueue's ticket polls without any other header: 200, its command, `accepted`, a
/// queue position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_ticket_polls_its_command() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let reply = stack.poll(data["ticket"].as_str().expect("ticket")).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.data()["command_id"], data["command_id"]);
    assert_eq!(reply.data()["status"], "accepted");
    assert_eq!(reply.data()["queue"]["position"], 0);
    let ticket = data["ticket"].as_str().expect("ticket");
    assert!(ticket.len() <= 512, "tickets are at most 512 bytes");
    assert!(
        ticket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "tickets are URL-safe: {ticket}"
    );
}

/// Changing any single character of a ticket (first, middle, last, every one) is 401, and the
/// original keeps polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_single_character_change_of_a_ticket_is_401() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let ticket = data["ticket"].as_str().expect("ticket");
    let len = ticket.len();
    for index in [len / 2, len - 1, 0] {
        assert_unauthenticated(
            &stack.poll(&flip(ticket, index)).await,
            &format!("flip {index}"),
        );
    }
    for index in 0..len {
        assert_unauthenticated(
            &stack.poll(&flip(ticket, index)).await,
            &format!("flip {index}"),
        );
    }
    assert_eq!(stack.poll(ticket).await.status, StatusCode::OK);
}

/// Truncated, padded and garbage tickets are 401 (a long one too: not 414, not 500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_garbage_tickets_are_401() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let ticket = data["ticket"].as_str().expect("ticket").to_string();
    let cases = [
        ("last char dropped", ticket[..ticket.len() - 1].to_string()),
        (
            "last four chars dropped",
            ticket[..ticket.len() - 4].to_string(),
        ),
        ("half", ticket[..ticket.len() / 2].to_string()),
        ("one char appended", format!("{ticket}A")),
        ("padding appended", format!("{ticket}==")),
        ("x", "x".to_string()),
        ("600 As", "A".repeat(600)),
        ("513 As", "A".repeat(513)),
        ("not base64", "!!!!".to_string()),
    ];
    for (what, bad) in cases {
        assert_unauthenticated(&stack.poll(&bad).await, what);
    }
    assert_eq!(stack.poll(&ticket).await.status, StatusCode::OK);
}

/// The same claims signed by another key set are 401; signed by the gateway's own keys they
/// poll (so the 401 is about the key, not the claims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_signed_with_another_key_is_401() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let (own, claims) = own_claims(&stack, data["ticket"].as_str().expect("ticket"));
    let (_, other) = TicketKeys::generate();
    assert_unauthenticated(&stack.poll(&other.sign(&claims)).await, "other key");
    let resigned = stack.poll(&own.sign(&claims)).await;
    assert_eq!(resigned.status, StatusCode::OK, "{:?}", resigned.body);
    assert_eq!(resigned.data()["command_id"], data["command_id"]);
}

/// A ticket whose expiry has passed is 401 even though its signature is the gateway's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_ticket_is_401() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let (own, claims) = own_claims(&stack, data["ticket"].as_str().expect("ticket"));
    let now = now_unix();
    for expires_at_unix in [now - 1, now - 86_400, 0, i64::MIN] {
        let expired = own.sign(&TicketClaims {
            expires_at_unix,
            ..claims
        });
        assert_unauthenticated(
            &stack.poll(&expired).await,
            &format!("expired at {expires_at_unix}"),
        );
    }
    let fresh = own.sign(&TicketClaims {
        expires_at_unix: now + 60,
        ..claims
    });
    assert_eq!(stack.poll(&fresh).await.status, StatusCode::OK);
}

/// A genuine ticket naming a command that does not exist is 404, not a status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_genuine_ticket_for_an_unknown_command_is_404() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-1").await;
    let (own, claims) = own_claims(&stack, data["ticket"].as_str().expect("ticket"));
    let ghost = own.sign(&TicketClaims {
        command_id: CommandId::new_v7(),
        ..claims
    });
    let reply = stack.poll(&ghost).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{:?}", reply.body);
    assert_eq!(reply.code(), "NOT_FOUND");
}

/// A valid subject token enqueues for itself without `subject` in the body; the row's subject
/// is the token's `sub`, and naming its own subject is allowed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_token_enqueues_for_its_own_subject() {
    let stack = Stack::start().await;
    let token = stack.subject_token("browser-7");
    let reply = stack.post(ENQUEUE, Some(&token), &own_body()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let id = reply.data()["command_id"].as_str().expect("command id");
    assert_eq!(row_subject(&stack, id).await, "browser-7");
    let named = json!({"request_key": key(), "subject": "browser-7", "input": {"offer": offer()}});
    let reply = stack.post(ENQUEUE, Some(&token), &named.to_string()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    assert_eq!(stack.count_rows().await, 2);
}

/// Tampered, wrongly signed, unknown-key, expired, too long-lived and `alg: none` subject
/// tokens are 401 and write no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_subject_tokens_are_401_and_write_nothing() {
    let stack = Stack::start().await;
    let now = now_unix();
    let kid = stack.creds.subject_key.id.clone();
    let secret = subject_secret(&stack);
    let valid = token_at(&stack, "user-1", now, now + 3600);
    let parts: Vec<&str> = valid.split('.').collect();
    assert_eq!(parts.len(), 3);

    let forged_claims =
        URL_SAFE_NO_PAD.encode(json!({"sub": "user-2", "iat": now, "exp": now + 3600}).to_string());
    let tampered_payload = format!("{}.{forged_claims}.{}", parts[0], parts[2]);
    let flipped_signature = {
        let sig = parts[2];
        let first = if sig.starts_with('A') { "B" } else { "A" };
        format!("{}.{}.{first}{}", parts[0], parts[1], &sig[1..])
    };
    let none_header =
        URL_SAFE_NO_PAD.encode(json!({"alg": "none", "typ": "JWT", "kid": kid}).to_string());
    let none_message = format!("{none_header}.{}", parts[1]);
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret).expect("hmac key");
    mac.update(none_message.as_bytes());
    let none_signed = format!(
        "{none_message}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    );
    let none_unsigned = format!("{none_message}.");
    let hs512_header =
        URL_SAFE_NO_PAD.encode(json!({"alg": "HS512", "typ": "JWT", "kid": kid}).to_string());
    let hs512 = format!("{hs512_header}.{}.{}", parts[1], parts[2]);

    let cases = [
        ("tampered payload", tampered_payload),
        ("flipped signature", flipped_signature),
        ("signature dropped", format!("{}.{}", parts[0], parts[1])),
        (
            "wrong secret",
            subject_token::issue(&kid, &[7u8; 32], "user-1", now, now + 3600),
        ),
        (
            "unknown kid",
            subject_token::issue("sk-unknown", &secret, "user-1", now, now + 3600),
        ),
        (
            "expired an hour ago",
            token_at(&stack, "user-1", now - 7200, now - 3600),
        ),
        (
            "expired a minute ago",
            token_at(&stack, "user-1", now - 600, now - 60),
        ),
        (
            "exp 25 h ahead",
            token_at(&stack, "user-1", now, now + 25 * 3600),
        ),
        (
            "exp 48 h ahead, iat forward-dated",
            token_at(&stack, "user-1", now + 24 * 3600, now + 48 * 3600),
        ),
        (
            "iat an hour ahead",
            token_at(&stack, "user-1", now + 3600, now + 7200),
        ),
        ("empty sub", token_at(&stack, "", now, now + 3600)),
        (
            "sub of 129 chars",
            token_at(&stack, &"s".repeat(129), now, now + 3600),
        ),
        ("alg none, HMAC signature", none_signed),
        ("alg none, empty signature", none_unsigned),
        ("alg HS512", hs512),
    ];
    for (what, token) in cases {
        let reply = stack.post(ENQUEUE, Some(&token), &own_body()).await;
        assert_unauthenticated(&reply, what);
    }
    assert_eq!(stack.count_rows().await, 0);
    // The valid token the bad ones were derived from does enqueue.
    let reply = stack.post(ENQUEUE, Some(&valid), &own_body()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
}

/// A subject key that was revoked no longer authenticates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_subject_key_is_401() {
    let stack = Stack::start().await;
    let kid = secrets::new_key_id();
    let secret = secrets::random_bytes::<32>();
    sqlx::query(
        "INSERT INTO subject_keys (kid, namespace_id, secret, revoked_at) VALUES ($1, $2, $3, now())",
    )
    .bind(&kid)
    .bind(stack.creds.namespace_id)
    .bind(secret.to_vec())
    .execute(&stack.pg)
    .await
    .expect("insert revoked key");
    let now = now_unix();
    let token = subject_token::issue(&kid, &secret, "user-1", now, now + 3600);
    assert_unauthenticated(
        &stack.post(ENQUEUE, Some(&token), &own_body()).await,
        "revoked key",
    );
    assert_eq!(stack.count_rows().await, 0);
}

/// The HS256 key is the subject key's secret as shown; tokens signed with its decoded bytes
/// (the earlier rule) are still accepted; any other key is refused and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_key_signs_as_shown_and_as_its_decoded_bytes_and_nothing_else() {
    let stack = Stack::start().await;
    let now = now_unix();
    let kid = &stack.creds.subject_key.id;
    let shown = stack.creds.subject_key.secret.as_bytes().to_vec();
    let decoded = base64_decode(&stack.creds.subject_key.secret);
    for (what, key) in [("as shown", shown.clone()), ("decoded", decoded.clone())] {
        let token = subject_token::issue(kid, &key, "user-1", now, now + 3600);
        let reply = stack.post(ENQUEUE, Some(&token), &own_body()).await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{what}: {:?}",
            reply.body
        );
    }
    let mut other = shown;
    other[0] ^= 1;
    let token = subject_token::issue(kid, &other, "user-1", now, now + 3600);
    assert_unauthenticated(
        &stack.post(ENQUEUE, Some(&token), &own_body()).await,
        "another key",
    );
    assert_eq!(stack.count_rows().await, 2);
}

/// A subject token may not name another subject in the body: 403, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_token_naming_another_subject_is_403() {
    let stack = Stack::start().await;
    let token = stack.subject_token("user-a");
    let body = json!({"request_key": key(), "subject": "user-b", "input": {"offer": offer()}});
    assert_denied(
        &stack.post(ENQUEUE, Some(&token), &body.to_string()).await,
        "other subject",
    );
    assert_eq!(stack.count_rows().await, 0);
}

/// Missing, malformed, unknown and revoked credentials are 401 and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_wrong_and_revoked_credentials_are_401() {
    let stack = Stack::start().await;
    let body =
        json!({"request_key": key(), "subject": "user-1", "input": {"offer": offer()}}).to_string();
    assert_unauthenticated(&stack.post(ENQUEUE, None, &body).await, "no Authorization");
    assert_unauthenticated(&stack.post(ENQUEUE, Some(""), &body).await, "empty bearer");
    assert_unauthenticated(
        &stack.post(ENQUEUE, Some("slc_wrong"), &body).await,
        "slc_wrong",
    );
    let almost = format!("{}x", stack.credential());
    assert_unauthenticated(
        &stack.post(ENQUEUE, Some(&almost), &body).await,
        "one char appended",
    );
    let long = format!("slc_{}", "a".repeat(5000));
    assert_unauthenticated(&stack.post(ENQUEUE, Some(&long), &body).await, "5000 chars");
    let revoked = credential_with(&stack, &["commands:enqueue"], true).await;
    assert_unauthenticated(&stack.post(ENQUEUE, Some(&revoked), &body).await, "revoked");
    assert_eq!(stack.count_rows().await, 0);
    // The same body with the real credential is accepted.
    let reply = stack.post(ENQUEUE, Some(&stack.credential()), &body).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
}

/// A credential without `commands:enqueue` cannot enqueue (403, nothing written), and one without
/// `commands:cancel` cannot cancel; `commands:read` still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_without_the_scope_is_403() {
    let stack = Stack::start().await;
    let reader = credential_with(&stack, &["commands:read"], false).await;
    let body = json!({"request_key": key(), "subject": "user-1", "input": {"offer": offer()}});
    assert_denied(
        &stack.post(ENQUEUE, Some(&reader), &body.to_string()).await,
        "enqueue",
    );
    assert_eq!(stack.count_rows().await, 0);

    let data = enqueued(&stack, "user-1").await;
    let id = data["command_id"].as_str().expect("command id");
    let read = stack
        .get(&format!("/v1/commands/{id}"), Some(&reader))
        .await;
    assert_eq!(read.status, StatusCode::OK, "{:?}", read.body);
    let cancel = stack
        .post(&format!("/v1/commands/{id}:cancel"), Some(&reader), "")
        .await;
    assert_denied(&cancel, "cancel");
    let enqueuer = credential_with(&stack, &["commands:enqueue"], false).await;
    assert_denied(
        &stack
            .get(&format!("/v1/commands/{id}"), Some(&enqueuer))
            .await,
        "read",
    );
    let after = stack
        .get(&format!("/v1/commands/{id}"), Some(&reader))
        .await;
    assert_eq!(after.data()["status"], "accepted");
}

/// A credential of another namespace with every scope neither sees nor enqueues this
/// namespace's commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespace_credential_sees_nothing() {
    let stack = Stack::start().await;
    let other = bootstrap_namespace(&stack, "other", vec![], false).await;
    let data = enqueued(&stack, "user-1").await;
    let id = data["command_id"].as_str().expect("command id");
    let read = stack
        .get(&format!("/v1/commands/{id}"), Some(&other.credential))
        .await;
    assert_eq!(read.status, StatusCode::NOT_FOUND, "{:?}", read.body);
    assert_eq!(read.code(), "NOT_FOUND");
    let cancel = stack
        .post(
            &format!("/v1/commands/{id}:cancel"),
            Some(&other.credential),
            "",
        )
        .await;
    assert_eq!(cancel.status, StatusCode::NOT_FOUND, "{:?}", cancel.body);
    let body = json!({"request_key": key(), "subject": "user-1", "input": {"offer": offer()}});
    let enqueue = stack
        .post(ENQUEUE, Some(&other.credential), &body.to_string())
        .await;
    assert_eq!(enqueue.status, StatusCode::NOT_FOUND, "{:?}", enqueue.body);
    assert_eq!(stack.count_rows().await, 1);
}

/// Subject A can neither read nor cancel subject B's command (403, still waiting); B can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_cannot_touch_another_subjects_command() {
    let stack = Stack::start().await;
    let data = enqueued(&stack, "user-b").await;
    let id = data["command_id"].as_str().expect("command id");
    let path = format!("/v1/commands/{id}");
    let cancel_path = format!("/v1/commands/{id}:cancel");
    let a = stack.subject_token("user-a");
    let b = stack.subject_token("user-b");

    assert_denied(&stack.get(&path, Some(&a)).await, "A reads B's");
    assert_denied(
        &stack.post(&cancel_path, Some(&a), "").await,
        "A cancels B's",
    );

    let read = stack.get(&path, Some(&b)).await;
    assert_eq!(read.status, StatusCode::OK, "{:?}", read.body);
    assert_eq!(read.data()["command_id"], data["command_id"]);
    assert_eq!(
        read.data()["status"],
        "accepted",
        "A's cancel changed nothing"
    );
    let cancel = stack.post(&cancel_path, Some(&b), "").await;
    assert_eq!(cancel.status, StatusCode::OK, "{:?}", cancel.body);
    assert_eq!(cancel.data()["status"], "cancelled");
}
