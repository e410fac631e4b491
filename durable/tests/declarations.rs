//! Applying declarations against a real PostgreSQL: revisions, validation that names the field,
//! and nothing ever half-applied.

use sluice_durable::DurableError;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_store::db;
use sluice_store::tenancy::{self, BootstrapRequest};
use sluice_testkit::shared_postgres;
use sqlx::PgPool;

const VALID: &str = r#"
[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[quota_pool]]
code = "stock"
capacity = 100
"#;

async fn namespace() -> (PgPool, NamespaceId) {
    let url = shared_postgres().fresh_database().await;
    let pg = db::connect(&url, 4).await.expect("connect");
    db::run_migrations(&pg).await.expect("migrate");
    db::run_migrations(&pg)
        .await
        .expect("migrations are idempotent");
    let out = tenancy::bootstrap(
        &pg,
        &BootstrapRequest {
            application: "app".into(),
            namespace: "ns".into(),
            application_id: None,
            scopes: vec![],
            resource_access: false,
        },
    )
    .await
    .expect("bootstrap");
    (pg, out.namespace_id)
}

async fn revisions(pg: &PgPool, ns: NamespaceId) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM declarations WHERE namespace_id = $1")
        .bind(ns)
        .fetch_one(pg)
        .await
        .expect("count")
}

async fn capacity(pg: &PgPool, ns: NamespaceId) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT capacity FROM quota_pools WHERE namespace_id = $1 AND code = 'stock'",
    )
    .bind(ns)
    .fetch_optional(pg)
    .await
    .expect("capacity")
}

/// Each apply is a new audited revision; the namespace's configuration is the newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_are_revisioned_and_audited() {
    let (pg, ns) = namespace().await;
    assert_eq!(
        tenancy::apply_declaration(&pg, ns, VALID, "test", None)
            .await
            .expect("apply"),
        1
    );
    let bigger = VALID.replace("capacity = 100", "capacity = 150");
    assert_eq!(
        tenancy::apply_declaration(&pg, ns, &bigger, "test", Some(1))
            .await
            .expect("apply"),
        2
    );
    assert_eq!(capacity(&pg, ns).await, Some(150));
    let config = tenancy::namespace_config(&pg, ns)
        .await
        .expect("load")
        .expect("exists");
    assert_eq!(config.declaration_revision, 2);
    assert_eq!(config.declaration.commands[0].code, "claim");
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit WHERE namespace_id = $1 AND action = 'declarations.apply'",
    )
    .bind(ns)
    .fetch_one(&pg)
    .await
    .expect("audit");
    assert_eq!(audits, 2);
}

/// An invalid declaration is refused naming the field, and nothing of it is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_declarations_name_the_field_and_change_nothing() {
    let (pg, ns) = namespace().await;
    tenancy::apply_declaration(&pg, ns, VALID, "test", None)
        .await
        .expect("apply");
    let cases = [
        (
            VALID.replace("capacity = 100", "capacity = -1"),
            "quota_pool[0].capacity",
        ),
        (
            VALID.replace("pool = \"stock\"", "pool = \"nope\""),
            "command[0].handler.pool",
        ),
        (
            VALID.replace("type = \"uuid\"", "type = \"uuid\", colour = 1"),
            "command[0].parameters.offer.colour",
        ),
        (
            VALID.replace("capacity = 100", "capacity = 120\n[[read]]\nname = \"x\""),
            "read[0].origin",
        ),
        ("[[command]\n".to_string(), "toml"),
    ];
    for (text, field) in cases {
        match tenancy::apply_declaration(&pg, ns, &text, "test", None).await {
            Err(DurableError::Invalid(error)) => assert_eq!(error.field, field, "{error}"),
            other => panic!("{field}: expected a field error, got {other:?}"),
        }
    }
    assert_eq!(revisions(&pg, ns).await, 1);
    assert_eq!(capacity(&pg, ns).await, Some(100));
}

