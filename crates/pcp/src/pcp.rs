//! The per-CPU page lists: allocation, free, refill, batch free, drains,
//! bulk operations, background zeroing.

use core::fmt;
use core::ptr::NonNull;

#[cfg(any(test, feature = "invariants"))]
use buddy::PageState;
use buddy::{AllocFlags, Buddy, FreeFlags, Order, Page, ZoneId};
use local_lock::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use local_lock::sync::CachePadded;
use local_lock::{ConstInit, LocalGuard, LocalLock, Platform, DEFAULT_SLOTS};

use crate::list::{is_pcp_tag, list_tag, owner, PageList};
use crate::sizing::{
    nr_pcp_free, refill_blocks, zone_batchsize, zone_highsize, MAX_FREE_FACTOR, NR_PCP_ORDERS,
    PAGE_ALLOC_COSTLY_ORDER,
};
use crate::stats::{PcpStat, PcpStats};
use buddy::Owner;

/// Where the pcp gets its pages: a buddy allocator, and optionally a way
/// to add memory to it when it runs dry (the std heap maps more).
pub trait PageSource: Sync {
    /// The buddy's platform.
    type P: Platform;
    /// The buddy allocator.
    fn buddy(&self) -> &Buddy<Self::P>;
    /// Called when the buddy could not supply a block of `order`: add
    /// memory if possible and say whether a retry may succeed. Runs outside
    /// every pcp lock.
    fn grow(&self, order: Order) -> bool {
        let _ = order;
        false
    }
}

impl<P: Platform> PageSource for Buddy<P> {
    type P = P;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<P> {
        self
    }
}

impl<S: PageSource> PageSource for &S {
    type P = S::P;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<S::P> {
        (**self).buddy()
    }
    fn grow(&self, order: Order) -> bool {
        (**self).grow(order)
    }
}

/// Times an allocation asks its page source to grow before it fails: memory
/// one `grow` added can be taken by other CPUs' refills before the retry
/// (seen as a spurious out-of-memory in a 4-thread `GlobalPcp` test).
pub const MAX_GROW_RETRIES: usize = 16;

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

/// The most pages one CPU's lists may hold (`high`): 2^20 (4 GiB of 4 KiB
/// pages; the kernel's `percpu_pagelist_high_fraction` keeps `high` to an
/// eighth of the zone). Larger values are refused by
/// [`Pcp::set_batch_high`], as are values whose batch arithmetic
/// (`batch << free_factor`) could overflow.
pub const MAX_HIGH: usize = 1 << 20;

/// Why [`Pcp::set_batch_high`] refused a `(batch, high)` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchHighError {
    /// `batch` is 0: a refill would bring nothing.
    ZeroBatch,
    /// `batch` is above `high`: a refill alone would overflow the list.
    BatchAboveHigh {
        /// The batch asked for.
        batch: usize,
        /// The high asked for.
        high: usize,
    },
    /// `high` (at least `2 * batch`) is above [`MAX_HIGH`].
    HighTooLarge {
        /// The high asked for (after raising it to `2 * batch`).
        high: usize,
    },
}

impl fmt::Display for BatchHighError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BatchHighError::ZeroBatch => f.write_str("pcp: set_batch_high: batch 0 refused"),
            BatchHighError::BatchAboveHigh { batch, high } => write!(
                f,
                "pcp: set_batch_high: batch {batch} above high {high} refused"
            ),
            BatchHighError::HighTooLarge { high } => write!(
                f,
                "pcp: set_batch_high: high {high} above the most a CPU's lists may hold ({MAX_HIGH} pages) refused"
            ),
        }
    }
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

