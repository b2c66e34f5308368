//! `GlobalBuddy`'s memory return (issue #17): `trim`, the time-based
//! decay, the resident-free cap checked after large frees, the decay hook
//! (GlobalSlub's idle shrink rides on it), and the purge of free blocks and
//! of their memmap pages.

use super::*;

impl GlobalBuddy {
    /// Purges every resident free block at or above the purge order
    /// ([`PurgePolicy`](crate::PurgePolicy)) now: their memory goes back to
    /// the OS (`madvise(MADV_DONTNEED)`), their address range stays, and
    /// they are served later as known zero without clearing (`malloc_trim`).
    /// Returns the bytes purged.
    pub fn trim(&self) -> usize {
        BuddySource::trim(self)
    }

    /// A decay scan (jemalloc's `dirty_decay_ms`), if one is due: free
    /// blocks at or above the purge order that stayed free for the policy's
    /// decay time are purged, keeping the retained resident free pages.
    /// Runs at most every quarter of the decay time (otherwise it costs one
    /// clock read); called on the heap's slow paths (growth, frees of
    /// blocks at or above the purge order), and by layers above on theirs
    /// ([`BuddySource::maybe_decay`]: pcp's batch frees and drains).
    /// On the same calls, at most every [`CAP_CHECK_MS`] ms, the policy's
    /// [`max_resident_pages`](crate::PurgePolicy::max_resident_pages) is
    /// enforced: resident free blocks beyond it are purged at once.
    /// Returns the bytes purged.
    pub fn decay(&self) -> usize {
        let policy = self.buddy.config().purge();
        if policy.decay_ms.is_none() && policy.max_resident_pages.is_none() {
            return 0;
        }
        let due = self.next_decay.load(Ordering::Relaxed);
        if due == DECAY_PAUSED {
            return 0;
        }
        let now = now_ms();
        let mut purged = 0;
        if let Some(cap) = policy.max_resident_pages {
            let c = self.next_cap.load(Ordering::Relaxed);
            if now >= c
                && self
                    .next_cap
                    .compare_exchange(c, now + CAP_CHECK_MS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                purged = self.purge_over_cap(cap);
            }
        }
        let Some(decay) = policy.decay_ms else {
            return purged;
        };
        if now < due
            || self
                .next_decay
                .compare_exchange(
                    due,
                    now + (decay / 4).max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return purged;
        }
        self.decay_tick();
        purged + self.decay_scan(now)
    }

    /// After a block of `order`, at or above the purge order, was freed
    /// (this heap's `dealloc`, and pcp's large frees through
    /// [`BuddySource::after_large_free`]): the policy's
    /// [`max_resident_pages`](crate::PurgePolicy::max_resident_pages) is
    /// checked whenever the large blocks freed since the last such check,
    /// less the large blocks handed out since, reach half of it (the check
    /// takes the zone lock), and the
    /// time-based [`decay`](Self::decay) runs on every
    /// [`DECAY_LARGE_EVERY`]th large free. A burst of large frees thus
    /// leaves at most the cap and half of it resident, whatever follows.
    /// The count is a plain load and store, not an atomic add: two CPUs
    /// racing may lose a count, which only delays a check (it costs a 4
    /// MiB alloc + free pair 3 ns instead of the 12 ns that the add and a
    /// clock read on every free cost, issue #17's cost check). Returns the
    /// bytes purged.
    #[inline]
    pub fn decay_large(&self, order: Order) -> usize {
        if self.decay_paused() {
            return 0;
        }
        let mut purged = 0;
        if let Some(cap) = self.buddy.config().purge().max_resident_pages {
            let n = self.large_freed.load(Ordering::Relaxed) + order.pages();
            if n >= (cap / 2).max(1) {
                self.large_freed.store(0, Ordering::Relaxed);
                purged = self.purge_over_cap(cap);
            } else {
                self.large_freed.store(n, Ordering::Relaxed);
            }
        }
        let k = self.large_frees.load(Ordering::Relaxed).wrapping_add(1);
        self.large_frees.store(k, Ordering::Relaxed);
        if k.is_multiple_of(DECAY_LARGE_EVERY) {
            purged += self.decay_cold();
        }
        purged
    }

    /// [`decay`](Self::decay) out of line (the rare call of
    /// [`decay_large`](Self::decay_large)).
    #[cold]
    #[inline(never)]
    pub(super) fn decay_cold(&self) -> usize {
        self.decay()
    }

    /// A block of `order` was handed out: a large one takes its pages off
    /// the count of large frees since the last cap check (so an alloc/free
    /// cycle of one large block never reaches the check: nothing piles up).
    #[inline(always)]
    pub(super) fn note_large_alloc(&self, order: Order) {
        if order >= self.buddy.config().purge_order() {
            let f = self.large_freed.load(Ordering::Relaxed);
            if f != 0 {
                self.large_freed
                    .store(f.saturating_sub(order.pages()), Ordering::Relaxed);
            }
        }
    }

