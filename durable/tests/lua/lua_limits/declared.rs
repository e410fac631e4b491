//! What is declared drives admission: an undeclared template limits nothing, an unknown command waits.

use super::*;

/// A template with no `cfg` entry (no longer declared) limits nothing and is not recorded in
/// `held`; dropping a template's entry frees the commands it held back; a command without its own
/// `cfg` entry is never admitted, whatever its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_templates_limit_nothing_and_unknown_commands_wait() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    let gone = ("gone:{g}", "gone:1");
    let mut free = Vec::new();
    for _ in 0..5 {
        free.push(bench.push("job", "r", &[gone]).await);
    }
    let heads = bench.admit(10).await;
    assert_eq!(ids(&heads), free, "all five, in order, one per pass");
    assert!(!bench.exists(&bench.limit_leases("gone:1")).await);
    assert!(!bench.exists(&bench.limit_bucket("gone:1")).await);
    assert_eq!(
        bench.held(free[0]).await,
        Some(vec![
            bench.keys.application_leases(),
            bench.command_leases("job")
        ])
    );

    let acct = ("acct:{a}", "acct:1");
    let holder = bench.push("job", "h", &[acct]).await;
    let held_back = bench.push("job", "w", &[acct]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![holder]);
    assert!(bench.admit(10).await.is_empty());
    // The template is no longer declared: its key no longer limits.
    bench.configure(&[("job", OPEN)], &[]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![held_back]);

    // A command without a spec is never admitted, even with free keys.
    let unknown = bench.push("webhook", "r", &[("acct:{a}", "acct:2")]).await;
    assert!(bench.admit(10).await.is_empty());
    bench
        .configure(&[("job", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    assert!(bench.admit(10).await.is_empty());
    assert_eq!(bench.queue("webhook", "r").await, vec![unknown]);
    assert_eq!(bench.status(unknown).await.as_deref(), Some("accepted"));
    assert!(!bench.exists(&bench.limit_leases("acct:2")).await);
}

/// End to end from a parsed declaration: `admission_spec` and `limit_specs` write the `cfg`
/// entries, `render_limit_keys` the `lim` field, and admit.lua's lease and bucket are the keys
/// `AppKeys::limit_leases` and `limit_bucket` name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_limits_drive_admit() {
    let declaration = parse(
        r#"
[[command]]
code = "ocr"
parameters = { provider = { type = "string", max_length = 16 }, account = { type = "string", max_length = 64 } }
resource_key = { from = "input", field = "account" }
handler = { kind = "webhook", url = "http://127.0.0.1:9000/ocr", timeout_ms = 10000 }
limits  = [ { key = "provider:{provider}", per_second = 2 }, { key = "account:{provider}:{account}", max_in_flight = 1 } ]
"#,
    )
    .expect("declaration");
    let decl = declaration.command("ocr").expect("ocr");
    let bench = Bench::new().await;
    let mut specs = vec![(format!("{}:ocr", bench.namespace), admission_spec(decl))];
    specs.extend(limit_specs(bench.namespace, decl));
    assert_eq!(
        specs[1..],
        [
            (
                format!("lim:{}:provider:{{provider}}", bench.namespace),
                "0 2 2".to_string()
            ),
            (
                format!("lim:{}:account:{{provider}}:{{account}}", bench.namespace),
                "1 0 0".to_string()
            ),
        ]
    );
    write_admission_config(&bench.redis, &bench.keys, specs)
        .await
        .expect("cfg");
    let input = |account: &str| -> Map<String, Json> {
        let Json::Object(map) = json!({"provider": "gitee", "account": account}) else {
            unreachable!()
        };
        map
    };
    let rendered = render_limit_keys(&decl.limits, &input("a"), "u1");
    assert_eq!(
        rendered,
        vec![
            [
                "provider:{provider}".to_string(),
                "provider:gitee".to_string()
            ],
            [
                "account:{provider}:{account}".to_string(),
                "account:gitee:a".to_string()
            ],
        ]
    );
    let pairs: Vec<(&str, &str)> = rendered
        .iter()
        .map(|[t, k]| (t.as_str(), k.as_str()))
        .collect();
    let first = bench.push("ocr", "a", &pairs).await;
    let second = bench.push("ocr", "a", &pairs).await;
    let rendered_b = render_limit_keys(&decl.limits, &input("b"), "u1");
    let pairs_b: Vec<(&str, &str)> = rendered_b
        .iter()
        .map(|[t, k]| (t.as_str(), k.as_str()))
        .collect();
    let other = bench.push("ocr", "b", &pairs_b).await;
    let got: HashSet<CommandId> = ids(&bench.admit(10).await).into_iter().collect();
    assert_eq!(
        got,
        HashSet::from([first, other]),
        "account:gitee:a allows one; provider:gitee's burst of 2 is used up"
    );
    assert_eq!(
        bench.members(&bench.limit_leases("account:gitee:a")).await,
        HashSet::from([first.to_string()])
    );
    let (tokens, _) = bench.bucket(&bench.limit_bucket("provider:gitee")).await;
    assert!(tokens < 1.0, "both tokens taken: {tokens}");
    assert_eq!(bench.queue("ocr", "a").await, vec![second]);
}
