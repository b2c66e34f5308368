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
    zone_batchsize, zone_highsize, MAX_HIGH, NR_PCP_ORDERS, PAGE_ALLOC_COSTLY_ORDER,
};
use crate::stats::PcpStat;

/// Where the pcp gets its pages: a buddy allocator and its growth hook,
/// the buddy crate's [`BuddySource`](buddy::BuddySource) (one contract for
/// every page layer, `docs/DESIGN.md`), under the name pcp has always used.
pub use buddy::BuddySource as PageSource;

/// How the per-CPU lists are protected against interrupt handlers (seed
/// 000 and its successors).
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
    /// falls back to the buddy.
    Trylock,
}

/// One CPU's lists (`struct per_cpu_pages`).
///
/// Invariant: `count == Σ_order (normal[order].len + zero[order].len) << order`.
#[derive(Clone, Copy, Debug)]
pub struct CpuPages {
    /// Pages (not blocks) on all lists of this CPU.
    pub count: usize,
    /// Drain scale: a batch free returns `batch << free_factor` pages; it
    /// grows with consecutive batch frees and halves with each allocation.
    pub free_factor: u32,
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
        free_factor: 0,
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
struct CpuCounters {
    stats: [AtomicU64; PcpStat::COUNT],
    /// Mirror of `CpuPages::count`, readable without the lock (drain_all
    /// skips CPUs with nothing; reports).
    count: AtomicUsize,
}

impl CpuCounters {
    local_lock::const_fn! {
        fn new() -> Self {
            #[cfg(not(loom))]
            return CpuCounters {
                stats: [const { AtomicU64::new(0) }; PcpStat::COUNT],
                count: AtomicUsize::new(0),
            };
            #[cfg(loom)]
            return CpuCounters {
                stats: core::array::from_fn(|_| AtomicU64::new(0)),
                count: AtomicUsize::new(0),
            };
        }
    }
}

/// Per-CPU page lists over one zone of a buddy allocator.
///
/// `S` supplies the buddy, `L` is the platform of the per-CPU lists (it may
/// differ from the buddy's: e.g. per-thread slots over a buddy whose zone
/// lock uses real CPUs), `N` the number of per-CPU slots.
pub struct Pcp<S: PageSource, L: Platform, const N: usize = DEFAULT_SLOTS> {
    source: S,
    zone: ZoneId,
    policy: Policy,
    /// `batch` in use (pages).
    batch: AtomicUsize,
    /// `high` in use (pages).
    high: AtomicUsize,
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
                high: AtomicUsize::new(high),
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

    /// `(batch, high)` in use.
    pub fn batch_high(&self) -> (usize, usize) {
        (self.batch.load(Relaxed), self.high.load(Relaxed))
    }

    /// Sets `batch` and `high` by hand (`percpu_pagelist_high_fraction`,
    /// `vm.percpu_pagelist_*`): `high` below `2 * batch` is raised to
    /// `2 * batch` (a list keeps a batch after a batch free). `None` goes
    /// back to the kernel's formula. Readers tolerate the change at any
    /// time; only `count` is authoritative.
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
                self.batch.store(b, Relaxed);
                self.high.store(h, Relaxed);
                self.tuned.store(1, Relaxed);
            }
            None => {
                self.tuned.store(0, Relaxed);
                self.recompute_sizes();
            }
        }
        Ok(())
    }

    /// `zone_batchsize`/`zone_highsize` from the zone's current size.
    fn recompute_sizes(&self) {
        if self.tuned.load(Relaxed) != 0 {
            return;
        }
        let b = self.buddy();
        let managed = b.managed_pages(self.zone);
        let batch = zone_batchsize(managed, b.config().page_size());
        let high = zone_highsize(
            b.watermarks(self.zone).low,
            self.platform().nr_cpus(),
            batch,
        );
        self.batch.store(batch, Relaxed);
        self.high.store(high, Relaxed);
    }

    #[inline(always)]
    fn stat(&self, cpu: usize, item: PcpStat, n: u64) {
        // Only the holder of `cpu`'s lists writes: load + store suffices.
        let c = &self.counters[cpu % N].stats[item as usize];
        c.store(c.load(Relaxed) + n, Relaxed);
    }

    /// Counts an event of a path that holds no pcp lock (bypasses): an
    /// atomic add, since the CPU's holder may be writing the same counter.
    #[cold]
    fn stat_unlocked(&self, item: PcpStat) {
        let cpu = self.platform().current_cpu() % N;
        self.counters[cpu].stats[item as usize].fetch_add(1, Relaxed);
    }

    #[inline(always)]
    fn set_count(&self, g: &mut Guard<'_, L, N>, count: usize) {
        g.count = count;
        self.counters[g.cpu() % N].count.store(count, Relaxed);
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
            Policy::Trylock => self.cpus.try_lock(),
        }
    }

    #[inline(always)]
    fn uses_lists(&self, order: Order, flags: AllocFlags) -> bool {
        order.get() <= PAGE_ALLOC_COSTLY_ORDER
            && flags
                .max_zone()
                .is_none_or(|z| z.index() >= self.zone.index())
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