/// Why a drain of a CPU did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainError {
    /// The platform does not let this CPU touch that CPU's lists (pinned
    /// kernel CPUs, live per-thread slots): drain it on that CPU.
    NotAllowed,
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

    // ----------------------------------------------------------------- alloc

    /// Allocates a block of `order` (`alloc_pages`): orders `0..=3` come
    /// from this CPU's lists (refilled by a batch under one zone-lock
    /// acquisition when empty), larger ones from the buddy. `ZEROED`
    /// requests take known-zero pages first and clear otherwise;
    /// `ONLY_ZERO` ones never clear (they fail instead); `COLD` ones take
    /// from the cold end. `Page::zero` tells whether the page reads as zero.
    #[inline]
    pub fn alloc(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        if !self.uses_lists(order, flags) {
            return self.alloc_buddy(order, flags);
        }
        let mut grown = 0;
        loop {
            let Some(mut g) = self.lock() else {
                self.stat_unlocked(PcpStat::BUDDY_FALLBACK);
                return self.alloc_buddy(order, flags);
            };
            let r = self.rmqueue_pcplist(&mut g, order, flags);
            drop(g);
            match r {
                Some((ptr, known_zero)) => {
                    return Some(self.prep_new_page(ptr, order, flags, known_zero))
                }
                None if flags.contains(AllocFlags::ONLY_ZERO) => return None,
                // Other CPUs may take what `grow` added before our retry
                // (their refills): retry while growing makes progress.
                None if grown < MAX_GROW_RETRIES && self.source.grow(order) => grown += 1,
                None => return None,
            }
        }
    }

    /// Clears what must be cleared, outside every lock (`prep_new_page`).
    #[inline(always)]
    fn prep_new_page(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: AllocFlags,
        known_zero: bool,
    ) -> Page {
        let zeroed = flags.contains(AllocFlags::ZEROED);
        if zeroed && !known_zero {
            let bytes = self.buddy().config().block_size(order);
            // SAFETY: the block is ours, `bytes` long.
            unsafe { ptr.as_ptr().write_bytes(0, bytes) };
        }
        if flags.contains(AllocFlags::COMP) && order > Order::ZERO {
            self.buddy().prep_compound(ptr, order);
        }
        Page {
            ptr,
            order,
            zero: zeroed || known_zero,
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_buddy(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        let b = self.buddy();
        let zflags = if flags.max_zone().is_some() {
            flags
        } else {
            flags.zone_max(self.zone)
        };
        if let Some(p) = b.alloc_pages(order, zflags) {
            return Some(p);
        }
        for _ in 0..MAX_GROW_RETRIES {
            if !self.source.grow(order) {
                break;
            }
            if let Some(p) = b.alloc_pages(order, zflags) {
                return Some(p);
            }
        }
        None
    }

    /// `rmqueue_pcplist`: a page of `order` from the locked lists, refilling
    /// once if needed. Returns the page and whether it is known zero.
    #[inline]
    fn rmqueue_pcplist(
        &self,
        g: &mut Guard<'_, L, N>,
        order: Order,
        flags: AllocFlags,
    ) -> Option<(NonNull<u8>, bool)> {
        let cpu = g.cpu();
        let mut refilled = false;
        loop {
            if let Some(r) = self.take(g, cpu, order, flags) {
                let c = g.count - order.pages();
                self.set_count(g, c);
                g.free_factor >>= 1;
                return Some(r);
            }
            if refilled || self.refill(g, order, flags) == 0 {
                if flags.contains(AllocFlags::ONLY_ZERO) {
                    self.stat(cpu, PcpStat::ONLY_ZERO_FAIL, 1);
                }
                return None;
            }
            refilled = true;
        }
    }

    /// Pops the right list for the request, counting which path served it.
    #[inline(always)]
    fn take(
        &self,
        g: &mut Guard<'_, L, N>,
        cpu: usize,
        order: Order,
        flags: AllocFlags,
    ) -> Option<(NonNull<u8>, bool)> {
        let o = order.index();
        let cold = flags.contains(AllocFlags::COLD);
        if flags.contains(AllocFlags::ZEROED) {
            if let Some(p) = g.zero[o].pop(cold) {
                self.stat(cpu, PcpStat::ALLOC_ZERO_HIT, 1);
                return Some((p, true));
            }
            if flags.contains(AllocFlags::ONLY_ZERO) {
                return None;
            }
            let p = g.normal[o].pop(cold)?;
            self.stat(cpu, PcpStat::ALLOC_CLEARED, 1);
            return Some((p, false));
        }
        if let Some(p) = g.normal[o].pop(cold) {
            self.stat(
                cpu,
                if cold {
                    PcpStat::ALLOC_COLD
                } else {
                    PcpStat::ALLOC_HIT
                },
                1,
            );
            return Some((p, false));
        }
        let p = g.zero[o].pop(cold)?;
        self.stat(cpu, PcpStat::ALLOC_ZERO_AS_NORMAL, 1);
        Some((p, true))
    }

    /// `rmqueue_bulk`: one zone-lock acquisition brings a batch; known-zero
    /// pages go to the zero list, the rest to the normal list, at the tail
    /// (in address order, as the kernel appends them).
    #[inline(never)]
    fn refill(&self, g: &mut Guard<'_, L, N>, order: Order, flags: AllocFlags) -> usize {
        self.recompute_sizes();
        let b = self.buddy();
        let o = order.index();
        let want = refill_blocks(self.batch.load(Relaxed), order.get());
        // The request's preference for zero blocks and its watermark rights
        // pass on; the zone is ours.
        let bflags = AllocFlags::NONE.union(flags);
        let cpu = g.cpu();
        let (normal_tag, zero_tag) = (list_tag(order.get(), false), list_tag(order.get(), true));
        let n = {
            let pages = &mut **g;
            b.alloc_bulk(self.zone, order, bflags, want, |p| {
                if p.zero {
                    pages.zero[o].push(owner(b, p.addr()), zero_tag, true);
                } else {
                    pages.normal[o].push(owner(b, p.addr()), normal_tag, true);
                }
            })
        };
        if n > 0 {
            let c = g.count + (n << order.get());
            self.set_count(g, c);
            self.stat(cpu, PcpStat::REFILL, 1);
            self.stat(cpu, PcpStat::REFILL_PAGES, (n << order.get()) as u64);
        }
        n
    }

    // ------------------------------------------------------------------ free

    /// Checks a block being freed against its descriptor, as the kernel's
    /// `free_pages_prepare` does: owned, a block head, of this order, and not
    /// already on a pcp list (a double free that has not reached the buddy
    /// yet). Panics with the address and the problem; changes nothing.
    #[inline(always)]
    #[track_caller]
    fn check_free(&self, ptr: NonNull<u8>, order: Order) -> &Owner {
        match self.validate_free(ptr, order) {
            Ok(o) => o,
            Err(e) => bad_free(e),
        }
    }

    /// The one address-to-descriptor lookup of a free; returns the block's
    /// owner words, which the lists then link through.
    #[inline(always)]
    fn validate_free(&self, ptr: NonNull<u8>, order: Order) -> Result<&Owner, BadFree> {
        match self.buddy().owner_of(ptr.as_ptr()) {
            Some(b)
                if b.head == ptr
                    && b.order == order
                    && !is_pcp_tag(b.owner.tag().load(Relaxed)) =>
            {
                Ok(b.owner)
            }
            other => Err(BadFree {
                ptr,
                order,
                found: other.map(|b| (b.head, b.order)),
            }),
        }
    }

    /// [`free`](Self::free) that returns the problem instead of panicking
    /// (for global allocators, which must not unwind); nothing changes on
    /// `Err`.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free).
    #[inline]
    pub unsafe fn try_free(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), BadFree> {
        let o = self.validate_free(ptr, order)?;
        // SAFETY: forwarded; validated above.
        unsafe { self.free_unchecked(ptr, order, flags, o) };
        Ok(())
    }

    /// Frees a block (`free_unref_page`): orders `0..=3` go to this CPU's
    /// lists (the zero list if `FreeFlags::ZERO`; the cold end if
    /// `FreeFlags::COLD`), and when the lists reach `high` a batch of the
    /// coldest pages returns to the buddy under one zone-lock acquisition.
    ///
    /// # Panics
    ///
    /// If the block is not an allocated block of this allocator's buddy, not
    /// a block head, of another order, or already freed (on a pcp list or in
    /// the buddy), with a message naming the address and the problem; the
    /// state is left intact.
    ///
    /// # Safety
    ///
    /// The caller holds the block (allocated with this order from this pcp or
    /// its buddy) and does not use it afterwards; with `FreeFlags::ZERO` it
    /// reads as zero.
    #[inline]
    #[track_caller]
    pub unsafe fn free(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        let o = self.check_free(ptr, order);
        // SAFETY: forwarded contract; validated above.
        unsafe { self.free_unchecked(ptr, order, flags, o) }
    }

    /// The free path after validation.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free), and `validate_free` accepted the block.
    #[inline(always)]
    unsafe fn free_unchecked(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags, o: &Owner) {
        let b = self.buddy();
        // The block is managed (validated): its zone is arithmetic on its address.
        if order.get() > PAGE_ALLOC_COSTLY_ORDER
            || b.config().zone_of_addr(ptr.as_ptr() as usize) != self.zone
        {
            // SAFETY: forwarded contract.
            return unsafe { b.free_pages_flags(ptr, order, flags) };
        }
        let Some(mut g) = self.lock() else {
            self.stat_unlocked(PcpStat::FREE_BUDDY_FALLBACK);
            // SAFETY: forwarded contract.
            return unsafe { b.free_pages_flags(ptr, order, flags) };
        };
        self.free_locked(&mut g, ptr, order, flags, o);
    }

    #[inline(always)]
    fn free_locked(
        &self,
        g: &mut Guard<'_, L, N>,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        own: &Owner,
    ) {
        let cpu = g.cpu();
        let o = order.index();
        let zero = flags.contains(FreeFlags::ZERO);
        let cold = flags.contains(FreeFlags::COLD);
        #[cfg(any(test, feature = "invariants"))]
        if zero {
            verify_zero(ptr, self.buddy().config().block_size(order));
        }
        #[cfg(not(any(test, feature = "invariants")))]
        let _ = ptr;
        if zero {
            g.zero[o].push(own, list_tag(order.get(), true), cold);
            self.stat(cpu, PcpStat::FREE_ZERO, 1);
        } else {
            g.normal[o].push(own, list_tag(order.get(), false), cold);
        }
        self.stat(cpu, PcpStat::FREE_HIT, 1);
        let c = g.count + order.pages();
        self.set_count(g, c);
        let high = self.high.load(Relaxed);
        if c >= high {
            let n = nr_pcp_free(self.batch.load(Relaxed), high, g.free_factor);
            self.free_pcppages_bulk(g, n, order.get());
            if g.free_factor < MAX_FREE_FACTOR {
                g.free_factor += 1;
            }
            self.stat(cpu, PcpStat::FREE_BATCH, 1);
        }
    }

    /// `free_pcppages_bulk`: returns at least `pages` pages (or all) to the
    /// buddy under one zone-lock acquisition, taking from the cold ends,
    /// round-robin over the orders starting with `start`; normal lists
    /// first, zero lists last (their pages keep PG_zero in the buddy).
    fn free_pcppages_bulk(&self, g: &mut Guard<'_, L, N>, pages: usize, start: u8) -> usize {
        let b = self.buddy();
        let cpu = g.cpu();
        let mut freed = 0usize;
        {
            let lists = &mut **g;
            // Phase 0: normal lists, phase 1: zero lists; within a phase,
            // one block per list in turn, starting at `start`; a phase ends
            // after a full round of empty lists.
            let mut zero = false;
            let mut o = start as usize % NR_PCP_ORDERS;
            let mut misses = 0usize;
            let iter = core::iter::from_fn(|| {
                while freed < pages {
                    let list = if zero {
                        &mut lists.zero[o]
                    } else {
                        &mut lists.normal[o]
                    };
                    let popped = list.pop(true);
                    let this = o;
                    o = (o + 1) % NR_PCP_ORDERS;
                    if let Some(ptr) = popped {
                        misses = 0;
                        freed += 1 << this;
                        let order = Order::new(this as u8).unwrap_or(Order::ZERO);
                        return Some(Page { ptr, order, zero });
                    }
                    misses += 1;
                    if misses == NR_PCP_ORDERS {
                        if zero {
                            return None;
                        }
                        zero = true;
                        misses = 0;
                    }
                }
                None
            });
            // SAFETY: every page on the lists is an allocated block of this
            // zone that the pcp holds, and the zero lists' pages (yielded
            // with `zero`) read as zero: nobody wrote them since they were
            // known zero (fresh, freed zeroed, or cleared by `prezero`).
            unsafe { b.free_bulk_keep_zero(self.zone, iter) };
        }
        let c = g.count - freed;
        self.set_count(g, c);
        self.stat(cpu, PcpStat::FREE_BATCH_PAGES, freed as u64);
        freed
    }

    // ---------------------------------------------------------------- drains

    /// Returns every page of the locked CPU's lists to the buddy.
    fn drain_locked(&self, g: &mut Guard<'_, L, N>) -> usize {
        if g.count == 0 {
            return 0;
        }
        let cpu = g.cpu();
        let n = self.free_pcppages_bulk(g, usize::MAX, 0);
        debug_assert_eq!(g.count, 0);
        self.stat(cpu, PcpStat::DRAIN, 1);
        self.stat(cpu, PcpStat::DRAIN_PAGES, n as u64);
        n
    }

    /// Drains this CPU's lists (`drain_local_pages`); returns the pages freed.
    pub fn drain_local(&self) -> usize {
        let mut g = self.cpus.lock_irqsave();
        self.drain_locked(&mut g)
    }

    /// Drains `cpu`'s lists from here (`drain_pages(cpu)`): directly under
    /// its lock where the platform allows (locked strategy, Linux 6.x; a
    /// per-thread slot whose thread has exited), the local lists if `cpu` is
    /// this CPU, else [`DrainError::NotAllowed`].
    pub fn drain_cpu(&self, cpu: usize) -> Result<usize, DrainError> {
        if cpu == self.platform().current_cpu() {
            // Pinned platforms name the current CPU reliably only while
            // pinned; take the lock and look again.
            let mut g = self.cpus.lock_irqsave();
            if g.cpu() == cpu {
                return Ok(self.drain_locked(&mut g));
            }
        }
        match self.cpus.lock_remote(cpu) {
            Some(mut g) => Ok(self.drain_locked(&mut g)),
            None => Err(DrainError::NotAllowed),
        }
    }

    /// Drains every CPU with pages on its lists (`drain_all_pages`: memory
    /// pressure, CPU offline); returns `(pages freed, CPUs that could not be
    /// drained from here)`.
    pub fn drain_all(&self) -> (usize, usize) {
        let mut freed = 0;
        let mut refused = 0;
        for cpu in 0..N.min(self.platform().nr_cpus().max(1)) {
            if self.counters[cpu].count.load(Relaxed) == 0 {
                continue;
            }
            match self.drain_cpu(cpu) {
                Ok(n) => freed += n,
                Err(DrainError::NotAllowed) => refused += 1,
            }
        }
        (freed, refused)
    }

    // ------------------------------------------------------------------ bulk

    /// `alloc_pages_bulk`: fills the `None` slots of `out` with order-0
    /// pages under one hold of this CPU's lists (refilling as needed);
    /// returns how many slots are populated in total (may be fewer than
    /// `out.len()` if memory runs out; callers loop). `ZEROED` pages are
    /// cleared under the hold, as the kernel's `prep_new_page` there does.
    pub fn alloc_bulk(&self, flags: AllocFlags, out: &mut [Option<NonNull<u8>>]) -> usize {
        let order = Order::ZERO;
        let mut populated = out.iter().filter(|s| s.is_some()).count();
        let missing = out.len() - populated;
        if missing == 0 {
            return populated;
        }
        let single = missing == 1;
        let g = if single || !self.uses_lists(order, flags) {
            None
        } else {
            self.lock()
        };
        let Some(mut g) = g else {
            // One page, or no lists: the single-page path.
            for slot in out.iter_mut().filter(|s| s.is_none()) {
                match self.alloc(order, flags) {
                    Some(p) => {
                        *slot = Some(p.ptr);
                        populated += 1;
                    }
                    None => break,
                }
            }
            return populated;
        };
        let cpu = g.cpu();
        let mut got = 0u64;
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            match self.rmqueue_pcplist(&mut g, order, flags) {
                Some((ptr, known_zero)) => {
                    self.prep_new_page(ptr, order, flags, known_zero);
                    *slot = Some(ptr);
                    populated += 1;
                    got += 1;
                }
                None => break,
            }
        }
        self.stat(cpu, PcpStat::BULK_ALLOC, 1);
        self.stat(cpu, PcpStat::BULK_ALLOC_PAGES, got);
        populated
    }

    /// Frees many order-0 pages under one hold of this CPU's lists.
    ///
    /// # Panics
    ///
    /// As [`free`](Self::free), on the first bad page (the pages before it
    /// are freed).
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free) for every page (order 0, not zero-flagged).
    pub unsafe fn free_bulk(&self, pages: &[NonNull<u8>]) {
        let order = Order::ZERO;
        let Some(mut g) = self.lock() else {
            for &p in pages {
                // SAFETY: forwarded contract.
                unsafe { self.free(p, order, FreeFlags::NONE) };
            }
            return;
        };
        for &p in pages {
            let o = self.check_free(p, order);
            if self.buddy().config().zone_of_addr(p.as_ptr() as usize) != self.zone {
                // SAFETY: forwarded contract.
                unsafe { self.buddy().free_pages(p, order) };
                continue;
            }
            self.free_locked(&mut g, p, order, FreeFlags::NONE, o);
        }
    }

    // --------------------------------------------------------------- prezero

    /// Background zeroing (seed 003): moves at most `budget` pages from the
    /// cold end of this CPU's normal lists to its zero lists by clearing
    /// them (outside the lock, one page at a time). For an idle loop or a
    /// helper thread. Returns the pages zeroed.
    pub fn prezero(&self, budget: usize) -> usize {
        self.prezero_with(budget, || self.lock())
    }

    /// [`prezero`](Self::prezero) for another CPU's lists, where the
    /// platform allows remote access (a helper thread on a locked platform).
    pub fn prezero_cpu(&self, cpu: usize, budget: usize) -> Result<usize, DrainError> {
        if self.cpus.lock_remote(cpu).is_none() {
            return Err(DrainError::NotAllowed);
        }
        Ok(self.prezero_with(budget, || self.cpus.lock_remote(cpu)))
    }

    fn prezero_with<'a>(
        &'a self,
        budget: usize,
        lock: impl Fn() -> Option<Guard<'a, L, N>>,
    ) -> usize {
        let mut done = 0;
        while done < budget {
            let Some(mut g) = lock() else { break };
            let b = self.buddy();
            let Some((o, p)) =
                (0..NR_PCP_ORDERS).find_map(|o| g.normal[o].pop(true).map(|p| (o, p)))
            else {
                break;
            };
            let c = g.count - (1 << o);
            self.set_count(&mut g, c);
            drop(g);
            let bytes = b
                .config()
                .block_size(Order::new(o as u8).unwrap_or(Order::ZERO));
            // SAFETY: the page was taken off the list; nobody else holds it.
            unsafe { p.as_ptr().write_bytes(0, bytes) };
            let Some(mut g) = lock() else {
                // SAFETY: the page is ours and zero.
                unsafe { b.free_pages_zeroed(p, Order::new(o as u8).unwrap_or(Order::ZERO)) };
                break;
            };
            g.zero[o].push(
                owner(b, p.as_ptr() as usize),
                list_tag(o as u8, true),
                false,
            );
            let c = g.count + (1 << o);
            self.set_count(&mut g, c);
            let cpu = g.cpu();
            self.stat(cpu, PcpStat::PREZERO_PAGES, 1 << o);
            done += 1 << o;
        }
        done
    }

    // --------------------------------------------------------- observability

    /// Counters summed over the CPUs.
    pub fn stats(&self) -> PcpStats {
        let mut s = PcpStats::ZERO;
        for c in &self.counters {
            s.merge(&cpu_stats(c));
        }
        s
    }

    /// One CPU's counters.
    pub fn cpu_stats(&self, cpu: usize) -> PcpStats {
        cpu_stats(&self.counters[cpu % N])
    }

    /// Pages on `cpu`'s lists (racy snapshot).
    pub fn cpu_count(&self, cpu: usize) -> usize {
        self.counters[cpu % N].count.load(Relaxed)
    }

    /// Pages on all CPUs' lists (racy snapshot).
    pub fn total_count(&self) -> usize {
        self.counters.iter().map(|c| c.count.load(Relaxed)).sum()
    }

    /// A report in the style of the buddy's (`/proc/zoneinfo`'s pagesets).
    pub fn report(&self) -> impl fmt::Display + '_ {
        Report(self)
    }

    /// The local CPU's lists, for tests and reports: a copy taken under the lock.
    pub fn local_lists(&self) -> CpuPages {
        *self.cpus.lock_irqsave()
    }

    /// A copy of `cpu`'s lists (per-order lengths of the normal and zero
    /// lists, count, drain scale), taken under its lock, if this CPU may
    /// reach it (its own CPU; any CPU on a locked platform).
    pub fn cpu_lists(&self, cpu: usize) -> Option<CpuPages> {
        {
            let g = self.cpus.lock_irqsave();
            if g.cpu() == cpu {
                return Some(*g);
            }
        }
        self.cpus.lock_remote(cpu).map(|g| *g)
    }

    /// Checks this CPU's lists: `count == Σ len << order`, links and tags
    /// consistent, every listed page allocated in the buddy with the list's
    /// order, zero-list pages read as zero. Panics on a violation.
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_local(&self) {
        let g = self.cpus.lock_irqsave();
        self.check_lists(&g, g.cpu());
    }

    /// Checks every CPU's lists (exclusive access, so every strategy).
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_all(&mut self) {
        let Self {
            cpus,
            counters,
            source,
            ..
        } = self;
        for (cpu, pages) in cpus.iter_mut().enumerate() {
            check_cpu(source.buddy(), pages, cpu);
            assert_eq!(
                counters[cpu].count.load(Relaxed),
                pages.count,
                "pcp: CPU {cpu} count mirror"
            );
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    fn check_lists(&self, pages: &CpuPages, cpu: usize) {
        check_cpu(self.buddy(), pages, cpu);
        assert_eq!(
            self.counters[cpu % N].count.load(Relaxed),
            pages.count,
            "pcp: CPU {cpu} count mirror"
        );
    }
}

fn cpu_stats(c: &CpuCounters) -> PcpStats {
    let mut s = PcpStats::ZERO;
    for (i, a) in c.stats.iter().enumerate() {
        s.0[i] = a.load(Relaxed);
    }
    s
}

#[cfg(any(test, feature = "invariants"))]
fn check_cpu<P: Platform>(b: &Buddy<P>, pages: &CpuPages, cpu: usize) {
    let mut total = 0usize;
    for o in 0..NR_PCP_ORDERS {
        for zero in [false, true] {
            let list = if zero {
                &pages.zero[o]
            } else {
                &pages.normal[o]
            };
            list.check(b, list_tag(o as u8, zero), |page| {
                match b.page_state(page as *const u8) {
                    PageState::Allocated { order } if order.index() == o => {}
                    s => panic!(
                        "pcp: CPU {cpu} lists page {page:#x} (order {o}) but the buddy says {s:?}"
                    ),
                }
                if zero {
                    verify_zero(
                        NonNull::new(page as *mut u8).expect("listed page is non-null"),
                        b.config()
                            .block_size(Order::new(o as u8).expect("pcp order")),
                    );
                }
            });
            total += list.len << o;
        }
    }
    assert_eq!(
        pages.count, total,
        "pcp: CPU {cpu} count {} != Σ len << order = {total}",
        pages.count
    );
}

#[cfg(any(test, feature = "invariants"))]
fn verify_zero(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: the page is held by the pcp (or being freed to it) and `bytes` long.
    let s = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), bytes) };
    assert!(
        s.iter().all(|&x| x == 0),
        "pcp: page {ptr:p} is on (or freed to) a zero list but is not zero"
    );
}

