//! The `sluice` binary: migrate, bootstrap, apply and keygen as scripts and operators use them.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use sluice_testkit::shared_postgres;

/// `sluice <args>` against `database_url`, logging warnings only; its output.
pub(crate) fn sluice(database_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATABASE_URL", database_url)
        .env("SLUICE_LOG", "warn")
        .output()
        .expect("run sluice")
}

/// What a `sluice` run printed, standard output then standard error.
pub(crate) fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `sluice bootstrap` of the application `shop` and its namespace `prod` into `creds.json` in
/// `dir`; the file's path.
fn bootstrap_shop(url: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let creds = dir.join("creds.json");
    let creds_arg = creds.to_str().expect("utf-8 path");
    let bootstrap = sluice(
        url,
        &[
            "bootstrap",
            "--application",
            "shop",
            "--namespace",
            "prod",
            "--output",
            creds_arg,
        ],
    );
    assert!(bootstrap.status.success(), "{}", text(&bootstrap));
    creds
}

/// migrate (twice), bootstrap to a 0600 file, apply a valid declaration, refuse an invalid one
/// naming the field without applying anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_bootstrap_apply_from_the_command_line() {
    let url = shared_postgres().fresh_database().await;
    let dir = tempfile::tempdir().expect("tempdir");
    for _ in 0..2 {
        let migrate = sluice(&url, &["migrate"]);
        assert!(migrate.status.success(), "{}", text(&migrate));
    }
    let creds = bootstrap_shop(&url, dir.path());
    let creds_arg = creds.to_str().expect("utf-8 path");
    let mode = std::fs::metadata(&creds)
        .expect("file")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "the credentials file holds secrets");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&creds).expect("read")).expect("json");
    for field in [
        "application_id",
        "namespace_id",
        "namespace",
        "credential",
        "scopes",
        "subject_key",
        "webhook_secret",
    ] {
        assert!(!written[field].is_null(), "{field} missing in {written}");
    }
    assert_eq!(written["namespace"], "prod");
    assert!(
        written["subject_key"]["id"].is_string() && written["subject_key"]["secret"].is_string()
    );

    let declaration = dir.path().join("sluice.toml");
    std::fs::write(&declaration, crate::support::CLAIM_DECLARATION).expect("write toml");
    let decl_arg = declaration.to_str().expect("utf-8 path");
    let apply = sluice(&url, &["apply", "--credentials", creds_arg, "-f", decl_arg]);
    assert!(apply.status.success(), "{}", text(&apply));
    assert!(text(&apply).contains("revision 1"), "{}", text(&apply));

    std::fs::write(
        &declaration,
        crate::support::CLAIM_DECLARATION.replace("max_queue = 1000000", "max_queue = 0"),
    )
    .expect("write toml");
    let refused = sluice(&url, &["apply", "--credentials", creds_arg, "-f", decl_arg]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("command[0].admission.max_queue"),
        "{}",
        text(&refused)
    );
    let pg = sluice_store::db::connect(&url, 1).await.expect("connect");
    let revisions: i64 = sqlx::query_scalar("SELECT count(*) FROM declarations")
        .fetch_one(&pg)
        .await
        .expect("count");
    assert_eq!(revisions, 1, "the refused declaration applied nothing");

    let joined = sluice(
        &url,
        &[
            "bootstrap",
            "--application",
            "shop",
            "--namespace",
            "staging",
            "--application-id",
            written["application_id"].as_str().expect("id"),
            "--scope",
            "commands:enqueue",
            "--output",
            dir.path().join("staging.json").to_str().expect("path"),
        ],
    );
    assert!(joined.status.success(), "{}", text(&joined));
    // Subject key rotation: a new key is added, the old one revoked by id.
    let created = sluice(&url, &["subject-key", "create", "--credentials", creds_arg]);
    assert!(created.status.success(), "{}", text(&created));
    let key: serde_json::Value = serde_json::from_slice(&created.stdout).expect("key json");
    assert!(key["id"].is_string() && key["secret"].is_string(), "{key}");
    let old_kid = written["subject_key"]["id"].as_str().expect("kid");
    let revoked = sluice(
        &url,
        &[
            "subject-key",
            "revoke",
            "--credentials",
            creds_arg,
            "--kid",
            old_kid,
        ],
    );
    assert!(revoked.status.success(), "{}", text(&revoked));
    let again = sluice(
        &url,
        &[
            "subject-key",
            "revoke",
            "--credentials",
            creds_arg,
            "--kid",
            old_kid,
        ],
    );
    assert!(
        !again.status.success(),
        "a revoked key cannot be revoked twice"
    );
    let live: Vec<String> = sqlx::query_scalar(
        "SELECT kid FROM subject_keys WHERE revoked_at IS NULL AND namespace_id = $1::text::uuid",
    )
    .bind(written["namespace_id"].as_str().expect("ns"))
    .fetch_all(&pg)
    .await
    .expect("keys");
    assert_eq!(live, vec![key["id"].as_str().expect("kid").to_string()]);

    let bad_scope = sluice(
        &url,
        &[
            "bootstrap",
            "--application",
            "x",
            "--namespace",
            "y",
            "--scope",
            "everything",
            "--output",
            dir.path().join("y.json").to_str().expect("path"),
        ],
    );
    assert!(!bad_scope.status.success());
    assert!(text(&bad_scope).contains("scope"), "{}", text(&bad_scope));
}