    /// The policy's `max_resident_pages`: purges down to `cap` resident
    /// free pages per zone if a zone has more (one zone-lock acquisition
    /// per zone when it has not).
    #[cold]
    #[inline(never)]
    pub(super) fn purge_over_cap(&self, cap: usize) -> usize {
        let over = (0..self.buddy.config().nr_zones())
            .any(|z| self.buddy.over_resident_cap(crate::ZoneId::new(z), cap));
        if !over {
            return 0;
        }
        self.buddy.purge_to_with(cap, |p, n| self.purge_free(p, n))
    }

    /// Sets the `fn()` run at each due decay tick (at most every quarter of
    /// the decay time, on the slow path that found the tick due, before
    /// the buddy's own scan): the layers above hook their idle shrink here
    /// (slub's `GlobalSlub` marks its caches' idle check due; its next
    /// slow path shrinks the caches that stayed idle, whose empty slabs
    /// then decay here). The hook runs wherever [`decay`](Self::decay)
    /// runs, possibly under the callers' locks (a slab being discarded), so
    /// it must take no lock and allocate nothing: set a flag. One hook per
    /// heap; the last set wins.
    pub fn set_decay_hook(&self, hook: fn()) {
        self.decay_hook.store(hook as *mut (), Ordering::Release);
    }

    /// Runs the decay hook, if one is set.
    #[cold]
    pub(super) fn decay_tick(&self) {
        let h = self.decay_hook.load(Ordering::Acquire);
        if !h.is_null() {
            // SAFETY: only `set_decay_hook` stores a non-null value, and it
            // stores a `fn()`.
            let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(h) };
            f();
        }
    }

    /// Pauses (`true`) or resumes (`false`) the automatic decay
    /// ([`decay`](Self::decay) and the [`BuddySource::maybe_decay`] calls
    /// of the layers above then return at once, before reading the clock):
    /// for a latency-critical phase, and for benchmarks that compare
    /// purging on and off in one process (`mm-bench --table
    /// memory-return`). [`trim`](Self::trim) and the policy's
    /// `release_order` still purge. A resumed decay scans at its next
    /// chance.
    pub fn set_decay_paused(&self, paused: bool) {
        if paused {
            self.next_decay.store(DECAY_PAUSED, Ordering::Relaxed);
        } else {
            // Resumes only a paused decay (a running one keeps its
            // schedule).
            let _ = self.next_decay.compare_exchange(
                DECAY_PAUSED,
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Whether the decay is paused ([`set_decay_paused`](Self::set_decay_paused)).
    pub fn decay_paused(&self) -> bool {
        self.next_decay.load(Ordering::Relaxed) == DECAY_PAUSED
    }

    /// The scan [`decay`](Self::decay) found due, at time `now` (ms).
    #[cold]
    #[inline(never)]
    pub(super) fn decay_scan(&self, now: u64) -> usize {
        self.buddy.decay_with(now, |p, n| self.purge_free(p, n))
    }

    /// The purge of a free block the buddy's purge pass isolated
    /// ([`trim`](Self::trim), the decay): the block's memory
    /// ([`BuddySource::purge`]), then the memmap pages that hold only the
    /// descriptors of its tail pages ([`purge_memmap`](Self::purge_memmap)).
    pub(super) fn purge_free(&self, block: NonNull<u8>, bytes: usize) -> bool {
        let ok = self.purge(block, bytes);
        if ok {
            self.purge_memmap(block.as_ptr() as usize, bytes);
        }
        ok
    }

    /// Gives back the memmap pages that hold only descriptors of the tail
    /// pages of the free block `[addr, addr + bytes)` (every page but the
    /// first, whose descriptor heads the block): 64-byte descriptors cost
    /// 1/64 of the heap (16 MiB per GiB), and a tail descriptor of a free
    /// block may read as zero (kind `NONE`: see `desc.rs`), which is what a
    /// purged memmap page reads as. Only for blocks isolated by a purge
    /// pass (nobody holds them, nothing writes their descriptors until the
    /// block is back on a free list and split or handed out, which faults
    /// the page in again, zero); a block of 64 pages or less has no such
    /// memmap page. Returns the memmap bytes purged.
    pub(super) fn purge_memmap(&self, addr: usize, bytes: usize) -> usize {
        let shift = self.buddy.config().page_shift();
        let desc = core::mem::size_of::<crate::desc::PageDesc>();
        let page = os::page_size();
        let g = self.lock_grow();
        for r in g.res[..g.nr].iter().flatten() {
            let heap = r.heap as usize;
            if addr < heap || addr + bytes > heap + r.populated {
                continue;
            }
            let first = (addr - heap) >> shift;
            let n = bytes >> shift;
            let base = r.base as usize;
            let Some(lo) = checked_align_up(base + (first + 1) * desc, page) else {
                return 0;
            };
            let hi = (base + (first + n) * desc) & !(page - 1);
            if hi <= lo {
                return 0;
            }
            // SAFETY: whole pages of this reservation's mapped memmap
            // (below `base + populated pages * desc`), private anonymous
            // memory, holding only descriptors of tail pages of a free
            // block the purge pass holds (see above).
            return if unsafe { os::purge(lo as *mut u8, hi - lo) } {
                hi - lo
            } else {
                0
            };
        }
        0
    }
}
