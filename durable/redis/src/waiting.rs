//! The pull behind waiting polls answered from a gateway's memory: one `waiting.lua` call per
//! application reads, at one Redis instant, what the gateway needs to tell that a ticket's
//! command cannot have started yet (see "Waiting polls" in `lua/README.md`).

use fred::prelude::*;

use super::AppKeys;
use crate::DurableError;
use crate::Projection;
use crate::ids::CommandId;
use crate::start_rate::StartRecord;

/// One resource queue as `waiting.lua` saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueView {
    /// The highest sequence started from the queue; None while it has no start on record
    /// (nothing about the queue can be told from memory then).
    pub started_seq: Option<u64>,
    /// Commands waiting in the queue (`ZCARD`).
    pub waiting: u64,
    /// The lowest and highest sequences waiting; None when the queue is empty.
    pub head_seq: Option<u64>,
    pub tail_seq: Option<u64>,
    /// The queue's start record (its ETA rate), as `ticket.lua` would return it.
    pub start_record: Option<StartRecord>,
    /// The sequences of the queue's first entries in rank order, as runs of consecutive
    /// sequences `(start, length)`: they cover ranks `0 .. n` exactly (`n` the sum of the
    /// lengths), so a sequence found in them has its `ZRANK` at the pull's instant.
    pub runs: Vec<(u64, u64)>,
    /// The queue holds entries beyond the runs (more than the cap asked for, or more than
    /// the reads allowed could cover).
    pub more: bool,
}

/// How much of each queue a pull reads as runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Runs cover at most this many of a queue's first entries.
    pub entries: u64,
    /// Reads allowed per queue: a `ZRANGE` counts 4 plus the entries it returns.
    pub reads: u64,
}

/// One entry of the gone record: a command that left its queue without starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoneEntry {
    pub command_id: CommandId,
    /// Its queue sequence, or an upper bound of it (a command that ended before it was queued).
    pub seq: u64,
    /// The entry's number (1, 2, 3, ... without gaps).
    pub number: u64,
}

/// What one pull read.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingSnapshot {
    pub ready: bool,
    pub generation: Option<i64>,
    /// Redis time of the pull, Unix milliseconds.
    pub now_ms: i64,
    /// The application's queue sequence: every sequence handed out so far is at most this.
    pub app_seq: u64,
    /// Lowest and highest gone entry numbers kept (0: none).
    pub gone_low: u64,
    pub gone_high: u64,
    /// Gone entries after the cursor, oldest first.
    pub gone: Vec<GoneEntry>,
    /// One per queue asked, in the order asked.
    pub queues: Vec<QueueView>,
}

impl WaitingSnapshot {
    /// Whether a reader whose cursor was `cursor` missed gone entries: some were trimmed
    /// before it read them, or more followed than this pull returned.
    pub fn missed_gone(&self, cursor: u64) -> bool {
        if self.gone_high <= cursor {
            return false;
        }
        let trimmed = self.gone_low > cursor + 1;
        let unread = self.gone.last().map_or(cursor, |e| e.number) < self.gone_high;
        trimmed || unread
    }
}

/// `waiting.lua` for the queues named by their suffixes (`<ns>:<cmd>:<resource>`).
pub async fn pull(
    redis: &Projection,
    keys: &AppKeys,
    suffixes: &[String],
    gone_cursor: u64,
    gone_limit: u64,
    runs: RunLimits,
) -> Result<WaitingSnapshot, DurableError> {
    let mut script_keys = Vec::with_capacity(5 + suffixes.len());
    script_keys.extend([
        keys.meta(),
        keys.seq(),
        keys.started(),
        keys.starts(),
        keys.gone(),
    ]);
    script_keys.extend(suffixes.iter().map(|s| keys.queue_by_suffix(s)));
    let mut args: Vec<Value> = Vec::with_capacity(4 + suffixes.len());
    args.push(clamp(gone_cursor).into());
    args.push(clamp(gone_limit).into());
    args.push(clamp(runs.entries).into());
    args.push(clamp(runs.reads).into());
    args.extend(suffixes.iter().map(|s| Value::from(s.as_str())));
    let answer: Vec<Value> = redis.waiting(script_keys, args).await?;
    parse(answer, suffixes.len())
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn parse(answer: Vec<Value>, queues: usize) -> Result<WaitingSnapshot, DurableError> {
    let bad = |detail: &str| DurableError::script("waiting.lua", detail.to_string());
    let [ready, generation, now, app_seq, low, high, gone, views]: [Value; 8] =
        answer.try_into().map_err(|_| bad("not 8 elements"))?;
    let number = |v: &Value| v.as_u64().ok_or_else(|| bad("a number"));
    let gone = match gone {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        _ => return Err(bad("gone")),
    };
    let mut entries = Vec::with_capacity(gone.len() / 2);
    for pair in gone.chunks_exact(2) {
        let member = pair[0].as_string().ok_or_else(|| bad("gone member"))?;
        let (id, seq) = member.split_once(' ').ok_or_else(|| bad("gone member"))?;
        entries.push(GoneEntry {
            command_id: id.parse().map_err(|_| bad("gone id"))?,
            seq: seq.parse().map_err(|_| bad("gone seq"))?,
            number: pair[1]
                .as_string()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("gone number"))?,
        });
    }
    let views = match views {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        _ => return Err(bad("queues")),
    };
    if views.len() != queues {
        return Err(bad("one view per queue"));
    }
    let mut parsed = Vec::with_capacity(views.len());
    for view in views {
        let Value::Array(fields) = view else {
            return Err(bad("queue view"));
        };
        let [started, waiting, head, tail, record, runs, more]: [Value; 7] =
            fields.try_into().map_err(|_| bad("queue view"))?;
        let runs = match runs {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            _ => return Err(bad("runs")),
        };
        let runs = runs
            .chunks_exact(2)
            .map(|pair| Ok((number(&pair[0])?, number(&pair[1])?)))
            .collect::<Result<Vec<_>, DurableError>>()?;
        let seq = |v: &Value| v.as_string().and_then(|s| s.parse::<u64>().ok());
        parsed.push(QueueView {
            started_seq: seq(&started),
            waiting: number(&waiting)?,
            head_seq: seq(&head),
            tail_seq: seq(&tail),
            start_record: record.as_string().as_deref().and_then(StartRecord::parse),
            runs,
            more: number(&more)? != 0,
        });
    }
    Ok(WaitingSnapshot {
        ready: ready.as_string().as_deref() == Some("1"),
        generation: generation.as_i64(),
        now_ms: now.as_i64().ok_or_else(|| bad("time"))?,
        app_seq: number(&app_seq)?,
        gone_low: number(&low)?,
        gone_high: number(&high)?,
        gone: entries,
        queues: parsed,
    })
}
