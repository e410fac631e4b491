//! Seeded generators: a declaration, a workload over it, and faults on a schedule. One seed
//! always draws the same plan (`StdRng`, ChaCha-based, the same on every platform).
//!
//! The declarations deliberately include what examples tend to leave out: limit templates that
//! render the same key (`{region}` and `{account}` both take `eu`), with the same or other
//! numbers; `{subject}` keys; per-resource caps; tight start rates; an application budget below
//! the commands'; committed and reserved quota pools; a waiting room.

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

use crate::plan::*;

/// How much a plan does.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub intents: usize,
    /// Operations are spread over this many milliseconds.
    pub span_ms: u64,
    pub faults: usize,
}

impl Profile {
    /// The suite's short run.
    pub const CI: Profile = Profile {
        intents: 90,
        span_ms: 14_000,
        faults: 5,
    };
    /// A longer run of fresh seeds.
    pub const SOAK: Profile = Profile {
        intents: 220,
        span_ms: 30_000,
        faults: 12,
    };
}

const TEMPLATES: [&str; 6] = [
    "{region}",
    "{account}",
    "region:{region}",
    "acct:{account}",
    "subj:{subject}",
    "{region}:{account}",
];

pub fn plan(seed: u64, profile: Profile) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let timing = Timing {
        lease_ms: 3_000,
        sweep_interval_ms: 500,
        gateways: 2,
        executors: 2,
    };
    let mut declaration = declaration(&mut rng);
    let mut ops = workload(&mut rng, &declaration, profile);
    ops.extend(faults(&mut rng, &timing, profile));
    ops.extend(room_changes(seed, &mut declaration, profile));
    ops.sort_by_key(|op| op.at_ms);
    Plan {
        seed,
        declaration,
        timing,
        ops,
    }
}

fn declaration(rng: &mut StdRng) -> Declaration {
    let webhooks = rng.random_range(1..=3);
    let mut commands = Vec::new();
    let mut limit_numbers: Vec<(String, Limit)> = Vec::new();
    for i in 0..webhooks {
        let resources: Vec<String> = (0..rng.random_range(1..=6))
            .map(|r| format!("r{r}"))
            .collect();
        let mut templates = TEMPLATES.to_vec();
        templates.shuffle(rng);
        let count = *[0usize, 1, 1, 2, 2].choose(rng).unwrap_or(&1);
        let mut limits = Vec::new();
        for template in templates.into_iter().take(count) {
            // A template another command already declares keeps its numbers most of the time
            // (a shared budget), and sometimes not (which apply must refuse).
            let limit = match limit_numbers.iter().find(|(t, _)| t == template) {
                Some((_, same)) if rng.random_bool(0.8) => same.clone(),
                _ => limit(rng, template),
            };
            limit_numbers.push((template.to_string(), limit.clone()));
            limits.push(limit);
        }
        let deadline = rng.random_range(20..=40);
        commands.push(CommandDecl {
            code: format!("w{i}"),
            handler: Handler::Webhook { timeout_ms: 1_500 },
            resources,
            regions: vec!["eu".into(), "us".into()],
            accounts: vec!["eu".into(), "a1".into(), "a2".into()],
            limits,
            intake: intake(rng),
            admission: admission(rng, deadline),
            deadline_seconds: deadline,
        });
    }
    let mut pools = Vec::new();
    if rng.random_bool(0.6) {
        let reserved = rng.random_bool(0.5);
        pools.push(PoolDecl {
            code: "stock".into(),
            capacity: rng.random_range(3..=15),
            reservation_seconds: reserved.then(|| rng.random_range(2..=4)),
        });
        let deadline = rng.random_range(20..=40);
        commands.push(CommandDecl {
            code: "q0".into(),
            handler: Handler::Quota {
                pool: "stock".into(),
            },
            resources: (0..rng.random_range(1..=2))
                .map(|r| format!("r{r}"))
                .collect(),
            regions: Vec::new(),
            accounts: Vec::new(),
            limits: Vec::new(),
            intake: intake(rng),
            admission: admission(rng, deadline),
            deadline_seconds: deadline,
        });
    }
    let rooms = if rng.random_bool(0.5) {
        vec![RoomDecl {
            code: "doors".into(),
            max_active: rng.random_range(2..=4),
            admit_per_minute: rng.random_bool(0.3).then(|| rng.random_range(30..=120)),
            pass_seconds: 10,
            heartbeat_seconds: Some(5),
        }]
    } else {
        Vec::new()
    };
    let application = rng.random_bool(0.5).then(|| AppBudget {
        max_concurrency: rng.random_range(2..=6),
        rate_per_second: rng.random_range(5..=60),
    });
    Declaration {
        commands,
        pools,
        rooms,
        application,
    }
}

