//! A sale of 1,000 people for 100 units run whole (intake, tickets, the executor, landings) with
//! every connection to PostgreSQL and to Redis over TLS, verified against the test's authority:
//! once on a single Redis, once on a Redis Cluster whose bus and replication are TLS too.

use std::sync::Arc;

use sluice_testkit::{PgServer, RedisCluster, RedisServer, TestCa};
use sqlx::Connection;

use super::tls_postgres;
use crate::execution::sale::{sale, sale_declaration};
use crate::support::*;

const PEOPLE: usize = 1_000;
const UNITS: usize = 100;

/// A database `sale` on `server`, reached with `sslmode=verify-full` trusting `ca`; its URL.
async fn sale_database(server: &PgServer, ca: &TestCa, dir: &std::path::Path) -> String {
    let trusted = ca.write_pem(dir, "ca.pem");
    let admin = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        server.port(),
        trusted.display()
    );
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect");
    sqlx::query("CREATE DATABASE sale")
        .execute(&mut conn)
        .await
        .expect("create");
    let _ = conn.close().await;
    admin.replace("/postgres?", "/sale?")
}

/// The sale on a stack whose database and Redis URLs are `database_url` and `redis_url`.
async fn sale_over(database_url: String, redis_url: String) {
    assert!(redis_url.starts_with("rediss://"), "{redis_url}");
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            database_url: Some(database_url),
            redis_url: Some(redis_url),
            declaration: sale_declaration(UNITS as u32),
            ..StackOptions::default()
        })
        .await,
    );
    let (encrypted, all): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*)
           FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
          WHERE a.datname = 'sale' AND a.backend_type = 'client backend'",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("pg_stat_ssl");
    assert!(
        all > 0 && encrypted == all,
        "{encrypted} of {all} connections encrypted"
    );
    sale(&stack, PEOPLE, UNITS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_of_a_thousand_runs_over_tls_to_postgres_and_redis() {
    let ca = TestCa::new("Sluice test authority");
    let dir = tempfile::tempdir().expect("temp dir");
    let server = tls_postgres(ca.server()).await;
    let redis_tls = ca.server();
    let redis = tokio::task::spawn_blocking(move || RedisServer::start_tls(&redis_tls))
        .await
        .expect("start a TLS Redis");
    sale_over(sale_database(&server, &ca, dir.path()).await, redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_of_a_thousand_runs_over_tls_to_postgres_and_a_redis_cluster() {
    let ca = TestCa::new("Sluice test authority");
    let dir = tempfile::tempdir().expect("temp dir");
    let server = tls_postgres(ca.server()).await;
    let cluster_tls = ca.server();
    let cluster = tokio::task::spawn_blocking(move || RedisCluster::start_tls(&cluster_tls))
        .await
        .expect("start a TLS Redis Cluster");
    sale_over(sale_database(&server, &ca, dir.path()).await, cluster.url()).await;
}
