//! Per-CPU statistics: an enum with one doc line per item, counted per CPU
//! (under the CPU's local lock, so plain adds into a [`PcpStats`]) and summed
//! on read. The types come from local-lock's `stat_items!`; the text names
//! are the item names (as the reports have always printed them).

local_lock::stat_items! {
    /// A pcp statistic (kernel-style upper-case names).
    ///
    /// ```
    /// use buddy::{AllocFlags, FreeFlags, Order};
    /// use pcp::PcpStat;
    /// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
    /// # let mut mem = vec![0u8; 1 << 20];
    /// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
    /// # // `Pcp`'s example.
    /// # let heap = buddy::Buddy::new(
    /// #     local_lock::std_platform::StdCpu,
    /// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
    /// # );
    /// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
    /// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
    /// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
    /// #     &heap,
    /// #     buddy::ZoneId::new(0),
    /// #     local_lock::std_platform::PerThread,
    /// #     pcp::Policy::Trylock,
    /// #     Some((8, 32)),
    /// # );
    /// assert_eq!(PcpStat::REFILL.name(), "REFILL");
    /// assert_eq!(PcpStat::ALL.len(), PcpStat::COUNT);
    /// let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
    /// // SAFETY: our page, freed once.
    /// unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
    /// let s = pcp.stats();
    /// assert_eq!((s.get(PcpStat::REFILL), s.get(PcpStat::REFILL_PAGES)), (1, 8));
    /// // A vm event: counted with the `stats` feature (the default).
    /// assert_eq!(s.get(PcpStat::FREE_HIT), u64::from(cfg!(feature = "stats")));
    /// ```
    pub enum PcpStat;
    /// One CPU's counters (plain adds under the CPU's local lock), or their
    /// sum.
    ///
    /// ```
    /// use pcp::{PcpStat, PcpStats};
    /// let mut a = PcpStats::ZERO;
    /// a.inc(PcpStat::ALLOC_HIT);
    /// a.add(PcpStat::REFILL_PAGES, 63);
    /// let mut sum = a;
    /// sum.merge(&a); // two CPUs' counters
    /// assert_eq!(sum.get(PcpStat::REFILL_PAGES), 126);
    /// assert_eq!(a.delta(&sum), a, "what changed from `a` to `sum`");
    /// // One `NAME value` line per item (zeros included).
    /// assert_eq!(a.to_string().lines().count(), PcpStat::COUNT);
    /// ```
    pub struct PcpStats [width = 22, zeros = true];
    items {
        /// A page was served from the CPU's hot/cold list (with the `stats`
        /// feature, else 0).
        ALLOC_HIT = "ALLOC_HIT",
        /// A page was served from the CPU's zero list to a zeroed request (no clearing).
        ALLOC_ZERO_HIT = "ALLOC_ZERO_HIT",
        /// A normal request took a zero page because the normal list was empty.
        ALLOC_ZERO_AS_NORMAL = "ALLOC_ZERO_AS_NORMAL",
        /// A zeroed request took a normal page and cleared it.
        ALLOC_CLEARED = "ALLOC_CLEARED",
        /// A cold request took from the tail of a list (with the `stats`
        /// feature, else 0).
        ALLOC_COLD = "ALLOC_COLD",
        /// An empty list was refilled from the buddy (one zone-lock acquisition).
        REFILL = "REFILL",
        /// Pages brought in by refills.
        REFILL_PAGES = "REFILL_PAGES",
        /// A request bypassed the lists and went to the buddy (IRQ context under
        /// the task-only policy, a failed trylock, an order above 3).
        BUDDY_FALLBACK = "BUDDY_FALLBACK",
        /// A list request found its zone below the watermark it was held
        /// to (`zone_watermark_fast`: low, then min with its reductions)
        /// and went to the buddy's zonelist and slow path.
        WATERMARK_BYPASS = "WATERMARK_BYPASS",
        /// An only-zero request found no zero page and failed.
        ONLY_ZERO_FAIL = "ONLY_ZERO_FAIL",
        /// A page was freed onto the CPU's lists (with the `stats` feature,
        /// else 0).
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