/// Two commands whose limit templates, `{region}` at 10 and `{account}` at 1, both render `eu`:
/// in Redis a rendered key is one budget, whose numbers would be whichever template admit.lua
/// read first. A declaration that can run like that is refused at apply.
const ONE_KEY_TWO_BUDGETS: &str = r#"
[[command]]
code = "regional"
parameters = { region = { type = "string", max_length = 16 } }
resource_key = { from = "input", field = "region" }
handler = { kind = "quota", pool = "stock", mode = "committed" }
limits = [{ key = "{region}", max_in_flight = 10 }]

[[command]]
code = "billing"
parameters = { account = { type = "string", max_length = 64 } }
resource_key = { from = "input", field = "account" }
handler = { kind = "quota", pool = "stock", mode = "committed" }
limits = [{ key = "{account}", max_in_flight = 1 }]

[[quota_pool]]
code = "stock"
capacity = 100
"#;

/// `sluice apply` (and the same apply as an API answer, `400 INVALID_ARGUMENT`) refuses limit
/// templates that can render one key with other numbers, naming the later limit's key, and the
/// revision in force does not move; distinct literal text applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_refuses_two_templates_that_render_one_key_with_other_numbers() {
    let url = shared_postgres().fresh_database().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let migrate = sluice(&url, &["migrate"]);
    assert!(migrate.status.success(), "{}", text(&migrate));
    let creds = bootstrap_shop(&url, dir.path());
    let creds_arg = creds.to_str().expect("utf-8 path");
    let declaration = dir.path().join("sluice.toml");
    let decl_arg = declaration.to_str().expect("utf-8 path");
    std::fs::write(&declaration, crate::support::CLAIM_DECLARATION).expect("write toml");
    let apply = sluice(&url, &["apply", "--credentials", creds_arg, "-f", decl_arg]);
    assert!(apply.status.success(), "{}", text(&apply));

    std::fs::write(&declaration, ONE_KEY_TWO_BUDGETS).expect("write toml");
    let refused = sluice(&url, &["apply", "--credentials", creds_arg, "-f", decl_arg]);
    assert!(!refused.status.success(), "{}", text(&refused));
    for part in [
        "command[1].limits[0].key",
        "command[0].limits[0].key",
        "region:{region}",
    ] {
        assert!(text(&refused).contains(part), "{part}: {}", text(&refused));
    }

    let pg = sluice_store::db::connect(&url, 1).await.expect("connect");
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&creds).expect("read")).expect("json");
    let namespace_id: sluice_durable::ids::NamespaceId =
        serde_json::from_value(written["namespace_id"].clone()).expect("namespace id");
    let error = sluice_store::tenancy::apply_declaration(
        &pg,
        namespace_id,
        ONE_KEY_TWO_BUDGETS,
        "test",
        None,
    )
    .await
    .expect_err("refused");
    let answer = sluice_gateway::http::error::ApiError::from(error);
    assert_eq!(answer.status(), hyper::StatusCode::BAD_REQUEST);
    assert_eq!(answer.code.as_str(), "INVALID_ARGUMENT");
    assert_eq!(
        answer.details.as_ref().and_then(|d| d.get("field")),
        Some(&serde_json::json!("command[1].limits[0].key")),
        "{answer:?}"
    );
    let revision: i64 = sqlx::query_scalar("SELECT max(revision) FROM declarations")
        .fetch_one(&pg)
        .await
        .expect("revision");
    assert_eq!(revision, 1, "nothing applied");

    let apart = ONE_KEY_TWO_BUDGETS
        .replace(r#"key = "{region}""#, r#"key = "region:{region}""#)
        .replace(r#"key = "{account}""#, r#"key = "account:{account}""#);
    std::fs::write(&declaration, apart).expect("write toml");
    let applied = sluice(&url, &["apply", "--credentials", creds_arg, "-f", decl_arg]);
    assert!(applied.status.success(), "{}", text(&applied));
    assert!(text(&applied).contains("revision 2"), "{}", text(&applied));
}

/// `serve` refuses to start without ticket keys and says how to make one; keygen makes one.
#[test]
fn serve_needs_ticket_keys_and_keygen_makes_them() {
    let serve = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve"])
        .env_remove("SLUICE_TICKET_KEYS")
        .output()
        .expect("run");
    assert!(!serve.status.success());
    assert!(text(&serve).contains("sluice keygen"), "{}", text(&serve));
    let keygen = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("keygen")
        .output()
        .expect("run");
    assert!(keygen.status.success());
    let spec = String::from_utf8_lossy(&keygen.stdout).trim().to_string();
    assert!(
        sluice_gateway::identity::ticket::TicketKeys::parse(&spec).is_ok(),
        "{spec}"
    );
}

/// `sluice dev` with nothing reachable starts its own Redis and PostgreSQL, bootstraps the demo
/// namespace and runs gateway and executor: a claim enqueued over HTTP ends `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_whole_stack_in_one_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let admin = format!("127.0.0.1:{}", crate::support::free_port());
    /// Kills the dev stack (and so its own servers) when the test ends, pass or fail.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _dev = Kill(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "dev",
                "--listen",
                &listen,
                "--admin-listen",
                &admin,
                "--dir",
                dir.path().to_str().expect("path"),
            ])
            .env("SLUICE_REDIS_URL", "redis://127.0.0.1:1")
            .env(
                "SLUICE_DATABASE_URL",
                "postgres://postgres@127.0.0.1:1/none",
            )
            .env("SLUICE_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sluice dev"),
    );
    let creds_path = dir.path().join("credentials.json");
    let up = crate::support::eventually(std::time::Duration::from_secs(60), || async {
        creds_path.exists() && tokio::net::TcpStream::connect(&listen).await.is_ok()
    })
    .await;
    assert!(up, "sluice dev serves within a minute");
    let creds: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&creds_path).expect("read")).expect("json");
    let credential = creds["credential"]
        .as_str()
        .expect("credential")
        .to_string();
    let (client, base) = (crate::support::http_client(1), format!("http://{listen}"));
    let body = serde_json::json!({"request_key": "order-1", "subject": "user-42",
        "input": {"offer": "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10"}})
    .to_string();
    let enqueue = crate::support::send_request(
        &client,
        &base,
        hyper::Method::POST,
        "/v1/commands/claim:enqueue",
        Some(&credential),
        Some(body.into()),
        &[],
    )
    .await
    .body;
    assert_eq!(enqueue["data"]["status"], "accepted", "{enqueue}");
    let ticket = enqueue["data"]["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();
    let done = crate::support::eventually(std::time::Duration::from_secs(20), || async {
        let poll = crate::support::send_request(
            &client,
            &base,
            hyper::Method::GET,
            &format!("/v1/tickets/{ticket}"),
            None,
            None,
            &[],
        )
        .await
        .body;
        poll["data"]["status"] == "succeeded"
    })
    .await;
    assert!(done, "the executor of the dev stack ran the claim");
    let scrape = crate::support::send_request(
        &client,
        &format!("http://{admin}"),
        hyper::Method::GET,
        "/metrics",
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(scrape.status, hyper::StatusCode::OK);
    assert!(
        scrape
            .body
            .as_str()
            .is_some_and(|text| text.contains("sluice_intake_decisions_total")),
        "the admin listener serves the metrics: {:?}",
        scrape.body
    );
}

/// A TCP proxy to `upstream` that holds every connection unanswered until `opens` has passed,
/// then relays it: a PostgreSQL that listens but is too busy to answer at first.
async fn slow_to_answer(upstream: u16, opens: std::time::Duration) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let opens_at = tokio::time::Instant::now() + opens;
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep_until(opens_at).await;
                if let Ok(mut server) =
                    tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    port
}

