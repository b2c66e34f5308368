//! Freeing one block (`__free_pages`): the descriptor check every free
//! does (with the diagnosis of a bad free), then the zone's
//! `__free_one_page` (`crate::zone`) under the zone lock.

use core::num::NonZeroUsize;
use core::ptr::NonNull;

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use super::{Buddy, ZoneGuard};
use crate::desc::{
    is_head, is_pcp_tag, kind, order_of, PageDesc, KIND_ALLOC, KIND_FREE, PURGED, ZERO_FULL,
};
use crate::error::{FreeError, FreeErrorKind};
use crate::span::Found;
use crate::types::{FreeFlags, Order, Stat};

#[cold]
#[inline(never)]
#[track_caller]
pub(super) fn bad_free(e: FreeError) -> ! {
    panic!("{e}")
}

/// The descriptor check every free does (zone lock held): `d` heads an
/// allocated block of `order` that no per-CPU list holds.
#[inline(always)]
fn free_ok(d: *mut PageDesc, order: Order) -> bool {
    // SAFETY: `d` is in a span's memmap (the caller's span lookup).
    let d = unsafe { &*d };
    // A page on a per-CPU list is held by the lists, not the caller. The
    // tag shares the state's cache line: one more load.
    is_head(d.load_state(), KIND_ALLOC, order) && !is_pcp_tag(d.tag.load(Ordering::Relaxed))
}

