//! A zone: its free areas and the buddy algorithm proper (`expand`,
//! `__rmqueue_smallest`, `__free_one_page`, the watermark check). Everything
//! here runs under the zone lock; `ZoneInner` is the data that lock
//! protects.

use core::ptr;

use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::{CachePadded, SpinLock};

use crate::desc::{
    is_head, make_state, PageDesc, AGED, KIND_ALLOC, KIND_FREE, KIND_MASK, ORDER_MASK, ORDER_SHIFT,
    PURGED, ZERO_FULL, ZERO_HI, ZERO_LO,
};
use crate::span::Found;
use crate::types::{AllocFlags, Config, Order, Stat, Watermarks, MAX_ZONES, ORDER_SLOTS};

/// Index of the known-zero list of a free area.
pub(crate) const ZERO_LIST: usize = 0;
/// Index of the list of other blocks (contents unknown, or only one half
/// known zero).
pub(crate) const DIRTY_LIST: usize = 1;

/// A doubly linked list of free block heads, linked through their
/// descriptors (`next`/`prev`), so unlinking a block whose buddy merges is
/// O(1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FreeList {
    /// First block (handed out first; hot end).
    pub(crate) head: *mut PageDesc,
    /// Last block (cold end: fresh memory, blocks likely to merge).
    pub(crate) tail: *mut PageDesc,
    // No count: [Linux differs] the kernel keeps `free_area->nr_free` on
    // every list operation; here emptiness is the links' and the bitmap's,
    // and `nr_free` walks the list (buddyinfo, zone_info, mallinfo: cold),
    // one read-modify-write less per list operation (issue #22: about four
    // per order-0 alloc + free).
}

impl FreeList {
    const EMPTY: FreeList = FreeList {
        head: ptr::null_mut(),
        tail: ptr::null_mut(),
    };

    /// Blocks on the list (a walk: cold).
    pub(crate) fn len(&self) -> usize {
        let mut n = 0;
        let mut d = self.head;
        while !d.is_null() {
            n += 1;
            // SAFETY: listed descriptors are valid; the caller holds the
            // zone lock (the list is the zone's).
            d = unsafe { (*d).next() };
        }
        n
    }
}

/// `free_area[order]`: two lists instead of the kernel's migratetypes,
/// known-zero blocks apart from the rest, so a zeroed request finds a zero
/// block in O(1) and ordinary requests leave zero blocks alone while other
/// blocks of the same order exist.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FreeArea {
    /// `[ZERO_LIST]`: blocks whose every byte is known zero (PG_zero);
    /// `[DIRTY_LIST]`: the others.
    pub(crate) lists: [FreeList; 2],
}

/// What the zone lock protects.
///
/// Invariants (checked by `check_invariants`):
///
/// * `free == Σ_order (blocks on lists[ZERO] and lists[DIRTY]) × 2^order`
/// * `zero_bits` bit `o` ⇔ `area[o].lists[ZERO]` is not empty; the same for
///   `dirty_bits` and the dirty lists
/// * every listed block is a properly aligned buddy head of its order in
///   this zone, and no two free buddies of equal order remain unmerged
/// * `free <= managed`
pub(crate) struct ZoneInner {
    /// `free_area[0..=MAX_ORDER]`.
    pub(crate) area: [FreeArea; ORDER_SLOTS],
    /// Orders with a known-zero block (smallest-fit search is one
    /// `trailing_zeros`).
    pub(crate) zero_bits: u32,
    /// Orders with another block.
    pub(crate) dirty_bits: u32,
    /// Pages on the free lists (`NR_FREE_PAGES`).
    pub(crate) free: usize,
    /// Pages given to the zone (`managed_pages`).
    pub(crate) managed: usize,
    /// Of the free pages, those given back to the OS (blocks flagged
    /// `PURGED`); `free - purged` are resident.
    pub(crate) purged: usize,
    /// Watermarks (copy of the zone's atomics for the locked path).
    pub(crate) wmark: Watermarks,
    /// `lowmem_reserve[j]`: pages kept from requests whose highest zone is
    /// `j`.
    pub(crate) lowmem_reserve: [usize; MAX_ZONES],
    /// Event counters, indexed by [`Stat`].
    pub(crate) stats: [u64; Stat::COUNT],
}

// SAFETY: the raw descriptor pointers in the lists are only dereferenced by
// the holder of the zone lock that owns this `ZoneInner`.
unsafe impl Send for ZoneInner {}

