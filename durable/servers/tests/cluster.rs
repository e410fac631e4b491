//! The cluster kit against itself: it forms, it fails over, it migrates a slot, each observed
//! through plain `redis-cli` commands (a witness that is not the kit's own parsing).

use std::process::Command;
use std::time::Duration;

use sluice_servers::RedisCluster;

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "-c", "--raw"])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `GET key` answered by the replica on `port` itself.
fn read_on_replica(port: u16, key: &str) -> String {
    let mut child = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--raw"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "READONLY\nGET {key}").expect("write to redis-cli");
    }
    let out = child.wait_with_output().expect("redis-cli");
    // The answers of READONLY (OK) and GET, one per line.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_cluster_forms_fails_over_and_migrates_a_slot() {
    let mut cluster = RedisCluster::start();
    let ports = cluster.ports();
    assert_eq!(ports.len(), 6);
    let masters = cluster.topology().into_iter().filter(|n| n.master).count();
    assert_eq!(masters, 3, "three masters: {:?}", cluster.topology());
    let url = cluster.url();
    assert_eq!(url.split(',').count(), 6, "every node is in the url: {url}");

    // A key written through one node (`-c` follows MOVED) is read through another.
    let key = "{a:kit}:probe";
    assert_eq!(cli(ports[0], &["SET", key, "1"]), "OK");
    assert_eq!(cli(ports[5], &["GET", key]), "1");

    // Moving the key's slot to another master keeps the key and makes that master serve it.
    let slot = cluster.slot_of(key);
    let from = cluster.master_of(slot);
    let to = cluster.other_master(from.port);
    cluster.migrate_slot(slot, to.port, 10, Duration::ZERO);
    assert_eq!(cluster.master_of(slot).port, to.port);
    assert_eq!(
        cli(from.port, &["GET", key]),
        "1",
        "followed MOVED to the new owner"
    );
    let direct = Command::new("redis-cli")
        .args(["-p", &to.port.to_string(), "--raw", "GET", key])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&direct.stdout).trim(), "1");

    // Killing the slot's master promotes its replica, which has the key once it synced: read
    // on each replica itself (READONLY, no redirection) until it has it. (A WAIT from a new
    // connection would wait for nothing: it counts only that connection's own writes.)
    let replicas: Vec<u16> = cluster
        .topology()
        .into_iter()
        .filter(|n| n.master_id.as_deref() == Some(to.id.as_str()))
        .map(|n| n.port)
        .collect();
    assert!(!replicas.is_empty(), "{} has a replica", to.port);
    for replica in replicas {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while read_on_replica(replica, key) != "1" {
            assert!(
                std::time::Instant::now() < deadline,
                "replica {replica} has the key within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (killed, promoted) = cluster.kill_master_of(slot);
    assert_eq!(killed, to.port);
    assert_ne!(promoted, killed);
    let read = Command::new("redis-cli")
        .args(["-p", &promoted.to_string(), "--raw", "GET", key])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), "1");
}
