//! The backend snippets of `examples/backend/` on what a real stack sends: Node's `verify.mjs`
//! and Python's `sluice_verify.py` (its `cryptography` from the venv
//! examples/backend/python/venv.sh makes), each run as a command, judge a webhook request a real
//! executor signed and a real HTTP backend received (before a rotation and during one), and a
//! waiting-room pass a real room admitted, with the JWK Set the gateway serves. Each must accept
//! the genuine ones and refuse every forgery with its reason: a body with one byte changed, a
//! wrong secret, a timestamp changed or older than five minutes, a pass of another room or
//! namespace, an expired one, a tampered one, one of a `kid` the set does not list or asking for
//! `alg: none`. Then the README's two HTTP handlers, run as written beside a copy of their
//! snippet: a real executor calls each one and its answer lands, a request Sluice did not sign is
//! refused, and a real pass posted to its room's `return_url` route lets its holder in while one
//! of another room or a tampered one does not. The snippets' own unit tests (`node --test`,
//! `python -m unittest`) use fixed vectors; these are what ties the snippets to Sluice's real
//! output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sluice_store::webhook_secret;

use super::*;
use crate::execution::OPEN_INTAKE;
use crate::execution::{fast_executor, start_executor};
use crate::rooms::kit::{join, key_set, poll_until, stack_with_rooms, until, verify_pass};
use crate::support::webhook_backend::{Answer, Backend, handler};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// One snippet as a command: its interpreter and its file.
struct Snippet {
    program: PathBuf,
    file: PathBuf,
}