/// A block taken off the free lists by [`ZoneInner::rmqueue`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    /// Its head descriptor (now `ALLOC`).
    pub(crate) desc: *mut PageDesc,
    /// Its first byte.
    pub(crate) ptr: *mut u8,
    /// Which of its halves were known zero (`ZERO_LO`/`ZERO_HI` bits;
    /// `ZERO_FULL`: all of it).
    pub(crate) zero: u32,
}

/// Which watermark an attempt is checked against (`ALLOC_WMARK_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mark {
    /// `ALLOC_WMARK_LOW`, no reductions: the first pass over the zonelist.
    Low,
    /// `ALLOC_WMARK_MIN` with the `HIGH` (`ALLOC_MIN_RESERVE`) and
    /// `NONBLOCK` (`ALLOC_NON_BLOCK`) reductions: the slow path.
    Min,
    /// `ALLOC_NO_WATERMARKS`: `__GFP_MEMALLOC` requests, no check.
    None,
}

/// `__zone_watermark_ok` on a free count (exact under the lock, or the
/// lockless mirror for `zone_watermark_fast`): after taking the block,
/// `free` (already less `2^order - 1`) must exceed the mark plus
/// `lowmem_reserve[highest]`.
#[inline(always)]
pub(crate) fn wmark_ok(
    free: isize,
    wm: &Watermarks,
    reserve: &[usize; MAX_ZONES],
    flags: AllocFlags,
    highest: usize,
    mark: Mark,
) -> bool {
    let min = match mark {
        Mark::None => return true,
        Mark::Low => wm.low as isize,
        Mark::Min => {
            let mut min = wm.min as isize;
            if flags.contains(AllocFlags::HIGH) {
                min -= min / 2;
            }
            // gfp_to_alloc_flags: ALLOC_NON_BLOCK only without
            // __GFP_NOMEMALLOC.
            if flags.contains(AllocFlags::NONBLOCK) && !flags.contains(AllocFlags::NOMEMALLOC) {
                min -= min / 4;
            }
            min
        }
    };
    // (`min`: `highest` is a zone type, below `MAX_ZONES`; no bounds check
    // that could panic under the zone lock: its unwinding path would keep
    // the zone guard in memory, issue #22.) `lowmem_reserve[0]` is 0 in
    // every zone (a zone owes reserves only to requests whose highest zone
    // is above its own type): no load for a request bound to the lowest
    // zone type, the only one with one zone.
    let res = if highest == 0 {
        0
    } else {
        reserve[highest.min(MAX_ZONES - 1)]
    };
    free > min + res as isize
}

impl ZoneInner {
    local_lock::const_fn! {
        /// An empty zone.
        pub(crate) fn new() -> ZoneInner {
            ZoneInner {
                area: [FreeArea { lists: [FreeList::EMPTY; 2] }; ORDER_SLOTS],
                zero_bits: 0,
                dirty_bits: 0,
                free: 0,
                managed: 0,
                purged: 0,
                wmark: Watermarks { min: 0, low: 0, high: 0 },
                lowmem_reserve: [0; MAX_ZONES],
                stats: [0; Stat::COUNT],
            }
        }
    }

    #[inline(always)]
    pub(crate) fn count(&mut self, s: Stat, n: u64) {
        self.stats[s as usize] += n;
    }

    /// [`count`](Self::count) for the per-operation events of the page path
    /// (`ALLOC`, `FREE`, `SPLIT`, `MERGE`: the kernel's `PGALLOC`/`PGFREE`
    /// vm events, `CONFIG_VM_EVENT_COUNTERS`): counted only with the
    /// `stats` feature (about 4% of an order-0 alloc + free, issue #22);
    /// without it they read 0.
    #[inline(always)]
    pub(crate) fn count_event(&mut self, s: Stat, n: u64) {
        #[cfg(feature = "stats")]
        self.count(s, n);
        #[cfg(not(feature = "stats"))]
        let _ = (s, n);
    }

    // --- lists ------------------------------------------------------------

    /// The known-zero (`zero`) or other list of `free_area[order]`, without
    /// a bounds check.
    #[inline(always)]
    fn list_mut(&mut self, order: Order, zero: bool) -> &mut FreeList {
        let li = if zero { ZERO_LIST } else { DIRTY_LIST };
        debug_assert!(order.index() < ORDER_SLOTS);
        // SAFETY: every `Order` is at most `ORDER_LIMIT` (`Order::new` and
        // the `Config` constructors check it; the buddy's `plus` stays
        // within `max_order`), so below `ORDER_SLOTS`.
        unsafe { &mut self.area.get_unchecked_mut(order.index()).lists[li] }
    }

