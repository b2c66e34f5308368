//! The per-CPU page lists: the [`Pcp`] struct, its configuration
//! (`batch`/`high`, the protection [`Policy`]) and its locks. The paths are
//! split by layer, each file adding an `impl` block (lowest first, no file
//! using one below it in this list):
//!
//! * `alloc`: allocation and refill (`rmqueue_pcplist`, `rmqueue_bulk`);
//! * `free`: free, its check, and the batch free (`free_pcppages_bulk`);
//! * `drain`: drains and background zeroing;
//! * `bulk`: `alloc_pages_bulk` and the bulk free;
//! * `report`: counters, snapshots, the report and the checker;
//! * `source`: the pcp as a [`PageAlloc`](buddy::PageAlloc) (slub's page source).

mod alloc;
mod bulk;
mod drain;
mod free;
mod report;
mod source;

use buddy::{AllocFlags, Buddy, Order, ZoneId};
use local_lock::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use local_lock::sync::CachePadded;
use local_lock::{ConstInit, LocalGuard, LocalLock, Platform, DEFAULT_SLOTS};

use crate::error::BatchHighError;
use crate::list::PageList;
use crate::sizing::{
    zone_batchsize, zone_highsize, zone_highsize_max, MAX_HIGH, NR_PCP_ORDERS,
    PAGE_ALLOC_COSTLY_ORDER, PCP_BATCH_SCALE_MAX,
};
use crate::stats::PcpStat;

/// Where the pcp gets its pages: a buddy allocator and its growth hook,
/// the buddy crate's [`BuddySource`](buddy::BuddySource) (one contract for
/// every page layer, `docs/DESIGN.md`), under the name pcp has always used.
///
/// ```
/// use buddy::{AllocFlags, Buddy, Config, Order, Tunables, ZoneId};
/// use local_lock::std_platform::{PerThread, StdCpu};
/// use pcp::{PageSource, Pcp, Policy};
/// use std::sync::Mutex;
///
/// /// A buddy with a spare region it adds when its zone runs out.
/// struct Reserve {
///     // Dropped first (fields drop in order): the memory outlives it.
///     heap: Buddy<StdCpu>,
///     // The spare memory, and whether it was added.
///     spare: Mutex<(Vec<u8>, bool)>,
/// }
/// impl PageSource for Reserve {
///     type P = StdCpu;
///     fn buddy(&self) -> &Buddy<StdCpu> {
///         &self.heap
///     }
///     fn grow(&self, _order: Order) -> bool {
///         let mut spare = self.spare.lock().unwrap();
///         let (mem, added) = &mut *spare;
///         if *added {
///             return false;
///         }
///         *added = true;
///         // SAFETY: zeroed memory that lives as long as `heap` (its buffer
///         // never moves), added once, used by nothing else.
///         unsafe { self.heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.is_ok()
///     }
/// }
/// // 256 KiB first, declared before the source: it outlives it.
/// let mut first = vec![0u8; 256 << 10];
/// let src = Reserve {
///     heap: Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(Tunables::NO_MIN)),
///     spare: Mutex::new((vec![0u8; 256 << 10], false)),
/// };
/// // SAFETY: `first` outlives `src`, nothing else uses it, and it reads as zero.
/// unsafe { src.heap.add_region(first.as_mut_ptr(), first.len(), true) }.unwrap();
/// let before = src.heap.total_managed_pages();
/// let pcp = Pcp::<_, PerThread>::new_tuned(&src, ZoneId::new(0), PerThread, Policy::Trylock, Some((8, 32)));
/// // Taking every page makes the pcp ask its source to grow (the pages are
/// // never freed here: the example ends).
/// let mut taken = 0;
/// while pcp.alloc(Order::ZERO, AllocFlags::NONE).is_some() {
///     taken += 1;
/// }
/// assert!(taken > before, "more pages than the first region: the spare was added");
/// assert!(src.spare.lock().unwrap().1);
/// ```
pub use buddy::BuddySource as PageSource;

