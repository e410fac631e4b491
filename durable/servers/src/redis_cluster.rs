//! A throwaway Redis Cluster: three masters with a replica each, real `redis-server
//! --cluster-enabled yes` processes joined by `redis-cli --cluster create`.
//!
//! Cluster administration (slots, failover, migration) goes through `redis-cli`, the tool an
//! operator would use, so the kit does not carry a second RESP parser for array replies.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis::{Admin, command, info_field};
use crate::{RedisServer, ServerTls};

/// Masters, each with one replica.
const MASTERS: usize = 3;
/// How long the cluster may take to agree on its slots and sync its replicas.
const FORMED_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a replica may take to take over from a killed master (node timeout 2 s, then an
/// election; seconds on a loaded machine).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// Six nodes on free loopback ports, formed into a cluster whose every replica finished its first
/// sync (a replica can take over only after it): ready for failover the moment it is returned.
/// Every node is killed on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`, as seen by a live node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// `fail` or `fail?` in its flags: the cluster (or the asking node) thinks it is down.
    pub failed: bool,
    /// For a replica, the id of its master.
    pub master_id: Option<String>,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

impl RedisCluster {
    /// Starts six nodes and forms the cluster.
    ///
    /// # Panics
    /// If a node cannot start or the cluster does not form within a minute; the message says
    /// which step and what `redis-cli` printed.
    pub fn start() -> RedisCluster {
        Self::start_as(None)
    }

    /// [`start`](Self::start) with every node serving TLS only, its cluster bus and replication
    /// included, on certificates `tls` describes; [`url`](Self::url) is then `rediss://`.
    pub fn start_tls(tls: &ServerTls) -> RedisCluster {
        Self::start_as(Some(tls))
    }

    fn start_as(tls: Option<&ServerTls>) -> RedisCluster {
        let starting: Vec<_> = (0..MASTERS * 2)
            .map(|_| {
                let tls = tls.cloned();
                thread::spawn(move || match tls {
                    None => RedisServer::start_cluster_node(),
                    Some(tls) => RedisServer::start_tls_cluster_node(&tls),
                })
            })
            .collect();
        let nodes: Vec<RedisServer> = starting
            .into_iter()
            .map(|node| {
                node.join()
                    .unwrap_or_else(|_| panic!("testkit: a cluster node did not start"))
            })
            .collect();
        let mut create = Command::new("redis-cli");
        if let Some(ca) = nodes[0].ca_file() {
            // The nodes are introduced to each other over their TLS ports.
            create.arg("--tls").arg("--cacert").arg(ca);
            if tls.is_some_and(|t| t.client_certificates) {
                let dir = ca.parent().expect("the CA file is in the node's directory");
                create
                    .arg("--cert")
                    .arg(dir.join("server.crt"))
                    .arg("--key")
                    .arg(dir.join("server.key"));
            }
        }
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = create
            .output()
            .unwrap_or_else(|e| panic!("testkit: cannot run redis-cli --cluster create: {e}"));
        assert!(
            out.status.success(),
            "testkit: redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_formed(FORMED_TIMEOUT);
        cluster
    }

    /// `redis://127.0.0.1:<p1>,redis://127.0.0.1:<p2>,…`: every node, in the form
    /// `SLUICE_REDIS_URL` takes a cluster (`rediss://…,rediss://…?sslrootcert=…` for TLS).
    pub fn url(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        let query = urls[0].split_once('?').map(|(_, q)| format!("?{q}"));
        let nodes: Vec<&str> = urls
            .iter()
            .map(|url| url.split_once('?').map_or(url.as_str(), |(node, _)| node))
            .collect();
        nodes.join(",") + &query.unwrap_or_default()
    }

    /// The ports of every node, running or not.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, so the hash tag rule is Redis's own).
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = command(&self.any_live_admin(), &["CLUSTER", "KEYSLOT", key])
            .unwrap_or_else(|e| panic!("testkit: CLUSTER KEYSLOT: {e}"));
        reply
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("testkit: CLUSTER KEYSLOT answered {reply:?}"))
    }

    /// The cluster as a live node sees it now.
    pub fn topology(&self) -> Vec<ClusterNode> {
        let text = command(&self.any_live_admin(), &["CLUSTER", "NODES"])
            .unwrap_or_else(|e| panic!("testkit: CLUSTER NODES: {e}"));
        parse_nodes(&text)
    }

    /// The live master serving `slot`, as a live node sees it.
    pub fn master_of(&self, slot: u16) -> ClusterNode {
        self.topology()
            .into_iter()
            .find(|n| n.master && !n.failed && n.serves(slot))
            .unwrap_or_else(|| panic!("testkit: no live master serves slot {slot}"))
    }

    /// SIGKILLs the master serving `slot` (a crash: its replica holds only what it had received)
    /// and waits until its replica took the slot over and every live node agrees the cluster is
    /// ok. Returns the killed master's and the new master's ports.
    ///
    /// # Panics
    /// If no replica took over within a minute.
    pub fn kill_master_of(&mut self, slot: u16) -> (u16, u16) {
        let old = self.master_of(slot);
        // Its own replicas: only one of them taking the slot is a failover (a node whose view of
        // the slot is stale may still name another master for it).
        let replicas: Vec<String> = self
            .topology()
            .into_iter()
            .filter(|n| n.master_id.as_deref() == Some(old.id.as_str()))
            .map(|n| n.id)
            .collect();
        assert!(
            !replicas.is_empty(),
            "testkit: the master of slot {slot} (port {}) has no replica",
            old.port
        );
        self.node_mut(old.port).kill();
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            let promoted = self
                .topology()
                .into_iter()
                .find(|n| n.master && !n.failed && n.serves(slot) && replicas.contains(&n.id));
            if let Some(new) = promoted
                && self.all_live_ok()
            {
                return (old.port, new.port);
            }
            assert!(
                Instant::now() < deadline,
                "testkit: no replica took slot {slot} over from port {} within {FAILOVER_TIMEOUT:?}",
                old.port
            );
            thread::sleep(POLL);
        }
    }

    /// Moves `slot` to the master on `to`, the way `redis-cli --cluster reshard` does, in
    /// batches of `batch` keys with `pause` between them, so callers meet `ASK` redirections
    /// while it runs and `MOVED` after it.
    ///
    /// # Panics
    /// If a step is refused.
    pub fn migrate_slot(&self, slot: u16, to: u16, batch: usize, pause: Duration) {
        let (from, target) = self.begin_migration(slot, to);
        let slot_text = slot.to_string();
        loop {
            let keys = cli(
                &self.admin_of(from.port),
                &["CLUSTER", "GETKEYSINSLOT", &slot_text, &batch.to_string()],
            );
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_text = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_text, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            cli_ok(&self.admin_of(from.port), &args);
            thread::sleep(pause);
        }
        // The target first, then the source, then everyone: the order redis-cli uses.
        for port in [to, from.port] {
            cli_ok(
                &self.admin_of(port),
                &["CLUSTER", "SETSLOT", &slot_text, "NODE", &target.id],
            );
        }
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let _ = cli(
                &node.admin(),
                &["CLUSTER", "SETSLOT", &slot_text, "NODE", &target.id],
            );
        }
    }

    /// A live master other than the one on `port`: where a test moves a slot to.
    ///
    /// # Panics
    /// If there is none.
    pub fn other_master(&self, port: u16) -> ClusterNode {
        self.topology()
            .into_iter()
            .find(|n| n.master && !n.failed && n.port != port)
            .unwrap_or_else(|| panic!("testkit: no live master besides {port}"))
    }

    /// The first step of a slot migration, and only that: `slot` is `IMPORTING` on the master
    /// at `to` and `MIGRATING` on its owner, whose keys stay where they are. A key the owner
    /// does not hold is then answered `ASK` there. Returns the owner and the target.
    pub fn begin_migration(&self, slot: u16, to: u16) -> (ClusterNode, ClusterNode) {
        let from = self.master_of(slot);
        let target = self
            .topology()
            .into_iter()
            .find(|n| n.port == to && n.master)
            .unwrap_or_else(|| panic!("testkit: port {to} is not a master"));
        assert_ne!(from.port, to, "testkit: slot {slot} is already on {to}");
        let slot_text = slot.to_string();
        cli_ok(
            &self.admin_of(to),
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from.id],
        );
        cli_ok(
            &self.admin_of(from.port),
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &target.id],
        );
        (from, target)
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("testkit: no cluster node on port {port}"))
    }

    fn any_live_admin(&self) -> Admin {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::admin)
            .unwrap_or_else(|| panic!("testkit: no cluster node is running"))
    }

    /// Where the kit's commands to the node on `port` go.
    fn admin_of(&self, port: u16) -> Admin {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .map(RedisServer::admin)
            .unwrap_or_else(|| panic!("testkit: no cluster node on port {port}"))
    }

    fn all_live_ok(&self) -> bool {
        self.nodes.iter().filter(|n| n.is_running()).all(|n| {
            info_field_of(&n.admin(), "CLUSTER", "INFO", "cluster_state").as_deref() == Some("ok")
        })
    }

    /// Every node says `cluster_state:ok`, every slot is served, and every replica's link to
    /// its master is up (its first sync finished).
    fn wait_formed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let replicas_synced = self.nodes.iter().all(|n| {
                let role = info_field(&n.admin(), "replication", "role").unwrap_or_default();
                role == "master"
                    || info_field(&n.admin(), "replication", "master_link_status")
                        .is_ok_and(|s| s == "up")
            });
            let masters = self
                .nodes
                .iter()
                .filter(|n| {
                    info_field(&n.admin(), "replication", "role").is_ok_and(|r| r == "master")
                })
                .count();
            if self.all_live_ok() && masters == MASTERS && replicas_synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "testkit: the cluster did not form within {timeout:?}:\n{}",
                command(&self.nodes[0].admin(), &["CLUSTER", "NODES"]).unwrap_or_default()
            );
            thread::sleep(POLL);
        }
    }
}

