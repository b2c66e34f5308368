//! The free fast path (`free_unref_page`): the one descriptor check of a
//! free, the push onto this CPU's lists, and the batch return of the
//! coldest pages to the buddy when the lists reach `high`
//! (`free_pcppages_bulk`), with `high` tuned per CPU as Linux 6.7+ does
//! (`free_unref_page_commit`: `free_count`, `free_high`, `nr_pcp_high`,
//! `nr_pcp_free`).

use core::ptr::NonNull;

use buddy::{FreeFlags, Order, Page, ZoneId};
use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

use super::{Guard, PageSource, Pcp, Policy};
use crate::error::{BadFree, BadFreeKind};
use crate::list::{is_pcp_tag, list_tag};
use crate::sizing::{
    nr_pcp_free, nr_pcp_high, NR_PCP_ORDERS, PAGE_ALLOC_COSTLY_ORDER, PCPF_FREE_HIGH_BATCH,
    PCPF_PREV_FREE_HIGH_ORDER,
};
use crate::stats::PcpStat;
use buddy::Owner;

#[cold]
#[inline(never)]
#[track_caller]
fn bad_free(e: BadFree) -> ! {
    panic!("{e}")
}

#[cold]
#[inline(never)]
#[track_caller]
fn bad_buddy_free(e: buddy::FreeError) -> ! {
    panic!("{e}")
}

