//! Allocating one block (`alloc_pages`): the zonelist walk, the watermark
//! check and `rmqueue` (`crate::zone`) under the zone lock, then clearing
//! and `prep_compound_page` outside it; and `GlobalAlloc` for a fixed heap.

use core::ptr::{self, NonNull};

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use super::node::NUMA;
use super::owner::Block;
use super::zero::clear_range;
use super::Buddy;
use crate::desc::{kind, order_of, PageDesc, KIND_ALLOC, KIND_TAIL, ZERO_FULL};
use crate::types::{AllocFlags, Order, Page, Stat, ZoneId, MAX_ZONE_IDS};
use crate::zone::{wmark_ok, Mark, Taken};

impl<P: Platform> Buddy<P> {
    /// The highest zone a request may use.
    #[inline(always)]
    pub(super) fn highest_zone(&self, flags: AllocFlags) -> usize {
        let top = self.cfg.nr_zones() - 1;
        match flags.max_zone() {
            Some(z) => z.index().min(top),
            None => top,
        }
    }

    /// Allocates a block of `2^order` pages (`alloc_pages`) as the
    /// kernel's `get_page_from_freelist` does, without the slow path's
    /// growth and reclaim (those are the source's:
    /// [`BuddySource::alloc_or_grow`](crate::BuddySource::alloc_or_grow)):
    /// first every zone of the request's zonelist against its **low**
    /// watermark (a lockless `zone_watermark_fast` before the lock), then
    /// every zone against the **min** watermark lowered for
    /// `HIGH`/`NONBLOCK`, each under its lock with IRQs saved, with the
    /// `lowmem_reserve` the request owes lower zones; then, for
    /// [`MEMALLOC`](AllocFlags::MEMALLOC) without
    /// [`NOMEMALLOC`](AllocFlags::NOMEMALLOC), with no watermark at all.
    /// `None` when no zone can serve it.
    ///
    /// The zonelist is the caller's node's
    /// ([`numa_node_id`](local_lock::Platform::numa_node_id)): its zones,
    /// then the other nodes' by distance (see
    /// [`alloc_pages_node`](Self::alloc_pages_node)); with one node (only
    /// node 0 has memory) node 0's zones, without the node lookup.
    ///
    /// With [`ZEROED`](AllocFlags::ZEROED) the block reads as zero: a
    /// known-zero block is taken without clearing; otherwise the non-zero
    /// part is cleared, after the lock is dropped.
    #[inline]
    pub fn alloc_pages(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        self.alloc_block(order, flags).map(|b| b.page)
    }

