//! The validated, typed declaration.
//!
//! Every value here has already passed validation and carries its defaults filled in, so
//! consumers never re-apply defaults. The model is stored as JSON and read back, so every type
//! derives serde and must round-trip through `serde_json` unchanged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A namespace's whole declaration: settings, commands, quota pools and reads. The default is
/// what a namespace that has applied nothing yet has: no commands, no pools, no reads, default
/// settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    /// Namespace-wide settings (`[namespace]`).
    pub namespace: NamespaceSettings,
    /// Declared commands (`[[command]]`), in document order.
    pub commands: Vec<CommandDecl>,
    /// Declared quota pools (`[[quota_pool]]`), in document order.
    pub quota_pools: Vec<QuotaPoolDecl>,
    /// Declared reads (`[[read]]`), in document order. Absent in declarations stored before
    /// reads existed, which load with none.
    #[serde(default)]
    pub reads: Vec<ReadDecl>,
    /// Declared waiting rooms (`[[room]]`), in document order. Absent in declarations stored
    /// before rooms existed, which load with none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rooms: Vec<RoomDecl>,
}

/// Namespace-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceSettings {
    /// Most waiting (accepted, not started) commands the namespace may hold.
    pub max_waiting: u64,
    /// Browser origins allowed to call the namespace, e.g. `https://shop.example`.
    pub allowed_origins: Vec<String>,
}

impl Default for NamespaceSettings {
    fn default() -> Self {
        Self {
            max_waiting: super::namespace::DEFAULT_MAX_WAITING,
            allowed_origins: Vec::new(),
        }
    }
}

/// One declared command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandDecl {
    /// Command code, unique in the namespace.
    pub code: String,
    /// Input parameters by name; every one is required in a caller's input.
    pub parameters: BTreeMap<String, ParamDecl>,
    /// What the command contends on.
    pub resource_key: ResourceKeyDecl,
    /// Time from acceptance after which the command is abandoned.
    pub deadline_seconds: u32,
    /// Budget for accepting commands.
    pub intake: IntakeBudget,
    /// Budget for starting accepted commands.
    pub admission: AdmissionBudget,
    /// What runs the command.
    pub handler: HandlerDecl,
    /// Extra keyed limits, rendered from the input.
    pub limits: Vec<LimitDecl>,
    /// What the hosted waiting page shows and where it returns (defaults when absent). Absent
    /// in declarations stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_page: Option<WaitingPageDecl>,
}

/// The hosted waiting page of a command (`waiting_page` in the declaration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingPageDecl {
    pub title: String,
    pub message: String,
    pub accent_color: String,
    pub background_color: String,
    pub text_color: String,
    /// Where the page may send the browser with the result; nowhere when empty.
    pub return_urls: Vec<String>,
}

/// The type of one input parameter, with its constraints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ParamDecl {
    /// A canonical hyphenated UUID string.
    Uuid,
    /// A string of at most `max_length` characters, one of `allowed` when set.
    String {
        /// Most characters (not bytes) allowed.
        max_length: u32,
        /// The only values allowed, when set (TOML key `enum`).
        allowed: Option<Vec<String>>,
    },
    /// A JSON integer within `min..=max`.
    Integer {
        /// Smallest value allowed.
        min: i64,
        /// Largest value allowed.
        max: i64,
    },
    /// A JSON boolean.
    Boolean,
}

/// Where a command's resource key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ResourceKeyDecl {
    /// The value of one declared input parameter.
    Input {
        /// Name of the parameter.
        field: String,
    },
    /// The same key for every command.
    Constant {
        /// The key.
        value: String,
    },
}

/// Rate and concurrency budget for accepting commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeBudget {
    /// Sustained accepts per second.
    pub per_second: u32,
    /// Accepts allowed in a burst.
    pub burst: u32,
    /// Accept calls in progress at once.
    pub max_in_flight: u32,
    /// Each subject's own bucket, checked before the command's shared one, so one person
    /// cannot spend what everyone shares. Absent (none) in declarations stored before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_subject: Option<SubjectRate>,
}

/// A rate per subject: `intake.per_subject_per_second` and `intake.per_subject_burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectRate {
    pub per_second: u32,
    pub burst: u32,
}

/// Rate, concurrency and queue budget for starting accepted commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionBudget {
    /// Sustained starts per second.
    pub per_second: u32,
    /// Starts allowed in a burst.
    pub burst: u32,
    /// Commands running at once.
    pub max_in_flight: u32,
    /// Commands waiting to start.
    pub max_queue: u64,
    /// Longest a command may wait to start; never more than the deadline.
    pub max_wait_seconds: u32,
    /// Commands of one resource running at once, when a resource needs its own limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_per_resource: Option<u32>,
}

/// What runs a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HandlerDecl {
    /// Takes one unit from a declared quota pool.
    Quota {
        /// Code of the quota pool.
        pool: String,
        /// Whether the unit is taken for good or held for a while.
        mode: QuotaMode,
    },
    /// Calls an HTTP endpoint.
    Webhook {
        /// Endpoint URL (`http://` or `https://`).
        url: String,
        /// Time allowed for one call.
        timeout_ms: u32,
    },
}