/// Capacity below what is already allocated is refused; a stale expected revision conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_below_allocations_and_stale_revisions_are_refused() {
    let (pg, ns) = namespace().await;
    tenancy::apply_declaration(&pg, ns, VALID, "test", None)
        .await
        .expect("apply");
    sqlx::query("UPDATE quota_pools SET allocated = 40 WHERE namespace_id = $1")
        .bind(ns)
        .execute(&pg)
        .await
        .expect("allocate");
    let smaller = VALID.replace("capacity = 100", "capacity = 30");
    match tenancy::apply_declaration(&pg, ns, &smaller, "test", None).await {
        Err(DurableError::Invalid(error)) => {
            assert_eq!(error.field, "quota_pool[0].capacity");
            assert!(error.message.contains("40"), "{error}");
        }
        other => panic!("expected a field error, got {other:?}"),
    }
    let stale = tenancy::apply_declaration(&pg, ns, VALID, "test", Some(7)).await;
    assert!(
        matches!(stale, Err(DurableError::StateConflict(_))),
        "{stale:?}"
    );
    assert_eq!(revisions(&pg, ns).await, 1);
    assert_eq!(capacity(&pg, ns).await, Some(100));
}

/// Bootstrap joins an existing application and refuses a duplicate namespace or unknown scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_joins_and_refuses_duplicates() {
    let url = shared_postgres().fresh_database().await;
    let pg = db::connect(&url, 4).await.expect("connect");
    db::run_migrations(&pg).await.expect("migrate");
    let request = |namespace: &str, application_id: Option<ApplicationId>| BootstrapRequest {
        application: "app".into(),
        namespace: namespace.into(),
        application_id,
        scopes: vec![],
        resource_access: false,
    };
    let first = tenancy::bootstrap(&pg, &request("first", None))
        .await
        .expect("first");
    assert!(
        !first.scopes.iter().any(|s| s.starts_with("application:")),
        "application scopes only when asked"
    );
    let second = tenancy::bootstrap(&pg, &request("second", Some(first.application_id)))
        .await
        .expect("join");
    assert_eq!(second.application_id, first.application_id);
    let duplicate = tenancy::bootstrap(&pg, &request("second", Some(first.application_id))).await;
    assert!(
        matches!(duplicate, Err(DurableError::StateConflict(_))),
        "{duplicate:?}"
    );
    let unknown_app =
        tenancy::bootstrap(&pg, &request("third", Some(ApplicationId::new_v7()))).await;
    assert!(
        matches!(unknown_app, Err(DurableError::NotFound(_))),
        "{unknown_app:?}"
    );
    let mut bad_scope = request("fourth", None);
    bad_scope.scopes = vec!["queues:*".into()];
    assert!(matches!(
        tenancy::bootstrap(&pg, &bad_scope).await,
        Err(DurableError::Invalid(_))
    ));
    let mut with_access = request("fifth", None);
    with_access.resource_access = true;
    let fifth = tenancy::bootstrap(&pg, &with_access).await.expect("fifth");
    assert!(
        fifth
            .scopes
            .iter()
            .any(|s| s == "application:resources:manage")
    );
    let stored = tenancy::credential_by_secret(&pg, &fifth.credential)
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(stored.namespace_id, fifth.namespace_id);
    let hash: Vec<u8> = sqlx::query_scalar("SELECT secret_sha256 FROM credentials WHERE id = $1")
        .bind(stored.id)
        .fetch_one(&pg)
        .await
        .expect("hash");
    assert_ne!(hash, fifth.credential.as_bytes(), "only the hash is stored");
}

/// Two webhook commands that both name the limit template `account:{provider}:{account}`, with
/// the given limit tables.
fn shared_limits(first: &str, second: &str) -> String {
    let command = |code: &str, limits: &str| {
        format!(
            r#"
[[command]]
code = "{code}"
parameters = {{ provider = {{ type = "string", max_length = 16 }}, account = {{ type = "string", max_length = 64 }} }}
resource_key = {{ from = "input", field = "account" }}
handler = {{ kind = "webhook", url = "http://127.0.0.1:9000/{code}", timeout_ms = 10000 }}
limits = [ {limits} ]
"#
        )
    };
    format!(
        "{}{}{}",
        VALID,
        command("ocr", first),
        command("translate", second)
    )
}

