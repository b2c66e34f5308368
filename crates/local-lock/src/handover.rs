//! The slot hand-over protocol of the per-thread platform, as a core-only
//! type so that loom can check it (`tests/loom.rs`).
//!
//! Each slot is `FREE`, `OWNED` (a live thread uses it with no lock at all)
//! or `DRAINING` (a remote drainer has it). Transitions:
//!
//! ```text
//!   FREE --claim (CAS, Acquire)--> OWNED --release (store, Release)--> FREE
//!   FREE --try_drain (CAS, Acquire)--> DRAINING --end_drain (store, Release)--> FREE
//! ```
//!
//! The Release store of whoever leaves a slot pairs with the Acquire CAS of
//! whoever takes it next, so everything the previous holder wrote to the
//! slot's data happens-before the next holder's accesses: the data itself
//! needs no atomics.

use crate::sync::atomic::{AtomicUsize, Ordering};

/// Slot is free: a thread may claim it, a drainer may drain it.
pub const FREE: usize = 0;
/// Slot is owned by a live thread.
pub const OWNED: usize = 1;
/// Slot is being drained remotely.
pub const DRAINING: usize = 2;

/// Ownership words of `N` slots.
///
/// ```
/// use local_lock::handover::{SlotTable, DRAINING, FREE};
///
/// let t: SlotTable<2> = SlotTable::new();
/// assert_eq!((t.claim(), t.claim()), (Some(0), Some(1)));
/// assert_eq!(t.claim(), None, "every slot is owned");
/// assert!(!t.try_drain(1), "an owned slot is not drained");
/// t.release(1); // its thread exits
/// assert!(t.try_drain(1));
/// assert_eq!(t.state(1), DRAINING);
/// assert_eq!(t.claim(), None, "a slot being drained is not handed out");
/// t.end_drain(1);
/// assert_eq!(t.state(1), FREE);
/// assert_eq!(t.claim(), Some(1));
/// ```
pub struct SlotTable<const N: usize> {
    state: [AtomicUsize; N],
}

impl<const N: usize> SlotTable<N> {
    const_fn! {
        /// All slots free.
        pub fn new() -> Self {
            #[cfg(not(loom))]
            return SlotTable { state: [const { AtomicUsize::new(FREE) }; N] };
            #[cfg(loom)]
            return SlotTable { state: core::array::from_fn(|_| AtomicUsize::new(FREE)) };
        }
    }

    /// Claims the lowest free slot for a new thread.
    pub fn claim(&self) -> Option<usize> {
        self.state.iter().position(|st| {
            st.load(Ordering::Relaxed) == FREE
                && st
                    .compare_exchange(FREE, OWNED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// The owner gives its slot up (thread exit, after flushing).
    pub fn release(&self, slot: usize) {
        debug_assert_eq!(self.state[slot].load(Ordering::Relaxed), OWNED);
        self.state[slot].store(FREE, Ordering::Release);
    }

    /// A remote drainer takes a free slot; `false` if it is owned or being
    /// drained.
    pub fn try_drain(&self, slot: usize) -> bool {
        self.state.get(slot).is_some_and(|st| {
            st.compare_exchange(FREE, DRAINING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// The drainer gives the slot back.
    pub fn end_drain(&self, slot: usize) {
        debug_assert_eq!(self.state[slot].load(Ordering::Relaxed), DRAINING);
        self.state[slot].store(FREE, Ordering::Release);
    }

    /// The state of a slot (racy; for reports and tests).
    pub fn state(&self, slot: usize) -> usize {
        self.state[slot].load(Ordering::Relaxed)
    }
}

impl<const N: usize> Default for SlotTable<N> {
    fn default() -> Self {
        Self::new()
    }
}
