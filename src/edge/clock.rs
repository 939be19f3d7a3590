//! The wall clock as a value: the system's, or a simulated one that runs on
//! tokio's clock (paused in the simulation) from a base. Only values shared
//! between processes (unix ms: members' deadlines, revocation times) read
//! it; every wait and deadline inside a process uses tokio's `Instant`.

/// Where unix milliseconds come from.
#[derive(Debug, Clone, Copy, Default)]
pub enum WallClock {
    /// `SystemTime::now()`.
    #[default]
    System,
    /// `base_ms` at tokio's instant `base`, moving with tokio's clock.
    Simulated {
        base_ms: u64,
        base: tokio::time::Instant,
    },
}

impl WallClock {
    /// Milliseconds since the Unix epoch, now.
    pub fn unix_ms(&self) -> u64 {
        match self {
            WallClock::System => crate::unix_ms(),
            WallClock::Simulated { base_ms, base } => base_ms + base.elapsed().as_millis() as u64,
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
            base: tokio::time::Instant::now(),
        };
        assert_eq!(c.unix_ms(), 1_000);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert_eq!(c.unix_ms(), 1_250);
    }
}