/// Node's and Python's snippets (Python's interpreter from venv.sh, made on first use).
async fn snippets() -> [Snippet; 2] {
    let root = Path::new(ROOT);
    let venv = tokio::process::Command::new(root.join("examples/backend/python/venv.sh"))
        .output()
        .await
        .expect("run examples/backend/python/venv.sh");
    assert!(
        venv.status.success(),
        "venv.sh: {}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = String::from_utf8(venv.stdout).expect("a path");
    [
        Snippet {
            program: "node".into(),
            file: root.join("examples/backend/node/verify.mjs"),
        },
        Snippet {
            program: python.trim().into(),
            file: root.join("examples/backend/python/sluice_verify.py"),
        },
    ]
}

impl Snippet {
    fn name(&self) -> String {
        self.file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    /// The verdict the snippet prints for `args`; its exit code must say the same (0 accepted,
    /// 1 refused).
    async fn verdict<S: AsRef<str>>(&self, args: &[S]) -> Value {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let output = tokio::process::Command::new(&self.program)
            .arg(&self.file)
            .args(&args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {}: {e}", self.program.display()));
        let shown = format!(
            "{} {args:?}: {}{}",
            self.name(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let verdict: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: not a JSON verdict: {shown}"));
        let accepted = verdict["ok"] == json!(true);
        assert_eq!(
            output.status.code(),
            Some(if accepted { 0 } else { 1 }),
            "the exit code says the verdict: {shown}"
        );
        verdict
    }

    async fn accepts<S: AsRef<str>>(&self, args: &[S]) -> Value {
        let verdict = self.verdict(args).await;
        assert_eq!(
            verdict["ok"],
            json!(true),
            "{} should accept {:?}: {verdict}",
            self.name(),
            args.iter().map(AsRef::as_ref).collect::<Vec<&str>>()
        );
        verdict
    }

    async fn refuses<S: AsRef<str>>(&self, args: &[S], reason: &str) {
        let verdict = self.verdict(args).await;
        assert_eq!(
            (&verdict["ok"], &verdict["reason"]),
            (&json!(false), &json!(reason)),
            "{} should refuse {:?}: {verdict}",
            self.name(),
            args.iter().map(AsRef::as_ref).collect::<Vec<&str>>()
        );
    }
}

/// The `t` of a `Sluice-Signature` header.
fn signed_at(header: &str) -> i64 {
    header
        .split(',')
        .find_map(|part| part.strip_prefix("t="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no t in {header}"))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write a file for the snippets");
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_and_python_snippets_verify_a_real_webhook_and_refuse_its_forgeries() {
    let backend = Backend::start(handler(|_| async { Answer::succeeded(json!({})) })).await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let executor = start_executor(&stack, fast_executor());
    let snippets = snippets().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = stack.creds.webhook_secret.clone();

    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "a report").await;
    assert!(arrives(&backend, &id, Duration::from_secs(10)).await);
    let arrival = arrivals_of(&backend, &id).remove(0);
    assert!(arrival.signature_valid, "the Rust verifier accepts it too");
    let header = arrival.signature.clone();
    let t = signed_at(&header);
    let body = write(dir.path(), "body.json", &arrival.raw);
    let mut changed = arrival.raw.to_vec();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x01;
    let changed = write(dir.path(), "changed.json", &changed);
    let (now, at_limit, stale) = (t.to_string(), (t + 300).to_string(), (t + 301).to_string());
    let other_t = header.replacen(&format!("t={t}"), &format!("t={}", t - 1), 1);
    let wrong_secret = format!("{secret}x");

    for snippet in &snippets {
        let verdict = snippet
            .accepts(&["signature", &body, &header, &secret, "--now", &now])
            .await;
        assert_eq!(verdict["timestamp"], json!(t));
        // Its own clock (the request was signed a moment ago), and five minutes on.
        snippet
            .accepts(&["signature", &body, &header, &secret])
            .await;
        snippet
            .accepts(&["signature", &body, &header, &secret, "--now", &at_limit])
            .await;
        // Any of the secrets given may be the one.
        snippet
            .accepts(&["signature", &body, &header, &wrong_secret, &secret])
            .await;
        snippet
            .refuses(
                &["signature", &changed, &header, &secret, "--now", &now],
                "no signature matches",
            )
            .await;
        snippet
            .refuses(
                &["signature", &body, &header, &wrong_secret, "--now", &now],
                "no signature matches",
            )
            .await;
        snippet
            .refuses(
                &["signature", &body, &other_t, &secret, "--now", &now],
                "no signature matches",
            )
            .await;
        snippet
            .refuses(
                &["signature", &body, &header, &secret, "--now", &stale],
                "timestamp outside tolerance",
            )
            .await;
    }

    // During a rotation each request carries a v1 per live secret: a backend that knows either
    // secret accepts it.
    let new = webhook_secret::rotate(&stack.pg, stack.creds.namespace_id, "test")
        .await
        .expect("rotate");
    let arrival = until(Duration::from_secs(10), || async {
        let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "rotated").await;
        assert!(arrives(&backend, &id, Duration::from_secs(10)).await);
        let arrival = arrivals_of(&backend, &id).remove(0);
        (arrival.signature.matches("v1=").count() == 2, arrival)
    })
    .await
    .unwrap_or_else(|last| panic!("never two signatures: {}", last.signature));
    let body = write(dir.path(), "rotated.json", &arrival.raw);
    let header = arrival.signature;
    for snippet in &snippets {
        for secrets in [vec![secret.as_str()], vec![new.as_str()]] {
            let args = [vec!["signature", body.as_str(), header.as_str()], secrets].concat();
            snippet.accepts(&args).await;
        }
        snippet
            .refuses(
                &["signature", &body, &header, &wrong_secret],
                "no signature matches",
            )
            .await;
    }
    executor.cancel();
}

const ROOMS: &str = r#"
[[room]]
code = "doors"
max_active = 1
pass_seconds = 60
heartbeat_seconds = 5

[[room]]
code = "hall"
max_active = 1
pass_seconds = 60
heartbeat_seconds = 5
"#;

/// `subject`'s pass of `room`, once the room admitted it.
async fn admitted_pass(stack: &Stack, room: &str, subject: &str) -> String {
    let joined = join(stack, room, subject).await;
    assert_eq!(joined.status.as_u16(), 202, "{:?}", joined.body);
    let ticket = joined.data()["ticket"].as_str().expect("a ticket");
    let admitted = poll_until(stack, ticket, "admitted", Duration::from_secs(5)).await;
    admitted["pass"].as_str().expect("a pass").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_and_python_snippets_verify_a_real_pass_and_refuse_its_forgeries() {
    let stack = stack_with_rooms(ROOMS).await;
    let snippets = snippets().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pass = admitted_pass(&stack, "doors", "alice").await;
    let hall = admitted_pass(&stack, "hall", "bob").await;
    let served = stack.get("/.well-known/jwks.json", None).await;
    assert_eq!(served.status.as_u16(), 200, "{:?}", served.body);
    let jwks = write(dir.path(), "jwks.json", served.body.to_string().as_bytes());
    // An independent witness: `jsonwebtoken` accepts the pass too.
    let claims = verify_pass(&key_set(&stack).await, &pass, "doors").expect("a genuine pass");
    let namespace = stack.creds.namespace_id.to_string();
    let exp = claims["exp"].as_i64().expect("exp");

    // Forgeries: the payload re-signed by nobody, and the pass's kid missing from the set (as
    // for a key the origin's cached set does not list yet).
    let parts: Vec<&str> = pass.split('.').collect();
    let mut theirs = claims.clone();
    theirs["sub"] = json!("mallory");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(theirs.to_string()),
        parts[2]
    );
    let mut renamed = served.body.clone();
    for key in renamed["keys"].as_array_mut().expect("keys") {
        key["kid"] = json!(format!("not-{}", key["kid"].as_str().expect("a kid")));
    }
    let other_keys = write(
        dir.path(),
        "other-jwks.json",
        renamed.to_string().as_bytes(),
    );
    // The header asking for no signature, the real payload.
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(json!({"alg": "none", "kid": pass_kid(&pass)}).to_string()),
        parts[1]
    );
    let another_namespace = uuid::Uuid::new_v4().to_string();
    // Each check at the moment the pass was issued (a first pass lives ten seconds), but those
    // of its end.
    let issued = claims["iat"].as_i64().expect("iat").to_string();
    let (last_moment, at_exp) = (format!("{}.5", exp - 1), exp.to_string());
    let args = |keys: &str, token: &str, namespace: &str, room: &str, now: &str| {
        ["pass", keys, token, namespace, room, "--now", now].map(String::from)
    };

    for snippet in &snippets {
        let verdict = snippet
            .accepts(&args(&jwks, &pass, &namespace, "doors", &issued))
            .await;
        assert_eq!(
            verdict["claims"], claims,
            "the claims jsonwebtoken read: {verdict}"
        );
        assert_eq!(
            (&verdict["claims"]["sub"], &verdict["claims"]["room"]),
            (&json!("alice"), &json!("doors"))
        );
        snippet
            .accepts(&args(&jwks, &hall, &namespace, "hall", &issued))
            .await;
        snippet
            .accepts(&args(&jwks, &pass, &namespace, "doors", &last_moment))
            .await;
        snippet
            .refuses(
                &args(&jwks, &hall, &namespace, "doors", &issued),
                "wrong room",
            )
            .await;
        snippet
            .refuses(
                &args(&jwks, &pass, &another_namespace, "doors", &issued),
                "wrong namespace",
            )
            .await;
        // The claim is the namespace's id, not its name.
        snippet
            .refuses(
                &args(&jwks, &pass, "main", "doors", &issued),
                "wrong namespace",
            )
            .await;
        snippet
            .refuses(&args(&jwks, &pass, &namespace, "doors", &at_exp), "expired")
            .await;
        let with_leeway = [
            &args(&jwks, &pass, &namespace, "doors", &at_exp)[..],
            &["--leeway".into(), "1".into()],
        ]
        .concat();
        snippet.accepts(&with_leeway).await;
        snippet
            .refuses(
                &args(&jwks, &tampered, &namespace, "doors", &issued),
                "bad signature",
            )
            .await;
        snippet
            .refuses(
                &args(&other_keys, &pass, &namespace, "doors", &issued),
                "unknown kid",
            )
            .await;
        snippet
            .refuses(
                &args(&jwks, &unsigned, &namespace, "doors", &issued),
                "alg is not EdDSA",
            )
            .await;
    }
}

/// The `kid` of a pass's header.
fn pass_kid(pass: &str) -> String {
    let header = URL_SAFE_NO_PAD
        .decode(pass.split('.').next().unwrap_or_default())
        .expect("base64url");
    let header: Value = serde_json::from_slice(&header).expect("a JSON header");
    header["kid"].as_str().expect("a kid").to_owned()
}

/// The first fenced block of `language` in examples/backend/README.md: the handlers as the
/// README shows them.
fn readme_block(language: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("examples/backend/README.md"))
        .expect("examples/backend/README.md");
    let fence = format!("```{language}\n");
    let start = readme
        .find(&fence)
        .unwrap_or_else(|| panic!("examples/backend/README.md has no {language} block"))
        + fence.len();
    let end = readme[start..].find("```").expect("the block ends") + start;
    readme[start..end].to_string()
}

/// A webhook command `code` posting to a handler on `port`.
fn hook_declaration(code: &str, port: u16) -> String {
    format!(
        r#"
[[command]]
code = "{code}"
parameters = {{ doc = {{ type = "string", max_length = 64 }}, n = {{ type = "integer" }} }}
resource_key = {{ from = "input", field = "doc" }}
deadline_seconds = 60
{OPEN_INTAKE}
admission = {{ per_second = 100000, burst = 100000, max_in_flight = 1000, max_queue = 1000000 }}
handler = {{ kind = "webhook", url = "http://127.0.0.1:{port}/sluice/webhook", timeout_ms = 2000 }}
"#
    )
}

/// One of the README's handlers, running: the block written beside a copy of its snippet (as a
/// reader would copy both), served on `port`; killed when dropped.
struct RunningHandler {
    base: String,
    log: PathBuf,
    _process: tokio::process::Child,
}

impl RunningHandler {
    async fn start(snippet: &Snippet, dir: &Path, port: u16, stack: &Stack) -> RunningHandler {
        let (server, language) = if snippet.name().ends_with(".mjs") {
            ("server.mjs", "js")
        } else {
            ("server.py", "python")
        };
        let own = dir.join(snippet.name().replace('.', "-"));
        std::fs::create_dir_all(&own).expect("a folder per handler");
        std::fs::copy(&snippet.file, own.join(snippet.name())).expect("copy the snippet");
        std::fs::write(own.join(server), readme_block(language)).expect("write the handler");
        let log = own.join("log");
        let process = tokio::process::Command::new(&snippet.program)
            .arg(server)
            .current_dir(&own)
            .env("SLUICE_WEBHOOK_SECRETS", &stack.creds.webhook_secret)
            .env("SLUICE_URL", &stack.base)
            .env("SLUICE_NAMESPACE_ID", stack.creds.namespace_id.to_string())
            .env("SLUICE_ROOM", "doors")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", snippet.program.display()));
        let handler = RunningHandler {
            base: format!("http://127.0.0.1:{port}"),
            log,
            _process: process,
        };
        let listening = eventually(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(listening, "{server} never listened: {}", handler.log());
        handler
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `POST {path}` with `body` of `content_type` and `headers`: the status and the JSON body.
    async fn post(
        &self,
        path: &str,
        content_type: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> (u16, Value) {
        let mut request = hyper::Request::post(format!("{}{path}", self.base))
            .header("content-type", content_type);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .expect("a request");
        let response =
            tokio::time::timeout(Duration::from_secs(10), http_client(0).request(request))
                .await
                .expect("answered within 10 s")
                .unwrap_or_else(|e| panic!("{path}: {e}: {}", self.log()));
        let status = response.status().as_u16();
        let body = body_bytes(response).await;
        let body = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{path}: {e}: {body:?} {}", self.log()));
        (status, body)
    }

    async fn enter(&self, pass: &str) -> (u16, Value) {
        let form = format!("pass={pass}&join_id=x&room=doors");
        self.post("/enter", "application/x-www-form-urlencoded", &[], form)
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_node_and_python_handlers_take_a_real_webhook_and_a_real_pass() {
    let snippets = snippets().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let commands = ["node_hook", "python_hook"];
    let ports = [free_port(), free_port()];
    let declaration = format!(
        "{}{}{}",
        hook_declaration(commands[0], ports[0]),
        hook_declaration(commands[1], ports[1]),
        ROOMS.replace("max_active = 1", "max_active = 2")
    );
    let stack = Stack::with_declaration(&declaration).await;
    let mut handlers = Vec::new();
    for (snippet, port) in snippets.iter().zip(ports) {
        handlers.push(RunningHandler::start(snippet, dir.path(), port, &stack).await);
    }
    let executor = start_executor(&stack, fast_executor());
    let now = sluice_gateway::identity::auth::now_unix();
    let forged = format!("t={now},v1={}", "0".repeat(64));

    for ((handler, command), snippet) in handlers.iter().zip(commands).zip(&snippets) {
        let name = snippet.name();
        // The executor calls the handler; the handler's answer lands. The input holds 2^53 + 1,
        // which JSON.parse rounds: a handler that verified what it parsed, serialized again,
        // would refuse this genuine request.
        let input = json!({"doc": name, "n": 9_007_199_254_740_993_i64});
        let body = json!({"request_key": key(), "subject": "user-1", "input": input});
        let enqueued = stack
            .post(
                &format!("/v1/commands/{command}:enqueue"),
                Some(&stack.credential()),
                &body.to_string(),
            )
            .await;
        assert_eq!(enqueued.status.as_u16(), 202, "{:?}", enqueued.body);
        let id = enqueued.data()["command_id"].as_str().expect("an id");
        if !until_status(&stack, id, "succeeded", Duration::from_secs(10)).await {
            panic!("{name}: {} {}", row(&stack, id).await, handler.log());
        }
        assert_eq!(
            row(&stack, id).await["result"],
            json!({"handled": id}),
            "{name}"
        );
        // A request Sluice did not sign is refused.
        let refused = handler
            .post(
                "/sluice/webhook",
                "application/json",
                &[("sluice-signature", &forged)],
                body.to_string(),
            )
            .await;
        assert_eq!(
            refused,
            (401, json!({"error": "no signature matches"})),
            "{name}"
        );
        let unsigned = handler
            .post("/sluice/webhook", "application/json", &[], body.to_string())
            .await;
        assert_eq!(
            unsigned,
            (401, json!({"error": "no signature header"})),
            "{name}"
        );
        // The room's pass lets its holder in (the handler fetched the gateway's JWK Set); a
        // pass of another room or a tampered one does not. Fresh passes for each handler: a
        // first pass lives ten seconds.
        let holder = format!("alice-{command}");
        let pass = admitted_pass(&stack, "doors", &holder).await;
        let hall = admitted_pass(&stack, "hall", &format!("bob-{command}")).await;
        let claims = verify_pass(&key_set(&stack).await, &pass, "doors").expect("a genuine pass");
        let parts: Vec<&str> = pass.split('.').collect();
        let mut theirs = claims.clone();
        theirs["sub"] = json!("mallory");
        let tampered = format!(
            "{}.{}.{}",
            parts[0],
            URL_SAFE_NO_PAD.encode(theirs.to_string()),
            parts[2]
        );
        assert_eq!(
            handler.enter(&pass).await,
            (200, json!({"welcome": holder, "until": claims["exp"]})),
            "{name}: {}",
            handler.log()
        );
        assert_eq!(
            handler.enter(&hall).await,
            (403, json!({"error": "wrong room"})),
            "{name}"
        );
        assert_eq!(
            handler.enter(&tampered).await,
            (403, json!({"error": "bad signature"})),
            "{name}"
        );
    }
    executor.cancel();
}
