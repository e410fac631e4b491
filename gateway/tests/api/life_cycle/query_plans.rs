//! The plans of every compile-time-checked query that reads `commands`, on a table at volume.
//!
//! `.sqlx/` holds the text of every `query!`-family query in the workspace (`deploy/sqlx.sh`
//! keeps it current, the suite checks that it is). Each one that reads `commands` is prepared
//! and explained with its generic plan (`plan_cache_mode = force_generic_plan`), the plan a
//! prepared statement settles on whatever its parameters: the claims, the sweeps, the rebuild's
//! reads, the status board's and the life cycle's updates. A sequential scan of `commands` in
//! one of them is a query whose cost grows with the table's history.

use std::path::Path;

use serde_json::Value;
use sqlx::PgPool;

/// Queries allowed to scan `commands`, by a fragment of their text, with the reason. Empty: a
/// new entry needs a reason that the table's size does not matter to it.
const MAY_SCAN: &[(&str, &str)] = &[];

/// How many checked queries read `commands` (by their text), and those whose generic plan scans
/// it or a day of its [`History`] sequentially (less the allowed ones), each with its plan's
/// nodes.
pub async fn scans_of_commands(pg: &PgPool) -> (usize, Vec<String>) {
    let files = checked_query_files();
    let history = History::of(pg).await;
    let mut conn = pg.acquire().await.expect("a connection");
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .expect("generic plans");
    let (mut checked, mut scans) = (0, Vec::new());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a .sqlx file");
        let described: Value = serde_json::from_str(&text).expect("a .sqlx file is JSON");
        let query = described["query"].as_str().expect("its query").to_string();
        if !reads_commands(&query) {
            continue;
        }
        checked += 1;
        let parameters = described["describe"]["parameters"]["Left"]
            .as_array()
            .map_or(0, Vec::len);
        let plan = generic_plan(&mut conn, &query, parameters).await;
        let scans_commands = history.scanned_by(&plan);
        let allowed = MAY_SCAN
            .iter()
            .any(|(fragment, _)| query.contains(fragment));
        if scans_commands && !allowed {
            scans.push(format!("{query}\n  plan: {plan:?}"));
        }
    }
    sqlx::query("RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .expect("reset");
    (checked, scans)
}

/// The `.sqlx/` files, one per checked query, in name order.
fn checked_query_files() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.sqlx");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a .sqlx entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// The text of the one checked query that contains every fragment of `fragments`, as the
/// code runs it (read from `.sqlx/`, so a test never keeps a copy that could drift).
pub fn checked_query(fragments: &[&str]) -> String {
    let found: Vec<String> = checked_query_files()
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("a .sqlx file");
            let described: Value = serde_json::from_str(&text).expect("a .sqlx file is JSON");
            described["query"].as_str().expect("its query").to_string()
        })
        .filter(|query| fragments.iter().all(|f| query.contains(f)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "checked queries with {fragments:?}: {found:?}"
    );
    found.into_iter().next().unwrap_or_default()
}

/// `commands` or one of its days (a plan names the partition it reads).
pub fn is_commands(relation: &str) -> bool {
    relation == "commands" || sluice_store::outbox::days::Day::from_partition(relation).is_some()
}

/// The days of `commands` that are history: rows, every one of them ended. A query that scans
/// one of them sequentially costs more as history grows. Scanning a day of live work (most of
/// whose rows a count of unfinished commands reads anyway) or an empty day ahead is no such
/// cost, and the planner rightly prefers it there.
pub struct History(std::collections::HashSet<String>);

impl History {
    pub async fn of(pg: &PgPool) -> History {
        let days: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'commands'::regclass",
        )
        .fetch_all(pg)
        .await
        .expect("the days of commands");
        let mut history = std::collections::HashSet::new();
        for day in days {
            // The name is PostgreSQL's own partition's, checked to be a day's.
            assert!(is_commands(&day), "{day} is a day of commands");
            let ended: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT EXISTS (SELECT 1 FROM {day})
                    AND NOT EXISTS (SELECT 1 FROM {day} WHERE finished_at IS NULL)"
            )))
            .fetch_one(pg)
            .await
            .expect("a day's rows");
            if ended {
                history.insert(day);
            }
        }
        History(history)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether a plan's nodes scan `commands` itself or a day of history sequentially.
    pub fn scanned_by(&self, nodes: &[(String, String, String)]) -> bool {
        nodes.iter().any(|(node, relation, _)| {
            node == "Seq Scan" && (relation == "commands" || self.0.contains(relation))
        })
    }
}

/// `FROM commands`, `JOIN commands` or `UPDATE commands`, as a word.
fn reads_commands(query: &str) -> bool {
    let words: Vec<String> = query
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    words
        .windows(2)
        .any(|w| matches!(w[0].as_str(), "from" | "join" | "update") && w[1] == "commands")
}

/// The nodes (type, relation, index) of the generic plan of `query` with `parameters`
/// parameters, prepared on `conn` and explained with every parameter NULL (a generic plan does
/// not look at them).
async fn generic_plan(
    conn: &mut sqlx::PgConnection,
    query: &str,
    parameters: usize,
) -> Vec<(String, String, String)> {
    // The statement is the repository's own checked query text, never input.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE plan_check AS {query}"
    )))
    .execute(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("PREPARE {query}: {e}"));
    let nulls = vec!["NULL"; parameters].join(", ");
    let execute = if parameters == 0 {
        "EXECUTE plan_check".to_string()
    } else {
        format!("EXECUTE plan_check({nulls})")
    };
    let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (FORMAT JSON) {execute}"
    )))
    .fetch_one(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("EXPLAIN {query}: {e}"));
    sqlx::raw_sql("DEALLOCATE plan_check")
        .execute(&mut *conn)
        .await
        .expect("deallocate");
    plan_nodes(&plan[0]["Plan"])
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan (`[0]["Plan"]` of its answer), depth first:
/// (node type, relation, index).
pub fn plan_nodes(plan: &Value) -> Vec<(String, String, String)> {
    fn walk(plan: &Value, out: &mut Vec<(String, String, String)>) {
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        out.push((
            text(&plan["Node Type"]),
            text(&plan["Relation Name"]),
            text(&plan["Index Name"]),
        ));
        for child in plan["Plans"].as_array().into_iter().flatten() {
            walk(child, out);
        }
    }
    let mut out = Vec::new();
    walk(plan, &mut out);
    out
}