/// A rejected free: the block and what its descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadFree {
    /// The address freed.
    pub ptr: NonNull<u8>,
    /// The order it was freed with.
    pub order: Order,
    /// The allocated block containing it (head, order), if any.
    pub found: Option<(NonNull<u8>, Order)>,
}

impl fmt::Display for BadFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ptr, order) = (self.ptr, self.order);
        match self.found {
            None => write!(
                f,
                "pcp: bad free of {ptr:p} ({order}): not an allocated block of this allocator (foreign, or already free in the buddy)"
            ),
            Some((head, o)) if head != ptr => {
                write!(f, "pcp: bad free of {ptr:p} ({order}): not a block head (inside the block at {head:p}, {o})")
            }
            Some((_, o)) if o != order => write!(f, "pcp: bad free of {ptr:p}: freed as {order} but allocated as {o}"),
            Some(_) => write!(f, "pcp: double free of {ptr:p} ({order}): the page is already on a per-CPU list"),
        }
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn bad_free(e: BadFree) -> ! {
    panic!("{e}")
}

struct Report<'a, S: PageSource, L: Platform, const N: usize>(&'a Pcp<S, L, N>);

impl<S: PageSource, L: Platform, const N: usize> fmt::Display for Report<'_, S, L, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let (batch, high) = p.batch_high();
        writeln!(
            f,
            "pcp zone {} policy {:?}: batch {batch} high {high}, {} pages on lists",
            p.zone.index(),
            p.policy,
            p.total_count()
        )?;
        for cpu in 0..N.min(p.platform().nr_cpus().max(1)) {
            let c = p.cpu_count(cpu);
            if c == 0 {
                continue;
            }
            write!(f, "  cpu {cpu:>3}: count {c:>5}")?;
            match p.cpu_lists(cpu) {
                Some(l) => {
                    write!(f, "  normal")?;
                    for o in 0..NR_PCP_ORDERS {
                        write!(f, " {:>4}", l.normal[o].len)?;
                    }
                    write!(f, "  zero")?;
                    for o in 0..NR_PCP_ORDERS {
                        write!(f, " {:>4}", l.zero[o].len)?;
                    }
                    writeln!(f, "  free_factor {}", l.free_factor)?;
                }
                None => writeln!(f, "  (lists not reachable from this CPU)")?,
            }
        }
        write!(f, "{}", p.stats())
    }
}

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

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
