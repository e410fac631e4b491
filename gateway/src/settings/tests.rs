use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
    f
}

fn lease_flag(value: &str) -> Flag {
    Flag::new("executor.lease_ms", &Some(value.into()))
}

#[test]
fn nothing_given_is_the_defaults() {
    let loaded = Settings::load(None, env(&[("PATH", "/bin")]), &[], &[]).expect("defaults load");
    assert_eq!(
        toml::to_string(&loaded).expect("toml"),
        toml::to_string(&Settings::default()).expect("toml")
    );
}

#[test]
fn file_then_environment_then_flag_then_set() {
    let f = file("pg_pool_size = 7\n[executor]\nlease_ms = 2000\ntick_ms = 50\n");
    let only_file = Settings::load(Some(f.path()), env(&[]), &[], &[]).expect("file");
    assert_eq!(only_file.pg_pool_size, 7);
    assert_eq!(only_file.executor.lease_ms, 2_000);
    assert_eq!(only_file.executor.tick_ms, 50);
    // A key the file does not name keeps its default.
    assert_eq!(
        only_file.executor.batch_size,
        ExecutorConfig::default().batch_size
    );

    let with_env = env(&[("SLUICE_EXECUTOR_LEASE_MS", "3000")]);
    let over_file = Settings::load(Some(f.path()), with_env.clone(), &[], &[]).expect("env");
    assert_eq!(over_file.executor.lease_ms, 3_000);
    assert_eq!(over_file.executor.tick_ms, 50, "the file's other keys stay");

    let over_env =
        Settings::load(Some(f.path()), with_env.clone(), &[lease_flag("4000")], &[]).expect("flag");
    assert_eq!(over_env.executor.lease_ms, 4_000);

    let over_flag = Settings::load(
        Some(f.path()),
        with_env,
        &[lease_flag("4000")],
        &["executor.lease_ms=5000".into()],
    )
    .expect("set");
    assert_eq!(over_flag.executor.lease_ms, 5_000);
}

#[test]
fn nested_tables_and_optional_values_come_from_the_environment() {
    let loaded = Settings::load(
        None,
        env(&[
            ("SLUICE_GATEWAY_GROUP_COMMIT_MAX_BATCH", "32"),
            ("SLUICE_GATEWAY_CACHE_ORIGIN_PER_PROCESS", "9"),
            ("SLUICE_EXECUTOR_BATCH_QUOTA", "false"),
            ("SLUICE_METRICS_LISTEN", "127.0.0.1:9100"),
            ("SLUICE_TICKET_KEYS", "k1:secret"),
        ]),
        &[],
        &[],
    )
    .expect("load");
    assert_eq!(loaded.gateway.group_commit.max_batch, 32);
    assert_eq!(loaded.gateway.cache.origin_per_process, 9);
    assert!(!loaded.executor.batch_quota);
    assert_eq!(
        loaded.metrics_listen,
        Some("127.0.0.1:9100".parse().expect("addr"))
    );
    assert_eq!(
        loaded.ticket_keys.as_ref().map(|k| k.expose().as_str()),
        Some("k1:secret")
    );
    assert!(
        !format!("{loaded:?}").contains("k1:secret"),
        "Debug never shows the ticket keys"
    );
}

#[test]
fn one_retention_sets_the_rows_and_the_tickets() {
    let loaded =
        Settings::load(None, env(&[("SLUICE_RETENTION_SECONDS", "3600")]), &[], &[]).expect("load");
    assert_eq!(loaded.executor_config().retention_seconds, 3_600);
    assert_eq!(loaded.gateway_config().ticket_retention_seconds, 3_600);
    // The tables have no retention of their own to disagree with.
    let err = Settings::load(
        None,
        env(&[]),
        &[],
        &["executor.retention_seconds=5".into()],
    )
    .expect_err("not a setting");
    assert!(matches!(err, SettingsError::UnknownSetting(_)), "{err}");
}

#[test]
fn a_misspelt_file_key_is_refused_naming_it() {
    let f = file("[executor]\nlease_msec = 2000\n");
    let err = Settings::load(Some(f.path()), env(&[]), &[], &[]).expect_err("unknown key");
    let text = err.to_string();
    assert!(text.contains("lease_msec"), "{text}");
    assert!(text.contains(&f.path().display().to_string()), "{text}");
}

#[test]
fn a_wrong_value_is_refused_naming_where_it_came_from() {
    let err = Settings::load(None, env(&[("SLUICE_EXECUTOR_LEASE_MS", "soon")]), &[], &[])
        .expect_err("not a number");
    assert!(
        err.to_string().starts_with("SLUICE_EXECUTOR_LEASE_MS: "),
        "{err}"
    );

    let err = Settings::load(None, env(&[("SLUICE_PG_POOL_SIZE", "-1")]), &[], &[])
        .expect_err("negative pool");
    assert!(err.to_string().contains("pg_pool_size"), "{err}");

    let err = Settings::load(None, env(&[]), &[lease_flag("1.5x")], &[]).expect_err("flag");
    assert!(err.to_string().starts_with("--lease-ms: "), "{err}");

    let err = Settings::load(None, env(&[("SLUICE_LISTEN", "localhost")]), &[], &[])
        .expect_err("not an address");
    assert!(err.to_string().starts_with("SLUICE_LISTEN: "), "{err}");

    // Each value reads alone but the whole breaks a guarantee: refused by validation.
    let err = Settings::load(None, env(&[("SLUICE_EXECUTOR_LEASE_MS", "10")]), &[], &[])
        .expect_err("lease too short");
    assert!(err.to_string().contains("lease_ms"), "{err}");

    let err =
        Settings::load(None, env(&[]), &[], &["executor.lease_ms".into()]).expect_err("no value");
    assert!(matches!(err, SettingsError::NotAnAssignment(_)), "{err}");
}

