//! A closed-loop HTTP load driver: C tasks, each sending its next request as soon as the last
//! one was answered, until N requests were sent. Loopback only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::connections::{HttpClient, IDLE_CONNECTION};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;

/// A client of at most `max_connections` kept-alive connections ([`crate::connections`]).
pub fn http_client(max_connections: usize) -> HttpClient {
    HttpClient::new(max_connections)
}

/// What one run measured.
#[derive(Debug)]
pub struct RunReport {
    pub requests: u64,
    pub by_status: Vec<(u16, u64)>,
    pub elapsed: Duration,
    pub latency_us: Histogram<u64>,
}

impl RunReport {
    pub fn per_second(&self, status: u16) -> f64 {
        let count = self
            .by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .unwrap_or(0);
        count as f64 / self.elapsed.as_secs_f64()
    }

    pub fn count(&self, status: u16) -> u64 {
        self.by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }
}

/// Sends `total` requests built by `make(i)` from `concurrency` tasks.
pub async fn run<F>(client: &HttpClient, total: u64, concurrency: usize, make: F) -> RunReport
where
    F: Fn(u64) -> Request<Full<Bytes>> + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (client, make, next) = (client.clone(), make.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses = [0u64; 600];
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                .expect("histogram bounds are valid");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let sent = Instant::now();
                let status = match client.request(make(i)).await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let _ = response.into_body().collect().await;
                        status
                    }
                    Err(_) => 599,
                };
                let _ = latency.record(sent.elapsed().as_micros() as u64);
                statuses[usize::from(status).min(599)] += 1;
            }
            (statuses, latency)
        }));
    }
    let mut statuses = [0u64; 600];
    let mut latency_us =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds are valid");
    for task in tasks {
        if let Ok((counts, latency)) = task.await {
            for (s, n) in counts.iter().enumerate() {
                statuses[s] += n;
            }
            let _ = latency_us.add(&latency);
        }
    }
    let elapsed = started.elapsed();
    let by_status = statuses
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(s, n)| (s as u16, *n))
        .collect();
    RunReport {
        requests: total,
        by_status,
        elapsed,
        latency_us,
    }
}