/// `sluice dev` pointed at a PostgreSQL that listens but answers only after a few seconds waits
/// for it instead of starting a throwaway one beside it (which would serve another database):
/// the demo credential it writes is in the configured database, and it never says it started one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_waits_for_a_slow_postgres_instead_of_replacing_it() {
    let database = shared_postgres().fresh_database().await;
    let name = database.rsplit('/').next().expect("a database name");
    let proxy = slow_to_answer(shared_postgres().port(), std::time::Duration::from_secs(5)).await;
    let slow_url = format!("postgres://postgres@127.0.0.1:{proxy}/{name}");
    let dir = tempfile::tempdir().expect("tempdir");
    let listen = format!("127.0.0.1:{}", crate::support::free_port());
    let admin = format!("127.0.0.1:{}", crate::support::free_port());
    let stdout = dir.path().join("stdout.txt");
    let mut dev = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "dev",
            "--listen",
            &listen,
            "--admin-listen",
            &admin,
            "--dir",
        ])
        .arg(dir.path())
        .env("SLUICE_REDIS_URL", sluice_testkit::shared_redis().url())
        .env("SLUICE_DATABASE_URL", &slow_url)
        .env("SLUICE_LOG", "warn")
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sluice dev");
    let creds_path = dir.path().join("credentials.json");
    let up = crate::support::eventually(std::time::Duration::from_secs(90), || async {
        creds_path.exists() && tokio::net::TcpStream::connect(&listen).await.is_ok()
    })
    .await;
    let printed = std::fs::read_to_string(&stdout).unwrap_or_default();
    assert!(up, "sluice dev serves within 90 s: {printed}");
    assert!(!printed.contains("starting one"), "{printed}");
    let creds: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&creds_path).expect("read")).expect("json");
    let credential = creds["credential"].as_str().expect("credential");
    let pg = sluice_store::db::connect(&database, 1)
        .await
        .expect("the configured database");
    let found = sluice_store::tenancy::credential_by_secret(&pg, credential)
        .await
        .expect("lookup");
    assert!(
        found.is_some(),
        "the demo credential is in the configured database"
    );
    let _ = dev.kill().await;
}

