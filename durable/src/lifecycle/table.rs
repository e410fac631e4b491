//! The transitions of a command, each named once with its PostgreSQL statement and its Redis
//! script side by side. The state diagram and table of `docs/life-cycle.md` are rendered from this table
//! ([`mermaid`], [`markdown`]), and a test keeps them equal.

use sluice_model::CommandStatus;
use sluice_model::CommandStatus::*;

/// A state in the diagram: a status, or the two states PostgreSQL has no row for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Before a reservation, and after a prune: no row.
    Nothing,
    /// Reserved in Redis (`intake.lua`), not yet committed.
    Reserved,
    Is(CommandStatus),
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Nothing => "[*]",
            State::Reserved => "reserved",
            State::Is(status) => status.as_str(),
        }
    }
}

/// Who carries a transition out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Gateway,
    Executor,
    Sweeper,
}

impl By {
    fn name(self) -> &'static str {
        match self {
            By::Gateway => "gateway",
            By::Executor => "executor",
            By::Sweeper => "sweeper",
        }
    }
}

/// One transition.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    pub name: &'static str,
    pub from: &'static [State],
    /// Empty: the status does not change (the transition works on the projection or the lease).
    pub to: &'static [State],
    /// What the PostgreSQL side does, in a line; `sql` is where its statement is written,
    /// relative to `durable/`: its file in `queries/` (run by `sqlx::query_file!` and the like),
    /// or the module that puts it together (the claim and the expiry sweeper share their `SET`
    /// items). Either way the macros check it against the schema at build time.
    pub postgres: &'static str,
    pub sql: Option<&'static str>,
    /// The Redis scripts (`lua/`), in the order they run.
    pub redis: &'static [&'static str],
    /// What fences it against every other ordering.
    pub fence: &'static str,
    pub by: &'static [By],
}

const WAITING: &[State] = &[State::Is(Accepted), State::Is(RetryWait)];
const HELD: &[State] = &[State::Is(Executing), State::Is(RetryWait)];
const ENDS: &[State] = &[
    State::Is(Succeeded),
    State::Is(Rejected),
    State::Is(Failed),
    State::Is(Expired),
    State::Is(Cancelled),
    State::Is(NeedsReview),
];
/// Every status a row has before it ends: what a rebuild projects again.
const UNFINISHED: &[State] = &[
    State::Is(Accepted),
    State::Is(RetryWait),
    State::Is(Executing),
    State::Is(Running),
    State::Is(NeedsReview),
];
const FINAL: &[State] = &[
    State::Is(Succeeded),
    State::Is(Rejected),
    State::Is(Failed),
    State::Is(Expired),
    State::Is(Cancelled),
];

