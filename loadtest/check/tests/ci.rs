//! The model checker's short run as a test of the suite (docs/faults.md "The model checker"): two
//! fixed seeds of generated declarations, workloads and faults against real gateway and executor
//! processes, judged by the checker's own model and witnesses. A failure prints the seed, the
//! broken promises and a shortened plan to replay (`sluice-check replay <file>`); the runs' files
//! stay under the target directory's `tmp/sluice-check-ci/`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_short_run_of_fixed_seeds_keeps_every_promise() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sluice-check-ci");
    let status = Command::new(env!("CARGO_BIN_EXE_sluice-check"))
        .arg("--sluice")
        .arg(sluice_testkit::sluice_binary_beside(env!(
            "CARGO_BIN_EXE_sluice-check"
        )))
        .arg("--out")
        .arg(&out)
        .args(["--shrink", "4", "ci"])
        .status()
        .expect("sluice-check runs");
    assert!(
        status.success(),
        "sluice-check ci found a broken promise or could not run (its output above; files in {})",
        out.display()
    );
}
