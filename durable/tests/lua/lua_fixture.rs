//! The Redis fixture of the tests that run the Lua scripts alone (`lua_scripts`, `lua_admit`,
//! `lua_limits`): one application's keys in the shared Redis, opened at generation 1 (as a rebuild
//! leaves it: ready, and verified in this Redis process), with the `cfg` hash, queues and status
//! hashes written by the test itself the way the gateway's scripts would leave them.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use fred::prelude::*;
use serde_json::json;
use sluice_durable::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_durable::lifecycle::rebuild::open_empty;
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits, AdmittedHead, Ending, admit, land};
use sluice_redis::admission_config::write_admission_config;
use sluice_redis::{AppKeys, Projection, connect_redis};
use sluice_testkit::test_redis_url;

/// A test file's bench: the shared [`LuaFixture`] and, in `impl Bench<Marker>` with a marker type
/// of the file's own, that file's helpers (so each file names them as it likes).
pub(crate) struct Bench<Marker> {
    fixture: LuaFixture,
    file: PhantomData<Marker>,
}

impl<Marker> Bench<Marker> {
    pub(crate) async fn new() -> Arc<Bench<Marker>> {
        Self::on(&test_redis_url()).await
    }

    /// A bench on the Redis at `url`: a test's own server, for tests that save or restart it.
    pub(crate) async fn on(url: &str) -> Arc<Bench<Marker>> {
        Arc::new(Bench {
            fixture: LuaFixture::on(url).await,
            file: PhantomData,
        })
    }
}

impl<Marker> Deref for Bench<Marker> {
    type Target = LuaFixture;

    fn deref(&self) -> &LuaFixture {
        &self.fixture
    }
}

/// One application's keys in the shared Redis, marked ready at generation 1.
pub(crate) struct LuaFixture {
    pub(crate) redis: Projection,
    pub(crate) keys: AppKeys,
    pub(crate) namespace: NamespaceId,
    seq: AtomicI64,
}

impl LuaFixture {
    pub(crate) async fn new() -> LuaFixture {
        Self::on(&test_redis_url()).await
    }

    pub(crate) async fn on(url: &str) -> LuaFixture {
        let redis = connect_redis(url, 4).await.expect("redis");
        let keys = AppKeys::new(ApplicationId::new_v7());
        // The application's first projection: a token bucket these tests have not used yet is
        // full (after a later rebuild it would count as empty, see lib/epoch.lua).
        open_empty(&redis, &keys, 1)
            .await
            .expect("open the projection");
        LuaFixture {
            redis,
            keys,
            namespace: NamespaceId::new_v7(),
            seq: AtomicI64::new(0),
        }
    }

    /// The next queue sequence: 1, 2, … over the fixture's life.
    pub(crate) fn next_seq(&self) -> i64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// `<namespace>:<command>`, the `cfg` field of a command.
    pub(crate) fn nscmd(&self, command: &str) -> String {
        format!("{}:{command}", self.namespace)
    }

    pub(crate) fn suffix(&self, command: &str, resource: &str) -> String {
        AppKeys::queue_suffix(self.namespace, command, resource)
    }

    /// Writes the whole `cfg` hash: commands ("max_in_flight per_second burst per_resource") and
    /// limit templates ("max_in_flight per_second burst").
    pub(crate) async fn configure(&self, commands: &[(&str, &str)], templates: &[(&str, &str)]) {
        let mut specs: Vec<(String, String)> = commands
            .iter()
            .map(|(command, spec)| (self.nscmd(command), spec.to_string()))
            .collect();
        specs.extend(templates.iter().map(|(template, spec)| {
            (
                AppKeys::limit_config_field(self.namespace, template),
                spec.to_string(),
            )
        }));
        write_admission_config(&self.redis, &self.keys, specs)
            .await
            .expect("write cfg");
    }

    /// Queues one accepted command with sequence `seq` on `resource`, the way `accept.lua` leaves
    /// it: queue entry, ready set, status hash and waiting counters.
    pub(crate) async fn queue_accepted_with_seq(
        &self,
        command: &str,
        resource: &str,
        seq: i64,
    ) -> CommandId {
        self.queue_command(
            command,
            resource,
            seq,
            vec![("status".to_string(), "accepted".to_string())],
            vec![
                format!("waiting:{}", self.namespace),
                format!("queued:{}", self.nscmd(command)),
            ],
        )
        .await
    }

