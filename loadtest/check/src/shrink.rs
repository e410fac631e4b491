//! Shrinking: a failing plan cut down (delta debugging over its operations) to one that still
//! breaks the same promise. A run of the real system is not deterministic, so a candidate counts
//! as failing when any of `tries` runs of it fails that way.

use crate::plan::Plan;
use crate::run::{RunContext, run};

/// The smallest plan found within `budget` runs that still shows a violation of `kind`.
pub async fn shrink(
    plan: &Plan,
    kind: &str,
    ctx: &RunContext,
    budget: usize,
    tries: usize,
) -> (Plan, usize) {
    let mut current = plan.clone();
    let mut runs = 0;
    let mut chunks = 2usize;
    while runs < budget && current.ops.len() > 1 {
        let len = current.ops.len();
        let size = len.div_ceil(chunks);
        let mut reduced = false;
        let pieces = chunks;
        for i in 0..pieces {
            if runs >= budget {
                break;
            }
            let (from, to) = (i * size, ((i + 1) * size).min(len));
            if from >= to {
                continue;
            }
            let mut candidate = current.clone();
            candidate.ops.drain(from..to);
            let mut fails = false;
            for t in 0..tries {
                runs += 1;
                let dir = ctx.dir.join(format!("shrink-{runs}-{t}"));
                let attempt = RunContext {
                    sluice: ctx.sluice.clone(),
                    dir,
                    pg: std::sync::Arc::clone(&ctx.pg),
                };
                if let Ok(outcome) = run(&candidate, &attempt).await
                    && outcome.violations.iter().any(|v| v.kind == kind)
                {
                    fails = true;
                    break;
                }
            }
            if fails {
                eprintln!(
                    "shrink: {} → {} operations still break {kind}",
                    current.ops.len(),
                    candidate.ops.len()
                );
                current = candidate;
                chunks = (chunks - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if chunks >= len {
                break;
            }
            chunks = (chunks * 2).min(len);
        }
    }
    (current, runs)
}
