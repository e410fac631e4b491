//! The documented subject-token snippets work: the Node and the Python block of
//! `docs/browser.md` (the README's Browser section links it) are run as they stand, with a
//! stack's key, and the gateway accepts what they mint for the subject they were given (and
//! refuses it for another).

use std::path::Path;
use std::process::Command;

use hyper::StatusCode;
use serde_json::json;

use crate::support::*;

/// The first fenced block of `language` in `docs/browser.md`.
fn snippet(language: &str) -> String {
    let section =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/browser.md"))
            .expect("docs/browser.md");
    let fence = format!("```{language}\n");
    let start = section
        .find(&fence)
        .unwrap_or_else(|| panic!("docs/browser.md has no {language} block"))
        + fence.len();
    let end = section[start..].find("```").expect("the block ends") + start;
    section[start..end].to_string()
}

fn mint(program: &str, file: &str, code: &str, stack: &Stack, subject: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(file);
    std::fs::write(&path, code).expect("write the snippet");
    let output = Command::new(program)
        .arg(&path)
        .arg(subject)
        .env("SLUICE_KID", &stack.creds.subject_key.id)
        .env("SLUICE_SUBJECT_KEY", &stack.creds.subject_key.secret)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {file}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_node_and_python_snippets_mint_accepted_tokens() {
    let stack = Stack::start().await;
    for (program, file, language) in [("node", "mint.mjs", "js"), ("python3", "mint.py", "python")]
    {
        let token = mint(program, file, &snippet(language), &stack, "user-42");
        // Naming its own subject is allowed, another one is not: the token is user-42's.
        let own = json!({"request_key": key(), "subject": "user-42", "input": {"offer": offer()}});
        let reply = stack
            .post("/v1/commands/claim:enqueue", Some(&token), &own.to_string())
            .await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{program}: {:?}",
            reply.body
        );
        let other = json!({"request_key": key(), "subject": "user-7", "input": {"offer": offer()}});
        let refused = stack
            .post(
                "/v1/commands/claim:enqueue",
                Some(&token),
                &other.to_string(),
            )
            .await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{program}: {:?}",
            refused.body
        );
    }
}