    /// Queues one command the way `accept.lua` leaves it: queue entry, ready set, status hash
    /// with its rendered limit keys in `lim`, and the counters.
    pub(crate) async fn queue_limited(
        &self,
        command: &str,
        resource: &str,
        lim: &[(&str, &str)],
    ) -> CommandId {
        let seq = self.next_seq();
        let mut fields = vec![
            ("status".to_string(), "accepted".to_string()),
            ("seq".to_string(), seq.to_string()),
        ];
        if !lim.is_empty() {
            let pairs: Vec<[&str; 2]> = lim.iter().map(|(t, k)| [*t, *k]).collect();
            fields.push(("lim".to_string(), json!(pairs).to_string()));
        }
        self.queue_command(
            command,
            resource,
            seq,
            fields,
            vec![
                "unfinished".to_string(),
                format!("waiting:{}", self.namespace),
                format!("queued:{}", self.nscmd(command)),
            ],
        )
        .await
    }

    /// Queues `n` accepted commands in sequence order; returns their ids in that order.
    pub(crate) async fn queue_accepted(
        &self,
        command: &str,
        resource: &str,
        n: usize,
    ) -> Vec<CommandId> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(
                self.queue_accepted_with_seq(command, resource, self.next_seq())
                    .await,
            );
        }
        ids
    }

    /// Queues one accepted `job` on `resource` as `accept.lua` leaves it, with the counts that
    /// ending it gives back (`unfinished`, waiting in its namespace and command).
    pub(crate) async fn queue_job(&self, resource: &str) -> CommandId {
        let ns = self.namespace;
        self.queue_command(
            "job",
            resource,
            self.next_seq(),
            vec![
                ("status".into(), "accepted".into()),
                ("ns".into(), ns.to_string()),
                ("cmd".into(), "job".into()),
                ("q".into(), self.keys.queue(ns, "job", resource)),
            ],
            vec![
                "unfinished".into(),
                format!("waiting:{ns}"),
                format!("queued:{ns}:job"),
            ],
        )
        .await
    }

    /// Queues one command with sequence `seq` the way `accept.lua` leaves it: its queue entry,
    /// its queue in its command's ready set and its command in the application's, its status
    /// hash of `fields`, and one more in each of `counters`.
    pub(crate) async fn queue_command(
        &self,
        command: &str,
        resource: &str,
        seq: i64,
        fields: Vec<(String, String)>,
        counters: Vec<String>,
    ) -> CommandId {
        let id = CommandId::new_v7();
        let client = self.redis.pool().next();
        // The status hash and the counters first, the queue entry after: an admission running
        // at the same time finds the command whole or not at all, as with accept.lua's one call.
        let _: () = client
            .hset(self.keys.command(id), fields)
            .await
            .expect("status hash");
        for counter in counters {
            let _: i64 = client
                .hincrby(self.keys.count(), counter, 1)
                .await
                .expect("count");
        }
        let _: i64 = client
            .zadd(
                self.keys.queue(self.namespace, command, resource),
                None,
                None,
                false,
                false,
                (seq as f64, id.to_string()),
            )
            .await
            .expect("zadd queue");
        let _: i64 = client
            .zadd(
                self.keys.resource_ready(self.namespace, command),
                Some(SetOptions::NX),
                None,
                false,
                false,
                (0.0, self.suffix(command, resource)),
            )
            .await
            .expect("zadd resource ready");
        let _: i64 = client
            .zadd(
                self.keys.ready(),
                Some(SetOptions::NX),
                None,
                false,
                false,
                (0.0, self.nscmd(command)),
            )
            .await
            .expect("zadd ready");
        id
    }

    /// One `admit.lua` call through its Rust caller.
    pub(crate) async fn admission(&self, limits: AdmitLimits) -> Admission {
        admit(&self.redis, &self.keys, limits)
            .await
            .expect("admit.lua")
    }

    /// The heads of one `admit.lua` call on a projection that is ready.
    pub(crate) async fn admitted_heads(&self, limits: AdmitLimits) -> Vec<AdmittedHead> {
        match self.admission(limits).await {
            Admission::Heads { heads, .. } => heads,
            Admission::NotReady => panic!("the projection is ready"),
        }
    }

    /// `land.lua` for command `id` of `command` in `resource`, ending `status`: whether it
    /// counted the command out (None: the projection was not trusted).
    pub(crate) async fn land(
        &self,
        command: &str,
        resource: &str,
        id: CommandId,
        status: &str,
    ) -> Option<bool> {
        land(
            &self.redis,
            &self.keys,
            &Ending {
                command_id: id,
                namespace_id: self.namespace,
                command,
                resource_key: resource,
                limit_keys: &[],
                status: sluice_model::CommandStatus::parse(status).expect("a status"),
                updated_at: "2026-12-01T00:00:00.000Z".into(),
                result: None,
                error: None,
                retention_ms: 600_000,
            },
        )
        .await
        .expect("land.lua")
    }

    /// A permit of `lease` held by nobody the test knows, that never lapses during the test.
    pub(crate) async fn hold_forever(&self, lease: &str) {
        let _: i64 = self
            .redis
            .pool()
            .next()
            .zadd(
                lease,
                None,
                None,
                false,
                false,
                (4_102_444_800_000.0, "holder"),
            )
            .await
            .expect("a held permit");
    }

    pub(crate) async fn counter(&self, name: &str) -> i64 {
        let value: Option<i64> = self
            .redis
            .pool()
            .next()
            .hget(self.keys.count(), name)
            .await
            .expect("hget");
        value.unwrap_or(0)
    }

    pub(crate) async fn waiting(&self) -> i64 {
        self.counter(&format!("waiting:{}", self.namespace)).await
    }

    /// The members of a sorted set, lowest score first.
    pub(crate) async fn zmembers(&self, key: &str) -> Vec<String> {
        self.redis
            .pool()
            .next()
            .zrange(key, 0, -1, None, false, None, false)
            .await
            .expect("zrange")
    }

    /// The members of a sorted set with their scores.
    pub(crate) async fn zscores(&self, key: &str) -> HashMap<String, f64> {
        let pairs: Vec<(String, f64)> = self
            .redis
            .pool()
            .next()
            .zrange(key, 0, -1, None, false, None, true)
            .await
            .expect("zrange withscores");
        pairs.into_iter().collect()
    }

    pub(crate) async fn hash(&self, key: &str) -> HashMap<String, String> {
        self.redis
            .pool()
            .next()
            .hgetall(key)
            .await
            .expect("hgetall")
    }

    /// A field of the status hash of command `id`.
    pub(crate) async fn field(&self, id: CommandId, field: &str) -> Option<String> {
        self.redis
            .pool()
            .next()
            .hget(self.keys.command(id), field)
            .await
            .expect("hget")
    }

    pub(crate) async fn status(&self, id: CommandId) -> Option<String> {
        self.field(id, "status").await
    }

    /// Every key of the application with its full contents, to prove a call wrote nothing (but
    /// the epoch prelude's own bookkeeping in `meta`: when it last verified the Redis process).
    pub(crate) async fn snapshot(&self) -> Vec<(String, String)> {
        let client = self.redis.pool().next();
        let mut keys = sluice_testkit::scan_keys(self.redis.pool(), &self.keys.pattern()).await;
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            let kind: String = client.r#type(&key).await.expect("type");
            let value = match kind.as_str() {
                "hash" => format!("{:?}", {
                    let mut v: Vec<(String, String)> = client
                        .hgetall::<HashMap<String, String>, _>(&key)
                        .await
                        .expect("hgetall")
                        .into_iter()
                        .filter(|(field, _)| field != "checked_at" && field != "lastsave")
                        .collect();
                    v.sort();
                    v
                }),
                "zset" => format!(
                    "{:?}",
                    client
                        .zrange::<Vec<String>, _, _, _>(&key, 0, -1, None, false, None, true)
                        .await
                        .expect("zrange")
                ),
                _ => format!(
                    "{:?}",
                    client.get::<Option<String>, _>(&key).await.expect("get")
                ),
            };
            out.push((key, value));
        }
        out
    }

    /// The start bucket of a command.
    pub(crate) fn command_bucket(&self, command: &str) -> String {
        format!(
            "{}:bucket:start:{}",
            self.keys.pattern().trim_end_matches(":*"),
            self.nscmd(command)
        )
    }
}

/// `admit.lua`'s limits as the executor's defaults set them (scan 256, lookahead 16), with
/// `max_heads` starts per call, at generation 1 and with one-minute leases.
pub(crate) fn admit_limits(max_heads: u32) -> AdmitLimits {
    AdmitLimits {
        min_generation: 1,
        max_heads,
        scan_limit: 256,
        lease_ms: 60_000,
        lookahead: 16,
    }
}