#[cfg(any(test, feature = "invariants"))]
pub(super) fn verify_zero(ptr: NonNull<u8>, bytes: usize) {
    // SAFETY: the page is held by the pcp (or being freed to it) and `bytes` long.
    let s = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), bytes) };
    assert!(
        s.iter().all(|&x| x == 0),
        "pcp: page {ptr:p} is on (or freed to) a zero list but is not zero"
    );
}

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// Checks a block being freed against its descriptor, as the kernel's
    /// `free_pages_prepare` does: owned, a block head, of this order, and not
    /// already on a pcp list (a double free that has not reached the buddy
    /// yet). Panics with the address and the problem; changes nothing.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn check_free(&self, ptr: NonNull<u8>, order: Order) -> (&Owner, ZoneId) {
        match self.validate_free(ptr, order) {
            Ok(o) => o,
            Err(e) => bad_free(e),
        }
    }

    /// The one address-to-descriptor lookup of a free; returns the block's
    /// owner words, which the lists then link through.
    #[inline(always)]
    pub(crate) fn validate_free(
        &self,
        ptr: NonNull<u8>,
        order: Order,
    ) -> Result<(&Owner, ZoneId), BadFree> {
        match self.own_zone_block(ptr, order) {
            Some(o) => Ok((o, self.zone)),
            None => self.validate_free_other(ptr, order),
        }
    }

    /// The common case of [`validate_free`](Self::validate_free): `ptr`
    /// heads an allocated block of `order` of this zone (in the buddy's
    /// first span: one span compare, one zone compare, one descriptor
    /// read), not on a pcp list: its tag 0, as the lists and the buddy
    /// hand blocks out (a holder's other tags, and the pcp's, are told
    /// apart on the cold path).
    #[inline(always)]
    fn own_zone_block(&self, ptr: NonNull<u8>, order: Order) -> Option<&Owner> {
        let o = self.buddy().head_owner_in(ptr.as_ptr(), order, self.zone)?;
        (o.tag().load(Relaxed) == 0).then_some(o)
    }

    /// The rest of [`validate_free`](Self::validate_free): a block of
    /// another zone or span, or why `ptr` is refused.
    #[cold]
    #[inline(never)]
    fn validate_free_other(
        &self,
        ptr: NonNull<u8>,
        order: Order,
    ) -> Result<(&Owner, ZoneId), BadFree> {
        if let Some((o, z)) = self.buddy().head_owner_zone(ptr.as_ptr(), order) {
            if !is_pcp_tag(o.tag().load(Relaxed)) {
                return Ok((o, z));
            }
        }
        self.diagnose_free(ptr, order)
    }

    /// Why [`validate_free`](Self::validate_free) refused `ptr` (the full
    /// lookup from any address).
    #[cold]
    #[inline(never)]
    fn diagnose_free(&self, ptr: NonNull<u8>, order: Order) -> Result<(&Owner, ZoneId), BadFree> {
        let b = self.buddy();
        match b.owner_of(ptr.as_ptr()) {
            Some(blk)
                if blk.head == ptr
                    && blk.order == order
                    && !is_pcp_tag(blk.owner.tag().load(Relaxed)) =>
            {
                Ok((blk.owner, b.zone_of(ptr.as_ptr()).unwrap_or(self.zone)))
            }
            other => Err(BadFree {
                addr: ptr.as_ptr() as usize,
                order,
                kind: match other {
                    None => BadFreeKind::NotAllocated,
                    Some(blk) if blk.head != ptr => BadFreeKind::NotHead {
                        head: blk.head.as_ptr() as usize,
                        order: blk.order,
                    },
                    Some(blk) if blk.order != order => {
                        BadFreeKind::WrongOrder { actual: blk.order }
                    }
                    Some(_) => BadFreeKind::OnPcpList,
                },
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
        // The common case on its own path, its zone a constant there.
        if let Some(o) = self.own_zone_block(ptr, order) {
            // SAFETY: forwarded; validated above.
            unsafe { self.free_unchecked(ptr, order, flags, o, self.zone) };
            return Ok(());
        }
        // SAFETY: forwarded.
        unsafe { self.try_free_other(ptr, order, flags) }
    }

    /// [`try_free`](Self::try_free) of a block of another zone or span, or
    /// of a bad address (refused).
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn try_free_other(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), BadFree> {
        let (o, z) = self.validate_free_other(ptr, order)?;
        // SAFETY: forwarded; validated above.
        unsafe { self.free_unchecked(ptr, order, flags, o, z) };
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
        // The common case on its own path, its zone a constant there.
        if let Some(o) = self.own_zone_block(ptr, order) {
            // SAFETY: forwarded contract; validated above.
            return unsafe { self.free_unchecked(ptr, order, flags, o, self.zone) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.free_other(ptr, order, flags) }
    }

    /// [`free`](Self::free) of a block of another zone or span, or of a
    /// bad address (a panic).
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    #[track_caller]
    unsafe fn free_other(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        let (o, z) = match self.validate_free_other(ptr, order) {
            Ok(o) => o,
            Err(e) => bad_free(e),
        };
        // SAFETY: forwarded contract; validated above.
        unsafe { self.free_unchecked(ptr, order, flags, o, z) }
    }

    /// The free path after validation.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free), and `validate_free` accepted the block,
    /// of zone `zone`: a block of another zone (another type, or another
    /// node's) never goes on these lists.
    #[inline(always)]
    pub(crate) unsafe fn free_unchecked(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        o: &Owner,
        zone: ZoneId,
    ) {
        if order.get() > PAGE_ALLOC_COSTLY_ORDER || zone != self.zone {
            // SAFETY: forwarded contract.
            return unsafe { self.free_to_buddy(ptr, order, flags) };
        }
        // One copy of the commit per way of taking the lists, so each
        // guard's interrupt state and flavour stay constants in its copy
        // instead of values merged over the policies (issue #22).
        let g = match self.policy {
            Policy::IrqSafe => self.cpus.lock_irqsave(),
            Policy::TaskOnly if !self.platform().in_interrupt() => {
                return self.free_commit_unlock(self.cpus.lock(), ptr, order, flags, o);
            }
            Policy::Trylock => match self.cpus.try_lock_spin() {
                Some(g) => return self.free_commit_unlock(g, ptr, order, flags, o),
                // SAFETY: forwarded contract.
                None => return unsafe { self.free_locked_out(ptr, order, flags) },
            },
            // SAFETY: forwarded contract.
            Policy::TaskOnly => return unsafe { self.free_locked_out(ptr, order, flags) },
        };
        self.free_commit_unlock(g, ptr, order, flags, o)
    }

    /// A block the lists do not take (above `PAGE_ALLOC_COSTLY_ORDER`, or
    /// of another zone): to the buddy, or back to the OS at or above the
    /// release order. Out of line: the order-0 free above stays small (its
    /// copies per policy), and a process that frees no large block does
    /// not map this code (mm-malloc's text, issue #18).
    ///
    /// # Safety
    ///
    /// As [`free_unchecked`](Self::free_unchecked).
    #[inline(never)]
    unsafe fn free_to_buddy(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        let b = self.buddy();
        if b.config().release_order().is_some_and(|r| order >= r) {
            // A block at or above the release order goes back to the OS
            // at once.
            // SAFETY: forwarded contract.
            if let Err(e) = unsafe { self.source.free_or_release(ptr, order, flags) } {
                bad_buddy_free(e)
            }
        } else {
            // SAFETY: forwarded contract.
            unsafe { b.free_pages_flags(ptr, order, flags) };
        }
        // A large block freed: a slow path, where the source bounds its
        // resident free memory and the decay may run.
        if order >= b.config().purge_order() {
            self.after_large_free(order);
        }
    }

    /// [`free_commit`](Self::free_commit) under `g`, then the unlock (and
    /// the batch when the lists reached `high`).
    #[inline(always)]
    fn free_commit_unlock(
        &self,
        mut g: Guard<'_, L, N>,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        o: &Owner,
    ) {
        // The guard's address escapes only on the batch side (by value),
        // so the common free keeps it in registers (issue #22).
        match self.free_commit(&mut g, ptr, order, flags, o) {
            None => drop(g),
            Some(n) => self.free_batch_unlock(g, n, order),
        }
    }

    /// The lists' lock could not be had here (task-only in an interrupt,
    /// trylock in an interrupt that hit the holder): the buddy.
    ///
    /// # Safety
    ///
    /// As [`free_unchecked`](Self::free_unchecked).
    #[cold]
    #[inline(never)]
    unsafe fn free_locked_out(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        self.stat_unlocked(PcpStat::FREE_BUDDY_FALLBACK);
        // SAFETY: forwarded contract.
        unsafe { self.buddy().free_pages_flags(ptr, order, flags) }
    }

    /// The lists reached `high`: returns `n` pages to the buddy
    /// (`free_pcppages_bulk`), drops the lists' lock, then
    /// [`after_batch`](Self::after_batch) (out of line: the free fast path
    /// only tests for it).
    #[cold]
    #[inline(never)]
    fn free_batch_unlock(&self, mut g: Guard<'_, L, N>, n: usize, order: Order) {
        self.free_batch(&mut g, n, order);
        drop(g);
        self.after_batch();
    }

    /// `free_pcppages_bulk` of `n` pages from `order`'s list on, counted.
    #[inline(always)]
    fn free_batch(&self, g: &mut Guard<'_, L, N>, n: usize, order: Order) {
        let cpu = g.cpu();
        self.free_pcppages_bulk(g, n, order.get());
        self.stat(cpu, PcpStat::FREE_BATCH, 1);
    }

    /// After pages went back to the buddy in a batch (a batch free, a
    /// drain), outside the lists' lock: the source's rate-limited decay
    /// ([`maybe_decay`](buddy::BuddySource::maybe_decay)) gets its chance,
    /// so memory freed through the lists is given back to the OS in time
    /// without a `trim`. Never on a fast path.
    #[cold]
    #[inline(never)]
    pub(super) fn after_batch(&self) {
        self.source.maybe_decay();
    }

    /// After a block at or above the purge order bypassed the lists into
    /// the buddy: the source's [`after_large_free`](buddy::BuddySource::after_large_free)
    /// (its resident bound checked now, then its decay). Never on a fast
    /// path.
    #[cold]
    #[inline(never)]
    fn after_large_free(&self, order: Order) {
        self.source.after_large_free(order);
    }

    /// The free after validation, under this CPU's lists' lock: push, then
    /// the batch return when the lists reach `high`. Returns true if a
    /// batch went back to the buddy (the caller then runs
    /// [`after_batch`](Self::after_batch) once the lock is dropped). For
    /// the bulk free, which keeps the lock over many pages.
    #[inline(always)]
    pub(super) fn free_locked(
        &self,
        g: &mut Guard<'_, L, N>,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        own: &Owner,
    ) -> bool {
        match self.free_commit(g, ptr, order, flags, own) {
            Some(n) => {
                self.free_batch(g, n, order);
                true
            }
            None => false,
        }
    }

    /// The push and `free_unref_page_commit`'s bookkeeping, under this
    /// CPU's lists' lock; `Some(n)` when the lists reached `high` and `n`
    /// pages must go back to the buddy (the caller's
    /// [`free_batch`](Self::free_batch)).
    #[inline(always)]
    fn free_commit(
        &self,
        g: &mut Guard<'_, L, N>,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
        own: &Owner,
    ) -> Option<usize> {
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
        self.stat_event(cpu, PcpStat::FREE_HIT);
        let c = Self::count(g) + order.pages();
        self.set_count(g, c);
        // free_unref_page_commit (Linux 6.7+).
        let batch = self.batch.load(Relaxed);
        let pages = &mut **g;
        // On freeing, reduce the number of pages a refill brings (see
        // nr_pcp_alloc).
        pages.alloc_factor >>= 1;
        // As high-order pages can contribute to fragmentation, limit the
        // number stored when this CPU keeps freeing them without
        // allocating (`free_high`); what is left is decayed later.
        let mut free_high = false;
        if o != 0 {
            free_high = pages.free_count >= batch
                && pages.flags & PCPF_PREV_FREE_HIGH_ORDER != 0
                && (pages.flags & PCPF_FREE_HIGH_BATCH == 0 || c >= batch);
            pages.flags |= PCPF_PREV_FREE_HIGH_ORDER;
        } else {
            // The kernel tests the flag first to spare the store; here
            // the line is written anyway (the count, `alloc_factor`).
            pages.flags &= !PCPF_PREV_FREE_HIGH_ORDER;
        }
        // Without a branch (a compare and an add with carry at order 0).
        // (`batch << PCP_BATCH_SCALE_MAX`, stored with `batch`.)
        let free_max = self.free_max.load(Relaxed);
        pages.free_count += order.pages() * usize::from(pages.free_count < free_max);
        let high_min = self.high_min.load(Relaxed);
        // nr_pcp_high's first step clamps the CPU's high to the current
        // range, so it is at least `high_min`: below that, and without
        // `free_high`, nr_pcp_high changes nothing more and `count < high`.
        // The common free ends here, leaving the clamp's store to the
        // next use (every reader clamps; `set_batch_high`'s "at its next
        // use").
        if c < high_min && !free_high {
            return None;
        }
        let high_max = self.high_max.load(Relaxed);
        // The rest of nr_pcp_high's first step: below the clamped high,
        // and without `free_high`, it returns it.
        let h = pages.high.max(high_min).min(high_max);
        pages.high = h;
        if c < h && !free_high {
            return None;
        }
        let high = nr_pcp_high(
            &mut pages.high,
            c,
            pages.free_count,
            batch,
            high_min,
            high_max,
            free_high,
        );
        if c >= high {
            return Some(nr_pcp_free(batch, high, c, pages.free_count, free_high));
        }
        None
    }

    /// `free_pcppages_bulk`: returns at least `pages` pages (or all) to the
    /// buddy under one zone-lock acquisition, taking from the cold ends,
    /// round-robin over the orders starting with `start`, each chosen list
    /// drained to empty (or to the count) before the next (Linux 5.18+);
    /// normal lists first, zero lists last (their pages keep PG_zero in the
    /// buddy).
    pub(super) fn free_pcppages_bulk(
        &self,
        g: &mut Guard<'_, L, N>,
        pages: usize,
        start: u8,
    ) -> usize {
        let b = self.buddy();
        let cpu = g.cpu();
        let mut freed = 0usize;
        {
            let lists = &mut **g;
            // Phase 0: normal lists, phase 1: zero lists; within a phase,
            // the list at `o` until it is empty, then the next, starting at
            // `start`; a phase ends after a full round of empty lists.
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
                    if let Some(ptr) = list.pop(true) {
                        misses = 0;
                        freed += 1 << o;
                        let order = Order::new(o as u8).unwrap_or(Order::ZERO);
                        return Some(Page { ptr, order, zero });
                    }
                    o = (o + 1) % NR_PCP_ORDERS;
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
        let c = Self::count(g) - freed;
        self.set_count(g, c);
        self.stat(cpu, PcpStat::FREE_BATCH_PAGES, freed as u64);
        freed
    }
}
