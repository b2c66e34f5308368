//! The allocation fast path (`alloc_pages` -> `rmqueue_pcplist`): this
//! CPU's lists, a refill of one batch from the buddy under one zone-lock
//! acquisition when they are empty (`rmqueue_bulk`), the buddy itself for
//! larger orders and bypasses, and growth of the source when the zone is
//! exhausted.

use core::ptr::NonNull;

use buddy::{alloc_slowpath, AllocFlags, Block, Order, Owner, Page, ZoneId};
use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

use super::{Guard, PageSource, Pcp};
use crate::list::{list_tag, owner};
use crate::sizing::nr_pcp_alloc;
use crate::stats::PcpStat;

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// Allocates a block of `order` (`alloc_pages`): orders `0..=3` come
    /// from this CPU's lists (refilled by a batch under one zone-lock
    /// acquisition when empty), larger ones from the buddy. `ZEROED`
    /// requests take known-zero pages first and clear otherwise;
    /// `ONLY_ZERO` ones never clear (they fail instead); `COLD` ones take
    /// from the cold end. `Page::zero` tells whether the page reads as zero.
    #[inline]
    pub fn alloc(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        // Its own copy of the paths, so the cold ones return a `Page` in
        // registers to the list hit's merge, not a `Block` through memory
        // (issue #22).
        self.alloc_as(order, flags, |b| b.page)
    }

    /// [`alloc`](Self::alloc) that also hands back the block's owner words
    /// (the [`PageAlloc`](buddy::PageAlloc) contract): a page from the lists
    /// brings its descriptor (the list node), a page from the buddy the one
    /// the buddy allocated it with, so the caller never looks it up.
    ///
    /// As the kernel's `get_page_from_freelist`, a list hit first passes
    /// the zone's lockless watermark check (`zone_watermark_fast`, before
    /// `rmqueue_pcplist`): the low watermark, else (after the lower zones
    /// were tried against theirs) the min watermark with the request's
    /// `HIGH`/`NONBLOCK` reductions; a zone below it is left to the buddy
    /// (lower zones, `MEMALLOC`'s reserves) and the slow path.
    #[inline]
    pub fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_as(order, flags, |b| b)
    }

    /// [`alloc_block`](Self::alloc_block) with the block handed out as
    /// `out` makes it.
    #[inline(always)]
    fn alloc_as<'a, R>(
        &'a self,
        order: Order,
        flags: AllocFlags,
        out: impl Fn(Block<'a>) -> R + Copy,
    ) -> Option<R> {
        if !self.uses_lists(order, flags) {
            return self.alloc_buddy(order, flags).map(out);
        }
        if !self.buddy().watermark_low_fast(self.zone, order, flags) {
            return self.alloc_below_low(order, flags).map(out);
        }
        self.alloc_lists(order, flags, out)
    }

    /// The list path once the watermark allowed it: the lists (refilled
    /// once if empty), then the slow path. A list hit returns its block
    /// straight from here; every other outcome is out of line, so the hit
    /// never goes through an `Option` in memory (issue #22).
    #[inline(always)]
    fn alloc_lists<'a, R>(
        &'a self,
        order: Order,
        flags: AllocFlags,
        out: impl Fn(Block<'a>) -> R + Copy,
    ) -> Option<R> {
        let Some(mut g) = self.lock() else {
            return self.alloc_locked_out(order, flags).map(out);
        };
        let cpu = g.cpu();
        match self.take(&mut g, cpu, order, flags) {
            Some(t) => {
                self.taken(&mut g, order);
                drop(g);
                Some(out(self.block(t, order, flags)))
            }
            None => self.alloc_lists_miss(g, order, flags, out),
        }
    }

    /// The lists' lock could not be had here (the trylock policy in an
    /// interrupt that hit the holder, task-only in an interrupt): the buddy.
    #[cold]
    #[inline(never)]
    fn alloc_locked_out(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.stat_unlocked(PcpStat::BUDDY_FALLBACK);
        self.alloc_buddy(order, flags)
    }

    /// The lists were empty for this request: a refill and a second try
    /// ([`rmqueue_refill`](Self::rmqueue_refill)), then the slow path
    /// (never for `ONLY_ZERO`, which fails instead).
    #[cold]
    #[inline(never)]
    fn alloc_lists_miss<'a, R>(
        &'a self,
        g: Guard<'a, L, N>,
        order: Order,
        flags: AllocFlags,
        out: impl Fn(Block<'a>) -> R + Copy,
    ) -> Option<R> {
        match self
            .rmqueue_refill(g, order, flags)
            .map(|t| self.block(t, order, flags))
        {
            Some(b) => Some(out(b)),
            None if flags.contains(AllocFlags::ONLY_ZERO) => None,
            None => self.alloc_lists_slow(order, flags).map(out),
        }
    }

    /// One try of the lists: `Err` when the lock cannot be had (the
    /// trylock policy in an interrupt that hit the holder).
    #[inline(always)]
    fn try_lists(&self, order: Order, flags: AllocFlags) -> Result<Option<Block<'_>>, ()> {
        let mut g = self.lock().ok_or(())?;
        // A list hit with the guard in registers: its address never
        // escapes on this path (the refill, out of line, takes it by
        // value), so it is not built on the stack (issue #22).
        let cpu = g.cpu();
        let r = match self.take(&mut g, cpu, order, flags) {
            Some(r) => {
                self.taken(&mut g, order);
                drop(g);
                Some(r)
            }
            None => self.rmqueue_refill(g, order, flags),
        };
        Ok(r.map(|t| self.block(t, order, flags)))
    }

    /// The block handed out for a page taken off the lists (`(page,
    /// known zero, descriptor)`), prepared outside the lists' lock.
    #[inline(always)]
    fn block<'a>(
        &'a self,
        (ptr, known_zero, owner): (NonNull<u8>, bool, &'a Owner),
        order: Order,
        flags: AllocFlags,
    ) -> Block<'a> {
        Block {
            page: self.prep_new_page(ptr, order, flags, known_zero),
            owner,
        }
    }

    /// The miss side of [`try_lists`](Self::try_lists): the rest of
    /// [`rmqueue_pcplist`](Self::rmqueue_pcplist) (a refill and a second
    /// try), then the lists' lock is dropped.
    #[cold]
    #[inline(never)]
    fn rmqueue_refill(
        &self,
        mut g: Guard<'_, L, N>,
        order: Order,
        flags: AllocFlags,
    ) -> Option<(NonNull<u8>, bool, &Owner)> {
        self.rmqueue_pcplist(&mut g, order, flags)
    }

    /// The bookkeeping of a page taken off the lists: the count, and the
    /// free batch an allocation halves.
    #[inline(always)]
    fn taken(&self, g: &mut Guard<'_, L, N>, order: Order) {
        let c = Self::count(g) - order.pages();
        self.set_count(g, c);
        // Allocations reduce the batch of the next frees.
        g.free_count >>= 1;
    }

    /// The zone failed its low watermark: the lower zones against theirs
    /// (the rest of the kernel's first pass), then the lists if the zone
    /// passes its min watermark (the slow path's first zone), else the
    /// buddy (lower zones at min, `MEMALLOC`, growth and reclaim).
    #[cold]
    #[inline(never)]
    fn alloc_below_low(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        // The next lower zone of the same node, if any.
        if b.zone_type(self.zone).index() > 0 {
            let lower = self.zone.index() - 1;
            // The request's own highest zone stays: the lower zones keep
            // the `lowmem_reserve` they owe it.
            if let Some(p) = b.alloc_block_low(ZoneId::new(lower), order, self.zflags(flags)) {
                return Some(p);
            }
        }
        if b.watermark_fast(self.zone, order, self.zflags(flags), false) {
            return self.alloc_lists(order, flags, |b| b);
        }
        self.stat_unlocked(PcpStat::WATERMARK_BYPASS);
        // Pages on this CPU's lists are not free to the watermark: if the
        // buddy cannot serve, give them back and retry once (the kernel's
        // `drain_all_pages` in `__alloc_pages_direct_reclaim`).
        match self.alloc_buddy(order, flags | AllocFlags::NOWARN) {
            Some(b) => Some(b),
            None => {
                self.drain_local_for_alloc();
                self.alloc_buddy(order, flags)
            }
        }
    }

    /// The slow path around the lists (`__alloc_pages_slowpath`): the
    /// source's growth and reclaim hook under the request's retry flags,
    /// each round retrying the lists (if the zone's min watermark allows)
    /// and then the buddy's zonelist.
    #[cold]
    #[inline(never)]
    fn alloc_lists_slow(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        alloc_slowpath(&self.source, order, flags, |f| {
            if self
                .buddy()
                .watermark_fast(self.zone, order, self.zflags(f), false)
            {
                if let Ok(Some(b)) = self.try_lists(order, f) {
                    return Some(b);
                }
            }
            self.buddy_block(order, self.zflags(f))
        })
    }

    /// The request's flags with this zone as its highest unless it names
    /// one (the zonelist a request to this zone's lists walks).
    #[inline(always)]
    fn zflags(&self, flags: AllocFlags) -> AllocFlags {
        if flags.max_zone().is_some() {
            flags
        } else {
            flags.zone_max(self.buddy().zone_type(self.zone))
        }
    }

    /// Clears what must be cleared, outside every lock (`prep_new_page`).
    #[inline(always)]
    pub(super) fn prep_new_page(
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
    fn alloc_buddy(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        if b.nr_node_ids() == 1 {
            self.source.alloc_or_grow(order, self.zflags(flags))
        } else {
            self.source
                .alloc_or_grow_node(b.zone_node(self.zone), order, self.zflags(flags))
        }
    }

    /// The buddy's passes without the slow path, over the zonelist of the
    /// node these lists cache (on one node: the caller's, node 0's).
    fn buddy_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        if b.nr_node_ids() == 1 {
            b.alloc_block(order, flags)
        } else {
            b.alloc_block_node(b.zone_node(self.zone), order, flags)
        }
    }

    /// This CPU's lists of this zone alone (`rmqueue_pcplist`, refilled
    /// from the zone when empty), no watermark check and no fallback:
    /// `None` when the lists and a refill give nothing or the lists'
    /// lock is not available here (an interrupt under `TaskOnly` or a
    /// held `Trylock`). For [`ZonePcps`](crate::ZonePcps), which makes the
    /// checks of its zonelist walk itself.
    #[inline]
    pub(crate) fn alloc_from_lists(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        if !self.uses_lists(order, flags) {
            return None;
        }
        self.try_lists(order, flags).ok().flatten()
    }

    /// `rmqueue_pcplist`: a page of `order` from the locked lists, refilling
    /// once if needed. Returns the page and whether it is known zero.
    #[inline]
    pub(super) fn rmqueue_pcplist(
        &self,
        g: &mut Guard<'_, L, N>,
        order: Order,
        flags: AllocFlags,
    ) -> Option<(NonNull<u8>, bool, &Owner)> {
        let cpu = g.cpu();
        let mut refilled = false;
        loop {
            if let Some(r) = self.take(g, cpu, order, flags) {
                self.taken(g, order);
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
    ) -> Option<(NonNull<u8>, bool, &Owner)> {
        let o = order.index();
        let cold = flags.contains(AllocFlags::COLD);
        if flags.contains(AllocFlags::ZEROED) {
            if let Some((p, own)) = g.zero[o].pop_owner(cold) {
                self.stat(cpu, PcpStat::ALLOC_ZERO_HIT, 1);
                return Some((p, true, own));
            }
            if flags.contains(AllocFlags::ONLY_ZERO) {
                return None;
            }
            let (p, own) = g.normal[o].pop_owner(cold)?;
            self.stat(cpu, PcpStat::ALLOC_CLEARED, 1);
            return Some((p, false, own));
        }
        if let Some((p, own)) = g.normal[o].pop_owner(cold) {
            self.stat_event(
                cpu,
                if cold {
                    PcpStat::ALLOC_COLD
                } else {
                    PcpStat::ALLOC_HIT
                },
            );
            return Some((p, false, own));
        }
        let (p, own) = g.zero[o].pop_owner(cold)?;
        self.stat(cpu, PcpStat::ALLOC_ZERO_AS_NORMAL, 1);
        Some((p, true, own))
    }

    /// `rmqueue_bulk`: one zone-lock acquisition brings a batch; known-zero
    /// pages go to the zero list, the rest to the normal list, at the tail
    /// (in address order, as the kernel appends them).
    #[inline(never)]
    fn refill(&self, g: &mut Guard<'_, L, N>, order: Order, flags: AllocFlags) -> usize {
        self.recompute_sizes();
        let b = self.buddy();
        let o = order.index();
        // nr_pcp_alloc (Linux 6.7+): a CPU that refills could have avoided
        // the zone with a larger `high` (raised by the refill, up to
        // high_max); consecutive order-0 refills double while they fit.
        let count = Self::count(g);
        let want = {
            let pages = &mut **g;
            nr_pcp_alloc(
                &mut pages.high,
                &mut pages.alloc_factor,
                count,
                self.batch.load(Relaxed),
                self.high_min.load(Relaxed),
                self.high_max.load(Relaxed),
                order.get(),
            )
        };
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
            let c = Self::count(g) + (n << order.get());
            self.set_count(g, c);
            self.stat(cpu, PcpStat::REFILL, 1);
            self.stat(cpu, PcpStat::REFILL_PAGES, (n << order.get()) as u64);
        }
        n
    }
}