/// How the per-CPU lists are protected against interrupt handlers (seed
/// 000 and its successors).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order, ZoneId};
/// use local_lock::std_platform::PerThread;
/// use pcp::{Pcp, PcpStat, Policy};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy, as in `Pcp`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// // std has no interrupt handlers: every policy serves tasks from the lists.
/// for policy in [Policy::IrqSafe, Policy::TaskOnly, Policy::Trylock] {
///     let pcp = Pcp::<_, PerThread>::new_tuned(&heap, ZoneId::new(0), PerThread, policy, Some((4, 16)));
///     assert_eq!(pcp.policy(), policy);
///     let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
///     // SAFETY: our page, freed once.
///     unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
///     assert_eq!(pcp.stats().get(PcpStat::BUDDY_FALLBACK), 0);
///     pcp.drain_local();
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Linux 5.14-5.19: `local_lock_irqsave` around every list access;
    /// interrupt handlers use the lists too.
    IrqSafe,
    /// Seed 000 (January 2017): the lists are protected by disabling
    /// preemption only; requests in interrupt context go straight to the
    /// buddy (zone lock with IRQs saved).
    TaskOnly,
    /// Linux 6.2 on: a per-CPU trylock with IRQs left enabled; an
    /// interrupt that finds its CPU's lists taken (or a contended slot)
    /// falls back to the buddy. The slots are real per-CPU spin locks
    /// (`pcp->lock`, Linux 6.0+) on every platform, so other CPUs drain
    /// them directly (`drain_cpu`, `drain_all`, `decay_pcp_high_cpu`,
    /// `prezero_cpu`).
    Trylock,
}

/// One CPU's lists (`struct per_cpu_pages`).
///
/// Invariant: `count == Σ_order (blocks on normal[order] and zero[order]) << order`
/// (in a snapshot, `Σ_order (normal[order].len + zero[order].len) << order`).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order};
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
/// let a = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
/// let b = pcp.alloc(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// // SAFETY: our blocks, each freed once (`a` written to: not zero).
/// unsafe {
///     a.ptr.as_ptr().write(1);
///     pcp.free(a.ptr, a.order, FreeFlags::NONE);
///     pcp.free(b.ptr, b.order, FreeFlags::NONE);
/// }
/// let lists = pcp.local_lists();
/// let pages = |l: &[pcp::list::PageList; 4]| l.iter().enumerate().map(|(o, l)| l.len << o).sum::<usize>();
/// assert_eq!(lists.count, pages(&lists.normal) + pages(&lists.zero));
/// assert_eq!(lists.normal[0].len, 1, "`a`, freed dirty");
/// assert!(lists.high >= 32);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CpuPages {
    /// Pages (not blocks) on all lists of this CPU, in a snapshot
    /// ([`Pcp::local_lists`], [`Pcp::cpu_lists`]). The live count is the
    /// lists' slot's published word (which lockless readers see:
    /// [`Pcp::cpu_count`]); this field reads 0 in the live lists (issue
    /// #22: one store per change).
    pub count: usize,
    /// This CPU's tuned limit (`pcp->high`, Linux 6.7+): kept within the
    /// zone's `[high_min, high_max]` (clamped at each use: by a refill, a
    /// decay, a free that finds `count` at `high_min` or above; snapshots
    /// show it clamped), raised by
    /// `nr_pcp_high` when frees fill the lists and by refills, lowered by
    /// `decay_pcp_high` and high-order `free_high` runs. 0 until first used.
    pub high: usize,
    /// Pages freed since the last allocations (`pcp->free_count`): each free
    /// adds its pages (up to `batch << PCP_BATCH_SCALE_MAX`), each
    /// allocation halves it; a batch free returns about this many pages.
    pub free_count: usize,
    /// `pcp->alloc_factor` (Linux 6.7+): order-0 refills ask for
    /// `batch << alloc_factor` pages; each refill raises it while that fits
    /// below `high` (`nr_pcp_alloc`), each free halves it.
    pub alloc_factor: u8,
    /// `PCPF_PREV_FREE_HIGH_ORDER` / `PCPF_FREE_HIGH_BATCH` (`pcp->flags`).
    pub flags: u8,
    /// Hot/cold lists, one per order: frees of hot pages and allocations go
    /// to the head, cold frees to the tail, cold allocations from the tail.
    pub normal: [PageList; NR_PCP_ORDERS],
    /// Known-zero pages, one list per order, same hot/cold order: kept apart
    /// so zeroed requests skip the clearing (seed 003).
    pub zero: [PageList; NR_PCP_ORDERS],
}