/// Every transition of a command.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        name: "reserve",
        from: &[State::Nothing],
        to: &[State::Reserved],
        postgres: "—",
        sql: None,
        redis: &["intake.lua"],
        fence: "epoch (NOT_READY); answers with the generation the commit is fenced on",
        by: &[By::Gateway],
    },
    Transition {
        name: "release",
        from: &[State::Reserved],
        to: &[State::Nothing],
        postgres: "— (the commit refused or failed)",
        sql: None,
        redis: &["release.lua"],
        fence: "exactly once (ZREM of the reservation)",
        by: &[By::Gateway],
    },
    Transition {
        name: "commit",
        from: &[State::Reserved],
        to: &[State::Is(Accepted)],
        postgres: "group-commit INSERT of request keys (ON CONFLICT DO NOTHING), then commands",
        sql: Some("queries/insert_batch.sql"),
        redis: &[],
        fence: "pause and epoch re-checked in the INSERT, under their locks",
        by: &[By::Gateway],
    },
    Transition {
        name: "accept",
        from: &[State::Is(Accepted)],
        to: &[],
        postgres: "— (after the commit)",
        sql: None,
        redis: &["accept.lua"],
        fence: "epoch of the reservation (STALE: the rebuild projected it); once per command",
        by: &[By::Gateway, By::Sweeper],
    },
    Transition {
        name: "admit",
        from: WAITING,
        to: &[State::Is(Executing)],
        postgres: "—",
        sql: None,
        redis: &["admit.lua"],
        fence: "epoch; every permit or none; mints the attempt",
        by: &[By::Executor],
    },
    Transition {
        name: "claim",
        from: WAITING,
        to: &[
            State::Is(Executing),
            State::Is(Expired),
            State::Is(NeedsReview),
        ],
        postgres: "UPDATE … SET attempt_id, lease, `started_at` if unset (the Redis time of the admit.lua call that started it) (past deadline or max_wait: expired)",
        sql: Some("src/lifecycle/claim.rs"),
        redis: &["requeue.lua", "land.lua"],
        fence: "epoch of the admission (FOR SHARE); still waiting and unheld",
        by: &[By::Executor],
    },
    Transition {
        name: "renew",
        from: HELD,
        to: &[],
        postgres: "UPDATE … SET lease_expires_at",
        sql: Some("queries/renew.sql"),
        redis: &["renew.lua"],
        fence: "attempt; only live permits (a lost attempt is stopped)",
        by: &[By::Executor],
    },
    Transition {
        name: "attempt",
        from: HELD,
        to: HELD,
        postgres: "UPDATE … retry_wait, then executing again",
        sql: Some("queries/start_retry.sql"),
        redis: &["attempt_status.lua", "start_tokens.lua"],
        fence: "attempt; each request is written only while the attempt's fence is open",
        by: &[By::Executor],
    },
    Transition {
        name: "running",
        from: &[State::Is(Executing)],
        to: &[State::Is(Running)],
        postgres: "UPDATE … SET status = 'running'",
        sql: Some("queries/running.sql"),
        redis: &["attempt_status.lua"],
        fence: "attempt; permits extended to the deadline before the row says running",
        by: &[By::Executor],
    },
    Transition {
        name: "land",
        from: HELD,
        to: ENDS,
        postgres: "UPDATE … SET status, result",
        sql: Some("queries/land.sql"),
        redis: &["land.lua"],
        fence: "attempt; a final status is never left; counted out once",
        by: &[By::Executor],
    },
    Transition {
        name: "cancel",
        from: WAITING,
        to: &[State::Is(Cancelled)],
        postgres: "UPDATE … (a started command records the intent only)",
        sql: Some("queries/cancel.sql"),
        redis: &["land.lua"],
        fence: "row lock; waiting only",
        by: &[By::Gateway],
    },
    Transition {
        name: "complete",
        from: &[
            State::Is(Executing),
            State::Is(RetryWait),
            State::Is(Running),
            State::Is(NeedsReview),
        ],
        to: &[State::Is(Succeeded), State::Is(Rejected), State::Is(Failed)],
        postgres: "UPDATE … SET status, result (the first result wins)",
        sql: Some("queries/complete.sql"),
        redis: &["land.lua"],
        fence: "row lock; the attempt in hand finds the row decided",
        by: &[By::Gateway],
    },
    Transition {
        name: "requeue",
        from: HELD,
        to: &[State::Is(RetryWait)],
        postgres: "UPDATE … attempt given back",
        sql: Some("queries/requeue_held.sql"),
        redis: &["requeue.lua"],
        fence: "attempt (a late requeue finds another attempt and changes nothing)",
        by: &[By::Executor],
    },
    Transition {
        name: "rescue",
        from: HELD,
        to: &[
            State::Is(RetryWait),
            State::Is(Expired),
            State::Is(NeedsReview),
        ],
        postgres: "UPDATE … lease lapsed, and its permits too: attempt cleared",
        sql: Some("queries/rescue.sql"),
        redis: &["still_held.lua", "requeue.lua", "land.lua"],
        fence: "the lapsed attempt can never land; requeue fenced on it",
        by: &[By::Sweeper],
    },
    Transition {
        name: "expire",
        from: WAITING,
        to: &[State::Is(Expired), State::Is(NeedsReview)],
        postgres: "UPDATE … past max_wait or deadline",
        sql: Some("src/lifecycle/sweep.rs"),
        redis: &["land.lua"],
        fence: "unheld rows only, row lock (SKIP LOCKED), database clock",
        by: &[By::Sweeper],
    },
    Transition {
        name: "review",
        from: &[State::Is(Running)],
        to: &[State::Is(NeedsReview)],
        postgres: "UPDATE … running past its deadline",
        sql: Some("queries/review_running.sql"),
        redis: &["land.lua"],
        fence: "row lock (SKIP LOCKED), database clock",
        by: &[By::Sweeper],
    },
    Transition {
        name: "rebuild",
        from: UNFINISHED,
        to: &[],
        postgres: "the epoch advanced (`projections.generation + 1`), then every unfinished row read in one snapshot, in queue order",
        sql: Some("queries/rebuild_rows.sql"),
        redis: &["ready.lua", "rebuild.lua", "ready.lua"],
        fence: "one rebuilder per application (advisory lock); the new generation refuses the old epoch's commits and claims; writes and opens only while its own fence stands in that Redis process",
        by: &[By::Gateway, By::Executor],
    },
    Transition {
        name: "prune",
        from: FINAL,
        to: &[State::Nothing],
        postgres: "request keys forgotten, then the day's partition detached and dropped",
        sql: Some("src/lifecycle/retention.rs"),
        redis: &["HDEL request key"],
        fence: "whole days whose commands all ended before the cutoff",
        by: &[By::Sweeper],
    },
];