/// The log settings refuse what they cannot mean: a `--log-format` outside its choices and a
/// filter that does not parse each stop the start with the reason, where both used to fall
/// back silently (text logs, `info`). `RUST_LOG` is read when `SLUICE_LOG` is unset, and only
/// then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_settings_refuse_typos_and_rust_log_is_read_when_sluice_log_is_unset() {
    let url = shared_postgres().fresh_database().await;
    let run = |vars: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(args)
            .env("SLUICE_DATABASE_URL", &url)
            .env_remove("SLUICE_LOG")
            .env_remove("RUST_LOG");
        for (name, value) in vars {
            command.env(name, value);
        }
        command.output().expect("run sluice")
    };
    let typo = run(&[], &["--log-format", "jsn", "migrate"]);
    assert!(!typo.status.success());
    let said = text(&typo);
    assert!(
        said.contains("jsn") && said.contains("text") && said.contains("json"),
        "the typo and the choices: {said}"
    );
    for variable in ["SLUICE_LOG", "RUST_LOG"] {
        let bad = run(&[(variable, "sluice=notalevel")], &["migrate"]);
        assert!(!bad.status.success(), "{variable}: {}", text(&bad));
        let said = text(&bad);
        assert!(
            said.contains(&format!(
                "{variable}=\"sluice=notalevel\" is not a log filter"
            )),
            "{said}"
        );
    }
    // sqlx logs each statement at `debug`: a `debug` filter shows them, `warn` does not.
    let debug_lines = |output: &Output| {
        text(output)
            .lines()
            .filter(|line| line.contains("DEBUG"))
            .count()
    };
    let from_rust_log = run(&[("RUST_LOG", "debug")], &["migrate"]);
    assert!(from_rust_log.status.success(), "{}", text(&from_rust_log));
    assert!(debug_lines(&from_rust_log) > 0, "RUST_LOG=debug was read");
    let sluice_log_wins = run(
        &[("RUST_LOG", "debug"), ("SLUICE_LOG", "warn")],
        &["migrate"],
    );
    assert!(
        sluice_log_wins.status.success(),
        "{}",
        text(&sluice_log_wins)
    );
    assert_eq!(debug_lines(&sluice_log_wins), 0, "SLUICE_LOG comes first");
    let help = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--help")
        .output()
        .expect("run sluice --help");
    let help = text(&help);
    assert!(
        help.contains("SLUICE_LOG") && help.contains("RUST_LOG"),
        "--help says where the filter comes from: {help}"
    );
}