impl ConstInit for CpuPages {
    const INIT: Self = CpuPages {
        count: 0,
        high: 0,
        free_count: 0,
        alloc_factor: 0,
        flags: 0,
        normal: [PageList::EMPTY; NR_PCP_ORDERS],
        zero: [PageList::EMPTY; NR_PCP_ORDERS],
    };
}

/// Validates a `(batch, high)` pair and raises `high` to `2 * batch`.
const fn check_batch_high(batch: usize, high: usize) -> Result<(usize, usize), BatchHighError> {
    if batch == 0 {
        return Err(BatchHighError::ZeroBatch);
    }
    if batch > high {
        return Err(BatchHighError::BatchAboveHigh { batch, high });
    }
    if high > MAX_HIGH {
        return Err(BatchHighError::HighTooLarge { high });
    }
    // batch <= high <= MAX_HIGH: no overflow.
    let high = if high < 2 * batch { 2 * batch } else { high };
    if high > MAX_HIGH {
        return Err(BatchHighError::HighTooLarge { high });
    }
    Ok((batch, high))
}

/// Per-CPU counters: written by the CPU holding its lists (a relaxed load
/// and store, no atomic read-modify-write), summed by readers.
/// (Each CPU's count, which lockless readers see for drain_all's skip of
/// empty CPUs and the reports, is the lists' slot's published word,
/// [`LocalGuard::publish`](local_lock::LocalGuard::publish), issue #22.)
struct CpuCounters {
    stats: [AtomicU64; PcpStat::COUNT],
}

impl CpuCounters {
    local_lock::const_fn! {
        fn new() -> Self {
            #[cfg(not(loom))]
            return CpuCounters {
                stats: [const { AtomicU64::new(0) }; PcpStat::COUNT],
            };
            #[cfg(loom)]
            return CpuCounters {
                stats: core::array::from_fn(|_| AtomicU64::new(0)),
            };
        }
    }
}

/// Per-CPU page lists over one zone of a buddy allocator.
///
/// `S` supplies the buddy, `L` is the platform of the per-CPU lists (it may
/// differ from the buddy's: e.g. per-thread slots over a buddy whose zone
/// lock uses real CPUs), `N` the number of per-CPU slots.
///
/// ```
/// use buddy::{AllocFlags, Buddy, Config, FreeFlags, Order, Tunables, ZoneId};
/// use local_lock::std_platform::{PerThread, StdCpu};
/// use pcp::{Pcp, PcpStat, Policy};
///
/// // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// let mut mem = vec![0u8; 1 << 20];
/// // A 1 MiB buddy (4 KiB pages, blocks up to order 4), its memory leaked:
/// // it must outlive the allocator.
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(Tunables::NO_MIN));
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// // Per-thread lists over its zone: batch 8, high 32 pages.
/// let pcp = Pcp::<_, PerThread>::new_tuned(&heap, ZoneId::new(0), PerThread, Policy::Trylock, Some((8, 32)));
///
/// // The first allocation refills this thread's lists with a batch.
/// let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
/// assert_eq!(pcp.stats().get(PcpStat::REFILL), 1);
/// assert_eq!(pcp.local_lists().count, 7, "a batch of 8, one handed out");
/// // SAFETY: our page, of its order, freed once.
/// unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
/// // The next one comes from the list, with no zone lock.
/// let q = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
/// assert_eq!(q.ptr, p.ptr, "the hot end: the page just freed");
/// // SAFETY: as above.
/// unsafe { pcp.free(q.ptr, q.order, FreeFlags::NONE) };
/// // Pages on the lists are allocated in the buddy until a drain.
/// assert_eq!(pcp.drain_local(), 8);
/// assert_eq!(heap.total_free_pages(), heap.total_managed_pages());
/// ```
pub struct Pcp<S: PageSource, L: Platform, const N: usize = DEFAULT_SLOTS> {
    source: S,
    zone: ZoneId,
    policy: Policy,
    /// `batch` in use (pages; `zone->pageset_batch`).
    batch: AtomicUsize,
    /// `batch << PCP_BATCH_SCALE_MAX`, the most `free_count` grows to,
    /// stored with `batch` (the free path's compare, issue #22).
    free_max: AtomicUsize,
    /// The least each CPU's `high` decays to (`zone->pageset_high_min`).
    high_min: AtomicUsize,
    /// The most each CPU's `high` grows to (`zone->pageset_high_max`); equal
    /// to `high_min` when set by hand (auto-tuning off).
    high_max: AtomicUsize,
    /// Whether `batch`/`high` were set by hand (else recomputed from the
    /// zone at each refill, as the zone grows).
    tuned: AtomicUsize,
    cpus: LocalLock<CpuPages, L, N>,
    counters: [CachePadded<CpuCounters>; N],
}