/// The state diagram (mermaid): the five final statuses drawn as one state, `ended`; one arrow
/// per pair of states, labelled with every transition that takes it. Transitions that keep the
/// status (accept, renew, rebuild) are in the table only.
pub fn mermaid() -> String {
    let node = |state: &State| match state {
        State::Is(status) if status.is_final() => "ended",
        other => other.name(),
    };
    let mut arrows: Vec<((&str, &str), Vec<&str>)> = Vec::new();
    for t in TRANSITIONS {
        for from in t.from {
            for to in t.to {
                let pair = (node(from), node(to));
                if pair.0 == pair.1 {
                    // Same status, another holder (a requeue between two attempts): table only.
                    continue;
                }
                match arrows.iter_mut().find(|(p, _)| *p == pair) {
                    Some((_, names)) if !names.contains(&t.name) => names.push(t.name),
                    Some(_) => {}
                    None => arrows.push((pair, vec![t.name])),
                }
            }
        }
    }
    let mut text = String::from("```mermaid\nstateDiagram-v2\n");
    text.push_str("    ended : succeeded, rejected, failed, expired, cancelled\n");
    for ((from, to), names) in arrows {
        text.push_str(&format!("    {from} --> {to} : {}\n", names.join(", ")));
    }
    text.push_str("```\n");
    text
}

/// The table: transition, from → to, PostgreSQL, Redis, fence, by.
pub fn markdown() -> String {
    let names = |states: &[State]| {
        if states.is_empty() {
            return "(unchanged)".to_string();
        }
        states
            .iter()
            .map(|s| match s {
                State::Nothing => "—",
                other => other.name(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::from(
        "| transition | from | to | PostgreSQL | Redis | fenced by | by |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for t in TRANSITIONS {
        let redis = if t.redis.is_empty() {
            "—".to_string()
        } else {
            t.redis
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            t.name,
            names(t.from),
            names(t.to),
            t.postgres,
            redis,
            t.fence,
            t.by.iter().map(|b| b.name()).collect::<Vec<_>>().join(", "),
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transition_is_named_once_and_every_status_is_reached_and_left() {
        let mut names: Vec<&str> = TRANSITIONS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a transition is named twice");
        for status in CommandStatus::ALL {
            let reached = TRANSITIONS
                .iter()
                .any(|t| t.to.contains(&State::Is(status)));
            assert!(reached, "{status} is never reached");
            let left = TRANSITIONS
                .iter()
                .any(|t| t.from.contains(&State::Is(status)));
            assert!(left, "{status} is never left (final rows are pruned)");
        }
    }

    #[test]
    fn final_statuses_are_left_only_by_prune() {
        for t in TRANSITIONS {
            if t.from
                .iter()
                .any(|s| matches!(s, State::Is(x) if x.is_final()))
            {
                assert_eq!(t.name, "prune", "{} leaves a final status", t.name);
            }
        }
    }

    #[test]
    fn every_script_named_exists() {
        // The scripts sit in a folder per kind (`lua/fenced/`, `lua/asking/`, `lua/plain/`);
        // the table names them by file name, found in exactly one of them.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lua");
        for t in TRANSITIONS {
            for script in t.redis.iter().filter(|s| s.ends_with(".lua")) {
                let found = ["fenced", "asking", "plain"]
                    .iter()
                    .filter(|kind| dir.join(kind).join(script).is_file())
                    .count();
                assert!(found == 1, "{}: lua/*/{script} is missing", t.name);
            }
        }
    }

    /// Every `.rs` file of `durable/src` but this one, with its text.
    fn sources() -> Vec<(std::path::PathBuf, String)> {
        let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("a source folder") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(file!()) {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    files.push((path, text));
                }
            }
        }
        files
    }

    #[test]
    fn every_statement_named_is_the_one_its_transition_runs() {
        let durable = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let sources = sources();
        for t in TRANSITIONS {
            let Some(sql) = t.sql else { continue };
            assert!(durable.join(sql).is_file(), "{}: {sql} is missing", t.name);
            let found = if sql.ends_with(".sql") {
                let call = format!("\"{sql}\"");
                sources.iter().any(|(_, text)| text.contains(&call))
            } else {
                let mark = format!("transition `{}`", t.name);
                sources
                    .iter()
                    .any(|(path, text)| path.ends_with(sql) && text.contains(&mark))
            };
            assert!(found, "{}: its statement is not run from {sql}", t.name);
        }
    }

    /// No statement file is left behind by the code that ran it.
    #[test]
    fn every_statement_file_is_run() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("queries");
        let sources = sources();
        for entry in std::fs::read_dir(dir).expect("durable/queries") {
            let name = entry.expect("an entry").file_name();
            let needle = format!("\"queries/{}\"", name.to_string_lossy());
            assert!(
                sources.iter().any(|(_, text)| text.contains(&needle)),
                "durable/queries/{} is run by no sqlx macro of durable/src",
                name.to_string_lossy()
            );
        }
    }
}