#[test]
fn a_renamed_variable_is_refused_with_its_new_name() {
    let err = Settings::load(
        None,
        env(&[("SLUICE_GROUP_COMMIT_MAX_BATCH", "8")]),
        &[],
        &[],
    )
    .expect_err("renamed");
    assert!(
        err.to_string()
            .contains("SLUICE_GATEWAY_GROUP_COMMIT_MAX_BATCH"),
        "{err}"
    );
}

#[test]
fn other_sluice_variables_are_not_settings() {
    let loaded = Settings::load(
        None,
        env(&[("SLUICE_LOG", "debug"), ("SLUICE_CHAOS_SEED", "7")]),
        &[],
        &[],
    )
    .expect("ignored");
    assert_eq!(loaded.pg_pool_size, Settings::default().pg_pool_size);
}

#[test]
fn the_printed_settings_hide_the_ticket_keys_and_read_back() {
    let loaded =
        Settings::load(None, env(&[("SLUICE_TICKET_KEYS", "k1:hunter2")]), &[], &[]).expect("load");
    let text = loaded.to_redacted_toml().expect("toml");
    assert!(!text.contains("hunter2"), "{text}");
    let f = file(&text);
    let again = Settings::load(Some(f.path()), env(&[]), &[], &[]).expect("reads back");
    assert_eq!(again.executor.lease_ms, loaded.executor.lease_ms);
}

/// docs/configuration.md has one row per setting, naming its variable and its default; a
/// setting added to a struct without a row (or a default changed without the page) fails here.
#[test]
fn the_configuration_page_lists_every_setting_with_its_default() {
    let page = include_str!("../../../docs/configuration.md");
    let rows = Settings::documented_defaults();
    assert!(rows.len() >= 40, "the settings were not walked: {rows:?}");
    for (variable, default) in rows {
        let row = page
            .lines()
            .find(|line| line.starts_with(&format!("| `{variable}`")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for {variable}"));
        match default {
            Some(value) => assert!(
                row.contains(&format!("`{value}`")),
                "the row of {variable} does not give its default `{value}`: {row}"
            ),
            None => assert!(
                row.contains("unset"),
                "{variable} is unset by default: {row}"
            ),
        }
    }
}

/// A transaction-mode pooler cannot carry `LISTEN` or the migrator's session lock: the mode is
/// refused without a session URL, naming the setting, and an unknown mode names the choices.
#[test]
fn transaction_pool_mode_needs_a_session_url() {
    let err = Settings::load(
        None,
        env(&[("SLUICE_DATABASE_POOL_MODE", "transaction")]),
        &[],
        &[],
    )
    .expect_err("no session URL");
    assert!(
        err.to_string().contains("SLUICE_DATABASE_SESSION_URL"),
        "{err}"
    );

    let direct = "postgres://postgres@127.0.0.1:5432/sluice";
    let settings = Settings::load(
        None,
        env(&[
            (
                "SLUICE_DATABASE_URL",
                "postgres://postgres@127.0.0.1:6432/sluice",
            ),
            ("SLUICE_DATABASE_POOL_MODE", "transaction"),
            ("SLUICE_DATABASE_SESSION_URL", direct),
        ]),
        &[],
        &[],
    )
    .expect("transaction mode with a session URL");
    assert_eq!(settings.database_pool_mode, PoolMode::Transaction);
    assert_eq!(settings.session_url(), direct);
    assert_eq!(
        Settings::default().session_url(),
        Settings::default().database_url
    );

    let err = Settings::load(
        None,
        env(&[("SLUICE_DATABASE_POOL_MODE", "statement")]),
        &[],
        &[],
    )
    .expect_err("no such mode");
    let text = err.to_string();
    assert!(text.starts_with("SLUICE_DATABASE_POOL_MODE: "), "{text}");
    assert!(
        text.contains("session") && text.contains("transaction"),
        "{text}"
    );
}

#[test]
fn an_outbound_ca_file_that_cannot_be_used_stops_the_load() {
    let missing = Settings::load(
        None,
        env(&[("SLUICE_OUTBOUND_CA_FILE", "/nonexistent/ca.pem")]),
        &[],
        &[],
    )
    .expect_err("a missing file");
    assert!(
        missing
            .to_string()
            .contains("outbound_ca_file /nonexistent/ca.pem: cannot be read"),
        "{missing}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let path = not_pem.to_str().expect("utf-8");
    let empty = Settings::load(None, env(&[("SLUICE_OUTBOUND_CA_FILE", path)]), &[], &[])
        .expect_err("no certificate");
    assert!(
        empty.to_string().contains("holds no PEM certificate"),
        "{empty}"
    );
}
