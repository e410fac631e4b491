//! A webhook request goes out only through its attempt's open fence, checked as it is written:
//! an executor paused past its lease between its last check and its send (the chaos run caught
//! one, SIGSTOPped while connecting, that called its backend a second after the command had
//! ended elsewhere) must send nothing when it resumes.
//!
//! The pause is reproduced without signals: the backend's accept queue is full, so the
//! executor's connection attempt waits in `SYN_SENT` (the kernel drops its SYN and retries a
//! second later) exactly as a stopped process would wait; the fence closes meanwhile; then the
//! queue is freed and the connection completes. What the backend reads is the witness.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_durable::ids::CommandId;
use sluice_executor::fence::Fence;
use sluice_executor::webhook::{Answer, Delivery, WebhookClient, WebhookSecrets};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long the connection may take: the SYN is retried one second after it was dropped, then
/// after two more.
const CONNECTED_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_fence_closes_while_it_connects_is_never_sent() {
    let (answer, received) = deliver_through_a_stalled_connect(true).await;
    assert!(
        received.is_empty(),
        "the backend read {} bytes of a request whose fence had closed: {:?}",
        received.len(),
        String::from_utf8_lossy(&received)
    );
    assert_eq!(
        answer,
        Answer::Withheld,
        "a request refused by its fence is answered as withheld, not as worth a retry"
    );

    // The control: the same stalled connection with the fence left open delivers the request,
    // so the empty read above is the fence's doing.
    let (answer, received) = deliver_through_a_stalled_connect(false).await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.starts_with("POST /call HTTP/1.1") && text.contains(r#""attempt":1"#),
        "with its fence open the request must arrive whole; the backend read {text:?}"
    );
    assert!(
        matches!(answer, Answer::Retry { in_doubt: true, .. }),
        "a request sent and then cut off is in doubt, got {answer:?}"
    );
}

/// Starts a delivery towards a backend whose accept queue is full, waits until it is connecting,
/// closes its fence if `close_fence`, frees the queue, and returns the delivery's answer and
/// every byte the backend read from its connection.
async fn deliver_through_a_stalled_connect(close_fence: bool) -> (Answer, Vec<u8>) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    // A backlog of 0 holds one established connection: the filler takes it.
    let listener: TcpListener = socket.listen(0).expect("listen");
    let address = listener.local_addr().expect("address");
    let filler = TcpStream::connect(address)
        .await
        .expect("the filler connects");

    let fence = Fence::until(std::time::Instant::now() + Duration::from_secs(60));
    let delivery = tokio::spawn({
        let fence = fence.clone();
        async move {
            WebhookClient::new(&Default::default())
                .deliver(Delivery {
                    url: &format!("http://{address}/call"),
                    secrets: &WebhookSecrets {
                        current: "whsec_test".into(),
                        previous: None,
                    },
                    command_id: CommandId::new_v7(),
                    body: Bytes::from_static(br#"{"attempt":1}"#),
                    timeout: CONNECTED_WITHIN + Duration::from_secs(5),
                    fence: &fence,
                    trace_parent: None,
                })
                .await
        }
    });
    wait_for_syn_sent(address.port()).await;
    if close_fence {
        fence.close();
    }

    // Free the queue: the delivery's SYN is taken at its next retry.
    let (first, _) = listener.accept().await.expect("accept the filler");
    drop((first, filler));
    let (mut connection, _) = tokio::time::timeout(CONNECTED_WITHIN, listener.accept())
        .await
        .expect("the delivery's connection completes once the queue is free")
        .expect("accept");
    let received = read_head_or_end(&mut connection).await;
    drop(connection);
    let answer = delivery.await.expect("the delivery task");
    (answer, received)
}

/// Reads until the connection ends, a whole request (head and a JSON body) has arrived, or a
/// deadline passes.
async fn read_head_or_end(connection: &mut TcpStream) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout_at(deadline, connection.read(&mut buffer)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
        if received.ends_with(b"}") {
            return received;
        }
    }
}

/// Polls the kernel's table of IPv4 TCP sockets until one is in `SYN_SENT` towards `port`.
async fn wait_for_syn_sent(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let remote = format!(":{port:04X}");
    loop {
        let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        let connecting = table.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2).is_some_and(|rem| rem.ends_with(&remote)) && fields.get(3) == Some(&"02")
        });
        if connecting {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the delivery never started connecting to port {port}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
