//! The figures of a `room` run: how fast people joined, how long they waited for a pass, what
//! the origin witness saw live at once against `max_active`, and how soon the slot of an
//! abandoned pass went to the next person.

use serde::{Deserialize, Serialize};

use super::Latency;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoomFigures {
    pub max_active: u32,
    pub admit_per_minute: Option<u32>,
    pub heartbeat_seconds: u32,
    /// Places taken (`202` to the join), before the start and after it.
    pub joined_prequeue: u64,
    pub joined_after_start: u64,
    /// Places taken per second, from the first join sent to the last answered.
    pub joins_per_second: f64,
    /// Every join request, retries included.
    pub join_latency: Latency,
    /// From `opens_at` to the first admission (PostgreSQL's `admitted_at`), and to the draw.
    pub first_admission_after_open_ms: Option<f64>,
    pub drawn_after_open_ms: Option<f64>,
    /// From the join's answer (or `opens_at`, for the pre-queue) to the poll that saw the
    /// place admitted: what a person waited.
    pub wait_to_admission_p50_seconds: f64,
    pub wait_to_admission_p99_seconds: f64,
    pub wait_to_admission_max_seconds: f64,
    /// People the witness saw admitted, with a pass it verified.
    pub admitted: u64,
    /// The most places with a pass the witness accepted and would still accept, at once.
    pub peak_live_passes: u64,
    /// Passes (admission and heartbeats) the witness verified, and refused.
    pub passes_verified: u64,
    pub passes_refused: u64,
    /// What the admitted did: gave the pass back, abandoned it at admission, let it run out
    /// after their visit.
    pub left: u64,
    pub abandoned: u64,
    pub ran_out: u64,
    pub heartbeats: u64,
    /// Heartbeats answered anything but `200` (a pass that lapsed under its holder).
    pub heartbeats_refused: u64,
    /// Passes that ended without a leave while people waited: from the pass's `exp` until the
    /// room was full again or nobody waited (the grace second included), p50 and max.
    pub freed_with_people_waiting: u64,
    pub freeing_delay_p50_ms: f64,
    pub freeing_delay_max_ms: f64,
    /// Place polls per person, and polls sent before the advised `poll_after_ms`.
    pub polls_per_person_p50: f64,
    pub polls_per_person_max: f64,
    pub polls_sooner_than_advised: u64,
    /// Per second since the first join, for the charts.
    #[serde(default)]
    pub timeline: Vec<RoomSecond>,
}

/// One second of a room run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoomSecond {
    pub second: u64,
    /// Places taken (joins answered `202` in this second).
    pub joins: u64,
    /// Places whose first pass the witness accepted was issued in this second.
    pub admissions: u64,
    /// Places with a pass the witness would accept during this second.
    pub live_passes: u64,
    /// The median and largest position told by polls answered in this second.
    pub position_p50: Option<u64>,
    pub position_max: Option<u64>,
}

impl RoomFigures {
    /// The figures as (name, value) lines, shared by the Markdown summary and the HTML page.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0} ms"));
        vec![
            (
                "room limits",
                format!(
                    "max_active {}, admit_per_minute {}, heartbeat {} s",
                    self.max_active,
                    self.admit_per_minute
                        .map_or("unset".into(), |n| n.to_string()),
                    self.heartbeat_seconds
                ),
            ),
            (
                "places taken: pre-queue / after the start",
                format!("{} / {}", self.joined_prequeue, self.joined_after_start),
            ),
            ("joins per second", format!("{:.0}", self.joins_per_second)),
            (
                "join latency p50 / p99 / max",
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    self.join_latency.p50_ms, self.join_latency.p99_ms, self.join_latency.max_ms
                ),
            ),
            (
                "opens_at to the draw / the first admission",
                format!(
                    "{} / {}",
                    ms(self.drawn_after_open_ms),
                    ms(self.first_admission_after_open_ms)
                ),
            ),
            (
                "wait to admission p50 / p99 / max",
                format!(
                    "{:.1} / {:.1} / {:.1} s",
                    self.wait_to_admission_p50_seconds,
                    self.wait_to_admission_p99_seconds,
                    self.wait_to_admission_max_seconds
                ),
            ),
            (
                "peak live passes (origin witness) / max_active",
                format!("{} / {}", self.peak_live_passes, self.max_active),
            ),
            (
                "passes verified / refused by the witness",
                format!("{} / {}", self.passes_verified, self.passes_refused),
            ),
            (
                "admitted: left / abandoned / ran out",
                format!(
                    "{}: {} / {} / {}",
                    self.admitted, self.left, self.abandoned, self.ran_out
                ),
            ),
            (
                "heartbeats sent / refused",
                format!("{} / {}", self.heartbeats, self.heartbeats_refused),
            ),
            (
                "slot freeing delay after exp, p50 / max (passes ended with people waiting)",
                format!(
                    "{:.0} / {:.0} ms ({})",
                    self.freeing_delay_p50_ms,
                    self.freeing_delay_max_ms,
                    self.freed_with_people_waiting
                ),
            ),
            (
                "place polls per person p50 / max (sooner than advised)",
                format!(
                    "{:.0} / {:.0} ({})",
                    self.polls_per_person_p50,
                    self.polls_per_person_max,
                    self.polls_sooner_than_advised
                ),
            ),
        ]
    }
}
