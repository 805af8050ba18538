//! Opening many sockets with a bounded number in flight, and gathering what each opening took.
//!
//! Owns: the concurrency bound (each opening is its own tokio task, so the client side spreads
//! over every runtime worker, and at most `concurrency` are in flight), the per-opening
//! deadline, and collecting sockets, timings and failures. Does not own: what an opening does
//! (the caller's closure: an agent attach, a room greeting, a raw echo).

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;

/// The longest one opening may take before it counts as failed.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// One socket that opened, with its two timings.
pub struct Opened<T> {
    pub socket: T,
    /// The protocol step measured alone: `attach` → `attached`, one echo round trip.
    pub step: Duration,
    /// Everything from the TCP connect to the end of that step.
    pub total: Duration,
}

/// What one phase of openings gave.
pub struct Phase<T> {
    /// The sockets that opened, still open.
    pub sockets: Vec<T>,
    pub step: Vec<Duration>,
    pub total: Vec<Duration>,
    /// One line per failed opening, saying which and why.
    pub failures: Vec<String>,
    /// Wall time of the whole phase.
    pub elapsed: Duration,
}

impl<T> Phase<T> {
    /// `1998 of 2000 opened in 12.3 s (162/s); 2 failed, e.g.: …`.
    pub fn outcome(&self, noun: &str) -> String {
        let attempted = self.sockets.len() + self.failures.len();
        let mut line = format!(
            "{} of {attempted} {noun} opened in {:.1} s ({:.0}/s)",
            self.sockets.len(),
            self.elapsed.as_secs_f64(),
            crate::stats::rate(self.sockets.len(), self.elapsed)
        );
        if !self.failures.is_empty() {
            line.push_str(&format!("; {} FAILED, first ones:", self.failures.len()));
            for failure in self.failures.iter().take(5) {
                line.push_str("\n      ");
                line.push_str(failure);
            }
        }
        line
    }
}

/// Runs `open(i)` for `i` in `0..count`, at most `concurrency` at once, each within
/// [`OPEN_TIMEOUT`]. `what(i)` names opening `i` in a failure (`agent link 37`).
pub async fn open_all<T, F, Fut>(
    count: usize,
    concurrency: usize,
    what: impl Fn(usize) -> String,
    open: F,
) -> Phase<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<Opened<T>, String>> + Send + 'static,
{
    let started = Instant::now();
    let mut running = futures::stream::iter(0..count)
        .map(|i| {
            let task = tokio::spawn(tokio::time::timeout(OPEN_TIMEOUT, open(i)));
            async move { (i, task.await) }
        })
        .buffer_unordered(concurrency.max(1));
    let mut phase = Phase {
        sockets: Vec::with_capacity(count),
        step: Vec::with_capacity(count),
        total: Vec::with_capacity(count),
        failures: Vec::new(),
        elapsed: Duration::ZERO,
    };
    while let Some((i, joined)) = running.next().await {
        match joined {
            Ok(Ok(Ok(opened))) => {
                phase.sockets.push(opened.socket);
                phase.step.push(opened.step);
                phase.total.push(opened.total);
            }
            Ok(Ok(Err(why))) => phase.failures.push(format!("{} {why}", what(i))),
            Ok(Err(_)) => phase.failures.push(format!(
                "{} did not finish within {} s",
                what(i),
                OPEN_TIMEOUT.as_secs()
            )),
            Err(join) => phase
                .failures
                .push(format!("{} failed in its task: {join}", what(i))),
        }
    }
    phase.elapsed = started.elapsed();
    phase
}

/// Connects to `host` with `TCP_NODELAY` set.
pub async fn dial(host: &str) -> Result<tokio::net::TcpStream, String> {
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| format!("could not connect to {host}: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("could not set TCP_NODELAY: {e}"))?;
    Ok(stream)
}
