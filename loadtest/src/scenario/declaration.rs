//! The declarations a run applies to its own namespace: a sale (`claim` on a quota pool,
//! committed or reserved as `--mode` says, and the `offer` read) for `drop` and `steady`, webhook
//! calls with limit keys for `backend`, one waiting room for `room`.

use super::Options;
use super::options::Mode;

pub const POOL: &str = "stock";

/// The lines every command of a run shares: its deadline and its intake and admission budgets,
/// all from the run's options.
fn budgets(options: &Options) -> String {
    format!(
        r#"deadline_seconds = {deadline}
intake    = {{ per_second = {intake_rate}, burst = {intake_burst}, max_in_flight = {intake_in_flight} }}
admission = {{ per_second = {admission_rate}, burst = {admission_rate}, max_in_flight = {admission_in_flight}, max_queue = 10000000, max_wait_seconds = {deadline} }}"#,
        deadline = options.deadline_seconds,
        intake_rate = options.intake_per_second,
        intake_burst = options.intake_burst,
        intake_in_flight = options.intake_max_in_flight,
        admission_rate = options.admission_per_second,
        admission_in_flight = options.admission_max_in_flight,
    )
}

/// The sale. The offer read depends on `offer:{offer}`, not on the pool: as the reference
/// advises, content and stock use separate dependencies so that every allocation does not
/// invalidate the page everybody is reading.
pub fn sale(options: &Options, origin: &str) -> String {
    format!(
        r#"
[namespace]
max_waiting = 10000000

[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
{budgets}
handler   = {handler}

[[quota_pool]]
code = "{POOL}"
capacity = {capacity}

[[read]]
name = "offer"
origin = "{origin}/offers/{{offer}}"
parameters = {{ offer = {{ type = "uuid" }} }}
fresh_seconds = 5
stale_seconds = 60
dependencies = ["offer:{{offer}}"]
timeout_ms = 2000
"#,
        budgets = budgets(options),
        handler = quota_handler(options),
        capacity = options.capacity,
    )
}

/// The claim's handler: a committed unit, or one held for `--reservation-seconds`.
fn quota_handler(options: &Options) -> String {
    match options.mode {
        Mode::Committed => format!(r#"{{ kind = "quota", pool = "{POOL}", mode = "committed" }}"#),
        Mode::Reserved => format!(
            r#"{{ kind = "quota", pool = "{POOL}", mode = "reserved", reservation_seconds = {} }}"#,
            options.reservation_seconds
        ),
    }
}

/// Webhook calls to providers: each command names a provider and an account; the provider's
/// starts per second and the account's requests at once are limit keys shared by every command.
pub fn backend(options: &Options, url: &str) -> String {
    format!(
        r#"
[namespace]
max_waiting = 10000000

[[command]]
code = "call"
parameters = {{ provider = {{ type = "string", max_length = 32 }}, account = {{ type = "string", max_length = 32 }} }}
resource_key = {{ from = "input", field = "account" }}
{budgets}
handler   = {{ kind = "webhook", url = "{url}", timeout_ms = 10000 }}
limits = [ {{ key = "provider:{{provider}}", per_second = {provider_rate} }}, {{ key = "account:{{provider}}:{{account}}", max_in_flight = {account_in_flight} }} ]
"#,
        budgets = budgets(options),
        provider_rate = options.provider_per_second,
        account_in_flight = options.account_max_in_flight,
    )
}

/// The room of a `room` run.
pub const ROOM: &str = "room";

/// One waiting room starting at `opens_at` (whole seconds), its pre-queue open from at least a
/// minute before (the shortest the declaration allows) and always from the run's start.
pub fn room(options: &Options, opens_at: chrono::DateTime<chrono::Utc>) -> String {
    let rate = options
        .room_admit_per_minute
        .map_or(String::new(), |n| format!("admit_per_minute = {n}\n"));
    format!(
        r#"
[[room]]
code = "{ROOM}"
max_active = {max_active}
{rate}pass_seconds = {pass}
heartbeat_seconds = {heartbeat}
opens_at = "{opens_at}"
prequeue_seconds = {prequeue}
"#,
        max_active = options.room_max_active,
        pass = options.pass_seconds,
        heartbeat = options.heartbeat_seconds,
        opens_at = opens_at.format("%Y-%m-%dT%H:%M:%SZ"),
        prequeue = (options.opens_in_seconds + 60).min(604_800),
    )
}