    /// Links `d` at the head (or tail) of the list for `order`. The order's
    /// bit in `zero_bits`/`dirty_bits` is written only when the list was
    /// empty (the kernel's `__add_to_free_list` is two link stores and
    /// `nr_free++`; the bit is the price of the O(1) smallest-fit search).
    ///
    /// # Safety
    ///
    /// The zone lock is held (`&mut self`), `d` is a valid descriptor of a
    /// page of this zone that is on no list.
    #[inline(always)]
    unsafe fn add(&mut self, d: *mut PageDesc, order: Order, zero: bool, tail: bool) {
        let l = self.list_mut(order, zero);
        // SAFETY: caller's contract; list members are valid descriptors of
        // this zone and the lock serialises link accesses.
        let was_empty = unsafe {
            if tail {
                let t = l.tail;
                (*d).set_next(ptr::null_mut());
                (*d).set_prev(t);
                if t.is_null() {
                    l.head = d;
                } else {
                    (*t).set_next(d);
                }
                l.tail = d;
                t.is_null()
            } else {
                let h = l.head;
                (*d).set_prev(ptr::null_mut());
                (*d).set_next(h);
                if h.is_null() {
                    l.tail = d;
                } else {
                    (*h).set_prev(d);
                }
                l.head = d;
                h.is_null()
            }
        };
        if was_empty {
            if zero {
                self.zero_bits |= 1 << order.get();
            } else {
                self.dirty_bits |= 1 << order.get();
            }
        }
    }

    /// Unlinks `d` from the list for `order` (O(1)).
    ///
    /// # Safety
    ///
    /// The zone lock is held and `d` is on that list.
    #[inline(always)]
    unsafe fn del(&mut self, d: *mut PageDesc, order: Order, zero: bool) {
        let l = self.list_mut(order, zero);
        // SAFETY: caller's contract.
        let empty = unsafe {
            let n = (*d).next();
            let p = (*d).prev();
            if p.is_null() {
                l.head = n;
            } else {
                (*p).set_next(n);
            }
            if n.is_null() {
                l.tail = p;
            } else {
                (*n).set_prev(p);
            }
            p.is_null() && n.is_null()
        };
        if empty {
            if zero {
                self.zero_bits &= !(1 << order.get());
            } else {
                self.dirty_bits &= !(1 << order.get());
            }
        }
    }

    /// Unlinks and returns the head (or, `cold`, the tail) of the list for
    /// `order`: [`del`](Self::del) of an end, whose outer link is known
    /// null (the kernel's `get_page_from_free_area` + `del_page_from_free_list`).
    /// The block's `prev` is null afterwards (a head's always is; the
    /// tail's is cleared): the block is handed out with every owner word
    /// zero (`PageDesc::owner_clean` and a null `prev`).
    ///
    /// # Safety
    ///
    /// The zone lock is held and the list is not empty.
    #[inline(always)]
    unsafe fn take(&mut self, order: Order, zero: bool, cold: bool) -> *mut PageDesc {
        let l = self.list_mut(order, zero);
        // SAFETY: caller's contract (a non-empty list's ends and their
        // neighbours are valid descriptors of this zone).
        let (d, empty) = unsafe {
            if cold {
                let d = l.tail;
                let p = (*d).prev();
                l.tail = p;
                if p.is_null() {
                    l.head = p;
                } else {
                    (*p).set_next(ptr::null_mut());
                }
                // As a head's: the owner words' reset leaves `prev` alone.
                (*d).set_prev(ptr::null_mut());
                (d, p.is_null())
            } else {
                let d = l.head;
                let n = (*d).next();
                l.head = n;
                if n.is_null() {
                    l.tail = n;
                } else {
                    (*n).set_prev(ptr::null_mut());
                }
                (d, n.is_null())
            }
        };
        if empty {
            if zero {
                self.zero_bits &= !(1 << order.get());
            } else {
                self.dirty_bits &= !(1 << order.get());
            }
        }
        d
    }

    /// Free blocks of `order`: `(known zero, others)`.
    #[inline]
    pub(crate) fn nr_free(&self, order: Order) -> (usize, usize) {
        let a = &self.area[order.index()];
        (a.lists[ZERO_LIST].len(), a.lists[DIRTY_LIST].len())
    }

    // --- watermarks -------------------------------------------------------