/// `sluice token` mints, from a credentials file alone, the subject token an application's
/// backend would: the gateway accepts it and the command is that subject's (its row says so);
/// a subject or a lifetime the gateway would refuse is refused before anything is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_mints_a_subject_token_the_gateway_accepts() {
    let stack = crate::support::Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let creds = dir.path().join("creds.json");
    std::fs::write(
        &creds,
        serde_json::to_string(&stack.creds).expect("credentials as JSON"),
    )
    .expect("write the credentials file");
    let creds_arg = creds.to_str().expect("utf-8 path");
    let token = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["token", "--credentials", creds_arg])
            .args(args)
            .env_remove("SLUICE_LOG")
            .output()
            .expect("run sluice token")
    };
    let minted = token(&["--subject", "alice", "--ttl-seconds", "600"]);
    assert!(minted.status.success(), "{}", text(&minted));
    let jwt = String::from_utf8_lossy(&minted.stdout).trim().to_string();
    assert_eq!(jwt.split('.').count(), 3, "a JWT alone on stdout: {jwt}");

    let body = serde_json::json!({"request_key": crate::support::key(), "input": {"offer": crate::support::offer()}});
    let reply = stack
        .post("/v1/commands/claim:enqueue", Some(&jwt), &body.to_string())
        .await;
    assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
    let id: uuid::Uuid = reply.data()["command_id"]
        .as_str()
        .expect("command_id")
        .parse()
        .expect("a uuid");
    let subject: String = sqlx::query_scalar("SELECT subject FROM commands WHERE id = $1")
        .bind(id)
        .fetch_one(&stack.pg)
        .await
        .expect("the row");
    assert_eq!(subject, "alice");

    for (args, said) in [
        (
            vec!["--subject", ""],
            "--subject must be 1 to 128 characters",
        ),
        (
            vec!["--subject", "bob", "--ttl-seconds", "86401"],
            "--ttl-seconds must be 1 to 86400",
        ),
    ] {
        let refused = token(&args);
        assert!(!refused.status.success(), "{args:?}");
        assert!(refused.stdout.is_empty(), "nothing printed for {args:?}");
        assert!(
            text(&refused).contains(said),
            "{args:?}: {}",
            text(&refused)
        );
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "token",
            "--credentials",
            "/nonexistent/creds.json",
            "--subject",
            "x",
        ])
        .output()
        .expect("run sluice token");
    assert!(text(&missing).contains("cannot read credentials file /nonexistent/creds.json"));
}
