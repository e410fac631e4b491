//! The `room` scenario: one waiting room, its start a few seconds into the run with the
//! pre-queue open from the first arrival. People join before and after the start, poll their
//! place, use the room with passes a witness verifies as an origin would, and leave, abandon or
//! let their pass run out. Afterwards the room's invariants are checked from the people's and
//! the witness's evidence, PostgreSQL's place rows and the published fair start
//! ([`crate::invariants::room`]).

mod person;
mod witness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_store::tenancy;
use uuid::Uuid;

use super::caller::subject_token;
use super::declaration::{self, ROOM};
use super::journey::Context;
use super::options::{Interrupted, Options};
use crate::bench_stack::{BoxError, Tenant};
use crate::driver::HttpClient;
use crate::invariants::room::{self as checks, Exit, Published, Witnessed};
use crate::record::Recorded;
use crate::report::{Check, Peaks, Report, RoomFigures, RoomSecond, Target};
use crate::stack::Stack;
use crate::{machine, progress, sampler};
use person::{JOIN, Log, Room};
use witness::{Witness, read_data};

/// The start as first declared: far enough that nobody can join before the run moves it to
/// its real place, once the stack is up.
pub(super) fn placeholder_start() -> chrono::DateTime<chrono::Utc> {
    whole_second(chrono::Utc::now() + chrono::Duration::hours(1))
}

fn whole_second(at: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(at.timestamp() + 1, 0).unwrap_or(at)
}