    /// `__zone_watermark_ok` against the min watermark: after taking
    /// `2^order` pages, more than `min` (lowered for `HIGH`/`NONBLOCK`)
    /// plus `lowmem_reserve[highest]` pages must remain. Whether a block of
    /// the order exists is left to [`rmqueue`](Self::rmqueue).
    #[inline(always)]
    pub(crate) fn watermark_ok(&self, order: Order, flags: AllocFlags, highest: usize) -> bool {
        self.watermark_ok_mark(order, flags, highest, Mark::Min)
    }

    /// `__zone_watermark_ok` against `mark`: the low watermark as is (the
    /// first pass of `get_page_from_freelist`), the min watermark lowered
    /// by the request's `HIGH`/`NONBLOCK` reductions (the slow path), or
    /// no check at all (`ALLOC_NO_WATERMARKS`).
    #[inline(always)]
    pub(crate) fn watermark_ok_mark(
        &self,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        mark: Mark,
    ) -> bool {
        let free = self.free as isize - (order.pages() as isize - 1);
        wmark_ok(
            free,
            &self.wmark,
            &self.lowmem_reserve,
            flags,
            highest,
            mark,
        )
    }

    // --- allocation -------------------------------------------------------

    /// `__rmqueue_smallest` + `expand`: takes the smallest free block of at
    /// least `order` and splits it down, the upper halves going back to the
    /// heads of their lists (PG_zero passed to the halves that had it).
    ///
    /// Choice of list: a `ZEROED` request takes the smallest known-zero
    /// block (an `ONLY_ZERO` one fails without); otherwise the smallest
    /// block, preferring one not known zero at that order. `COLD` takes
    /// the tail.
    ///
    /// # Safety
    ///
    /// The zone lock is held; the listed descriptors are valid (type
    /// invariant).
    #[inline]
    pub(crate) unsafe fn rmqueue(
        &mut self,
        cfg: &Config,
        order: Order,
        flags: AllocFlags,
    ) -> Option<Taken> {
        let above: u32 = !0u32 << order.get();
        let (o, li) = if flags.contains(AllocFlags::ZEROED) {
            let z = self.zero_bits & above;
            if z != 0 {
                (z.trailing_zeros(), ZERO_LIST)
            } else if flags.contains(AllocFlags::ONLY_ZERO) {
                self.count(Stat::ONLY_ZERO_FAIL, 1);
                return None;
            } else {
                let d = self.dirty_bits & above;
                if d == 0 {
                    return None;
                }
                (d.trailing_zeros(), DIRTY_LIST)
            }
        } else if !self.list_mut(order, false).head.is_null() {
            // The order's own list of blocks not known zero (an order-0
            // request's usual hit: the upper half the last split left): its
            // head decides, without the bitmap's load and search before the
            // list's load (one dependent load less after the lock is taken,
            // issue #22). The choice is the search's: the smallest order,
            // not known zero first. No split: the list's address and the
            // block's order are the request's (issue #22: about 10
            // instructions of the generic take and split check).
            // SAFETY: the list is not empty (caller's contract: listed
            // descriptors are valid).
            let desc = unsafe { self.take(order, false, flags.contains(AllocFlags::COLD)) };
            // SAFETY: as above.
            let d = unsafe { &*desc };
            let s = d.load_state();
            let p = d.aux.load(Ordering::Relaxed);
            return Some(self.taken(desc, s, p, order, s & ZERO_FULL));
        } else {
            let any = (self.zero_bits | self.dirty_bits) & above;
            if any == 0 {
                return None;
            }
            let o = any.trailing_zeros();
            let li = if self.dirty_bits & (1 << o) != 0 {
                DIRTY_LIST
            } else {
                ZERO_LIST
            };
            (o, li)
        };
        let high = Order::of_bit(o);
        let cold = flags.contains(AllocFlags::COLD);
        // SAFETY: the bit for `high` says the list is non-empty (caller's
        // contract: listed descriptors are valid). The list a constant in
        // each branch (its address from `li` cost instructions, issue #22).
        let desc = unsafe {
            if li == ZERO_LIST {
                self.take(high, true, cold)
            } else {
                self.take(high, false, cold)
            }
        };
        // SAFETY: as above.
        let d = unsafe { &*desc };
        let s = d.load_state();
        let zero = s & ZERO_FULL;
        // A purged block's halves are purged (and zero) too.
        let purged = s & PURGED;
        let p = d.aux.load(Ordering::Relaxed);
        // SAFETY: `desc` heads a block of `high` taken off its list; the
        // halves are on no list (caller's contract for the rest).
        let zero = unsafe {
            if zero | purged == 0 {
                // A dirty resident block (the common case): every half is
                // dirty, no PG_zero bits to pass on.
                self.expand::<true>(cfg, desc, p, high, order, 0, 0)
            } else {
                self.expand::<false>(cfg, desc, p, high, order, zero, purged)
            }
        };
        self.count_event(Stat::SPLIT, u64::from(high.get() - order.get()));
        Some(self.taken(desc, s, p, order, zero))
    }