/// How a quota handler takes its unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaMode {
    /// The unit is taken for good.
    Committed,
    /// The unit is held and returned unless confirmed within `reservation_seconds`.
    Reserved {
        /// How long the reservation is held.
        reservation_seconds: u32,
    },
}

/// An extra limit keyed by a template rendered from the input, e.g. `provider:{provider}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitDecl {
    /// Key template; every `{name}` is a declared parameter.
    pub key: String,
    /// Sustained rate per key, if limited.
    pub per_second: Option<u32>,
    /// Burst per key; set exactly when `per_second` is.
    pub burst: Option<u32>,
    /// Concurrency per key, if limited.
    pub max_in_flight: Option<u32>,
}

/// A declared quota pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaPoolDecl {
    /// Pool code, unique in the namespace.
    pub code: String,
    /// Units in the pool.
    pub capacity: u64,
}

/// A declared read: a cached view of an origin, served by `GET /v1/reads/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadDecl {
    /// Read name, unique among the namespace's reads.
    pub name: String,
    /// Origin URL template (`http://` or `https://`); `{name}` placeholders, only in the path
    /// and query, are filled with percent-encoded parameter values.
    pub origin: String,
    /// Query parameters by name; every one is required on each read.
    pub parameters: BTreeMap<String, ParamDecl>,
    /// Whether a cached value is shared by the application or kept per subject.
    pub scope: ReadScope,
    /// How long a filled value is served as fresh.
    pub fresh_seconds: u32,
    /// Extra time after `fresh_seconds` during which a stale value is served while one refresh
    /// runs; 0 means never stale.
    pub stale_seconds: u32,
    /// Dependency templates (`offer:{id}`); invalidating a rendered dependency drops the value.
    pub dependencies: Vec<String>,
    /// Largest origin body cached; a larger one is served but not cached.
    pub max_bytes: u32,
    /// How long an origin 404 or error is cached.
    pub negative_seconds: u32,
    /// Time allowed for one origin call.
    pub timeout_ms: u32,
}

/// Who shares a read's cached values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadScope {
    /// One value per parameter set, shared by every caller of the namespace.
    Application,
    /// One value per parameter set and subject: never served to another subject.
    Subject,
}

/// A declared waiting room: people queue for a pass to a protected page or API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomDecl {
    /// Room code, unique in the namespace.
    pub code: String,
    /// Passes live at once, when limited.
    pub max_active: Option<u32>,
    /// Admissions per minute, spread evenly, when limited.
    pub admit_per_minute: Option<u32>,
    /// Longest a pass lives from admission, heartbeats or not.
    pub pass_seconds: u32,
    /// When set, a pass must be renewed at least this often or its place is freed.
    pub heartbeat_seconds: Option<u32>,
    /// When the room starts admitting (RFC 3339, UTC, whole seconds); open at once when absent.
    pub opens_at: Option<String>,
    /// How long before `opens_at` joins are taken into the pre-queue; from the declaration on
    /// when absent.
    pub prequeue_seconds: Option<u32>,
    /// Whether the pre-queue is ordered by the committed seed (else by arrival).
    pub shuffle_prequeue: bool,
    /// What a join must prove it spent first; absent in declarations stored before it existed.
    #[serde(default)]
    pub proof_of_work: ProofOfWork,
    /// The hosted room page's texts, colours and return URL (`page`), when declared.
    #[serde(default)]
    pub page: Option<RoomPageDecl>,
}

/// The hosted room page of a room (`page` in the declaration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomPageDecl {
    pub title: String,
    pub message: String,
    pub accent_color: String,
    pub background_color: String,
    pub text_color: String,
    /// Where an admitted person's pass is posted (an HTML form post of `pass`, `join_id` and
    /// `room`); the page keeps the pass on itself when absent.
    pub return_url: Option<String>,
}

/// The work a join must show: the number of leading zero bits of a SHA-256 the joiner has to
/// find (each bit doubles the expected work, and checking a solution is one hash).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum ProofOfWork {
    #[default]
    Off,
    /// Every challenge asks for `bits`.
    Fixed { bits: u8 },
    /// `min_bits` while joins arrive at most `calm_joins_per_second`; one more bit for each
    /// doubling of the arrival rate above it, up to `max_bits`: a script that joins faster pays
    /// more per join, and a calm room costs a browser almost nothing.
    Adaptive {
        min_bits: u8,
        max_bits: u8,
        calm_joins_per_second: u32,
    },
}

impl ProofOfWork {
    /// The bits a challenge issued now asks for, given the room's recent arrival rate.
    pub fn bits_at(self, joins_per_second: f64) -> u8 {
        match self {
            Self::Off => 0,
            Self::Fixed { bits } => bits,
            Self::Adaptive {
                min_bits,
                max_bits,
                calm_joins_per_second,
            } => {
                let calm = f64::from(calm_joins_per_second.max(1));
                if !joins_per_second.is_finite() || joins_per_second <= calm {
                    return min_bits;
                }
                let extra = (joins_per_second / calm).log2().ceil();
                let bits = f64::from(min_bits) + extra;
                if bits >= f64::from(max_bits) {
                    max_bits
                } else {
                    // Between min_bits and max_bits, both u8.
                    bits as u8
                }
            }
        }
    }
}
