//! The invariant checker (`cfg(any(test, loom, feature = "invariants"))`;
//! compiled out otherwise). Tests and the fuzz target run it after every
//! operation.

use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;
use local_lock::Platform;

use crate::buddy::Buddy;
use crate::desc::{kind, order_of, PageDesc, AGED, KIND_ALLOC, KIND_FREE, PURGED, ZERO_FULL};
use crate::types::{Order, ZoneId, ORDER_SLOTS};
use crate::zone::{ZoneInner, DIRTY_LIST, ZERO_LIST};

impl<P: Platform> Buddy<P> {
    /// Checks every invariant of every zone, each under its lock, and
    /// panics with a description of the first violation:
    ///
    /// * `free == Σ_order blocks(order) × 2^order`, list counts and the
    ///   non-empty bitmaps agree with the lists, links are consistent;
    /// * every listed block is a properly aligned buddy head (`FREE`, its
    ///   list's order, PG_zero matching its list, the descriptor of its own
    ///   address, inside its span and zone, no block head inside it);
    /// * no two free buddies of equal order remain unmerged;
    /// * every `FREE` descriptor of the zone is on a list, and every
    ///   `ALLOC` head is aligned and inside its span;
    /// * `free <= managed`, and `managed` matches its lock-free copy;
    /// * `lowmem_reserve[0]` is 0 (the watermark check loads none for a
    ///   request whose highest zone is of type 0);
    /// * a `PURGED` block is known zero, and `purged` is the pages of the
    ///   listed `PURGED` blocks.
    ///
    /// Cost: O(pages managed). Tests and fuzzing only.
    pub fn check_invariants(&self) {
        for z in 0..self.nr_zone_ids() {
            let g = self.lock_zone(z);
            self.check_zone(ZoneId::new(z), &g);
        }
    }

