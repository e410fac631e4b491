//! `sluice-check`: run seeded plans against a real Sluice and judge them (see the crate docs).
//!
//! - `sluice-check ci`: the suite's short run (fixed seeds, a few minutes).
//! - `sluice-check run --seed S`: one plan drawn from a seed.
//! - `sluice-check soak --minutes M`: fresh seeds until the time is up, stopping at a failure.
//! - `sluice-check replay FILE`: a saved plan (a failure's shortened one, or an edited one).
//! - `sluice-check plan --seed S`: print the plan a seed draws, to read or edit.
//! - `sluice-check judge DIR…`: the checks again on what runs saved, without the system.
//!
//! A failure prints its seed, the broken promises, and the path of a shortened plan that still
//! breaks the first of them, with the command that replays it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::{Parser, Subcommand};
use sluice_check::generate::{self, Profile};
use sluice_check::plan::{self, Plan};
use sluice_check::run::{RunContext, run};
use sluice_check::shrink::shrink;
use sluice_servers::PgServer;

/// The suite's seeds, kept so a red suite is the code's and not the draw's. Chosen for what
/// their plans hold together: a declaration `apply` must refuse (templates rendering one key with
/// other numbers) in both; a waiting room, a reserved pool, a flapping executor link, an executor
/// killed and another stopped past its lease, a Redis rolled back (406); an application budget, a
/// gateway killed, PostgreSQL restarted, a reset link (363).
const CI_SEEDS: [u64; 2] = [406, 363];

#[derive(Parser)]
#[command(name = "sluice-check", about = "A model checker for a running Sluice")]
struct Cli {
    /// The `sluice` binary (default: the one beside this program).
    #[arg(long, global = true)]
    sluice: Option<PathBuf>,
    /// Where runs write their files.
    #[arg(long, global = true, default_value = "target/sluice-check")]
    out: PathBuf,
    /// Runs a failure may spend on shrinking (0: none).
    #[arg(long, global = true, default_value_t = 12)]
    shrink: usize,
    #[command(subcommand)]
    command: Action,
}