    /// The end of [`rmqueue`](Self::rmqueue): the block headed by `desc`
    /// (state `s` when taken, first byte `p`), split down to `order` with
    /// PG_zero bits `zero` for the part kept, becomes allocated.
    #[inline(always)]
    fn taken(&mut self, desc: *mut PageDesc, s: u32, p: *mut u8, order: Order, zero: u32) -> Taken {
        // SAFETY: `desc` heads the block (caller's contract).
        let d = unsafe { &*desc };
        let zero = if order == Order::ZERO && zero != ZERO_FULL {
            0
        } else {
            zero
        };
        self.free -= order.pages();
        // One test for both rare flags (issue #22).
        if s & (PURGED | AGED) != 0 {
            self.taken_flagged(d, s, order);
        }
        debug_assert!(d.owner_clean() && d.owner().prev().load(Ordering::Relaxed) == 0);
        d.state
            .store(make_state(KIND_ALLOC, order, 0), Ordering::Release);
        self.count_event(Stat::ALLOC, 1);
        Taken { desc, ptr: p, zero }
    }

    /// [`taken`](Self::taken) of a block with `PURGED` or `AGED` (state
    /// `s` when taken, head `d`).
    #[cold]
    #[inline(never)]
    fn taken_flagged(&mut self, d: &PageDesc, s: u32, order: Order) {
        if s & PURGED != 0 {
            // Handed out: its pages are resident again once touched.
            self.purged -= order.pages();
        }
        // The owner words read zero already (`free_one`'s callers cleared
        // what the last holder left; `take` nulled `prev`), but for the
        // decay scan's stamp on an `AGED` block.
        if s & AGED != 0 {
            d.data.store(0, Ordering::Relaxed);
        }
    }