    fn check_zone(&self, zone: ZoneId, g: &ZoneInner) {
        let cfg = self.config();
        let shift = cfg.page_shift();
        let max = cfg.max_order();
        let z = zone.index();
        assert_eq!(g.lowmem_reserve[0], 0, "zone {z}: lowmem_reserve[0]");
        let mut total = 0usize;
        let mut listed = 0usize;
        let mut purged = 0usize;
        for o in 0..ORDER_SLOTS {
            for li in [ZERO_LIST, DIRTY_LIST] {
                let l = &g.area[o].lists[li];
                let bit = if li == ZERO_LIST {
                    g.zero_bits
                } else {
                    g.dirty_bits
                } & (1 << o)
                    != 0;
                assert_eq!(
                    bit,
                    !l.head.is_null(),
                    "zone {z} order {o} list {li}: bitmap disagrees with the list"
                );
                if o > max.index() {
                    assert!(l.head.is_null(), "zone {z}: blocks above max_order {o}");
                    continue;
                }
                let order = Order::new(o as u8).unwrap();
                let mut prev: *mut PageDesc = core::ptr::null_mut();
                let mut d = l.head;
                let mut n = 0usize;
                while !d.is_null() {
                    assert!(
                        n <= g.managed,
                        "zone {z} order {o}: list longer than the zone (cycle?)"
                    );
                    // SAFETY: listed descriptors are valid; lock held.
                    let dr = unsafe { &*d };
                    // SAFETY: lock held.
                    let p = unsafe { dr.prev() };
                    assert_eq!(p, prev, "zone {z} order {o}: bad prev link");
                    self.check_free_block(zone, dr, d, order, li == ZERO_LIST);
                    if dr.load_state() & PURGED != 0 {
                        assert!(
                            li == ZERO_LIST,
                            "zone {z} order {o}: purged block not known zero"
                        );
                        purged += order.pages();
                    }
                    n += 1;
                    total += order.pages();
                    prev = d;
                    // SAFETY: lock held.
                    d = unsafe { dr.next() };
                }
                assert_eq!(l.tail, prev, "zone {z} order {o}: bad tail");
                listed += n;
            }
        }
        assert_eq!(
            purged, g.purged,
            "zone {z}: purged pages {} != pages of the purged blocks listed = {purged}",
            g.purged
        );
        assert_eq!(
            total, g.free,
            "zone {z}: free pages {} != sum over orders of blocks x 2^order = {total}",
            g.free
        );
        assert!(
            g.free <= g.managed,
            "zone {z}: free {} > managed {}",
            g.free,
            g.managed
        );
        assert_eq!(
            g.managed,
            self.managed_pages(zone),
            "zone {z}: managed copy out of date"
        );
        // Every FREE head of this zone is listed; ALLOC heads are aligned.
        let spans = self.spans();
        let mut free_heads = 0usize;
        for i in 0..spans.len() {
            let f = spans.get(i);
            for idx in 0..f.pages {
                let pfn = f.info.first_pfn + idx;
                if self.zone_in(&f, pfn << shift) != zone.index() {
                    continue;
                }
                let d = f.desc(pfn).unwrap();
                let s = d.load_state();
                match kind(s) {
                    KIND_FREE => free_heads += 1,
                    KIND_ALLOC => {
                        let o = order_of(s);
                        assert!(o <= max, "ALLOC head of pfn {pfn:#x}: order {o} > max");
                        assert!(
                            pfn & (o.pages() - 1) == 0 && idx + o.pages() <= f.pages,
                            "ALLOC head of pfn {pfn:#x} ({o}) misaligned or outside its span"
                        );
                        assert_eq!(
                            d.aux.load(Ordering::Relaxed) as usize,
                            pfn << shift,
                            "ALLOC head of pfn {pfn:#x}: wrong block pointer"
                        );
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(
            free_heads, listed,
            "zone {z}: {free_heads} FREE descriptors but {listed} listed blocks"
        );
    }

    fn check_free_block(
        &self,
        zone: ZoneId,
        dr: &PageDesc,
        d: *mut PageDesc,
        order: Order,
        zero_list: bool,
    ) {
        let cfg = self.config();
        let shift = cfg.page_shift();
        let z = zone.index();
        let s = dr.load_state();
        let addr = dr.aux.load(Ordering::Relaxed) as usize;
        assert_eq!(
            kind(s),
            KIND_FREE,
            "zone {z}: listed block {addr:#x} not FREE ({s:#x})"
        );
        assert_eq!(
            order_of(s),
            order,
            "zone {z}: block {addr:#x} on the wrong order's list"
        );
        assert_eq!(
            s & ZERO_FULL == ZERO_FULL,
            zero_list,
            "zone {z}: block {addr:#x} PG_zero does not match its list"
        );
        if order == Order::ZERO {
            let zb = s & ZERO_FULL;
            assert!(
                zb == 0 || zb == ZERO_FULL,
                "order-0 block {addr:#x} half zero"
            );
        }
        assert_eq!(
            addr & (cfg.block_size(order) - 1),
            0,
            "zone {z}: free block {addr:#x} not aligned to its {order}"
        );
        let f = self
            .spans()
            .find(addr, shift)
            .unwrap_or_else(|| panic!("free block {addr:#x} outside every span"));
        assert_eq!(
            self.zone_in(&f, addr),
            zone.index(),
            "free block {addr:#x} in the wrong zone (or node)"
        );
        let pfn = addr >> shift;
        assert_eq!(
            f.desc_ptr(pfn),
            Some(d),
            "free block {addr:#x}: listed descriptor is not its own"
        );
        assert!(
            f.index(pfn + order.pages() - 1).is_some(),
            "free block {addr:#x} ({order}) runs past its span"
        );
        if order < cfg.max_order() {
            let b = pfn ^ order.pages();
            if let Some(bd) = f.desc(b) {
                let bs = bd.load_state();
                assert!(
                    !(kind(bs) == KIND_FREE && order_of(bs) == order),
                    "free buddies {addr:#x} and {:#x} of {order} not merged",
                    b << shift
                );
            }
        }
        // The owner words read zero on every page of a free block (but the
        // decay scan's stamp on an `AGED` head): an allocation hands them
        // out without clearing them.
        let w = dr.owner();
        assert!(
            w.pair().load(Ordering::Relaxed) == DWord::new(0, 0)
                && (s & AGED != 0 || w.data().load(Ordering::Relaxed) == 0)
                && w.link().load(Ordering::Relaxed) == 0
                && w.tag().load(Ordering::Relaxed) == 0,
            "zone {z}: free block {addr:#x}: owner words left set"
        );
        for i in 1..order.pages() {
            let pd = f.desc(pfn + i).unwrap();
            let k = kind(pd.load_state());
            assert!(
                k != KIND_FREE && k != KIND_ALLOC,
                "free block {addr:#x} ({order}) contains a block head at page {i}"
            );
            // (Not under miri: every page of every free block, at each
            // check of the state machines, would cost its time budget; the
            // heads are checked there.)
            #[cfg(not(miri))]
            assert!(
                pd.owner_clean(),
                "free block {addr:#x} ({order}): owner words left set at page {i}"
            );
        }
    }
}

impl<P: Platform> Buddy<P> {
    /// Calls `f(address, order, known_zero)` for every free block of `zone`,
    /// under its lock (`f` must not call into the allocator). For models
    /// and tests.
    pub fn for_each_free_block(&self, zone: ZoneId, mut f: impl FnMut(usize, Order, bool)) {
        let g = self.lock_zone(zone.index());
        for o in 0..=self.config().max_order().index() {
            let order = Order::new(o as u8).unwrap();
            for li in [ZERO_LIST, DIRTY_LIST] {
                let mut d = g.area[o].lists[li].head;
                while !d.is_null() {
                    // SAFETY: listed descriptors are valid; lock held.
                    let dr = unsafe { &*d };
                    f(
                        dr.aux.load(Ordering::Relaxed) as usize,
                        order,
                        li == ZERO_LIST,
                    );
                    // SAFETY: lock held.
                    d = unsafe { dr.next() };
                }
            }
        }
    }
}