fn limit(rng: &mut StdRng, template: &str) -> Limit {
    if rng.random_bool(0.7) {
        Limit {
            key: template.to_string(),
            max_in_flight: Some(rng.random_range(1..=3)),
            per_second: None,
            burst: None,
        }
    } else {
        let per_second = rng.random_range(2..=15);
        Limit {
            key: template.to_string(),
            max_in_flight: rng.random_bool(0.3).then(|| rng.random_range(1..=3)),
            per_second: Some(per_second),
            burst: Some(rng.random_range(1..=4)),
        }
    }
}

fn intake(rng: &mut StdRng) -> Intake {
    if rng.random_bool(0.2) {
        Intake {
            per_second: rng.random_range(3..=8),
            burst: rng.random_range(3..=8),
            max_in_flight: 50,
        }
    } else {
        Intake {
            per_second: rng.random_range(50..=500),
            burst: rng.random_range(20..=100),
            max_in_flight: 100,
        }
    }
}

fn admission(rng: &mut StdRng, deadline: u32) -> Admission {
    Admission {
        per_second: rng.random_range(3..=100),
        burst: rng.random_range(1..=20),
        max_in_flight: rng.random_range(2..=8),
        max_queue: if rng.random_bool(0.15) {
            rng.random_range(5..=15)
        } else {
            1_000
        },
        max_wait_seconds: if rng.random_bool(0.2) {
            rng.random_range(3..=8)
        } else {
            deadline
        },
        per_resource: rng.random_bool(0.3).then(|| rng.random_range(1..=3)),
    }
}

fn answers(rng: &mut StdRng) -> Vec<Answer> {
    let mut list = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let latency_ms = rng.random_range(5..=300);
        let roll: f64 = rng.random();
        let answer = if roll < 0.70 {
            Answer::Decide {
                latency_ms,
                succeeded: rng.random_bool(0.8),
            }
        } else if roll < 0.82 {
            Answer::Running {
                latency_ms,
                complete_after_ms: if rng.random_bool(0.2) {
                    0
                } else {
                    rng.random_range(50..=800)
                },
                succeeded: rng.random_bool(0.8),
                late: rng.random_bool(0.3),
            }
        } else if roll < 0.90 {
            Answer::TooMany {
                latency_ms,
                retry_after_s: rng.random_range(0..=1),
            }
        } else if roll < 0.96 {
            Answer::Unavailable { latency_ms }
        } else {
            Answer::Refuse { latency_ms }
        };
        let decides = matches!(
            answer,
            Answer::Decide { .. } | Answer::Running { .. } | Answer::Refuse { .. }
        );
        list.push(answer);
        if decides {
            return list;
        }
    }
    // Every intent is decided in the end (a backend that never decides only costs the deadline).
    list.push(Answer::Decide {
        latency_ms: rng.random_range(5..=300),
        succeeded: true,
    });
    list
}

fn workload(rng: &mut StdRng, decl: &Declaration, profile: Profile) -> Vec<Op> {
    let mut ops = Vec::new();
    // Bursts: groups arriving at one instant across commands and resources.
    let mut n = 0u32;
    while (n as usize) < profile.intents {
        let at_ms = rng.random_range(0..profile.span_ms);
        let size = rng.random_range(1..=12).min(profile.intents - n as usize);
        for _ in 0..size {
            let Some(command) = decl.commands.choose(rng) else {
                break;
            };
            let enqueue = Enqueue {
                n,
                command: command.code.clone(),
                subject: format!("s{}", rng.random_range(0..40)),
                resource: command.resources.choose(rng).cloned().unwrap_or_default(),
                region: ["eu", "us"].choose(rng).unwrap_or(&"eu").to_string(),
                account: ["eu", "a1", "a2"].choose(rng).unwrap_or(&"eu").to_string(),
                gateway: rng.random_range(0..2),
                invalid: rng.random_bool(0.03),
                answers: answers(rng),
                reservation: match rng.random_range(0..10) {
                    0..=4 => Reservation::Confirm {
                        after_ms: rng.random_range(100..=1_500),
                    },
                    5..=6 => Reservation::Release {
                        after_ms: rng.random_range(100..=1_500),
                    },
                    _ => Reservation::Lapse,
                },
            };
            let jitter = rng.random_range(0..20);
            if rng.random_bool(0.08) {
                ops.push(Op {
                    at_ms: at_ms + jitter + rng.random_range(0..3_000),
                    kind: OpKind::Replay {
                        n,
                        other_input: rng.random_bool(0.3),
                        gateway: rng.random_range(0..2),
                    },
                });
            }
            if rng.random_bool(0.12) {
                ops.push(Op {
                    at_ms: at_ms + jitter + rng.random_range(0..3_000),
                    kind: OpKind::Cancel {
                        n,
                        gateway: rng.random_range(0..2),
                    },
                });
            }
            ops.push(Op {
                at_ms: at_ms + jitter,
                kind: OpKind::Enqueue(enqueue),
            });
            n += 1;
        }
    }
    for room in &decl.rooms {
        for person in 0..rng.random_range(6..=12) {
            ops.push(Op {
                at_ms: rng.random_range(0..profile.span_ms),
                kind: OpKind::Visit(Visit {
                    person,
                    room: room.code.clone(),
                    gateway: rng.random_range(0..2),
                    after: if rng.random_bool(0.7) {
                        RoomExit::Leave {
                            stay_ms: rng.random_range(500..=6_000),
                            beats: rng.random_range(0..=2),
                        }
                    } else {
                        RoomExit::Abandon
                    },
                    // Not drawn, so the rest of the plan stays what the seed drew before.
                    twice: person % 3 == 0,
                    quit_after_polls: (person % 4 == 1).then_some(1 + person % 3),
                    rejoin_after_end: person % 5 == 1,
                }),
            });
        }
    }
    ops
}

