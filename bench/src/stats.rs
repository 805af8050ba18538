//! Figures from raw measurements: latency summaries (nearest-rank percentiles) and memory per
//! socket from two RSS readings.
//!
//! Owns: the arithmetic and how a figure is written (milliseconds with two decimals, KiB with
//! one). Does not own: taking the measurements or judging them against goals.

use std::time::Duration;

/// The summary of one set of latency samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Summary {
    /// `None` for no samples.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        Some(Summary {
            count: sorted.len(),
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
            mean: total / u32::try_from(sorted.len()).unwrap_or(u32::MAX),
        })
    }

    /// `p50 1.23 ms, p90 3.00 ms, p99 4.56 ms, max 7.89 ms, mean 2.00 ms (n=2000)`.
    pub fn line(&self) -> String {
        format!(
            "p50 {} ms, p90 {} ms, p99 {} ms, max {} ms, mean {} ms (n={})",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.max),
            ms(self.mean),
            self.count
        )
    }
}

/// Nearest-rank percentile of an ascending, non-empty slice.
fn percentile(sorted: &[Duration], pct: f64) -> Duration {
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Two readings of a process's resident set, and how many sockets were opened between them.
#[derive(Debug, Clone, Copy)]
pub struct RssDelta {
    pub before_kib: u64,
    pub after_kib: u64,
    pub sockets: usize,
}

impl RssDelta {
    /// KiB per socket; `None` when no socket was opened.
    pub fn per_socket(&self) -> Option<f64> {
        (self.sockets > 0)
            .then(|| (self.after_kib as f64 - self.before_kib as f64) / self.sockets as f64)
    }

    /// `RSS 45312 KiB → 412345 KiB (+367033 KiB over 2000 sockets) = 183.5 KiB per socket`.
    pub fn line(&self) -> String {
        let delta = self.after_kib as i64 - self.before_kib as i64;
        format!(
            "RSS {} KiB → {} KiB ({delta:+} KiB over {} sockets) = {} KiB per socket",
            self.before_kib,
            self.after_kib,
            self.sockets,
            self.per_socket()
                .map_or_else(|| "n/a".to_owned(), |k| format!("{k:.1}"))
        )
    }
}

/// Operations per second for `count` operations in `elapsed`.
pub fn rate(count: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}
