//! Browser tests' plumbing: Debian's headless Chromium driven by playwright-core scripts in
//! `gateway/tests/ui/`, which talk to the test over stdio (`@@event detail` lines, answered
//! with `continue`). Screenshots land in `target/test-artifacts/`.
//!
//! Needs `/usr/bin/chromium`, `node` and `npm ci` in `gateway/tests/ui` (deploy/test.sh does all
//! three).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one browser scenario may take, launch included.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(240);

pub fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui")
}

pub use sluice_testkit::artifacts_dir;

/// Fails with what to do when the browser side is not installed.
pub fn require_browser_tools() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: `apt-get install -y chromium` (deploy/test.sh does it)"
    );
    assert!(
        ui_dir()
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is not installed: run `npm ci` in gateway/tests/ui (deploy/test.sh does it)"
    );
}

/// What a browser scenario printed, and how it ended.
pub struct Run {
    pub success: bool,
    pub transcript: String,
}

impl Run {
    /// Why the script failed, in a line or two: its `FAILED:` line (the check it names), or the
    /// timeout. A test that returns this as its error gets it printed last, after no backtrace,
    /// where a CI log's tail shows it (the whole transcript went to stdout already).
    pub fn failure(&self) -> String {
        self.transcript
            .lines()
            .filter(|l| l.starts_with("FAILED:") || l.contains("did not finish within"))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Held while a browser script runs; see [`run_script`].
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `node <script> <base> <first> <artifacts dir> <args…>` in `gateway/tests/ui`; each
/// `@@event detail` line it prints is handed to `on_event`, and the script continues once that
/// returns (it waits for a line `continue` on its stdin).
pub async fn run_script<F, Fut>(
    script: &str,
    base: &str,
    first: &str,
    args: &[String],
    mut on_event: F,
) -> Run
where
    F: FnMut(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    require_browser_tools();
    // One Chromium at a time in this test binary: six at once (the dashboard's and the waiting
    // page's scripts, one with 50 pages) starve a 2-core machine, and the tests running beside
    // them then see their own Redis calls time out.
    let _one_browser = BROWSER.lock().await;
    let mut child = Command::new("node")
        .arg(script)
        .arg(base)
        .arg(first)
        .arg(artifacts_dir())
        .args(args)
        .current_dir(ui_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start node (install nodejs: deploy/test.sh does it)");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut transcript = String::new();
    let conversation = async {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            transcript.push_str(&line);
            transcript.push('\n');
            if let Some(event) = line.strip_prefix("@@") {
                let (name, detail) = event.split_once(' ').unwrap_or((event, ""));
                on_event(name.to_string(), detail.to_string()).await;
                stdin
                    .write_all(b"continue\n")
                    .await
                    .expect("answer the browser script");
            }
        }
        child.wait().await
    };
    let status = tokio::time::timeout(SCENARIO_TIMEOUT, conversation).await;
    let errors = errors.await.unwrap_or_default();
    transcript.push_str(&errors);
    let success = matches!(status, Ok(Ok(ref s)) if s.success());
    if status.is_err() {
        transcript.push_str(&format!(
            "{script} did not finish within {SCENARIO_TIMEOUT:?}\n"
        ));
    }
    println!("---- {script} {args:?} ----\n{transcript}---- end ----");
    Run {
        success,
        transcript,
    }
}