    /// `expand`: splits the block of `high` headed by `desc` (first byte
    /// `p`) down to `order`, the upper halves going to the heads of their
    /// lists, and returns the PG_zero bits of the part kept (the lower
    /// half's at each step). `DIRTY`: the block has no PG_zero or `PURGED`
    /// bits (`zero`, `purged` are 0), so neither do its halves: the loop
    /// without the bit bookkeeping.
    ///
    /// # Safety
    ///
    /// The zone lock is held; `desc` heads a block of `high` in one span
    /// and this zone, on no list; `zero` are its PG_zero bits, `purged` its
    /// `PURGED` bit.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn expand<const DIRTY: bool>(
        &mut self,
        cfg: &Config,
        desc: *mut PageDesc,
        p: *mut u8,
        high: Order,
        order: Order,
        mut zero: u32,
        purged: u32,
    ) -> u32 {
        // The half's descriptors (in bytes: no scaling per step) and its
        // bytes, halved each step (no shifts by `m`).
        let mut half = high.pages() * core::mem::size_of::<PageDesc>();
        let mut bytes = cfg.block_size(high);
        let mut m = high;
        // The state of a free head of `m`, one order down each step (not
        // worked out from `m` at each: a mask and an add, issue #22).
        let mut st = make_state(KIND_FREE, high, 0);
        while m > order {
            m = m.minus(1);
            st -= 1 << ORDER_SHIFT;
            half >>= 1;
            bytes >>= 1;
            // SAFETY: the block lies in one span, so its descriptors are
            // contiguous in one memmap.
            let hd = unsafe { desc.byte_add(half) };
            let hz = if DIRTY || zero & ZERO_HI == 0 {
                0
            } else {
                ZERO_FULL
            };
            // SAFETY: `hd` heads the upper half, a page of this zone on no
            // list.
            unsafe {
                (*hd).aux.store(p.wrapping_add(bytes), Ordering::Relaxed);
                // (`hz | purged` are PG_zero and `PURGED` bits only:
                // `make_state`'s mask is not needed.)
                (*hd).state.store(st | hz | purged, Ordering::Relaxed);
                self.add(hd, m, hz == ZERO_FULL, false);
            }
            if !DIRTY {
                zero = if zero & ZERO_LO != 0 { ZERO_FULL } else { 0 };
                if zero | purged == 0 {
                    // The rest is dirty (a block with only its upper half
                    // known zero, the usual shape of a merged block): the
                    // loop without the bit bookkeeping.
                    // SAFETY: as for this call, with the lower half left.
                    return unsafe { self.expand::<true>(cfg, desc, p, m, order, 0, 0) };
                }
            }
        }
        zero
    }

    // --- free ---------------------------------------------------------------

    /// `__free_one_page`: adds the order-`order` block at `pfn` (descriptor
    /// `desc`) to the free lists, merging it with its free
    /// buddies up to `max_order` (O(max_order), each step one descriptor
    /// check: `pfn ^ (1 << order)` free, of this order, in the span).
    /// PG_zero of the merged block: the halves that were wholly zero
    /// (`ZERO_LO`, `ZERO_HI`); zero only if both were.
    ///
    /// `zero` may carry `PURGED` (a block given back to the OS, put back by
    /// the purge pass; always with `ZERO_FULL`): the merged block keeps it
    /// only if its buddy was purged too; merging a purged block with a
    /// resident one gives a resident block (the purged half's pages leave
    /// `purged`: a later purge pass purges the whole block again).
    ///
    /// Placement: at the tail if `to_tail` (fresh memory, cold frees) or if
    /// the buddy one order up is free, so a block likely to merge soon is
    /// not handed out first (`buddy_merge_likely`); else at the head.
    ///
    /// # Safety
    ///
    /// The zone lock is held; the block lies in span `span`, in this zone,
    /// and is on no list (allocated and validated, or fresh memory);
    /// `desc` is its head descriptor, whose owner words but `prev` read
    /// zero (the caller cleared what a holder left:
    /// `PageDesc::clear_owner_for_free`) and whose `aux` holds its first byte (as
    /// every block head's does: set when it became one, by `expand` or by
    /// the region's `add`; no store per free, issue #22).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) unsafe fn free_one(
        &mut self,
        cfg: &Config,
        span: &Found,
        mut desc: *mut PageDesc,
        mut pfn: usize,
        mut order: Order,
        mut zero: u32,
        to_tail: bool,
    ) {
        self.free += order.pages();
        let max = cfg.max_order();
        let mut purged = zero & PURGED;
        zero &= ZERO_FULL;
        if purged != 0 {
            self.purged += order.pages();
        }
        if order == Order::ZERO && zero != ZERO_FULL {
            zero = 0;
        }
        let from = order;
        // `order.pages()`, doubled each step, and the kind and order bits
        // of a free head of `order` (`is_head`'s), one order up each step.
        let mut bit = order.pages();
        let mut want = make_state(KIND_FREE, order, 0);
        while order < max {
            let bpfn = pfn ^ bit;
            let Some(bd) = span.desc_ptr(bpfn) else { break };
            // SAFETY: in the span's memmap.
            let bs = unsafe { (*bd).load_state() };
            if bs & (KIND_MASK | ORDER_MASK) != want {
                break;
            }
            if (bs & (ZERO_FULL | PURGED | AGED)) | zero | purged == 0 {
                // Both halves dirty and resident (the common case): the
                // merged block is too.
                // SAFETY: a FREE head of this order in this zone (buddies
                // share the zone: zone ends are multiples of the largest
                // block) without PG_zero bits is on the dirty list.
                unsafe { self.del(bd, order, false) };
            } else {
                if bs & AGED != 0 {
                    // The decay scan's stamp: the buddy's owner words read
                    // zero again, as every page's of a free block.
                    // SAFETY: as above.
                    unsafe { (*bd).data.store(0, Ordering::Relaxed) };
                }
                let bz = bs & ZERO_FULL;
                if (bs & PURGED) != purged {
                    // One half purged, the other resident: the merged block
                    // is resident (the purged half is counted resident
                    // again).
                    self.purged -= bit;
                    purged = 0;
                }
                // SAFETY: as above, on the list its PG_zero bits name.
                unsafe { self.del(bd, order, bz == ZERO_FULL) };
                let (lo, hi) = if bpfn < pfn { (bz, zero) } else { (zero, bz) };
                zero = (if lo == ZERO_FULL { ZERO_LO } else { 0 })
                    | (if hi == ZERO_FULL { ZERO_HI } else { 0 });
            }
            // SAFETY: both descriptors are valid (span memmap).
            unsafe {
                if bpfn < pfn {
                    (*desc).state.store(0, Ordering::Relaxed);
                    desc = bd;
                    pfn = bpfn;
                } else {
                    (*bd).state.store(0, Ordering::Relaxed);
                }
            }
            order = order.plus(1);
            bit <<= 1;
            want += 1 << ORDER_SHIFT;
        }
        self.count_event(Stat::MERGE, u64::from(order.get() - from.get()));
        // SAFETY: `desc` heads the merged block, whose `aux` is its first
        // byte already (the caller's contract for the block freed; a free
        // buddy's own for a lower buddy that became the head).
        unsafe {
            // (From `order`, not `want`: the loop's exit value of `want`
            // cost a closed form before every loop, issue #22.)
            (*desc).state.store(
                make_state(KIND_FREE, order, zero | purged),
                Ordering::Release,
            );
            // The list a constant in each branch (issue #22: its address
            // worked out from the PG_zero bits cost four instructions).
            if zero == ZERO_FULL {
                self.place::<true>(span, desc, pfn, order, max, to_tail);
            } else {
                self.place::<false>(span, desc, pfn, order, max, to_tail);
            }
        }
    }

    /// Links the merged block `desc` (at `pfn`, of `order`) onto its list
    /// (the known-zero one if `ZERO`): at the tail if `to_tail` or
    /// `buddy_merge_likely`, else at the head.
    ///
    /// # Safety
    ///
    /// As [`ZoneInner::add`], with `desc` a free head of `order` in `span`.
    #[inline(always)]
    unsafe fn place<const ZERO: bool>(
        &mut self,
        span: &Found,
        desc: *mut PageDesc,
        pfn: usize,
        order: Order,
        max: Order,
        to_tail: bool,
    ) {
        // Onto an empty list, head and tail are the same place: no
        // `buddy_merge_likely` lookup (one descriptor read and a branch
        // that follows no pattern, issue #22). The usual case of a free
        // that merged: its order's list held only the buddy.
        let tail = !self.list_mut(order, ZERO).head.is_null()
            && (to_tail || merge_likely(max, span, pfn, order));
        // SAFETY: caller's contract.
        unsafe { self.add(desc, order, ZERO, tail) };
    }
}