    /// [`alloc_pages`](Self::alloc_pages) that also hands back the block's
    /// owner words (its head descriptor, which the allocation had in hand):
    /// the [`PageAlloc`](crate::PageAlloc) contract, so a holder that keeps
    /// state in the owner words needs no [`owner_of`](Self::owner_of)
    /// lookup.
    #[inline]
    pub fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        if order > self.cfg.max_order() {
            return None;
        }
        // Several nodes, or a request bound to its node: the zonelist of
        // the caller's node, out of line. One relaxed load gives the top
        // zone type or says so.
        let top = self.nodes.fast_top();
        if flags.contains(AllocFlags::THISNODE) || top == NUMA {
            return self.alloc_block_numa(order, flags);
        }
        if top == 0 {
            // One zone (node 0's only): no zonelist to walk, and no
            // low-watermark pass (with no zone to fall back to, a block it
            // would give, the min pass gives too: min <= low). Zone 0 and
            // highest zone 0 as constants (issue #22: the zonelist loop's
            // indexing was 13 instructions of every allocation).
            if let Some(p) = self.alloc_from(0, order, flags, 0, Mark::Min) {
                return Some(p);
            }
            return self.alloc_memalloc(order, flags, 0);
        }
        self.alloc_block_zones(order, flags, top)
    }

    /// [`alloc_block`](Self::alloc_block) on node 0 with several zones,
    /// the highest `top`: the low-watermark pass, then the min pass, down
    /// the zonelist.
    #[inline(never)]
    fn alloc_block_zones(&self, order: Order, flags: AllocFlags, top: usize) -> Option<Block<'_>> {
        let highest = match flags.max_zone() {
            Some(z) => z.index().min(top),
            None => top,
        };
        // The low-watermark pass only decides something when there is a
        // zone to fall back to: with one zone, a block it would give, the
        // min pass gives too (min <= low).
        if highest > 0 {
            if let Some(p) = self.alloc_block_low(ZoneId::new(highest), order, flags) {
                return Some(p);
            }
        }
        let mut z = highest + 1;
        while z > 0 {
            z -= 1;
            if let Some(p) = self.alloc_from(z, order, flags, highest, Mark::Min) {
                return Some(p);
            }
        }
        self.alloc_memalloc(order, flags, highest)
    }

    /// The last resort of [`alloc_block`](Self::alloc_block): for
    /// [`MEMALLOC`](AllocFlags::MEMALLOC) without
    /// [`NOMEMALLOC`](AllocFlags::NOMEMALLOC), node 0's zones from
    /// `highest` down with no watermark.
    #[inline(always)]
    fn alloc_memalloc(&self, order: Order, flags: AllocFlags, highest: usize) -> Option<Block<'_>> {
        if flags.contains(AllocFlags::MEMALLOC) && !flags.contains(AllocFlags::NOMEMALLOC) {
            let zl = [3u8, 2, 1, 0];
            return self.alloc_no_watermarks(order, flags, highest, &zl[3 - highest.min(3)..]);
        }
        None
    }

    /// The first pass of `get_page_from_freelist` alone, over the zones
    /// of `from`'s node from `from` down: each against its low watermark (the lockless
    /// `zone_watermark_fast` first) plus the `lowmem_reserve` the request
    /// owes it given its own highest zone (from `flags`, at least `from`).
    /// For a per-CPU layer whose own zone (above `from`) is below its low
    /// watermark: the lower zones it would fall back to before dipping
    /// into its zone's min reserve.
    #[inline(never)]
    pub fn alloc_block_low(
        &self,
        from: ZoneId,
        order: Order,
        flags: AllocFlags,
    ) -> Option<Block<'_>> {
        if order > self.cfg.max_order() || from.index() >= MAX_ZONE_IDS {
            return None;
        }
        let t = self.zone_type_of(from);
        let base = from.index() - t;
        let highest = self.highest_zone(flags).max(t);
        let mut z = t + 1;
        while z > 0 {
            z -= 1;
            let z = base + z;
            if self.zone_watermark_fast(z, order, flags, highest, Mark::Low) {
                if let Some(p) = self.alloc_from_outline(z, order, flags, highest, Mark::Low) {
                    return Some(p);
                }
            }
        }
        None
    }

    /// `ALLOC_NO_WATERMARKS` (`__GFP_MEMALLOC`): the zonelist `zl` once
    /// more, with no watermark and no `lowmem_reserve`.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_no_watermarks(
        &self,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        zl: &[u8],
    ) -> Option<Block<'_>> {
        for &z in zl {
            let z = usize::from(z);
            if let Some(p) = self.alloc_from_outline(z, order, flags, highest, Mark::None) {
                self.lock_zone(z).count(Stat::NO_WATERMARKS, 1);
                return Some(p);
            }
        }
        None
    }

    /// Counts an event of a request in its highest zone (the slow path's
    /// counters: failures, reclaim rounds).
    #[cold]
    pub(crate) fn count_top(&self, flags: AllocFlags, s: Stat, n: u64) {
        self.lock_zone(self.highest_zone(flags)).count(s, n);
    }

    /// The lockless low-watermark check of a per-CPU list hit of `zone`
    /// (`zone_watermark_fast` before `rmqueue_pcplist`), with the request's
    /// highest zone `zone` unless `flags` names a higher one (the zonelist
    /// a request to that zone's lists walks): free pages less
    /// `2^order - 1` above the low watermark plus that `lowmem_reserve`.
    #[inline(always)]
    pub fn watermark_low_fast(&self, zone: ZoneId, order: Order, flags: AllocFlags) -> bool {
        let zn = &self.zones[zone.index()];
        // `lowmem_reserve[j]` is 0 for every `j` up to the zone's own type,
        // so the reserve owed for a highest zone `max(z, type)` is the one
        // for `z`, and none without a constraint.
        let reserve = match flags.max_zone() {
            Some(z) => zn.reserve[z.index().min(self.cfg.nr_zones() - 1)].load(Ordering::Relaxed),
            None => 0,
        };
        let free = zn.nr_free.load(Ordering::Relaxed) as isize - (order.pages() as isize - 1);
        let low = zn.wmark[1].load(Ordering::Relaxed) as isize;
        free > low + reserve as isize
    }

    /// `zone_watermark_fast`: the watermark check on the zone's lockless
    /// free count (as the last holder of its lock left it), without taking
    /// the lock. `mark` is [`Mark::Low`] (first pass, pcp hits) or
    /// [`Mark::Min`] with the request's reductions.
    #[inline(always)]
    pub(crate) fn zone_watermark_fast(
        &self,
        zone: usize,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        mark: Mark,
    ) -> bool {
        let zn = &self.zones[zone];
        let free = zn.nr_free.load(Ordering::Relaxed) as isize - (order.pages() as isize - 1);
        if mark == Mark::Low {
            // The common case first: one load of the low mark.
            let low = zn.wmark[1].load(Ordering::Relaxed) as isize;
            let res = zn.reserve[highest].load(Ordering::Relaxed) as isize;
            return free > low + res;
        }
        let wm = self.watermarks(ZoneId::new(zone));
        let mut reserve = [0usize; crate::types::MAX_ZONES];
        reserve[highest] = zn.reserve[highest].load(Ordering::Relaxed);
        wmark_ok(free, &wm, &reserve, flags, highest, mark)
    }

    /// Whether `zone` passes the lockless `zone_watermark_fast` check a
    /// per-CPU list hit makes before `rmqueue_pcplist`: its free pages less
    /// `2^order - 1` above the low watermark (`low`) or above the min
    /// watermark lowered by the request's `HIGH`/`NONBLOCK` (`!low`), plus
    /// the `lowmem_reserve` it owes lower zones given the request's
    /// highest allowed zone. The free count is the one the last holder of
    /// the zone lock left (pages on per-CPU lists are not free).
    #[inline(always)]
    pub fn watermark_fast(&self, zone: ZoneId, order: Order, flags: AllocFlags, low: bool) -> bool {
        // (`lowmem_reserve[j]` is 0 up to the zone's own type: the reserve
        // owed for `max(highest, type)` is the one for `highest`.)
        let highest = self.highest_zone(flags);
        let mark = if low { Mark::Low } else { Mark::Min };
        self.zone_watermark_fast(zone.index(), order, flags, highest, mark)
    }

    /// Allocates from one zone only (no fallback, e.g. for pcp, which keeps
    /// lists per zone). The watermark applies with the `lowmem_reserve` the
    /// request owes `zone` given its highest allowed zone (from `flags`; no
    /// constraint means the top zone).
    pub fn alloc_pages_zone(&self, zone: ZoneId, order: Order, flags: AllocFlags) -> Option<Page> {
        if order > self.cfg.max_order() || zone.index() >= self.nr_zone_ids() {
            return None;
        }
        let highest = self.highest_zone(flags);
        self.alloc_from_outline(zone.index(), order, flags, highest, Mark::Min)
            .map(|b| b.page)
    }

    /// [`alloc_from`](Self::alloc_from) out of line: for the passes other
    /// than the min pass of the common single-zone request, so that the
    /// hot path keeps its one inlined copy.
    #[inline(never)]
    pub(super) fn alloc_from_outline(
        &self,
        zone: usize,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        mark: Mark,
    ) -> Option<Block<'_>> {
        self.alloc_from(zone, order, flags, highest, mark)
    }

    #[inline(always)]
    fn alloc_from(
        &self,
        zone: usize,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        mark: Mark,
    ) -> Option<Block<'_>> {
        let mut g = self.lock_zone(zone);
        let t = if g.watermark_ok_mark(order, flags, highest, mark) {
            // SAFETY: zone lock held.
            unsafe { g.rmqueue(&self.cfg, order, flags) }
        } else {
            // Counted by the pass that decides (min): a zone below its low
            // watermark is only passed over for a lower one.
            if mark != Mark::Low {
                g.count(Stat::WATERMARK_FAIL, 1);
            }
            None
        };
        let Some(t) = t else {
            if mark != Mark::Low {
                g.count(Stat::ZONE_FAIL, 1);
            }
            return None;
        };
        let shift = self.cfg.page_shift();
        let clear = if flags.contains(AllocFlags::ZEROED) {
            let c = clear_range(t.zero, order, shift);
            g.count(Stat::ZEROED_REQUEST, 1);
            if c.1 == 0 {
                g.count(Stat::ZEROED_NO_CLEAR, 1);
            } else {
                g.count(Stat::ZEROED_CLEARED, 1);
                g.count(Stat::BYTES_CLEARED, c.1 as u64);
            }
            c
        } else {
            if t.zero == ZERO_FULL {
                g.count(Stat::ZERO_SPENT, 1);
            }
            (0, 0)
        };
        drop(g);
        Some(self.finish_alloc(t, order, flags, clear))
    }

    /// Outside the lock: clear what must be cleared, stamp tails.
    #[inline(always)]
    fn finish_alloc(
        &self,
        t: Taken,
        order: Order,
        flags: AllocFlags,
        clear: (usize, usize),
    ) -> Block<'_> {
        #[cfg(any(test, feature = "invariants"))]
        self.verify_known_zero(t.ptr, t.zero, order);
        if clear.1 != 0 {
            // SAFETY: the block is ours (just allocated) and `clear` lies in
            // it.
            unsafe { ptr::write_bytes(t.ptr.add(clear.0), 0, clear.1) };
        }
        if flags.contains(AllocFlags::COMP) {
            self.stamp_tails(t.desc, t.ptr, order);
        }
        Block {
            page: Page {
                // SAFETY: block pointers come from the non-null memory of a span.
                ptr: unsafe { NonNull::new_unchecked(t.ptr) },
                order,
                zero: flags.contains(AllocFlags::ZEROED) || t.zero == ZERO_FULL,
            },
            // SAFETY: `t.desc` is the block's head descriptor in its span's
            // memmap, which lives as long as the allocator.
            owner: unsafe { &*t.desc }.owner(),
        }
    }

    /// `prep_compound_page` for a block the caller holds (allocated here,
    /// or handed on by a per-CPU list that kept it): stamps its tail
    /// descriptors, so [`owner_of`](Self::owner_of) from any address inside
    /// it is two descriptor reads. What [`AllocFlags::COMP`] does at
    /// allocation, for blocks that did not come straight from the buddy.
    ///
    /// # Panics
    ///
    /// If `ptr` is not the head of an allocated block of `order`.
    pub fn prep_compound(&self, ptr: NonNull<u8>, order: Order) {
        if order == Order::ZERO {
            return;
        }
        let a = ptr.as_ptr() as usize;
        let shift = self.cfg.page_shift();
        let d = self
            .spans
            .find(a, shift)
            .and_then(|f| f.desc_ptr(a >> shift));
        let ok = d.is_some_and(|d| {
            // SAFETY: a descriptor of a span's memmap.
            let s = unsafe { (*d).state.load(Ordering::Acquire) };
            kind(s) == KIND_ALLOC && order_of(s) == order && a & ((1 << shift) - 1) == 0
        });
        match d {
            Some(d) if ok => self.stamp_tails(d, ptr.as_ptr(), order),
            _ => panic!("buddy: prep_compound({ptr:p}, {order}): not the head of an allocated block of that order"),
        }
    }

    /// `prep_compound_page`: every tail descriptor points at the head.
    #[cold]
    pub(super) fn stamp_tails(&self, desc: *mut PageDesc, head: *mut u8, order: Order) {
        for i in 1..order.pages() {
            // SAFETY: the block's descriptors are contiguous in its span's
            // memmap; its tails are written only by its holder (us).
            let d = unsafe { &*desc.add(i) };
            d.aux.store(head, Ordering::Relaxed);
            d.state.store(KIND_TAIL, Ordering::Release);
        }
    }
}

