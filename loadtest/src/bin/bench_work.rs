//! What proof of work costs each side: the gateway checking a join's solution against the
//! joiner finding one, with the check of a place ticket (what every poll pays) as the baseline
//! measured in the same run.
//!
//! Pure CPU, one thread, no servers. Solving is measured here in native Rust, one SHA-256 per
//! nonce; a browser's Web Worker (the browser module's solver) is slower per hash, so these are
//! the least a joiner pays. Each solving figure is the mean over `--challenges` fresh
//! challenges (the work per challenge is geometric, so single runs vary widely).

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Parser;
use sluice_gateway::identity::ticket::{PlaceClaims, Seat, TicketKeys};
use sluice_gateway::rooms::work_challenge::{self, Holder};
use uuid::Uuid;

#[derive(Debug, Parser)]
#[command(about = "Checking a proof-of-work solution versus finding one, against a ticket check")]
struct Args {
    /// Checks timed per round (solutions and tickets alike).
    #[arg(long, default_value_t = 200_000)]
    checks: u32,
    /// Rounds; the median round is reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Challenges solved per difficulty.
    #[arg(long, default_value_t = 20)]
    challenges: u32,
    /// Difficulties to solve, in bits.
    #[arg(long, value_delimiter = ',', default_value = "8,12,16,20")]
    bits: Vec<u8>,
}

const NOW: i64 = 1_800_000_000;

fn main() {
    let args = Args::parse();
    let (_, keys) = TicketKeys::generate();
    let namespace_id = Uuid::new_v4().into();
    let holder = Holder {
        namespace_id,
        room: "drop",
        subject: "subject-0123456789",
    };
    let ticket = keys.sign_place(&PlaceClaims {
        namespace_id,
        place_id: Uuid::new_v4(),
        expires_at_unix: NOW + 3_600,
        seat: Some(Seat {
            room: "drop".into(),
            ord: 12_345,
            joined_at_ms: NOW * 1_000,
            prequeue: false,
        }),
    });
    let issued = work_challenge::issue(&keys, holder, 16, NOW);
    let nonce = work_challenge::solve(&issued.text, 16);
    if work_challenge::verify(&keys, holder, &issued.text, &nonce, NOW + 1).is_err()
        || keys.verify_any(&ticket, NOW + 1).is_err()
    {
        eprintln!("the benchmark's own solution or ticket does not verify");
        std::process::exit(1);
    }

    let mut ticket_rounds = Vec::new();
    let mut check_rounds = Vec::new();
    for _ in 0..args.rounds {
        ticket_rounds.push(per_call(args.checks, || {
            black_box(keys.verify_any(black_box(&ticket), NOW + 1)).is_ok()
        }));
        check_rounds.push(per_call(args.checks, || {
            black_box(work_challenge::verify(
                &keys,
                holder,
                black_box(&issued.text),
                black_box(&nonce),
                NOW + 1,
            ))
            .is_ok()
        }));
    }
    let ticket_check = median(ticket_rounds);
    let work_check = median(check_rounds);
    println!("place ticket check (baseline)      {:>12?}", ticket_check);
    println!(
        "proof-of-work check                {:>12?}   {:.2}× the baseline",
        work_check,
        ratio(work_check, ticket_check)
    );
    for bits in &args.bits {
        let started = Instant::now();
        for n in 0..args.challenges {
            let challenge = work_challenge::issue(&keys, holder, *bits, NOW + i64::from(n));
            black_box(work_challenge::solve(&challenge.text, *bits));
        }
        let solve = started.elapsed() / args.challenges.max(1);
        println!(
            "finding a {bits:>2}-bit solution (native) {:>12?}   {:.0}× the check",
            solve,
            ratio(solve, work_check)
        );
    }
}

/// Mean time of one call over `calls` calls; every call must succeed.
fn per_call(calls: u32, mut call: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    for _ in 0..calls {
        if !call() {
            eprintln!("a check failed during the benchmark");
            std::process::exit(1);
        }
    }
    started.elapsed() / calls.max(1)
}

fn median(mut rounds: Vec<Duration>) -> Duration {
    rounds.sort();
    rounds.get(rounds.len() / 2).copied().unwrap_or_default()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}
