//! Free loopback ports and short-timeout probe connections.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Picks a port that is free right now by binding `127.0.0.1:0`.
///
/// The listener is dropped before the server binds, so another process may
/// still grab the port in between; callers retry with a new port when the
/// server reports `Address already in use`. Within this process a port is
/// handed out only once (servers keep theirs across restarts), which rules
/// out races between tests starting servers concurrently (and gateways, whose ports the tests
/// pick the same way).
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
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

/// Connects to `127.0.0.1:port` with short timeouts, so a readiness probe
/// against a hung or half-started server never blocks for long.
pub(crate) fn connect(port: u16) -> io::Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(stream)
}
