//! Where time comes from. Two clocks, both read only here and at the edges,
//! and passed to the pure core as values:
//! - [`now`]: the monotonic clock, for every wait and deadline inside a
//!   process. It is tokio's (paused and advanced in tests and in the
//!   simulation), returned as a `std::time::Instant` so that `core/` needs
//!   no tokio. `std::time::Instant::now` is disallowed (`clippy.toml`): it
//!   would not follow a paused clock.
//! - [`WallClock`]: unix milliseconds, the system's or a simulated one that
//!   runs on tokio's clock from a base. Only values shared between processes
//!   (members' deadlines, revocation times) read it.

use std::time::Instant;

/// The monotonic clock now: tokio's, so that a paused runtime (tests, the
/// simulation) controls it.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Where unix milliseconds come from.
#[derive(Debug, Clone, Copy, Default)]
pub enum WallClock {
    /// `SystemTime::now()`.
    #[default]
    System,
    /// `base_ms` at the instant `base` (of [`now`]), moving with tokio's
    /// clock.
    Simulated { base_ms: u64, base: Instant },
}

impl WallClock {
    /// Milliseconds since the Unix epoch, now.
    pub fn unix_ms(&self) -> u64 {
        match self {
            WallClock::System => crate::unix_ms(),
            WallClock::Simulated { base_ms, base } => {
                base_ms + now().saturating_duration_since(*base).as_millis() as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_simulated_clock_moves_with_tokios() {
        let c = WallClock::Simulated {
            base_ms: 1_000,
            base: now(),
        };
        assert_eq!(c.unix_ms(), 1_000);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert_eq!(c.unix_ms(), 1_250);
    }
}
