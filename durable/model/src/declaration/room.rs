//! `[[room]]` declarations: waiting rooms that admit people to a protected page or API.

use chrono::{DateTime, SecondsFormat, Utc};
use toml::Value;

use super::model::{ProofOfWork, RoomDecl};
use super::names::{check_code, first_duplicate};
use super::walk::{Obj, Result};
use crate::field_error::FieldError;

/// Most `[[room]]` entries, to bound the work of one declaration and of the admission ticker.
const MAX_ROOMS: usize = 64;
/// Longest life of one pass: the pass keys stay published this long after a rotation
/// (`pass_keys::RETIRED_KEY_LISTED`), so no pass can outlive its key's listing.
pub const MAX_PASS_SECONDS: u32 = 86_400;
/// Default `pass_seconds`.
const DEFAULT_PASS_SECONDS: u32 = 600;
/// Shortest heartbeat interval: a browser tab cannot be expected to beat faster.
const MIN_HEARTBEAT_SECONDS: u32 = 5;
/// Longest pre-queue window (a week).
const MAX_PREQUEUE_SECONDS: u32 = 7 * 86_400;
/// Most proof-of-work bits: 2^26 hashes is about a minute of a phone's browser; more would
/// shut out the people the room is for.
pub const MAX_WORK_BITS: u8 = 26;

/// Parses every `[[room]]`, refusing duplicate codes (naming the later one).
pub(crate) fn parse_rooms(root: &Obj<'_>) -> Result<Vec<RoomDecl>> {
    let tables = root.opt_table_list("room")?;
    if tables.len() > MAX_ROOMS {
        return Err(root.error("room", format!("at most {MAX_ROOMS} rooms")));
    }
    let rooms = tables.iter().map(parse_room).collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(rooms.iter().map(|r| r.code.as_str())) {
        return Err(FieldError::new(
            format!("room[{i}].code"),
            format!("duplicate room code \"{dup}\""),
        ));
    }
    Ok(rooms)
}

fn parse_room(room: &Obj<'_>) -> Result<RoomDecl> {
    room.allow_only(&[
        "code",
        "max_active",
        "admit_per_minute",
        "pass_seconds",
        "heartbeat_seconds",
        "opens_at",
        "prequeue_seconds",
        "shuffle_prequeue",
        "proof_of_work",
        "page",
    ])?;
    let code = room.req_str("code")?;
    check_code(code, &room.field("code"))?;
    let max_active = room.opt_num("max_active", 1..=1_000_000u32)?;
    let admit_per_minute = room.opt_num("admit_per_minute", 1..=6_000_000u32)?;
    if max_active.is_none() && admit_per_minute.is_none() {
        return Err(
            room.own_error("needs max_active (passes live at once), admit_per_minute, or both")
        );
    }
    let pass_seconds = room
        .opt_num("pass_seconds", 10..=MAX_PASS_SECONDS)?
        .unwrap_or(DEFAULT_PASS_SECONDS);
    let heartbeat_seconds = room.opt_num(
        "heartbeat_seconds",
        MIN_HEARTBEAT_SECONDS..=MAX_PASS_SECONDS,
    )?;
    if let Some(heartbeat) = heartbeat_seconds.filter(|h| *h > pass_seconds) {
        return Err(room.error(
            "heartbeat_seconds",
            format!("{heartbeat} is longer than pass_seconds ({pass_seconds}): a pass ends first"),
        ));
    }
    let opens_at = parse_opens_at(room)?;
    let prequeue_seconds = room.opt_num("prequeue_seconds", 60..=MAX_PREQUEUE_SECONDS)?;
    let shuffle_prequeue = opt_bool(room, "shuffle_prequeue")?;
    if opens_at.is_none() {
        for key in ["prequeue_seconds", "shuffle_prequeue"] {
            if room.has(key) {
                return Err(
                    room.error(key, "needs opens_at: there is no pre-queue without a start")
                );
            }
        }
    }
    let proof_of_work = parse_proof_of_work(room)?;
    Ok(RoomDecl {
        code: code.to_owned(),
        max_active,
        admit_per_minute,
        pass_seconds,
        heartbeat_seconds,
        opens_at,
        prequeue_seconds,
        shuffle_prequeue: shuffle_prequeue.unwrap_or(true),
        proof_of_work,
        page: super::waiting_page::parse_room_page(room)?,
    })
}