/// Rooms' pass lengths (which bound how long waiting people may be told to wait: 10 s passes
/// keep them near, longer ones let those far back be told up to 30 s) and, for half the rooms,
/// one raise of `max_active` in the middle half of the run while people wait. Drawn from a
/// generator of its own, so every other draw of a seed stays what it was before these existed
/// (recorded defects replay as they were found).
fn room_changes(seed: u64, decl: &mut Declaration, profile: Profile) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5261_6973_6552_6f6f);
    let mut ops = Vec::new();
    for room in &mut decl.rooms {
        room.pass_seconds = *[10, 45, 90].choose(&mut rng).unwrap_or(&10);
        if rng.random_bool(0.5) {
            ops.push(Op {
                at_ms: rng.random_range(profile.span_ms / 4..profile.span_ms * 3 / 4),
                kind: OpKind::RaiseRoom {
                    room: room.code.clone(),
                    max_active: room.max_active + rng.random_range(1..=3),
                },
            });
        }
    }
    ops
}

fn faults(rng: &mut StdRng, timing: &Timing, profile: Profile) -> Vec<Op> {
    let mut ops = Vec::new();
    // One after another, each in its own slot of the span.
    let slot = profile.span_ms / (profile.faults as u64 + 1);
    for i in 0..profile.faults {
        let start = slot * i as u64 + rng.random_range(0..slot / 2);
        let process = if rng.random_bool(0.5) {
            Process::Executor(rng.random_range(0..timing.executors))
        } else {
            Process::Gateway(rng.random_range(0..timing.gateways))
        };
        let store = if rng.random_bool(0.7) {
            Store::Redis
        } else {
            Store::Postgres
        };
        let link = Link { process, store };
        let roll = rng.random_range(0..100);
        let kind = match roll {
            0..=5 => FaultKind::Link(link, LinkFault::Blackhole),
            // A flapping link of an executor to Redis: the fault that finds what a caller does
            // between two steps, so it comes often.
            6..=19 => FaultKind::Link(
                Link {
                    process: Process::Executor(rng.random_range(0..timing.executors)),
                    store: Store::Redis,
                },
                LinkFault::Flap {
                    period_ms: rng.random_range(150..=400),
                },
            ),
            20..=27 => FaultKind::Link(link, LinkFault::Reset),
            28..=34 => FaultKind::Link(link, LinkFault::Stall),
            35..=42 => FaultKind::Link(link, LinkFault::Delay(rng.random_range(20..=400))),
            43..=51 => FaultKind::KillExecutor(rng.random_range(0..timing.executors)),
            52..=58 => FaultKind::KillGateway(rng.random_range(0..timing.gateways)),
            59..=66 => FaultKind::StopExecutor(rng.random_range(0..timing.executors)),
            67..=74 => FaultKind::RedisFlush,
            75..=82 => FaultKind::RedisRestart,
            83..=90 => FaultKind::RedisRollback,
            _ => FaultKind::PostgresRestart,
        };
        let hold_ms = match kind {
            FaultKind::StopExecutor(_) => {
                rng.random_range(timing.lease_ms / 2..=timing.lease_ms * 2)
            }
            FaultKind::Link(_, LinkFault::Reset) | FaultKind::RedisFlush => 0,
            FaultKind::Link(_, LinkFault::Flap { .. }) => rng.random_range(2_000..=6_000),
            _ => rng.random_range(200..=slot.clamp(300, 2_500)),
        };
        ops.push(Op {
            at_ms: start,
            kind: OpKind::Fault(Fault { kind, hold_ms }),
        });
    }
    ops
}