/// A field of a command answering `INFO`-shaped text (`CLUSTER INFO`).
fn info_field_of(admin: &Admin, a: &str, b: &str, name: &str) -> Option<String> {
    let text = command(admin, &[a, b]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Runs one command with `redis-cli --raw` and returns what it printed.
fn cli(admin: &Admin, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(admin.cli_args())
        .arg("--raw")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("testkit: cannot run redis-cli: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`cli`], which must answer `OK`.
fn cli_ok(admin: &Admin, args: &[&str]) {
    let reply = cli(admin, args);
    assert_eq!(
        reply.trim(),
        "OK",
        "testkit: redis-cli {admin:?} {} answered {reply:?}",
        args.join(" ")
    );
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link>
/// <slot>…`, where a slot is `n`, `a-b`, or a migration marker `[…]` (skipped).
fn parse_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(ClusterNode {
                id: fields[0].to_string(),
                port,
                master: flags.contains(&"master"),
                failed: flags.iter().any(|f| f.starts_with("fail")),
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_nodes;

    #[test]
    fn cluster_nodes_lines_parse() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7001@17001 master,fail - 0 0 2 connected 5461-10922 12000
c3 127.0.0.1:7003@17003 slave a1 0 0 1 connected
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].port, 7000);
        assert!(nodes[0].master && !nodes[0].failed);
        assert_eq!(nodes[0].slots, vec![(0, 5460)]);
        assert!(nodes[1].failed && nodes[1].serves(12000) && !nodes[1].serves(11000));
        assert_eq!(nodes[2].master_id.as_deref(), Some("a1"));
        assert!(!nodes[2].master && nodes[2].slots.is_empty());
    }
}