impl<P: Platform> Buddy<P> {
    /// Frees a block (`__free_pages`): validated against its descriptor,
    /// merged with free buddies, placed by the kernel's rule.
    ///
    /// # Panics
    ///
    /// With a message naming the address and the problem if the address is
    /// not owned, not a block head, misaligned, of another order, or
    /// already free ([`FreeErrorKind`]); the allocator's state is left
    /// intact.
    ///
    /// # Safety
    ///
    /// The caller holds the block (it came from this allocator with this
    /// order) and will not touch it again.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, FreeFlags::NONE) } {
            bad_free(e)
        }
    }

    /// Frees a block the caller knows still reads as zero: it keeps PG_zero
    /// and serves a later zeroed request without clearing.
    ///
    /// # Panics
    ///
    /// As [`free_pages`](Self::free_pages); checked builds also verify the
    /// block reads as zero.
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages), and the block reads as zero.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages_zeroed(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, FreeFlags::ZERO) } {
            bad_free(e)
        }
    }

    /// Frees a block with [`FreeFlags`] (still zero, cold).
    ///
    /// # Panics
    ///
    /// As [`free_pages`](Self::free_pages).
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages); with `FreeFlags::ZERO`, the
    /// block reads as zero.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages_flags(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, flags) } {
            bad_free(e)
        }
    }

    /// Frees a block, or says why not (and changes nothing).
    ///
    /// # Safety
    ///
    /// As [`free_pages_flags`](Self::free_pages_flags). A rejected free is
    /// harmless; the contract is about blocks that pass the check (someone
    /// else's block would be freed under them).
    #[inline]
    pub unsafe fn try_free_pages(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), FreeError> {
        if flags.contains(FreeFlags::PURGED) {
            // SAFETY: caller's contract.
            return unsafe { self.try_free_purged(ptr, order, flags) };
        }
        // SAFETY: caller's contract.
        unsafe { self.free_inner(ptr, order, flags, false) }
    }

    /// [`try_free_pages`](Self::try_free_pages) with `FreeFlags::PURGED`,
    /// out of line (the common free stays as small as it was, and inlined).
    ///
    /// # Safety
    ///
    /// As [`try_free_pages`](Self::try_free_pages).
    #[cold]
    #[inline(never)]
    unsafe fn try_free_purged(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), FreeError> {
        // SAFETY: caller's contract.
        unsafe { self.free_inner(ptr, order, flags, true) }
    }

    /// The one-block free; `purged`: `flags` has `FreeFlags::PURGED`.
    ///
    /// # Safety
    ///
    /// As [`try_free_pages`](Self::try_free_pages).
    #[inline(always)]
    pub(crate) unsafe fn free_inner(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        purged: bool,
    ) -> Result<(), FreeError> {
        let this = super::unhoisted(self);
        let addr = ptr.as_ptr() as usize;
        // (`locate_ok`, not `locate`: no `Result` carrying the span to move
        // through the hot path.)
        let Some((found, pfn)) = this.locate_ok(addr, order) else {
            return Err(this.locate_err(addr, order));
        };
        let zone = this.zone_in(&found, addr);
        let zero = purged || flags.contains(FreeFlags::ZERO);
        let desc = found.desc_unchecked(pfn);
        // Whether the holder left owner words set, read before the lock
        // (loads the zone lock's acquisition does not wait for; the block
        // is the caller's, so no one else writes them), acted on only once
        // the free passed its check (a rejected free changes nothing).
        // SAFETY: `desc` is in the span's memmap (`locate_ok`).
        let clean = unsafe { (*desc).owner_clean() };
        let mut g = this.lock_zone(zone);
        // A zero tag is no per-CPU list's: with clean owner words only the
        // state needs checking (the tag is the lists', set and cleared
        // under the pcp's lock, not this one: reading it before the zone
        // lock is as good as after).
        let ok = if clean {
            // SAFETY: as above.
            let s = unsafe { (*desc).load_state() };
            is_head(s, KIND_ALLOC, order)
        } else {
            free_ok(desc, order)
        };
        if !ok {
            return Err(this.reject_free(g, pfn, addr, order));
        }
        if !clean {
            // SAFETY: as above; validated, and the caller gives it up.
            unsafe { (*desc).reset_owner_but_prev() };
        }
        #[cfg(any(test, feature = "invariants"))]
        if zero {
            this.verify_zero_free(ptr, order)?;
        }
        g.count_event(Stat::FREE, 1);
        if zero {
            g.count(Stat::FREE_ZERO, 1);
        }
        if purged {
            g.count(Stat::PURGE, 1);
            g.count(Stat::PURGED_BYTES, this.cfg.block_size(order) as u64);
        }
        // SAFETY: validated: `desc` heads an allocated block of `order` in
        // span `found` and this zone; the caller gives it up.
        unsafe {
            g.free_one(
                &this.cfg,
                &found,
                desc,
                pfn,
                order,
                match (purged, zero) {
                    (true, _) => ZERO_FULL | PURGED,
                    (false, true) => ZERO_FULL,
                    (false, false) => 0,
                },
                flags.contains(FreeFlags::COLD),
            )
        };
        Ok(())
    }

    /// Order, alignment and span checks that need no lock.
    #[inline(always)]
    pub(super) fn locate(&self, addr: usize, order: Order) -> Result<(Found, usize), FreeError> {
        // The common case returns an `Option` (no error value to build and
        // move through the free path); the error is worked out apart, cold.
        match self.locate_ok(addr, order) {
            Some(f) => Ok(f),
            None => Err(self.locate_err(addr, order)),
        }
    }

    /// [`locate`](Self::locate) without the diagnosis.
    #[inline(always)]
    fn locate_ok(&self, addr: usize, order: Order) -> Option<(Found, usize)> {
        let shift = self.cfg.page_shift();
        // Aligned to the block: at least `shift + order` trailing zero bits
        // (one bit scan and a compare, not the mask's four instructions;
        // address 0, which no span covers, passes here and fails the lookup).
        let tz = NonZeroUsize::new(addr).map_or(usize::BITS, NonZeroUsize::trailing_zeros);
        if order > self.cfg.max_order() || tz < shift + u32::from(order.get()) {
            return None;
        }
        let found = self.spans.find(addr, shift)?;
        Some((found, addr >> shift))
    }

    /// Why [`locate`](Self::locate) refused `addr`.
    #[cold]
    #[inline(never)]
    fn locate_err(&self, addr: usize, order: Order) -> FreeError {
        let kind = if order > self.cfg.max_order() {
            FreeErrorKind::BadOrder
        } else if addr & (self.cfg.block_size(order) - 1) != 0 {
            FreeErrorKind::Misaligned
        } else {
            FreeErrorKind::NotOwned
        };
        FreeError {
            addr,
            order: order.get(),
            kind,
        }
    }

    /// The descriptor check every free does (zone lock held): the address
    /// must head an allocated block of this order. `d` is `pfn`'s
    /// descriptor (`found.desc_unchecked(pfn)`: [`locate`](Self::locate)
    /// found `pfn` in the span, so no second range check).
    #[inline(always)]
    pub(super) fn check_free_locked(
        &self,
        d: *mut PageDesc,
        pfn: usize,
        addr: usize,
        order: Order,
    ) -> Result<*mut PageDesc, FreeError> {
        if free_ok(d, order) {
            return Ok(d);
        }
        // The diagnosis finds the span again: passing it would keep the
        // whole `Found` (fields the free does not use) live in the hot path
        // (issue #22).
        Err(self.diagnose_free(pfn, addr, order))
    }

    /// A free that failed the descriptor check: the diagnosis under the
    /// zone lock, which `g` holds and this drops. The guard moves in, so
    /// the free holds no guard across a call that may unwind, and need
    /// not keep it in memory for an unwinding path (issue #22: four stores
    /// of every free).
    #[cold]
    #[inline(never)]
    fn reject_free(&self, g: ZoneGuard<'_, P>, pfn: usize, addr: usize, order: Order) -> FreeError {
        let e = self.diagnose_free(pfn, addr, order);
        drop(g);
        e
    }

    /// Why a free failed the descriptor check (zone lock held; `addr`
    /// passed [`locate`](Self::locate), and spans never shrink).
    #[cold]
    #[inline(never)]
    fn diagnose_free(&self, pfn: usize, addr: usize, order: Order) -> FreeError {
        let shift = self.cfg.page_shift();
        let Some(found) = self.spans.find(addr, shift) else {
            return FreeError {
                addr,
                order: order.get(),
                kind: FreeErrorKind::NotOwned,
            };
        };
        let found = &found;
        let desc = found.desc(pfn);
        let kind_ = match desc.map(|d| d.load_state()) {
            Some(s)
                if kind(s) == KIND_ALLOC
                    && desc.is_some_and(|d| is_pcp_tag(d.tag.load(Ordering::Relaxed))) =>
            {
                FreeErrorKind::OnPcpList
            }
            Some(s) if kind(s) == KIND_ALLOC => FreeErrorKind::WrongOrder {
                actual: order_of(s),
            },
            Some(s) if kind(s) == KIND_FREE => FreeErrorKind::DoubleFree {
                block: addr,
                order: order_of(s),
            },
            _ => match self.covering_head(found, pfn) {
                Some((h, o, KIND_FREE)) => FreeErrorKind::DoubleFree {
                    block: h << shift,
                    order: o,
                },
                Some((h, o, _)) => FreeErrorKind::NotHead {
                    head: h << shift,
                    order: o,
                },
                None => FreeErrorKind::NotAllocated,
            },
        };
        FreeError {
            addr,
            order: order.get(),
            kind: kind_,
        }
    }
}
