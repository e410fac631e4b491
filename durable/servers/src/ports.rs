//! Free loopback ports and short-timeout probe connections.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Picks a port that is free right now, outside the kernel's ephemeral range.
///
/// The port is only tested (bound and released), so a server started on it binds it later. A
/// port from the ephemeral range could be taken in between by anything the kernel numbers on
/// its own: a listener on port 0 (the test's webhook backend, a proxy) or the source port of an
/// outgoing connection. Seen: an executor's metrics port handed out here, then taken by the
/// backend listening on port 0, so the executor's health probes landed on the backend. Ports
/// below the ephemeral range are never numbered by the kernel, so only another caller choosing
/// on purpose can take them: within this process each is handed out once (servers keep theirs
/// across restarts), and other processes start their walk at another place (a hash of the
/// process id and the clock). Callers still retry with a new port when a server reports
/// `Address already in use`.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let (low, high) = chosen_range();
    let span = u32::from(high - low);
    let mut offset = walk_start() % span;
    loop {
        for _ in 0..span {
            let port = low + (offset % span) as u16;
            offset = offset.wrapping_add(1);
            let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
            if handed_out.contains(&port) {
                continue;
            }
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                handed_out.insert(port);
                return port;
            }
        }
        // Every port of the range is taken or handed out: fall back to the kernel's choice.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("testkit: cannot bind 127.0.0.1:0: {e}"));
        let port = listener
            .local_addr()
            .expect("testkit: bound listener has an address")
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The ports [`free_port`] walks: from 15,000 up to the start of the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32,768 by default), clear of the well-known servers below.
fn chosen_range() -> (u16, u16) {
    const LOW: u16 = 15_000;
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    // A machine whose ephemeral range starts low leaves no room below it: walk above it instead
    // (the old behaviour's risk, but still each port once per process).
    if ephemeral_start > LOW + 1_000 {
        (LOW, ephemeral_start)
    } else {
        (61_000, 65_000)
    }
}

/// Where this process starts its walk, so processes choosing at once rarely meet.
fn walk_start() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish() as u32
}

/// A free port whose Redis Cluster bus port (`port + 10000`) is free right now too.
pub fn free_port_with_bus() -> u16 {
    loop {
        let port = free_port();
        if port <= u16::MAX - 10_000
            && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok()
        {
            return port;
        }
    }
}

/// How long a probe waits for a read or a write, so a probe against a hung or half-started
/// server never blocks for long.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects to `127.0.0.1:port` with short timeouts ([`PROBE_TIMEOUT`]).
pub(crate) fn connect(port: u16) -> io::Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handed_out_ports_are_distinct_and_never_ones_the_kernel_numbers_itself() {
        let (low, high) = chosen_range();
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        for port in &ports {
            assert!(
                (low..high).contains(port),
                "{port} is outside {low}..{high}"
            );
        }
        // What the kernel hands a listener on port 0 is never one of them.
        let kernel: Vec<u16> = (0..50)
            .map(|_| {
                TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .expect("bind port 0")
            })
            .collect();
        assert!(kernel.iter().all(|p| !distinct.contains(p)), "{kernel:?}");
    }
}