/// A block the purge pass took off the free lists (`Buddy::purge_free`),
/// to give back to the OS outside the lock and put back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Isolated {
    /// Its head descriptor (kind `NONE` while isolated: no free of it
    /// passes the descriptor check, no buddy merges with it).
    pub(crate) desc: *mut PageDesc,
    /// Its first byte.
    pub(crate) ptr: *mut u8,
    /// Its order.
    pub(crate) order: Order,
    /// Its PG_zero bits when taken.
    pub(crate) zero: u32,
}

impl Isolated {
    /// An empty slot.
    pub(crate) const NONE: Isolated = Isolated {
        desc: ptr::null_mut(),
        ptr: ptr::null_mut(),
        order: Order::ZERO,
        zero: 0,
    };
}

/// Which free blocks a purge pass takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PurgeScan {
    /// Every resident free block at or above the threshold (`trim`).
    All,
    /// Blocks that two scans `decay` ms apart saw free (the first sighting
    /// stamps the block `AGED` with `now`), while the zone keeps more than
    /// `retain` resident free pages.
    Decay {
        /// The caller's clock (ms).
        now: u64,
        /// The decay time (ms).
        decay: u64,
        /// Resident free pages to keep.
        retain: usize,
    },
    /// Any resident free block, largest first, while the zone keeps more
    /// than `retain` resident free pages (the policy's
    /// `max_resident_pages`).
    Cap {
        /// Resident free pages to keep.
        retain: usize,
    },
}