#[derive(Subcommand)]
enum Action {
    /// The short fixed-seed run of the test suite.
    Ci,
    /// One plan drawn from a seed.
    Run {
        #[arg(long)]
        seed: u64,
        #[arg(long, value_enum, default_value = "ci")]
        profile: ProfileName,
    },
    /// Fresh seeds for `minutes`, stopping at the first failure.
    Soak {
        #[arg(long)]
        minutes: f64,
        #[arg(long, value_enum, default_value = "soak")]
        profile: ProfileName,
        /// Stop only at a violation of this kind (others are reported and the soak goes on):
        /// to hunt one defect on a branch that has several.
        #[arg(long)]
        stop_on: Option<String>,
    },
    /// Run the checks again on what a run saved (`<dir>/evidence.json`), without the system:
    /// for reading a failure, or a change to the checks.
    Judge { dirs: Vec<PathBuf> },
    /// Print the plan a seed draws (JSON), to read or edit before `replay`.
    Plan {
        #[arg(long)]
        seed: u64,
        #[arg(long, value_enum, default_value = "ci")]
        profile: ProfileName,
    },
    /// A saved plan, `runs` times.
    Replay {
        file: PathBuf,
        #[arg(long, default_value_t = 1)]
        runs: usize,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProfileName {
    Ci,
    Soak,
}

impl ProfileName {
    fn profile(self) -> Profile {
        match self {
            ProfileName::Ci => Profile::CI,
            ProfileName::Soak => Profile::SOAK,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Action::Judge { dirs } = &cli.command {
        return judge_again(dirs);
    }
    if let Action::Plan { seed, profile } = cli.command {
        let plan = generate::plan(seed, profile.profile());
        return match serde_json::to_string_pretty(&plan) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("sluice-check: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice-check: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async_main(cli))
}

async fn async_main(cli: Cli) -> ExitCode {
    let sluice = match cli.sluice.clone().or_else(beside_me) {
        Some(path) if path.exists() => path,
        other => {
            eprintln!(
                "sluice-check: no sluice binary at {other:?}; build it (cargo build -p sluice-gateway) or pass --sluice"
            );
            return ExitCode::FAILURE;
        }
    };
    let pg = match tokio::task::spawn_blocking(PgServer::start).await {
        Ok(server) => Arc::new(Mutex::new(Some(server))),
        Err(error) => {
            eprintln!("sluice-check: PostgreSQL did not start: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Absolute: the `sluice` processes run in the run's own directory.
    let out = std::path::absolute(&cli.out).unwrap_or(cli.out.clone());
    let sluice = std::path::absolute(&sluice).unwrap_or(sluice);
    let checker = Checker {
        sluice,
        out,
        pg,
        shrink: cli.shrink,
        began: Instant::now(),
    };
    let clean = match cli.command {
        Action::Ci => {
            let mut clean = true;
            for seed in CI_SEEDS {
                clean &= checker.seed(seed, Profile::CI).await;
                if !clean {
                    break;
                }
            }
            clean
        }
        Action::Run { seed, profile } => checker.seed(seed, profile.profile()).await,
        Action::Soak {
            minutes,
            profile,
            stop_on,
        } => {
            checker
                .soak(minutes, profile.profile(), stop_on.as_deref())
                .await
        }
        Action::Plan { .. } | Action::Judge { .. } => true,
        Action::Replay { file, runs } => match plan::load(&file) {
            Ok(plan) => {
                let mut clean = true;
                for i in 0..runs {
                    clean &= checker.check(&plan, &format!("replay-{i}")).await;
                }
                clean
            }
            Err(error) => {
                eprintln!("sluice-check: {error}");
                false
            }
        },
    };
    if let Ok(mut pg) = checker.pg.lock() {
        pg.take();
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `sluice-check judge`: the checks again on saved evidence; a failure if any finds a violation.
fn judge_again(dirs: &[PathBuf]) -> ExitCode {
    let mut clean = true;
    for dir in dirs {
        let path = dir.join("evidence.json");
        let saved: sluice_check::judge::Saved = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        {
            Ok(saved) => saved,
            Err(error) => {
                eprintln!("sluice-check: {}: {error}", path.display());
                clean = false;
                continue;
            }
        };
        let (violations, stats) = saved.judge();
        println!(
            "== {} (seed {}): {}",
            dir.display(),
            saved.plan.seed,
            serde_json::to_string(&stats).unwrap_or_default()
        );
        for v in &violations {
            println!("   - [{}] {}", v.kind, v.detail);
        }
        clean &= violations.is_empty();
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The `sluice` binary in the same directory as this one (both built into one target).
fn beside_me() -> Option<PathBuf> {
    Some(std::env::current_exe().ok()?.parent()?.join("sluice"))
}

struct Checker {
    sluice: PathBuf,
    out: PathBuf,
    pg: Arc<Mutex<Option<PgServer>>>,
    shrink: usize,
    /// When this invocation began (a soak reports how long a failure took to find).
    began: Instant,
}

impl Checker {
    fn context(&self, name: &str) -> RunContext {
        RunContext {
            sluice: self.sluice.clone(),
            dir: self.out.join(name),
            pg: Arc::clone(&self.pg),
        }
    }

    async fn seed(&self, seed: u64, profile: Profile) -> bool {
        let plan = generate::plan(seed, profile);
        self.check(&plan, &format!("seed-{seed}")).await
    }

    /// Runs `plan`, prints what it found; on a failure shrinks it and saves the shortened plan.
    async fn check(&self, plan: &Plan, name: &str) -> bool {
        self.check_for(plan, name, None).await
    }

    /// [`Checker::check`], failing only on a violation of `only` when it is given.
    async fn check_for(&self, plan: &Plan, name: &str, only: Option<&str>) -> bool {
        let ctx = self.context(name);
        let _ = std::fs::create_dir_all(&ctx.dir);
        let plan_path = ctx.dir.join("plan.json");
        let _ = plan::save(plan, &plan_path);
        let started = Instant::now();
        println!(
            "== seed {} ({name}): {} operations",
            plan.seed,
            plan.ops.len()
        );
        for (what, count) in plan::summary(plan) {
            println!("   {count:>4} {what}");
        }
        let outcome = match run(plan, &ctx).await {
            Ok(outcome) => outcome,
            Err(error) => {
                println!("   the run could not be carried out: {error}");
                println!("   plan: {}", plan_path.display());
                return false;
            }
        };
        let stats = serde_json::to_string(&outcome.stats).unwrap_or_default();
        println!(
            "   {:.1} s; judged: {stats}",
            started.elapsed().as_secs_f64()
        );
        let counted: Vec<_> = outcome
            .violations
            .iter()
            .filter(|v| only.is_none_or(|kind| v.kind == kind))
            .collect();
        if counted.is_empty() {
            for v in &outcome.violations {
                println!("   - (not counted) [{}] {}", v.kind, v.detail);
            }
            println!(
                "   no violation{}",
                only.map(|k| format!(" of {k}")).unwrap_or_default()
            );
            return true;
        }
        println!(
            "   {} violation(s), found {:.1} minutes after this invocation began:",
            outcome.violations.len(),
            self.began.elapsed().as_secs_f64() / 60.0
        );
        for v in &outcome.violations {
            println!("   - [{}] {}", v.kind, v.detail);
        }
        println!("--- process logs (tails) ---\n{}", outcome.logs);
        let report = ctx.dir.join("violations.json");
        let _ = std::fs::write(
            &report,
            serde_json::to_string_pretty(&outcome.violations).unwrap_or_default(),
        );
        if self.shrink > 0 {
            let kind = counted[0].kind.clone();
            println!("   shrinking on [{kind}] (at most {} runs)…", self.shrink);
            let (small, runs) = shrink(plan, &kind, &ctx, self.shrink, 2).await;
            let path = ctx.dir.join("shrunk-plan.json");
            let _ = plan::save(&small, &path);
            println!(
                "   shortened to {} of {} operations in {runs} runs: {}",
                small.ops.len(),
                plan.ops.len(),
                path.display()
            );
            println!("   replay: sluice-check replay {}", path.display());
        } else {
            println!("   replay: sluice-check replay {}", plan_path.display());
        }
        false
    }

    async fn soak(&self, minutes: f64, profile: Profile, only: Option<&str>) -> bool {
        let started = Instant::now();
        let until = Instant::now() + std::time::Duration::from_secs_f64(minutes * 60.0);
        let mut runs = 0;
        let mut totals = std::collections::BTreeMap::<String, usize>::new();
        while Instant::now() < until {
            let seed: u64 = rand::random();
            let plan = generate::plan(seed, profile);
            for (what, count) in plan::summary(&plan) {
                *totals.entry(what).or_default() += count;
            }
            runs += 1;
            if !self.check_for(&plan, &format!("soak-{seed}"), only).await {
                println!(
                    "soak: seed {seed} failed in run {runs} ({:.1} minutes with the shrinking)",
                    started.elapsed().as_secs_f64() / 60.0
                );
                return false;
            }
        }
        println!("soak: {runs} runs, no violation; operations over all runs:");
        for (what, count) in totals {
            println!("   {count:>6} {what}");
        }
        true
    }
}
