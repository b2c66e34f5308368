//! Per-CPU statistics: an enum with one doc line per item, counted per CPU
//! (under the CPU's local lock, so plain adds into a [`PcpStats`]) and summed
//! on read. The types come from local-lock's `stat_items!`; the text names
//! are the item names (as the reports have always printed them).

local_lock::stat_items! {
    /// A pcp statistic (kernel-style upper-case names).
    pub enum PcpStat;
    /// One CPU's counters (plain adds under the CPU's local lock), or their
    /// sum.
    pub struct PcpStats [width = 22, zeros = true];
    items {
        /// A page was served from the CPU's hot/cold list.
        ALLOC_HIT = "ALLOC_HIT",
        /// A page was served from the CPU's zero list to a zeroed request (no clearing).
        ALLOC_ZERO_HIT = "ALLOC_ZERO_HIT",
        /// A normal request took a zero page because the normal list was empty.
        ALLOC_ZERO_AS_NORMAL = "ALLOC_ZERO_AS_NORMAL",
        /// A zeroed request took a normal page and cleared it.
        ALLOC_CLEARED = "ALLOC_CLEARED",
        /// A cold request took from the tail of a list.
        ALLOC_COLD = "ALLOC_COLD",
        /// An empty list was refilled from the buddy (one zone-lock acquisition).
        REFILL = "REFILL",
        /// Pages brought in by refills.
        REFILL_PAGES = "REFILL_PAGES",
        /// A request bypassed the lists and went to the buddy (IRQ context under
        /// the task-only policy, a failed trylock, an order above 3).
        BUDDY_FALLBACK = "BUDDY_FALLBACK",
        /// An only-zero request found no zero page and failed.
        ONLY_ZERO_FAIL = "ONLY_ZERO_FAIL",
        /// A page was freed onto the CPU's lists.
        FREE_HIT = "FREE_HIT",
        /// A page freed as still zero went onto the zero list.
        FREE_ZERO = "FREE_ZERO",
        /// A free reached `high` and returned pages to the buddy (one zone-lock acquisition).
        FREE_BATCH = "FREE_BATCH",
        /// Pages returned by those batch frees.
        FREE_BATCH_PAGES = "FREE_BATCH_PAGES",
        /// A free bypassed the lists (see BUDDY_FALLBACK).
        FREE_BUDDY_FALLBACK = "FREE_BUDDY_FALLBACK",
        /// The lists of this CPU were drained (locally or remotely).
        DRAIN = "DRAIN",
        /// Pages returned by drains.
        DRAIN_PAGES = "DRAIN_PAGES",
        /// Pages moved to the zero list by `prezero`.
        PREZERO_PAGES = "PREZERO_PAGES",
        /// Bulk allocation calls.
        BULK_ALLOC = "BULK_ALLOC",
        /// Pages handed out by bulk allocation.
        BULK_ALLOC_PAGES = "BULK_ALLOC_PAGES",
    }
}