impl ZoneInner {
    /// Takes up to `out.len()` resident free blocks of order `min..=max`
    /// (largest first) that `scan` selects off the free lists (`free`
    /// drops by their pages while they are out), and ages the others
    /// `scan` looks at. Returns how many it took.
    ///
    /// # Safety
    ///
    /// The zone lock is held; the listed descriptors are valid (type
    /// invariant).
    pub(crate) unsafe fn isolate_for_purge(
        &mut self,
        min: Order,
        max: Order,
        scan: PurgeScan,
        out: &mut [Isolated],
    ) -> usize {
        let mut n = 0;
        let mut o = max;
        loop {
            for li in [DIRTY_LIST, ZERO_LIST] {
                let mut d = self.area[o.index()].lists[li].head;
                while !d.is_null() && n < out.len() {
                    // SAFETY: a listed descriptor (caller's contract).
                    let dr = unsafe { &*d };
                    // SAFETY: lock held.
                    let next = unsafe { dr.next() };
                    let s = dr.load_state();
                    let take = if s & PURGED != 0 {
                        false
                    } else {
                        match scan {
                            PurgeScan::All => true,
                            PurgeScan::Cap { retain } => {
                                if self.free - self.purged <= retain {
                                    return n;
                                }
                                true
                            }
                            PurgeScan::Decay { now, decay, retain } => {
                                if self.free - self.purged <= retain {
                                    return n;
                                }
                                if s & AGED == 0 {
                                    // First sighting: stamp it (the head's
                                    // owner words are the buddy's while the
                                    // block is free).
                                    dr.data.store(now as usize, Ordering::Relaxed);
                                    dr.state.store(s | AGED, Ordering::Relaxed);
                                    false
                                } else {
                                    let seen = dr.data.load(Ordering::Relaxed) as u64;
                                    now.wrapping_sub(seen) >= decay
                                }
                            }
                        }
                    };
                    if take {
                        // SAFETY: listed on this list (its PG_zero bits
                        // name it).
                        unsafe { self.del(d, o, li == ZERO_LIST) };
                        self.free -= o.pages();
                        out[n] = Isolated {
                            desc: d,
                            ptr: dr.aux.load(Ordering::Relaxed),
                            order: o,
                            zero: s & ZERO_FULL,
                        };
                        dr.state.store(0, Ordering::Relaxed);
                        n += 1;
                    }
                    d = next;
                }
            }
            if n == out.len() || o <= min {
                return n;
            }
            o = o.minus(1);
        }
    }
}

/// `buddy_merge_likely`: the buddy of this block's parent is free, so once
/// this block's own buddy is freed the merge goes two orders up.
#[inline(always)]
fn merge_likely(max: Order, span: &Found, pfn: usize, order: Order) -> bool {
    if order.get() + 1 >= max.get() {
        return false;
    }
    let parent = pfn & !order.pages();
    let higher_buddy = parent ^ (order.pages() << 1);
    match span.desc(higher_buddy) {
        Some(d) => {
            let s = d.load_state();
            is_head(s, KIND_FREE, order.plus(1))
        }
        None => false,
    }
}

/// A zone: its lock and the data it protects, plus lock-free copies of the
/// sizes pcp reads (`managed`, watermarks).
pub(crate) struct Zone {
    /// `zone->lock`, taken with IRQs saved (`spin_lock_irqsave`), in its
    /// own cache line: a raw spin lock (plain-store unlock) where the
    /// platform's holders cannot be preempted (`Platform::RAW_SPINLOCKS`:
    /// a kernel without PREEMPT_RT), else the adaptive futex lock.
    pub(crate) lock: CachePadded<SpinLock<ZoneInner>>,
    /// Copy of `managed` (written under the resize lock).
    pub(crate) managed: AtomicUsize,
    /// Copies of the watermarks: min, low, high (written under the resize
    /// lock).
    pub(crate) wmark: [AtomicUsize; 3],
    /// Copy of `lowmem_reserve` (written under the resize lock), for
    /// `zone_watermark_fast`.
    pub(crate) reserve: [AtomicUsize; MAX_ZONES],
    /// `NR_FREE_PAGES` readable without the lock: `ZoneInner::free` as the
    /// last holder of the zone lock left it (stored when a zone guard
    /// drops), for `zone_watermark_fast`.
    pub(crate) nr_free: AtomicUsize,
}

impl Zone {
    local_lock::const_fn! {
        /// An empty zone; its lock is a raw spin lock if `raw`
        /// ([`Platform::RAW_SPINLOCKS`](local_lock::Platform::RAW_SPINLOCKS)).
        pub(crate) fn new(raw: bool) -> Zone {
            #[cfg(not(loom))]
            return Zone {
                lock: CachePadded::new(if raw {
                    SpinLock::new_raw(ZoneInner::new())
                } else {
                    SpinLock::new(ZoneInner::new())
                }),
                managed: AtomicUsize::new(0),
                wmark: [const { AtomicUsize::new(0) }; 3],
                reserve: [const { AtomicUsize::new(0) }; MAX_ZONES],
                nr_free: AtomicUsize::new(0),
            };
            #[cfg(loom)]
            return Zone {
                lock: CachePadded::new(if raw {
                    SpinLock::new_raw(ZoneInner::new())
                } else {
                    SpinLock::new(ZoneInner::new())
                }),
                managed: AtomicUsize::new(0),
                wmark: core::array::from_fn(|_| AtomicUsize::new(0)),
                reserve: core::array::from_fn(|_| AtomicUsize::new(0)),
                nr_free: AtomicUsize::new(0),
            };
        }
    }
}