/// `GlobalAlloc` for a fixed heap (a no_std kernel's `#[global_allocator]`):
/// every `Layout` rounded up to a block (alignment honoured: blocks are
/// naturally aligned), null when it is larger than the largest block or
/// memory is exhausted. See [`GlobalBuddy`](crate::GlobalBuddy) for a heap
/// that grows from the OS.
///
/// `dealloc` of a bad pointer panics (see [`Buddy::free_pages`]).
// SAFETY: blocks are at least `max(size, align)` rounded up to a power of
// two of pages and naturally aligned, so every returned pointer honours the
// layout; `dealloc` gets back the order `alloc` used (same rounding).
unsafe impl<P: Platform> core::alloc::GlobalAlloc for Buddy<P> {
    #[inline]
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        match self.cfg.order_for(layout.size(), layout.align()) {
            Some(o) => self
                .alloc_pages(o, AllocFlags::NONE)
                .map_or(ptr::null_mut(), |p| p.ptr.as_ptr()),
            None => ptr::null_mut(),
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: core::alloc::Layout) -> *mut u8 {
        match self.cfg.order_for(layout.size(), layout.align()) {
            Some(o) => self
                .alloc_pages(o, AllocFlags::ZEROED)
                .map_or(ptr::null_mut(), |p| p.ptr.as_ptr()),
            None => ptr::null_mut(),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: core::alloc::Layout) {
        let o = self
            .cfg
            .order_for(layout.size(), layout.align())
            .unwrap_or(Order::ZERO);
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: GlobalAlloc's contract: `ptr` came from `alloc` with
            // this layout, hence this order.
            unsafe { self.free_pages(p, o) }
        }
    }
}
