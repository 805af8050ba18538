//! Randomness, behind a seam.
//!
//! Owns: every random value the server makes — ids, tokens, cookie verifiers, jitter.
//! Production draws from the operating system; the simulator and tests use a seeded generator
//! so a seed replays the same ids.

use std::sync::{Arc, Mutex};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use uuid::Uuid;

pub trait Entropy: Send + Sync + 'static {
    fn fill(&self, buf: &mut [u8]);

    /// A version-4 UUID made from this source's bytes.
    fn uuid(&self) -> Uuid {
        let mut bytes = [0u8; 16];
        self.fill(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// `len` random bytes as lowercase hex (a token of `len * 8` bits).
    fn token_hex(&self, len: usize) -> String {
        let mut bytes = vec![0u8; len];
        self.fill(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn next_u64(&self) -> u64 {
        let mut bytes = [0u8; 8];
        self.fill(&mut bytes);
        u64::from_le_bytes(bytes)
    }
}

pub type SharedEntropy = Arc<dyn Entropy>;

/// The operating system's randomness.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        // The OS source failing is not recoverable: no id or token may be made without it.
        getrandom::fill(buf).expect("the operating system's random source failed");
    }
}

/// A deterministic generator: the same seed yields the same sequence.
#[derive(Debug)]
pub struct SeededEntropy(Mutex<ChaCha20Rng>);

impl SeededEntropy {
    pub fn new(seed: u64) -> Self {
        Self(Mutex::new(ChaCha20Rng::seed_from_u64(seed)))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        let mut rng = self.0.lock().unwrap_or_else(|e| e.into_inner());
        rng.fill_bytes(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_entropy_repeats_for_a_seed_and_differs_across_seeds() {
        let a = SeededEntropy::new(7);
        let b = SeededEntropy::new(7);
        let c = SeededEntropy::new(8);
        let (ua, ub, uc) = (a.uuid(), b.uuid(), c.uuid());
        assert_eq!(ua, ub);
        assert_ne!(ua, uc);
        assert_eq!(ua.get_version_num(), 4);
        assert_eq!(a.token_hex(16).len(), 32);
    }
}
