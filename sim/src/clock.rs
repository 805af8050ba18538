//! Simulated wall-clock time for the server's `Clock` seam.
//!
//! Owns: [`SimClock`] — a fixed epoch ([`SIM_EPOCH_MS`]) plus the whole simulation's elapsed
//! time (`turmoil::sim_elapsed`), so a host restarted mid-simulation reads on from where the
//! simulation is instead of starting over, and records (lease expiry, `created_at_ms`) replay
//! exactly for a seed. Does not own: timers — the server uses `tokio::time`, which turmoil drives.

use std::sync::atomic::{AtomicI64, Ordering};

use chopin_server::runtime::clock::Clock;
use chopin_server::store::UnixMillis;

/// 2026-01-01T00:00:00Z in milliseconds since the Unix epoch: "time zero" of every simulation.
pub const SIM_EPOCH_MS: UnixMillis = 1_767_225_600_000;

/// `SIM_EPOCH_MS` + simulated time elapsed since the simulation began.
///
/// Never goes backwards: it remembers the latest reading and never returns less (hosts are
/// ticked one after another, each a little ahead within a tick; outside any host — e.g. in the
/// driver — it returns the latest reading).
#[derive(Debug)]
pub struct SimClock {
    epoch_ms: UnixMillis,
    latest_ms: AtomicI64,
}

impl SimClock {
    pub fn new() -> Self {
        Self::with_epoch(SIM_EPOCH_MS)
    }

    pub fn with_epoch(epoch_ms: UnixMillis) -> Self {
        Self {
            epoch_ms,
            latest_ms: AtomicI64::new(epoch_ms),
        }
    }
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> UnixMillis {
        match turmoil::sim_elapsed() {
            Some(elapsed) => {
                let elapsed_ms = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
                let now = self.epoch_ms.saturating_add(elapsed_ms);
                let before = self.latest_ms.fetch_max(now, Ordering::SeqCst);
                before.max(now)
            }
            None => self.latest_ms.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_simulation_the_clock_reads_its_epoch() {
        assert_eq!(SimClock::new().now_ms(), SIM_EPOCH_MS);
    }
}
