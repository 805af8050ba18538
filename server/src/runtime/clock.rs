//! Wall-clock time, behind a seam.
//!
//! Owns: reading "what time is it" for timestamps people see and for records (`created_at_ms`,
//! lease expiry). Does not own: timers and deadlines — those use `tokio::time`, which the
//! simulator drives. In the simulator the clock is the sim epoch plus elapsed simulated time.

use std::sync::Arc;

use crate::store::UnixMillis;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> UnixMillis;
}

pub type SharedClock = Arc<dyn Clock>;

/// The operating system's clock. The one place the server reads system time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // this is the seam itself
    fn now_ms(&self) -> UnixMillis {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that reads `tokio::time`: a fixed epoch plus the time elapsed on the runtime's clock
/// since the clock was made. Under turmoil (or a paused tokio runtime) it advances with simulated
/// time, so traces and records are reproducible.
#[derive(Debug, Clone)]
pub struct TokioClock {
    epoch_ms: UnixMillis,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// Must be called inside a tokio runtime.
    pub fn new(epoch_ms: UnixMillis) -> Self {
        Self {
            epoch_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> UnixMillis {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        self.epoch_ms
            .saturating_add(i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock set by hand, for unit tests.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    pub fn new(now_ms: UnixMillis) -> Self {
        Self(std::sync::atomic::AtomicI64::new(now_ms))
    }
    pub fn set(&self, now_ms: UnixMillis) {
        self.0.store(now_ms, std::sync::atomic::Ordering::SeqCst);
    }
    pub fn advance(&self, by_ms: i64) {
        self.0.fetch_add(by_ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