/// A limit template is one budget per namespace: a second command declaring it with other
/// numbers is refused naming that command's limit, and nothing is applied; the same numbers
/// (written out or defaulted) are accepted; another namespace may declare other numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_limit_template_must_carry_the_same_numbers() {
    let (pg, ns) = namespace().await;
    tenancy::apply_declaration(&pg, ns, VALID, "test", None)
        .await
        .expect("apply");
    let account = r#"{ key = "account:{provider}:{account}", max_in_flight = 2 }"#;
    let provider = r#"{ key = "provider:{provider}", per_second = 5 }"#;
    let cases = [
        (
            shared_limits(
                account,
                r#"{ key = "account:{provider}:{account}", max_in_flight = 3 }"#,
            ),
            "command[2].limits[0]",
        ),
        (
            shared_limits(
                &format!("{provider}, {account}"),
                &format!(
                    r#"{account}, {{ key = "provider:{{provider}}", per_second = 5, burst = 6 }}"#
                ),
            ),
            "command[2].limits[1]",
        ),
        (
            shared_limits(
                account,
                r#"{ key = "account:{provider}:{account}", max_in_flight = 2, per_second = 1 }"#,
            ),
            "command[2].limits[0]",
        ),
    ];
    for (text, field) in cases {
        match tenancy::apply_declaration(&pg, ns, &text, "test", None).await {
            Err(DurableError::Invalid(error)) => {
                assert_eq!(error.field, field, "{error}");
                assert!(error.message.contains("limit key"), "{error}");
            }
            other => panic!("{field}: expected a field error, got {other:?}"),
        }
    }
    assert_eq!(revisions(&pg, ns).await, 1, "nothing applied");

    // The same numbers, one of them with its default burst spelt out.
    let same = shared_limits(
        &format!("{account}, {provider}"),
        &format!(r#"{{ key = "provider:{{provider}}", per_second = 5, burst = 5 }}, {account}"#),
    );
    assert_eq!(
        tenancy::apply_declaration(&pg, ns, &same, "test", None)
            .await
            .expect("same numbers are one budget"),
        2
    );
    let config = tenancy::namespace_config(&pg, ns)
        .await
        .expect("load")
        .expect("exists");
    let ocr = config.declaration.command("ocr").expect("ocr");
    let translate = config.declaration.command("translate").expect("translate");
    assert_eq!(ocr.limits[0], translate.limits[1]);
    assert_eq!(ocr.limits[1], translate.limits[0]);

    // Another namespace of the application has its own budgets.
    let application_id: ApplicationId =
        sqlx::query_scalar("SELECT application_id FROM namespaces WHERE id = $1")
            .bind(ns)
            .fetch_one(&pg)
            .await
            .expect("application");
    let other = tenancy::bootstrap(
        &pg,
        &BootstrapRequest {
            application: "app".into(),
            namespace: "other".into(),
            application_id: Some(application_id),
            scopes: vec![],
            resource_access: false,
        },
    )
    .await
    .expect("second namespace");
    let different = shared_limits(
        r#"{ key = "account:{provider}:{account}", max_in_flight = 7 }"#,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 7 }"#,
    );
    assert_eq!(
        tenancy::apply_declaration(&pg, other.namespace_id, &different, "test", None)
            .await
            .expect("other numbers in another namespace"),
        1
    );
}

/// `render_limit_keys` renders each template with the input: `[[template, key], …]` in declared
/// order.
#[test]
fn render_limit_keys_renders_each_template() {
    let declaration = sluice_durable::declaration::parse(&shared_limits(
        r#"{ key = "account:{provider}:{account}", max_in_flight = 2 }, { key = "provider:{provider}", per_second = 5 }, { key = "all", max_in_flight = 9 }"#,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 2 }"#,
    ))
    .expect("parse");
    let ocr = declaration.command("ocr").expect("ocr");
    let serde_json::Value::Object(input) =
        serde_json::json!({"provider": "gitee", "account": "acc-7"})
    else {
        unreachable!()
    };
    assert_eq!(
        sluice_durable::declaration::render_limit_keys(&ocr.limits, &input, "u1"),
        vec![
            [
                "account:{provider}:{account}".to_string(),
                "account:gitee:acc-7".to_string()
            ],
            [
                "provider:{provider}".to_string(),
                "provider:gitee".to_string()
            ],
            ["all".to_string(), "all".to_string()],
        ]
    );
    assert_eq!(
        serde_json::to_string(&sluice_durable::declaration::render_limit_keys(
            &ocr.limits,
            &input,
            "u1"
        ))
        .expect("json"),
        r#"[["account:{provider}:{account}","account:gitee:acc-7"],["provider:{provider}","provider:gitee"],["all","all"]]"#,
        "the `lim` field as admit.lua reads it"
    );
}