/// `opens_at`: a TOML offset date-time or an RFC 3339 string, with an offset (a local time would
/// mean a different instant on every machine). Stored normalised to UTC, whole seconds.
fn parse_opens_at(room: &Obj<'_>) -> Result<Option<String>> {
    let Some(value) = room.get("opens_at") else {
        return Ok(None);
    };
    let path = room.field("opens_at");
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Datetime(datetime) => with_seconds(*datetime).to_string(),
        _ => {
            return Err(FieldError::new(
                path,
                "must be an RFC 3339 date-time with an offset",
            ));
        }
    };
    let parsed = DateTime::parse_from_rfc3339(&text).map_err(|_| {
        FieldError::new(
            path.clone(),
            format!("{text:?} is not an RFC 3339 date-time with an offset (2026-12-24T18:00:00Z)"),
        )
    })?;
    if parsed.timestamp_subsec_nanos() != 0 {
        return Err(FieldError::new(path, "must be a whole second"));
    }
    Ok(Some(
        parsed
            .with_timezone(&Utc)
            .to_rfc3339_opts(SecondsFormat::Secs, true),
    ))
}

/// `datetime` with its seconds written out: TOML 1.1 lets them be left off (`18:00Z`), RFC 3339
/// does not.
fn with_seconds(mut datetime: toml::value::Datetime) -> toml::value::Datetime {
    if let Some(time) = datetime.time.as_mut() {
        time.second.get_or_insert(0);
    }
    datetime
}

/// `proof_of_work`: `"off"`, `{ bits = N }` (fixed), or `{ min_bits, max_bits,
/// calm_joins_per_second }` (adaptive to the arrival rate).
fn parse_proof_of_work(room: &Obj<'_>) -> Result<ProofOfWork> {
    let shape = "must be \"off\", { bits = N } or { min_bits = N, max_bits = M, \
                 calm_joins_per_second = R }";
    let work = match room.get("proof_of_work") {
        None => return Ok(ProofOfWork::Off),
        Some(Value::String(mode)) if mode == "off" => return Ok(ProofOfWork::Off),
        Some(Value::Table(_)) => room.req_table("proof_of_work")?,
        Some(_) => return Err(room.error("proof_of_work", shape)),
    };
    if work.has("bits") {
        work.allow_only(&["bits"])?;
        let bits = work.req_num("bits", 1..=MAX_WORK_BITS)?;
        return Ok(ProofOfWork::Fixed { bits });
    }
    work.allow_only(&["min_bits", "max_bits", "calm_joins_per_second"])?;
    if !work.has("min_bits") && !work.has("max_bits") {
        return Err(room.error("proof_of_work", shape));
    }
    let min_bits = work.req_num("min_bits", 0..=MAX_WORK_BITS)?;
    let max_bits = work.req_num("max_bits", 1..=MAX_WORK_BITS)?;
    if max_bits <= min_bits {
        return Err(work.error(
            "max_bits",
            format!("must be more than min_bits ({min_bits}), or use {{ bits = {min_bits} }}"),
        ));
    }
    let calm_joins_per_second = work.req_num("calm_joins_per_second", 1..=1_000_000u32)?;
    Ok(ProofOfWork::Adaptive {
        min_bits,
        max_bits,
        calm_joins_per_second,
    })
}

fn opt_bool(obj: &Obj<'_>, key: &str) -> Result<Option<bool>> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Boolean(b)) => Ok(Some(*b)),
        Some(_) => Err(obj.error(key, "must be true or false")),
    }
}

/// `opens_at` of a validated declaration as a time.
pub fn opens_at(room: &RoomDecl) -> Option<DateTime<Utc>> {
    room.opens_at
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}