/// Runs the people against the started stack and checks the room.
pub(super) async fn drive_on(
    options: &Options,
    arrivals: &[Duration],
    started_at: chrono::DateTime<chrono::Utc>,
    tenant: &Tenant,
    stack: &Stack,
    client: &crate::driver::HttpClient,
) -> Result<Report, BoxError> {
    let creds = &tenant.creds;
    let machine = machine::describe();
    let mut watched = stack.watched();
    if let Some(pid) = sampler::redis_pid(&tenant.redis).await {
        watched.push(crate::stack::Watched {
            name: "redis-server".into(),
            pid,
        });
    }
    watched.push(crate::stack::Watched {
        name: "load generator".into(),
        pid: std::process::id(),
    });
    let run_id = Uuid::new_v4().simple().to_string();
    let reader = subject_token(&creds.subject_key, &format!("reader-{run_id}"));
    let room_uri = format!("{}/v1/rooms/{ROOM}", stack.base);
    let before = read_data(client, &room_uri, &reader).await?;
    let witness = Witness::start(client, &stack.base, ROOM, creds.namespace_id.to_string()).await?;

    // The real start: whole seconds, `--opens-in-seconds` after the first arrival, which is
    // at least half a second from now (every person is spawned by then).
    let opens_at = whole_second(
        chrono::Utc::now()
            + chrono::Duration::milliseconds(500)
            + chrono::Duration::seconds(options.opens_in_seconds as i64),
    );
    tenancy::apply_declaration(
        &tenant.pg,
        creds.namespace_id,
        &declaration::room(options, opens_at),
        "loadtest",
        None,
    )
    .await?;
    let until_open = (opens_at - chrono::Utc::now()).to_std().unwrap_or_default();
    let origin = (Instant::now() + until_open)
        .checked_sub(Duration::from_secs(options.opens_in_seconds))
        .unwrap_or_else(Instant::now);
    let recorder = Arc::new(crate::record::Recorder::new(origin));
    let stop = tokio_util::sync::CancellationToken::new();
    let usage = sampler::processes(watched, stop.clone());
    let bar = progress::start(recorder.clone(), arrivals.len() as u64, options.quiet);
    let context = Arc::new(Context {
        client: client.clone(),
        base: stack.base.clone(),
        recorder: recorder.clone(),
        retry: !options.no_retry,
        patience: Duration::from_secs(options.patience_seconds),
    });
    let room = Arc::new(Room::new(
        ROOM,
        witness,
        options,
        opens_at.timestamp_micros(),
    ));
    let mut people = tokio::task::JoinSet::new();
    for (i, after) in arrivals.iter().enumerate() {
        let subject = format!("person-{run_id}-{i}");
        // A person holds their token before the room opens (issued at sign-in).
        let token = subject_token(&creds.subject_key, &subject);
        let (context, room, arrive_at) = (context.clone(), room.clone(), origin + *after);
        people.spawn(async move {
            person::person(&context, &room, subject, token, arrive_at).await;
        });
    }
    let flush = options.flush_redis_after_seconds.map(|after| {
        let at = origin
            + Duration::from_secs(options.opens_in_seconds)
            + Duration::from_secs_f64(after.max(0.0));
        tokio::spawn(flush_redis(
            tenant.redis.clone(),
            tenant.creds.application_id,
            at,
        ))
    });
    if !super::joined_all(&mut people, &options.interrupt).await {
        stop.cancel();
        bar.finish();
        if let Some(flush) = flush {
            flush.abort();
        }
        return Err(Interrupted.into());
    }
    let duration = recorder.elapsed();
    let flushed = match flush {
        Some(flush) => Some(flush.await?),
        None => None,
    };
    stop.cancel();
    bar.finish();
    let processes = usage.await?;
    let recorded = recorder.finish();

    let after = read_data(client, &room_uri, &reader).await?;
    let (prequeue_ids, complete) = read_prequeue(client, &room_uri, &reader).await?;
    let published = Published {
        commitment: text(&before, "seed_sha256"),
        seed_before: text(&before, "seed"),
        seed: text(&after, "seed"),
        prequeue_ids,
        complete,
    };
    let rows = checks::rows(&tenant.pg, creds.namespace_id, ROOM).await?;
    let log = std::mem::take(&mut *room.log.lock().unwrap_or_else(|p| p.into_inner()));
    let opens_at_us = opens_at.timestamp_micros();

    let mut invariants = vec![checks::capacity(&log.witnessed, options.room_max_active)];
    invariants.extend(checks::nothing_lost(&log.witnessed, &rows));
    invariants.push(checks::fair_start(&published, &log.witnessed, &rows));
    invariants.push(checks::prequeue_positions(
        &published,
        &log.positions,
        &rows,
    ));
    let (freeing, delays) = checks::freeing(
        &log.witnessed,
        &rows,
        options.room_max_active,
        opens_at_us,
        options.room_admit_per_minute.is_some(),
    );
    invariants.push(freeing);
    invariants.push(Check {
        name: "every pass handed out verifies with the published keys (origin witness)".into(),
        holds: log.passes_refused.is_empty(),
        detail: format!(
            "{} verified, {} refused{}",
            log.passes_verified,
            log.passes_refused.len(),
            log.passes_refused
                .first()
                .map_or(String::new(), |why| format!(" (first: {why})"))
        ),
    });
    if let Some(flushed) = &flushed {
        invariants.push(flushed_mid_room(flushed, &log.witnessed, opens_at_us));
    }
    let people = &recorded.people;
    let endings = people.succeeded
        + people.rejected.values().sum::<u64>()
        + people.refused.values().sum::<u64>()
        + people.unknown;
    invariants.push(Check {
        name: "every person ended exactly once".into(),
        holds: endings == people.arrived && people.arrived == arrivals.len() as u64,
        detail: format!(
            "{} scheduled, {} arrived, {endings} endings",
            arrivals.len(),
            people.arrived
        ),
    });
    let figures = figures(
        options,
        &recorded,
        &log,
        &rows,
        &after,
        opens_at_us,
        &delays,
    );
    let targets = targets(&recorded, &figures);
    let settings: BTreeMap<String, Value> = match serde_json::to_value(options)? {
        Value::Object(map) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    Ok(Report {
        scenario: options.scenario.name().into(),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_seconds: duration.as_secs_f64(),
        machine,
        stack: stack.description.clone(),
        settings,
        people: recorded.people.clone(),
        requests: recorded.endpoints.clone(),
        final_latency: recorded.final_latency.clone(),
        timeline: recorded.timeline.clone(),
        peaks: Peaks::default(),
        processes,
        invariants_hold: invariants.iter().all(|c| c.holds),
        invariants,
        waiting: None,
        reservations: None,
        room: Some(figures),
        sigterm: None,
        targets,
    })
}

/// Empties Redis of the tenant's application at `at` (every key it has there: what a
/// `FLUSHALL` does to it, while other users of a shared Redis keep theirs): when it did (Unix
/// microseconds, the clock of the people's evidence) and how many keys went, or why it could
/// not.
async fn flush_redis(
    redis: sluice_redis::Projection,
    application_id: sluice_durable::ids::ApplicationId,
    at: Instant,
) -> Result<(i64, u64), String> {
    tokio::time::sleep_until(at.into()).await;
    let flushed_at = chrono::Utc::now().timestamp_micros();
    crate::bench_stack::forget_application(&redis, application_id)
        .await
        .map(|keys| (flushed_at, keys))
        .map_err(|error| error.to_string())
}

/// The flush happened while the room was busy: someone had joined before it and someone was
/// admitted after it, so the run's other invariants judged a room that lived through it.
fn flushed_mid_room(
    flushed: &Result<(i64, u64), String>,
    witnessed: &[Witnessed],
    opens_at_us: i64,
) -> Check {
    let name =
        "Redis emptied of the application's keys mid-room, with places before and admissions after"
            .to_string();
    let (at, keys) = match flushed {
        Ok(flushed) => *flushed,
        Err(why) => {
            return Check {
                name,
                holds: false,
                detail: format!("the flush failed: {why}"),
            };
        }
    };
    let joined_before = witnessed.iter().filter(|w| w.join_answered_us < at).count();
    let admitted_after = witnessed
        .iter()
        .filter(|w| w.first_iat.is_some_and(|iat| iat * 1_000_000 > at))
        .count();
    Check {
        name,
        holds: joined_before > 0 && admitted_after > 0,
        detail: format!(
            "{keys} keys deleted {:.1} s after the start: {joined_before} places joined before \
             it, {admitted_after} first passes issued after it",
            (at - opens_at_us) as f64 / 1e6
        ),
    }
}

fn text(data: &Value, field: &str) -> Option<String> {
    data.get(field).and_then(Value::as_str).map(str::to_string)
}

/// The `q` quantile of `values` (nearest rank), 0 when there are none.
fn quantile(values: &mut [i64], q: f64) -> i64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn millis_after(data: &Value, field: &str, from_us: i64) -> Option<f64> {
    let at = chrono::DateTime::parse_from_rfc3339(data.get(field)?.as_str()?).ok()?;
    Some((at.timestamp_micros() - from_us) as f64 / 1000.0)
}

fn figures(
    options: &Options,
    recorded: &Recorded,
    log: &Log,
    rows: &[checks::PlaceRow],
    room: &Value,
    opens_at_us: i64,
    delays: &[i64],
) -> RoomFigures {
    let count =
        |f: &dyn Fn(&Witnessed) -> bool| log.witnessed.iter().filter(|w| f(w)).count() as u64;
    let first_sent = log.witnessed.iter().map(|w| w.join_sent_us).min();
    let last_answered = log.witnessed.iter().map(|w| w.join_answered_us).max();
    let joins_per_second = match (first_sent, last_answered) {
        (Some(first), Some(last)) if last > first => {
            log.witnessed.len() as f64 / ((last - first) as f64 / 1e6)
        }
        _ => 0.0,
    };
    let mut waits = log.waits_us.clone();
    let seconds = |us: i64| us as f64 / 1e6;
    let mut polls: Vec<i64> = log.polls.iter().map(|p| *p as i64).collect();
    let mut delays = delays.to_vec();
    RoomFigures {
        max_active: options.room_max_active,
        admit_per_minute: options.room_admit_per_minute,
        heartbeat_seconds: options.heartbeat_seconds,
        joined_prequeue: count(&|w| w.prequeue),
        joined_after_start: count(&|w| !w.prequeue),
        joins_per_second,
        join_latency: recorded
            .endpoints
            .get(JOIN)
            .map(|e| e.latency.clone())
            .unwrap_or_default(),
        first_admission_after_open_ms: rows
            .iter()
            .filter_map(|r| r.admitted_at_us)
            .min()
            .map(|at| (at - opens_at_us) as f64 / 1000.0),
        drawn_after_open_ms: millis_after(room, "drawn_at", opens_at_us),
        wait_to_admission_p50_seconds: seconds(quantile(&mut waits, 0.5)),
        wait_to_admission_p99_seconds: seconds(quantile(&mut waits, 0.99)),
        wait_to_admission_max_seconds: seconds(quantile(&mut waits, 1.0)),
        admitted: count(&|w| w.last_exp.is_some()),
        peak_live_passes: checks::peak_live(&log.witnessed),
        passes_verified: log.passes_verified,
        passes_refused: log.passes_refused.len() as u64,
        left: count(&|w| w.exit == Exit::Left),
        abandoned: count(&|w| w.exit == Exit::Abandoned),
        ran_out: count(&|w| w.exit == Exit::RanOut),
        heartbeats: log.heartbeats,
        heartbeats_refused: log.heartbeats_refused,
        freed_with_people_waiting: delays.len() as u64,
        freeing_delay_p50_ms: quantile(&mut delays, 0.5) as f64 / 1000.0,
        freeing_delay_max_ms: delays.iter().copied().max().unwrap_or(0).min(i64::MAX / 2) as f64
            / 1000.0,
        polls_per_person_p50: quantile(&mut polls, 0.5) as f64,
        polls_per_person_max: quantile(&mut polls, 1.0) as f64,
        polls_sooner_than_advised: log.polls_early,
        timeline: timeline(log),
    }
}

/// Longest run the room's timeline covers, seconds.
const TIMELINE_SECONDS: i64 = 3_600;

/// Per second since the first join sent: places taken, admissions, the passes the witness
/// would accept (each place from its first `iat` through its last `exp`) and the positions told.
fn timeline(log: &Log) -> Vec<RoomSecond> {
    let Some(first_us) = log.witnessed.iter().map(|w| w.join_sent_us).min() else {
        return Vec::new();
    };
    let first_s = first_us.div_euclid(1_000_000);
    let slot = |second: i64| usize::try_from((second - first_s).clamp(0, TIMELINE_SECONDS)).ok();
    let of_us = |us: i64| slot(us.div_euclid(1_000_000));
    let mut seconds: Vec<RoomSecond> = (0..=TIMELINE_SECONDS as u64)
        .map(|second| RoomSecond {
            second,
            ..RoomSecond::default()
        })
        .collect();
    // Live passes as a difference array: +1 at the first `iat`, −1 after the last `exp`.
    let mut live = vec![0i64; seconds.len() + 1];
    let mut last = 0;
    for w in &log.witnessed {
        if let Some(i) = of_us(w.join_answered_us) {
            seconds[i].joins += 1;
            last = last.max(i);
        }
        if let (Some(iat), Some(exp)) = (w.first_iat, w.last_exp)
            && let (Some(from), Some(to)) = (slot(iat), slot(exp))
        {
            seconds[from].admissions += 1;
            live[from] += 1;
            live[to + 1] -= 1;
            last = last.max(to);
        }
    }
    let mut told: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for t in &log.positions {
        if let Some(i) = of_us(t.answered_us) {
            told.entry(i).or_default().push(t.position);
            last = last.max(i);
        }
    }
    let mut running = 0;
    for (i, second) in seconds.iter_mut().enumerate() {
        running += live[i];
        second.live_passes = u64::try_from(running).unwrap_or(0);
    }
    for (i, mut positions) in told {
        positions.sort_unstable();
        seconds[i].position_p50 = positions.get(positions.len() / 2).copied();
        seconds[i].position_max = positions.last().copied();
    }
    seconds.truncate(last + 1);
    seconds
}

/// What a room run is judged by besides its invariants, reported met or not.
fn targets(recorded: &Recorded, figures: &RoomFigures) -> Vec<Target> {
    let p99 = figures.join_latency.p99_ms;
    vec![
        Target {
            name: "unknown outcomes".into(),
            measured: recorded.people.unknown.to_string(),
            goal: "0".into(),
            met: recorded.people.unknown == 0,
        },
        Target {
            name: "p99 join latency".into(),
            measured: format!("{p99:.1} ms"),
            goal: "< 250 ms".into(),
            met: p99 < 250.0,
        },
        Target {
            name: "first admission after opens_at".into(),
            measured: figures
                .first_admission_after_open_ms
                .map_or("–".into(), |ms| format!("{ms:.0} ms")),
            goal: "< 1,000 ms".into(),
            met: figures
                .first_admission_after_open_ms
                .is_some_and(|ms| ms < 1000.0),
        },
        Target {
            name: "place polls sooner than advised".into(),
            measured: figures.polls_sooner_than_advised.to_string(),
            goal: "0".into(),
            met: figures.polls_sooner_than_advised == 0,
        },
    ]
}

/// Every page of `GET /v1/rooms/{room}/prequeue`: the join ids, and whether the last page said
/// the set is complete (the draw happened).
async fn read_prequeue(
    client: &HttpClient,
    room_uri: &str,
    reader: &str,
) -> Result<(Vec<Uuid>, bool), BoxError> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let uri = match &cursor {
            Some(cursor) => format!("{room_uri}/prequeue?cursor={cursor}"),
            None => format!("{room_uri}/prequeue"),
        };
        let page = read_data(client, &uri, reader).await?;
        ids.extend(
            page.get("join_ids")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|id| id.as_str().and_then(|id| id.parse::<Uuid>().ok())),
        );
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
            None => {
                return Ok((
                    ids,
                    page.get("complete").and_then(Value::as_bool) == Some(true),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(join_s: f64, pass: Option<(i64, i64)>) -> Witnessed {
        let base = 1_800_000_000_000_000i64;
        Witnessed {
            join_id: Uuid::new_v4(),
            subject: "s".into(),
            prequeue: false,
            join_sent_us: base + (join_s * 1e6) as i64,
            join_answered_us: base + (join_s * 1e6) as i64 + 100_000,
            jtis: Default::default(),
            first_iat: pass.map(|(iat, _)| 1_800_000_000 + iat),
            last_exp: pass.map(|(_, exp)| 1_800_000_000 + exp),
            exit: Exit::Left,
        }
    }

    #[test]
    fn the_timeline_counts_joins_admissions_live_passes_and_positions_per_second() {
        let log = Log {
            witnessed: vec![
                place(0.0, Some((1, 3))),
                place(0.5, Some((2, 2))),
                place(1.2, None),
            ],
            positions: [(1_500_000, 4), (1_600_000, 1), (1_700_000, 2)]
                .map(|(after_us, position)| checks::Told {
                    join_id: Uuid::new_v4(),
                    sent_us: 1_800_000_000_000_000 + after_us - 1_000,
                    answered_us: 1_800_000_000_000_000 + after_us,
                    position,
                })
                .to_vec(),
            ..Log::default()
        };
        let seconds = timeline(&log);
        let pick = |f: fn(&RoomSecond) -> u64| seconds.iter().map(f).collect::<Vec<_>>();
        assert_eq!(pick(|s| s.joins), [2, 1, 0, 0]);
        assert_eq!(pick(|s| s.admissions), [0, 1, 1, 0]);
        // Accepted from `iat` through `exp`, whole seconds.
        assert_eq!(pick(|s| s.live_passes), [0, 1, 2, 1]);
        assert_eq!(
            (seconds[1].position_p50, seconds[1].position_max),
            (Some(2), Some(4))
        );
        assert_eq!(seconds[0].position_p50, None);
        assert!(timeline(&Log::default()).is_empty());
    }
}
