//! SLUB statistics (`enum stat_item`): counted per CPU with deliberately
//! racy increments (a relaxed load and store, like `this_cpu_inc` without
//! the atomic instruction), summed on read. The types come from local-lock's
//! `stat_items!`; the text names are the `/sys/kernel/slab/<cache>/` file
//! names in upper case (as the reports have always printed them).

local_lock::stat_items! {
    /// A SLUB statistic, with the kernel's names.
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags, SlubStat};
    ///
    /// assert_eq!(SlubStat::ALLOC_SLAB.name(), "ALLOC_SLAB");
    /// assert_eq!(SlubStat::ALL.len(), SlubStat::COUNT);
    /// // A cache counts its paths: its first object needs a new slab.
    /// let mut c = KmemCache::<GlobalPages, PerThread>::create(
    ///     "stat_demo", 32, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let p = c.alloc().unwrap();
    /// assert_eq!(c.stats().get(SlubStat::ALLOC_SLAB), 1);
    /// assert_eq!(c.stats().get(SlubStat::ALLOC_SLOWPATH), 1);
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(p) };
    /// c.destroy().unwrap();
    /// ```
    pub enum SlubStat;
    /// A snapshot of the counters (one CPU's, or summed over CPUs).
    ///
    /// ```
    /// use slub::{SlubStat, SlubStats};
    ///
    /// let mut a = SlubStats::ZERO;
    /// a.inc(SlubStat::ALLOC_FASTPATH);
    /// a.add(SlubStat::FREE_FASTPATH, 2);
    /// let mut sum = a;
    /// sum.merge(&a); // two CPUs' counters
    /// assert_eq!(sum.get(SlubStat::FREE_FASTPATH), 4);
    /// assert_eq!(a.delta(&sum), a, "what changed from `a` to `sum`");
    /// // One `NAME value` line per non-zero item; `{:#}` prints them all.
    /// assert_eq!(a.to_string().lines().next(), Some(format!("{:<24} 1", "ALLOC_FASTPATH").as_str()));
    /// assert_eq!(a.to_string().lines().count(), 2);
    /// assert_eq!(format!("{a:#}").lines().count(), SlubStat::COUNT);
    /// ```
    pub struct SlubStats [width = 24, zeros = false];
    items {
        /// Allocation from the CPU slab's lockless freelist.
        ALLOC_FASTPATH = "ALLOC_FASTPATH",
        /// Allocation through `___slab_alloc`.
        ALLOC_SLOWPATH = "ALLOC_SLOWPATH",
        /// Free to the CPU slab's freelist.
        FREE_FASTPATH = "FREE_FASTPATH",
        /// Free through `__slab_free`.
        FREE_SLOWPATH = "FREE_SLOWPATH",
        /// Free to a frozen slab (another CPU's slab or CPU partial slab).
        FREE_FROZEN = "FREE_FROZEN",
        /// A free made a full slab partial and put it on the node partial list.
        FREE_ADD_PARTIAL = "FREE_ADD_PARTIAL",
        /// A free emptied a slab and took it off the node partial list.
        FREE_REMOVE_PARTIAL = "FREE_REMOVE_PARTIAL",
        /// The slow path took a slab from the node partial list.
        ALLOC_FROM_PARTIAL = "ALLOC_FROM_PARTIAL",
        /// The slow path allocated a new slab from the page allocator.
        ALLOC_SLAB = "ALLOC_SLAB",
        /// The slow path refilled the CPU freelist from the CPU slab's freelist.
        ALLOC_REFILL = "ALLOC_REFILL",
        /// A node-specific allocation found the CPU slab on another node and
        /// deactivated it (`node_match`).
        ALLOC_NODE_MISMATCH = "ALLOC_NODE_MISMATCH",
        /// A slab went back to the page allocator.
        FREE_SLAB = "FREE_SLAB",
        /// A CPU slab was flushed (deactivated) to install another.
        CPUSLAB_FLUSH = "CPUSLAB_FLUSH",
        /// A deactivated slab was full (no list).
        DEACTIVATE_FULL = "DEACTIVATE_FULL",
        /// A deactivated slab was empty and freed.
        DEACTIVATE_EMPTY = "DEACTIVATE_EMPTY",
        /// A deactivated slab went to the head of the node partial list.
        DEACTIVATE_TO_HEAD = "DEACTIVATE_TO_HEAD",
        /// A deactivated slab went to the tail of the node partial list.
        DEACTIVATE_TO_TAIL = "DEACTIVATE_TO_TAIL",
        /// A deactivated slab had received remote frees while frozen.
        DEACTIVATE_REMOTE_FREES = "DEACTIVATE_REMOTE_FREES",
        /// The CPU slab had no free objects left and was dropped without a
        /// deactivation (it is full; no list).
        DEACTIVATE_BYPASS = "DEACTIVATE_BYPASS",
        /// A slab was allocated at the minimum order because the preferred order
        /// failed.
        ORDER_FALLBACK = "ORDER_FALLBACK",
        /// The per-CPU (freelist, tid) compare-exchange failed (migration,
        /// interrupt, concurrent free) and was retried.
        CMPXCHG_DOUBLE_CPU_FAIL = "CMPXCHG_DOUBLE_CPU_FAIL",
        /// A slab's (freelist, counters) compare-exchange failed and was retried.
        CMPXCHG_DOUBLE_FAIL = "CMPXCHG_DOUBLE_FAIL",
        /// The slow path took a slab from the CPU partial list.
        CPU_PARTIAL_ALLOC = "CPU_PARTIAL_ALLOC",
        /// A free froze a full slab onto the CPU partial list.
        CPU_PARTIAL_FREE = "CPU_PARTIAL_FREE",
        /// A slab moved from the node partial list to the CPU partial list.
        CPU_PARTIAL_NODE = "CPU_PARTIAL_NODE",
        /// The CPU partial list was full and was drained to the node list.
        CPU_PARTIAL_DRAIN = "CPU_PARTIAL_DRAIN",
        /// Allocation from the CPU's main sheaf (per-CPU sheaves, 6.18 on).
        ALLOC_PCS = "ALLOC_PCS",
        /// Free into the CPU's main sheaf.
        FREE_PCS = "FREE_PCS",
        /// Main and spare sheaves swapped.
        SHEAF_SWAP = "SHEAF_SWAP",
        /// An empty sheaf was refilled from slabs by bulk allocation.
        SHEAF_REFILL = "SHEAF_REFILL",
        /// A full sheaf was flushed to slabs by bulk free.
        SHEAF_FLUSH = "SHEAF_FLUSH",
        /// A sheaf was allocated.
        SHEAF_ALLOC = "SHEAF_ALLOC",
        /// A sheaf was freed.
        SHEAF_FREE = "SHEAF_FREE",
        /// A full sheaf was taken from the barn (for an empty one).
        BARN_GET = "BARN_GET",
        /// The barn had no full sheaf.
        BARN_GET_FAIL = "BARN_GET_FAIL",
        /// A full sheaf was put into the barn (for an empty one).
        BARN_PUT = "BARN_PUT",
        /// The barn was full of full sheaves.
        BARN_PUT_FAIL = "BARN_PUT_FAIL",
    }
    /// One CPU's counters.
    pub(crate) struct StatCells;
}
