//! A TCP proxy between one Sluice process and one store (Redis or PostgreSQL), on real sockets,
//! that can delay, stall, black-hole and reset the traffic it carries.
//!
//! Each accepted connection is copied both ways by two tasks that consult the proxy's current
//! [`Mode`] before forwarding every chunk read. A reset closes every connection with `SO_LINGER`
//! 0 (an RST, as a failed middlebox or a restarted node sends); the caller sees an error at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the proxy does to bytes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Pass,
    /// Every chunk waits this long before it is forwarded (both directions).
    Delay(Duration),
    /// Chunks towards the store wait until the mode changes (then they are delivered).
    Stall,
    /// Chunks towards the store are thrown away (answers still flow back).
    Blackhole,
    /// Passing, until the next answer has gone back to the caller: then a black hole. A caller's
    /// next request after an answer is the one lost, at the moment between two steps of what it
    /// does (the network's counterpart of a crash point).
    BlackholeAfterAnswer,
}

pub struct Proxy {
    pub port: u16,
    mode: Arc<watch::Sender<Mode>>,
    /// Cancelled to reset every open connection; replaced by a fresh token after each reset.
    generation: Mutex<CancellationToken>,
    shutdown: CancellationToken,
    /// When bytes last came back from the store, in milliseconds since `born`.
    last_answer_ms: Arc<AtomicU64>,
    born: Instant,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub async fn start(target: u16) -> std::io::Result<Arc<Proxy>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (mode, _) = watch::channel(Mode::Pass);
        let proxy = Arc::new(Proxy {
            port,
            mode: Arc::new(mode),
            generation: Mutex::new(CancellationToken::new()),
            shutdown: CancellationToken::new(),
            last_answer_ms: Arc::new(AtomicU64::new(0)),
            born: Instant::now(),
        });
        let accepting = Arc::clone(&proxy);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = accepting.shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((client, _)) = accepted else { continue };
                let proxy = Arc::clone(&accepting);
                tokio::spawn(async move { proxy.carry(client, target).await });
            }
        });
        Ok(proxy)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Closes every open connection with an RST; new ones are accepted as before.
    pub fn reset(&self) {
        let mut generation = self.generation.lock().unwrap_or_else(|p| p.into_inner());
        generation.cancel();
        *generation = CancellationToken::new();
    }

    /// Resets every connection once no byte has come back from the store for `quiet` (at most
    /// after `most`): under a black hole nothing new reaches the store, so every request that did
    /// reach it has been answered by then and no answer is lost by the reset.
    pub async fn reset_when_quiet(&self, quiet: Duration, most: Duration) {
        let until = Instant::now() + most;
        loop {
            let now = self.born.elapsed().as_millis() as u64;
            let last = self.last_answer_ms.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= quiet.as_millis() as u64 || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.reset();
    }

    pub fn stop(&self) {
        self.shutdown.cancel();
        self.reset();
    }

    async fn carry(self: Arc<Self>, client: TcpStream, target: u16) {
        let reset = self
            .generation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
            let _ = client.set_zero_linger();
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let up = pump(client_read, server_write, Arc::clone(&self.mode), None);
        let answers = (Arc::clone(&self.last_answer_ms), self.born);
        let down = pump(
            server_read,
            client_write,
            Arc::clone(&self.mode),
            Some(answers),
        );
        tokio::select! {
            _ = reset.cancelled() => {}
            _ = self.shutdown.cancelled() => {}
            _ = async { tokio::join!(up, down) } => {}
        }
        // Dropping the halves closes both sockets; with linger 0 that is an RST.
    }
}

/// Copies `from` to `to`, obeying the mode. Towards the store `answers` is None; back from it,
/// it is where the time of the last byte is kept.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    sender: Arc<watch::Sender<Mode>>,
    answers: Option<(Arc<AtomicU64>, Instant)>,
) {
    let mut mode = sender.subscribe();
    let upstream = answers.is_none();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if let Some((last, born)) = &answers {
            last.store(born.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        loop {
            let current = *mode.borrow_and_update();
            match current {
                Mode::Pass | Mode::BlackholeAfterAnswer => break,
                Mode::Delay(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                Mode::Stall if upstream => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
                Mode::Blackhole if upstream => break,
                Mode::Stall | Mode::Blackhole => break,
            }
        }
        if upstream && *mode.borrow() == Mode::Blackhole {
            continue;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        if !upstream {
            // An answer went back: an armed black hole begins now.
            sender.send_if_modified(|m| {
                let armed = *m == Mode::BlackholeAfterAnswer;
                if armed {
                    *m = Mode::Blackhole;
                }
                armed
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text).await?;
        let mut got = vec![0u8; text.len()];
        stream.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn passes_blackholes_stalls_and_resets() {
        let proxy = Proxy::start(echo_server().await).await.expect("proxy");
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .expect("connect");
        assert_eq!(round_trip(&mut stream, b"one").await.expect("echo"), b"one");

        proxy.set(Mode::Blackhole);
        stream.write_all(b"lost").await.expect("write");
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await;
        assert!(read.is_err(), "nothing comes back while black-holed");
        proxy.set(Mode::Pass);
        assert_eq!(round_trip(&mut stream, b"two").await.expect("echo"), b"two");

        proxy.set(Mode::Stall);
        stream.write_all(b"held").await.expect("write");
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await;
        assert!(read.is_err(), "held while stalled");
        proxy.set(Mode::Pass);
        let mut got = [0u8; 4];
        stream.read_exact(&mut got).await.expect("delivered after");
        assert_eq!(&got, b"held");

        proxy.set(Mode::BlackholeAfterAnswer);
        assert_eq!(
            round_trip(&mut stream, b"three").await.expect("echo"),
            b"three"
        );
        assert_eq!(proxy.mode(), Mode::Blackhole, "the answer armed it");
        stream.write_all(b"after").await.expect("write");
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await;
        assert!(read.is_err(), "the request after the answer is lost");
        proxy.set(Mode::Pass);

        proxy.reset();
        let after = round_trip(&mut stream, b"x").await;
        assert!(after.is_err(), "reset: {after:?}");
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .expect("connect again");
        assert_eq!(round_trip(&mut fresh, b"ok").await.expect("echo"), b"ok");
    }
}
