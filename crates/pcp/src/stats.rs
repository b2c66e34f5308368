//! Per-CPU statistics: an enum with one doc line per item, counted per CPU
//! (under the CPU's local lock, so plain adds) and summed on read.

use core::fmt;

macro_rules! stat_items {
    ($($(#[doc = $d:literal])* $name:ident),* $(,)?) => {
        /// A pcp statistic (kernel-style upper-case names).
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum PcpStat {
            $($(#[doc = $d])* $name,)*
        }

        impl PcpStat {
            /// Every item, in order.
            pub const ALL: &'static [PcpStat] = &[$(PcpStat::$name),*];
            /// Number of items.
            pub const COUNT: usize = Self::ALL.len();

            /// The item's name as printed in reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $(PcpStat::$name => stringify!($name),)*
                }
            }
        }
    };
}

stat_items! {
    /// A page was served from the CPU's hot/cold list.
    ALLOC_HIT,
    /// A page was served from the CPU's zero list to a zeroed request (no clearing).
    ALLOC_ZERO_HIT,
    /// A normal request took a zero page because the normal list was empty.
    ALLOC_ZERO_AS_NORMAL,
    /// A zeroed request took a normal page and cleared it.
    ALLOC_CLEARED,
    /// A cold request took from the tail of a list.
    ALLOC_COLD,
    /// An empty list was refilled from the buddy (one zone-lock acquisition).
    REFILL,
    /// Pages brought in by refills.
    REFILL_PAGES,
    /// A request bypassed the lists and went to the buddy (IRQ context under
    /// the task-only policy, a failed trylock, an order above 3).
    BUDDY_FALLBACK,
    /// An only-zero request found no zero page and failed.
    ONLY_ZERO_FAIL,
    /// A page was freed onto the CPU's lists.
    FREE_HIT,
    /// A page freed as still zero went onto the zero list.
    FREE_ZERO,
    /// A free reached `high` and returned pages to the buddy (one zone-lock acquisition).
    FREE_BATCH,
    /// Pages returned by those batch frees.
    FREE_BATCH_PAGES,
    /// A free bypassed the lists (see BUDDY_FALLBACK).
    FREE_BUDDY_FALLBACK,
    /// The lists of this CPU were drained (locally or remotely).
    DRAIN,
    /// Pages returned by drains.
    DRAIN_PAGES,
    /// Pages moved to the zero list by `prezero`.
    PREZERO_PAGES,
    /// Bulk allocation calls.
    BULK_ALLOC,
    /// Pages handed out by bulk allocation.
    BULK_ALLOC_PAGES,
}

/// One CPU's counters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PcpStats(pub [u64; PcpStat::COUNT]);

impl PcpStats {
    /// All zero.
    pub const ZERO: PcpStats = PcpStats([0; PcpStat::COUNT]);

    /// Adds `n` to an item.
    #[inline(always)]
    pub fn add(&mut self, item: PcpStat, n: u64) {
        self.0[item as usize] += n;
    }

    /// Increments an item.
    #[inline(always)]
    pub fn inc(&mut self, item: PcpStat) {
        self.add(item, 1)
    }

    /// The value of an item.
    pub fn get(&self, item: PcpStat) -> u64 {
        self.0[item as usize]
    }

    /// Adds another CPU's counters (summing on read).
    pub fn merge(&mut self, other: &PcpStats) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }
}

impl Default for PcpStats {
    fn default() -> Self {
        Self::ZERO
    }
}

impl fmt::Debug for PcpStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for &s in PcpStat::ALL {
            m.entry(&s.name(), &self.get(s));
        }
        m.finish()
    }
}

impl fmt::Display for PcpStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &s in PcpStat::ALL {
            writeln!(f, "{:<22} {}", s.name(), self.get(s))?;
        }
        Ok(())
    }
}
