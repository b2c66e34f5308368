//! SLUB statistics (`enum stat_item`): counted per CPU with deliberately
//! racy increments (a relaxed load and store, like `this_cpu_inc` without
//! the atomic instruction), summed on read.

use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

macro_rules! stat_items {
    ($($(#[doc = $d:literal])* $name:ident),* $(,)?) => {
        /// A SLUB statistic, with the kernel's names.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum SlubStat {
            $($(#[doc = $d])* $name,)*
        }

        impl SlubStat {
            /// Every item, in the kernel's order.
            pub const ALL: &'static [SlubStat] = &[$(SlubStat::$name),*];
            /// Number of items.
            pub const COUNT: usize = Self::ALL.len();

            /// The item's name as `/sys/kernel/slab/*/` spells it, upper case.
            pub const fn name(self) -> &'static str {
                match self {
                    $(SlubStat::$name => stringify!($name),)*
                }
            }
        }
    };
}

stat_items! {
    /// Allocation from the CPU slab's lockless freelist.
    ALLOC_FASTPATH,
    /// Allocation through `___slab_alloc`.
    ALLOC_SLOWPATH,
    /// Free to the CPU slab's freelist.
    FREE_FASTPATH,
    /// Free through `__slab_free`.
    FREE_SLOWPATH,
    /// Free to a frozen slab (another CPU's slab or CPU partial slab).
    FREE_FROZEN,
    /// A free made a full slab partial and put it on the node partial list.
    FREE_ADD_PARTIAL,
    /// A free emptied a slab and took it off the node partial list.
    FREE_REMOVE_PARTIAL,
    /// The slow path took a slab from the node partial list.
    ALLOC_FROM_PARTIAL,
    /// The slow path allocated a new slab from the page allocator.
    ALLOC_SLAB,
    /// The slow path refilled the CPU freelist from the CPU slab's freelist.
    ALLOC_REFILL,
    /// The CPU slab was on the wrong node (never: one node here).
    ALLOC_NODE_MISMATCH,
    /// A slab went back to the page allocator.
    FREE_SLAB,
    /// A CPU slab was flushed (deactivated) to install another.
    CPUSLAB_FLUSH,
    /// A deactivated slab was full (no list).
    DEACTIVATE_FULL,
    /// A deactivated slab was empty and freed.
    DEACTIVATE_EMPTY,
    /// A deactivated slab went to the head of the node partial list.
    DEACTIVATE_TO_HEAD,
    /// A deactivated slab went to the tail of the node partial list.
    DEACTIVATE_TO_TAIL,
    /// A deactivated slab had received remote frees while frozen.
    DEACTIVATE_REMOTE_FREES,
    /// The CPU slab had no free objects left and was dropped without a
    /// deactivation (it is full; no list).
    DEACTIVATE_BYPASS,
    /// A slab was allocated at the minimum order because the preferred order
    /// failed.
    ORDER_FALLBACK,
    /// The per-CPU (freelist, tid) compare-exchange failed (migration,
    /// interrupt, concurrent free) and was retried.
    CMPXCHG_DOUBLE_CPU_FAIL,
    /// A slab's (freelist, counters) compare-exchange failed and was retried.
    CMPXCHG_DOUBLE_FAIL,
    /// The slow path took a slab from the CPU partial list.
    CPU_PARTIAL_ALLOC,
    /// A free froze a full slab onto the CPU partial list.
    CPU_PARTIAL_FREE,
    /// A slab moved from the node partial list to the CPU partial list.
    CPU_PARTIAL_NODE,
    /// The CPU partial list was full and was drained to the node list.
    CPU_PARTIAL_DRAIN,
    /// Allocation from the CPU's main sheaf (per-CPU sheaves, 6.18 on).
    ALLOC_PCS,
    /// Free into the CPU's main sheaf.
    FREE_PCS,
    /// Main and spare sheaves swapped.
    SHEAF_SWAP,
    /// An empty sheaf was refilled from slabs by bulk allocation.
    SHEAF_REFILL,
    /// A full sheaf was flushed to slabs by bulk free.
    SHEAF_FLUSH,
    /// A sheaf was allocated.
    SHEAF_ALLOC,
    /// A sheaf was freed.
    SHEAF_FREE,
    /// A full sheaf was taken from the barn (for an empty one).
    BARN_GET,
    /// The barn had no full sheaf.
    BARN_GET_FAIL,
    /// A full sheaf was put into the barn (for an empty one).
    BARN_PUT,
    /// The barn was full of full sheaves.
    BARN_PUT_FAIL,
}

/// One CPU's counters.
#[derive(Debug)]
pub(crate) struct StatCells([AtomicUsize; SlubStat::COUNT]);

impl StatCells {
    pub(crate) const fn new() -> Self {
        StatCells([const { AtomicUsize::new(0) }; SlubStat::COUNT])
    }

    /// The racy increment (`this_cpu_inc` without the atomic RMW).
    #[inline(always)]
    pub(crate) fn inc(&self, s: SlubStat) {
        self.add(s, 1)
    }

    /// The racy addition (`stat_add`).
    #[inline(always)]
    pub(crate) fn add(&self, s: SlubStat, n: usize) {
        let c = &self.0[s as usize];
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> SlubStats {
        let mut v = [0u64; SlubStat::COUNT];
        for (o, c) in v.iter_mut().zip(&self.0) {
            *o = c.load(Ordering::Relaxed) as u64;
        }
        SlubStats(v)
    }
}

/// A snapshot of the counters (one CPU's, or summed over CPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlubStats(pub [u64; SlubStat::COUNT]);

impl Default for SlubStats {
    fn default() -> Self {
        SlubStats([0; SlubStat::COUNT])
    }
}

impl SlubStats {
    /// One item.
    pub fn get(&self, s: SlubStat) -> u64 {
        self.0[s as usize]
    }

    /// Adds `other` item by item.
    pub fn add(&mut self, other: &SlubStats) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += b;
        }
    }

    /// `new - self`, item by item (saturating).
    pub fn delta(&self, new: &SlubStats) -> SlubStats {
        let mut d = SlubStats::default();
        for ((o, a), b) in d.0.iter_mut().zip(&self.0).zip(&new.0) {
            *o = b.saturating_sub(*a);
        }
        d
    }
}

impl fmt::Display for SlubStats {
    /// The non-zero items, one `NAME value` per line (all with `{:#}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in SlubStat::ALL {
            let v = self.get(*s);
            if v != 0 || f.alternate() {
                writeln!(f, "{:<24} {v}", s.name())?;
            }
        }
        Ok(())
    }
}
