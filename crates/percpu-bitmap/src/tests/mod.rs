//! Unit tests: hint maintenance against brute force, the allocator, the
//! typed layer, and a proptest state machine against a model.

mod alloc;
mod chunk_hints;
mod model;
mod typed;

/// xorshift64: deterministic pseudo-random numbers for the tests.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
