//! The bulk paths for pcp: `rmqueue_bulk` ([`Buddy::alloc_bulk`]) and
//! `free_pcppages_bulk` ([`Buddy::free_bulk`] and its variants), each under
//! one zone-lock acquisition.

use core::ptr::NonNull;

use local_lock::Platform;

use super::free::bad_free;
use super::Buddy;
use crate::desc::ZERO_FULL;
use crate::error::{FreeError, FreeErrorKind};
use crate::types::{AllocFlags, Order, Page, Stat, ZoneId};

impl<P: Platform> Buddy<P> {
    /// `rmqueue_bulk`: takes up to `max` blocks of `order` from `zone`
    /// under **one** acquisition of its lock, calling `sink` with each (in
    /// address order when split from one larger block; `Page::zero` tells
    /// whether it is known zero). Stops early at the watermark or when the
    /// zone has no block. Returns how many it took.
    ///
    /// `flags`: `ZEROED` prefers known-zero blocks, `ONLY_ZERO` takes only
    /// those; bulk allocation **never clears** (the lock is held). `COLD`,
    /// `COMP`, `HIGH`/`ATOMIC` and the zone constraint work as for
    /// [`alloc_pages`](Self::alloc_pages) (a zone above the constraint gets
    /// nothing).
    ///
    /// `sink` runs under the zone lock with IRQs saved: it must not call
    /// into this allocator (deadlock), and should only link the page (e.g.
    /// into a pcp list through its [`Owner`](crate::Owner) words).
    pub fn alloc_bulk(
        &self,
        zone: ZoneId,
        order: Order,
        flags: AllocFlags,
        max: usize,
        mut sink: impl FnMut(Page),
    ) -> usize {
        let highest = self.highest_zone(flags);
        if order > self.cfg.max_order() || self.zone_type_of(zone) > highest || max == 0 {
            return 0;
        }
        let mut g = self.lock_zone(zone.index());
        let mut n = 0;
        while n < max {
            if !g.watermark_ok(order, flags, highest) {
                g.count(Stat::WATERMARK_FAIL, 1);
                break;
            }
            // SAFETY: zone lock held.
            let Some(t) = (unsafe { g.rmqueue(&self.cfg, order, flags) }) else {
                break;
            };
            #[cfg(any(test, feature = "invariants"))]
            self.verify_known_zero(t.ptr, t.zero, order);
            if flags.contains(AllocFlags::COMP) {
                self.stamp_tails(t.desc, t.ptr, order);
            }
            sink(Page {
                // SAFETY: block pointers are non-null.
                ptr: unsafe { NonNull::new_unchecked(t.ptr) },
                order,
                zero: t.zero == ZERO_FULL,
            });
            n += 1;
        }
        if n == 0 {
            g.count(Stat::ZONE_FAIL, 1);
        }
        n
    }

    /// `free_pcppages_bulk`: frees every block `pages` yields into `zone`
    /// under **one** acquisition of its lock. Returns how many it freed.
    ///
    /// Every block is freed as **not known zero**: `Page::zero` is ignored.
    /// A `Page` from [`alloc_bulk`](Self::alloc_bulk) says what the block was
    /// when it was handed out, not what it is after its holder used it, so
    /// handing it back must not make a claim about its contents. A caller
    /// that keeps blocks it knows still read as zero (pcp's zero lists) says
    /// so explicitly with [`free_bulk_keep_zero`](Self::free_bulk_keep_zero).
    ///
    /// The iterator runs under the zone lock with IRQs saved: it must not
    /// call into this allocator.
    ///
    /// # Panics
    ///
    /// On the first bad block ([`FreeErrorKind`], including a block of
    /// another zone), after releasing the lock; the blocks before it are
    /// freed, it and the rest are not.
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages) for every block.
    #[track_caller]
    pub unsafe fn free_bulk<I: IntoIterator<Item = Page>>(&self, zone: ZoneId, pages: I) -> usize {
        // SAFETY: caller's contract.
        match unsafe { self.free_bulk_inner(zone, pages, false) } {
            Ok(n) => n,
            Err(e) => bad_free(e),
        }
    }

    /// [`free_bulk`](Self::free_bulk) that trusts `Page::zero`: a block
    /// yielded with `zero: true` keeps PG_zero (as
    /// [`free_pages_zeroed`](Self::free_pages_zeroed)) and serves a later
    /// zeroed request without clearing. For a caller that tracks which of
    /// its blocks still read as zero (pcp's zero lists, whose pages nobody
    /// wrote since they were known zero); never for `Page`s passed through
    /// from [`alloc_bulk`](Self::alloc_bulk) after use. Checked builds
    /// (`invariants`) verify each such block reads as zero.
    ///
    /// # Panics
    ///
    /// As [`free_bulk`](Self::free_bulk) (and, in checked builds, on a block
    /// claimed zero that is not).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk), and every block yielded with
    /// `zero: true` reads as zero.
    #[track_caller]
    pub unsafe fn free_bulk_keep_zero<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> usize {
        // SAFETY: caller's contract.
        match unsafe { self.free_bulk_inner(zone, pages, true) } {
            Ok(n) => n,
            Err(e) => bad_free(e),
        }
    }

    /// [`free_bulk`](Self::free_bulk) that returns the first bad block's
    /// error instead of panicking (the blocks before it are freed). Every
    /// block is freed as not known zero.
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    pub unsafe fn try_free_bulk<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> Result<usize, FreeError> {
        // SAFETY: caller's contract.
        unsafe { self.free_bulk_inner(zone, pages, false) }
    }

    /// [`free_bulk_keep_zero`](Self::free_bulk_keep_zero) that returns the
    /// first bad block's error instead of panicking (the blocks before it
    /// are freed).
    ///
    /// # Safety
    ///
    /// As [`free_bulk_keep_zero`](Self::free_bulk_keep_zero).
    pub unsafe fn try_free_bulk_keep_zero<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> Result<usize, FreeError> {
        // SAFETY: caller's contract.
        unsafe { self.free_bulk_inner(zone, pages, true) }
    }

    /// The bulk free; `keep_zero`: trust `Page::zero`.
    ///
    /// # Safety
    ///
    /// As [`free_bulk_keep_zero`](Self::free_bulk_keep_zero) if `keep_zero`,
    /// else as [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_inner<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
        keep_zero: bool,
    ) -> Result<usize, FreeError> {
        let mut g = self.lock_zone(zone.index());
        let mut n = 0;
        for p in pages {
            let addr = p.addr();
            let zero = keep_zero && p.zero;
            let (found, pfn) = self.locate(addr, p.order)?;
            let actual = ZoneId::raw(self.zone_in(&found, addr));
            if actual != zone {
                return Err(FreeError {
                    addr,
                    order: p.order.get(),
                    kind: FreeErrorKind::WrongZone {
                        expected: zone,
                        actual,
                    },
                });
            }
            let desc = self.check_free_locked(found.desc_unchecked(pfn), pfn, addr, p.order)?;
            // SAFETY: validated: the caller gives the block up.
            unsafe { (*desc).clear_owner_for_free() };
            #[cfg(any(test, feature = "invariants"))]
            if zero {
                self.verify_zero_free(p.ptr, p.order)?;
            }
            g.count_event(Stat::FREE, 1);
            if zero {
                g.count(Stat::FREE_ZERO, 1);
            }
            // SAFETY: validated as in `try_free_pages`.
            unsafe {
                g.free_one(
                    &self.cfg,
                    &found,
                    desc,
                    pfn,
                    p.order,
                    if zero { ZERO_FULL } else { 0 },
                    false,
                )
            };
            n += 1;
        }
        Ok(n)
    }
}