/// The guard type over one CPU's lists.
type Guard<'a, L, const N: usize> = LocalGuard<'a, CpuPages, L, N>;

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    local_lock::const_fn! {
        /// Per-CPU lists over `zone` of `source`'s buddy, protected by
        /// `platform` with `policy`. `batch`/`high` follow the zone's size
        /// as the kernel computes them until [`set_batch_high`](Self::set_batch_high).
        pub fn new(source: S, zone: ZoneId, platform: L, policy: Policy) -> Self {
            Self::new_tuned(source, zone, platform, policy, None)
        }
    }

    local_lock::const_fn! {
        /// [`new`](Self::new) with `batch` and `high` set by hand from the
        /// start (as [`set_batch_high`](Self::set_batch_high); `high` is
        /// raised to at least `2 * batch`).
        ///
        /// # Panics
        ///
        /// If `set_batch_high` would refuse the values (in a `static`, a
        /// compile-time error).
        pub fn new_tuned(source: S, zone: ZoneId, platform: L, policy: Policy, tuned: Option<(usize, usize)>) -> Self {
            let (batch, high, t) = match tuned {
                Some((b, h)) => match check_batch_high(b, h) {
                    Ok((b, h)) => (b, h, 1),
                    Err(_) => panic!("pcp: new_tuned: batch must be 1..=high and high at most MAX_HIGH"),
                },
                None => (1, 4, 0),
            };
            Pcp {
                source,
                zone,
                policy,
                batch: AtomicUsize::new(batch),
                free_max: AtomicUsize::new(batch << PCP_BATCH_SCALE_MAX),
                high_min: AtomicUsize::new(high),
                high_max: AtomicUsize::new(high),
                tuned: AtomicUsize::new(t),
                #[cfg(not(loom))]
                cpus: LocalLock::new(platform),
                #[cfg(loom)]
                cpus: LocalLock::new_with(platform, |_| CpuPages::INIT),
                #[cfg(not(loom))]
                counters: [const { CachePadded::new(CpuCounters::new()) }; N],
                #[cfg(loom)]
                counters: core::array::from_fn(|_| CachePadded::new(CpuCounters::new())),
            }
        }
    }

    /// The page source.
    #[inline(always)]
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The buddy.
    #[inline(always)]
    pub fn buddy(&self) -> &Buddy<S::P> {
        self.source.buddy()
    }

    /// The zone these lists cache.
    pub fn zone(&self) -> ZoneId {
        self.zone
    }

    /// The protection policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The platform of the per-CPU lists.
    pub fn platform(&self) -> &L {
        self.cpus.platform()
    }

    /// `(batch, high)` in use; `high` is `high_min`, the limit every CPU's
    /// tuned `high` starts from and decays back to (the fixed `high` when set
    /// by hand).
    pub fn batch_high(&self) -> (usize, usize) {
        (self.batch.load(Relaxed), self.high_min.load(Relaxed))
    }

    /// `(high_min, high_max)`: the range of the CPUs' automatically tuned
    /// `high` (Linux 6.7+); equal when `high` is fixed by hand.
    pub fn high_range(&self) -> (usize, usize) {
        (self.high_min.load(Relaxed), self.high_max.load(Relaxed))
    }

    /// Sets `batch` and `high` by hand (`percpu_pagelist_high_fraction`,
    /// `vm.percpu_pagelist_*`): `high` below `2 * batch` is raised to
    /// `2 * batch` (a list keeps a batch after a batch free). As the
    /// kernel's sysctl, a fixed `high` turns the auto-tuning off
    /// (`high_min == high_max == high`). `None` goes back to the kernel's
    /// formulas (auto-tuned between `zone_highsize` of the low watermark and
    /// of an eighth of the zone). Readers tolerate the change at any time;
    /// each CPU's `high` is clamped to the new range at its next use.
    ///
    /// # Errors
    ///
    /// Nothing changes on error: `batch` 0 ([`BatchHighError::ZeroBatch`]),
    /// `batch > high` ([`BatchHighError::BatchAboveHigh`]), `high` (after
    /// the rounding) above [`MAX_HIGH`] pages
    /// ([`BatchHighError::HighTooLarge`]).
    pub fn set_batch_high(&self, v: Option<(usize, usize)>) -> Result<(), BatchHighError> {
        match v {
            Some((b, h)) => {
                let (b, h) = check_batch_high(b, h)?;
                self.set_batch(b);
                self.high_min.store(h, Relaxed);
                self.high_max.store(h, Relaxed);
                self.tuned.store(1, Relaxed);
            }
            None => {
                self.tuned.store(0, Relaxed);
                self.recompute_sizes();
            }
        }
        Ok(())
    }

    /// Sets `batch` and the auto-tuning range `[high_min, high_max]` by hand
    /// (what `zone_set_pageset_high_and_batch` computes at boot; for tests
    /// and experiments). `high_min` is raised to `2 * batch` as in
    /// [`set_batch_high`](Self::set_batch_high); `high_max == high_min`
    /// turns the tuning off. [`set_batch_high(None)`](Self::set_batch_high)
    /// goes back to the kernel's formulas.
    ///
    /// # Errors
    ///
    /// As [`set_batch_high`](Self::set_batch_high) for `(batch, high_min)`
    /// and for `high_max`, and [`BatchHighError::HighMinAboveMax`] if
    /// `high_max` is below (the raised) `high_min`; nothing changes on error.
    pub fn set_high_range(
        &self,
        batch: usize,
        high_min: usize,
        high_max: usize,
    ) -> Result<(), BatchHighError> {
        let (b, lo) = check_batch_high(batch, high_min)?;
        if high_max > MAX_HIGH {
            return Err(BatchHighError::HighTooLarge { high: high_max });
        }
        if high_max < lo {
            return Err(BatchHighError::HighMinAboveMax {
                high_min: lo,
                high_max,
            });
        }
        self.set_batch(b);
        self.high_min.store(lo, Relaxed);
        self.high_max.store(high_max, Relaxed);
        self.tuned.store(1, Relaxed);
        Ok(())
    }

    /// `zone_set_pageset_high_and_batch` from the zone's current size:
    /// `zone_batchsize`, `high_min` = `zone_highsize` of the low watermark,
    /// `high_max` = `zone_highsize` of an eighth of the managed pages.
    fn recompute_sizes(&self) {
        if self.tuned.load(Relaxed) != 0 {
            return;
        }
        let b = self.buddy();
        let managed = b.managed_pages(self.zone);
        let batch = zone_batchsize(managed, b.config().page_size());
        // The kernel divides by the node's online CPUs
        // (`cpumask_weight(cpumask_of_node)`), not by the possible ones.
        let cpus = self.platform().nr_online_cpus().max(1);
        let high_min = zone_highsize(b.watermarks(self.zone).low, cpus, batch).min(MAX_HIGH);
        let high_max = zone_highsize_max(managed, cpus, batch).max(high_min);
        self.set_batch(batch);
        self.high_min.store(high_min, Relaxed);
        self.high_max.store(high_max, Relaxed);
    }

    /// Stores `batch` and the `free_count` bound that follows from it.
    fn set_batch(&self, batch: usize) {
        self.batch.store(batch, Relaxed);
        self.free_max.store(batch << PCP_BATCH_SCALE_MAX, Relaxed);
    }

    #[inline(always)]
    fn stat(&self, cpu: usize, item: PcpStat, n: u64) {
        // Only the holder of `cpu`'s lists writes: load + store suffices.
        let c = &self.counters[cpu % N].stats[item as usize];
        c.store(c.load(Relaxed) + n, Relaxed);
    }

    /// [`stat`](Self::stat) for the per-operation events of the list fast
    /// paths (`ALLOC_HIT`, `ALLOC_COLD`, `FREE_HIT`): counted only with the
    /// `stats` feature (issue #22); without it they read 0.
    #[inline(always)]
    fn stat_event(&self, cpu: usize, item: PcpStat) {
        #[cfg(feature = "stats")]
        self.stat(cpu, item, 1);
        #[cfg(not(feature = "stats"))]
        let _ = (cpu, item);
    }

    /// Counts an event of a path that holds no pcp lock (bypasses): an
    /// atomic add, since the CPU's holder may be writing the same counter.
    #[cold]
    fn stat_unlocked(&self, item: PcpStat) {
        let cpu = self.platform().current_cpu() % N;
        self.counters[cpu].stats[item as usize].fetch_add(1, Relaxed);
    }

    /// Pages on the held lists (`pcp->count`): the slot's published word
    /// itself, which lockless readers poll (one store per change, issue
    /// #22); `CpuPages::count` is filled only in snapshots.
    #[inline(always)]
    fn count(g: &Guard<'_, L, N>) -> usize {
        g.published()
    }

    #[inline(always)]
    fn set_count(&self, g: &mut Guard<'_, L, N>, count: usize) {
        g.publish(count);
    }

    /// Takes this CPU's lists per the policy; `None` means "use the buddy".
    #[inline(always)]
    fn lock(&self) -> Option<Guard<'_, L, N>> {
        match self.policy {
            Policy::IrqSafe => Some(self.cpus.lock_irqsave()),
            Policy::TaskOnly => {
                if self.platform().in_interrupt() {
                    None
                } else {
                    Some(self.cpus.lock())
                }
            }
            // spin_trylock(&pcp->lock): a real per-CPU spin lock, so other
            // CPUs can drain these lists under it (Linux 6.0+).
            Policy::Trylock => self.cpus.try_lock_spin(),
        }
    }

    /// This CPU's lists with interrupts saved (drains, decay, snapshots),
    /// in the policy's flavour: `Trylock`'s slots are spin locks.
    #[inline]
    fn lock_irqsave(&self) -> Guard<'_, L, N> {
        match self.policy {
            Policy::Trylock => self.cpus.lock_irqsave_spin(),
            _ => self.cpus.lock_irqsave(),
        }
    }

    /// `cpu`'s lists from another CPU: `Trylock`'s spin slots on every
    /// platform (the kernel's `pcp->lock`, Linux 6.0+), the others where
    /// the platform allows remote access (locked strategy, a per-thread
    /// slot whose thread left).
    fn lock_remote(&self, cpu: usize) -> Option<Guard<'_, L, N>> {
        match self.policy {
            Policy::Trylock => self.cpus.lock_remote_spin(cpu),
            _ => self.cpus.lock_remote(cpu),
        }
    }

    #[inline(always)]
    fn uses_lists(&self, order: Order, flags: AllocFlags) -> bool {
        order.get() <= PAGE_ALLOC_COSTLY_ORDER
            && flags
                .max_zone()
                .is_none_or(|z| z.index() >= self.buddy().zone_type(self.zone).index())
    }
}

// fork support (issue #14 item 13; see `crate::fork`)

#[cfg(not(loom))]
impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// Takes CPU `cpu`'s list lock word and keeps it: the `prepare` half of
    /// a `fork` handler, for the slots the platform always locks (every
    /// slot of a locked platform, the per-thread platform's overflow slot).
    ///
    /// # Safety
    ///
    /// As [`LocalLock::fork_lock_slot`]: slot `cpu` is protected by the
    /// locked strategy for every context that uses it.
    pub unsafe fn fork_lock_cpu(&self, cpu: usize) {
        // SAFETY: caller's contract.
        unsafe { self.cpus.fork_lock_slot(cpu) }
    }

    /// Releases a slot taken by [`fork_lock_cpu`](Self::fork_lock_cpu).
    ///
    /// # Safety
    ///
    /// As [`LocalLock::fork_unlock_slot`].
    pub unsafe fn fork_unlock_cpu(&self, cpu: usize) {
        // SAFETY: caller's contract.
        unsafe { self.cpus.fork_unlock_slot(cpu) }
    }
}
