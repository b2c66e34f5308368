//! The descriptor lookups of allocated blocks (`virt_to_page` +
//! `compound_head`): the owner words of the block containing an address
//! ([`Buddy::owner_of`]), what the buddy thinks of a page
//! ([`Buddy::page_state`]), and the candidate-head search the free checks
//! and region setup share.

use core::ptr::NonNull;

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use super::Buddy;
use crate::desc::{is_head, kind, order_of, Owner, KIND_ALLOC, KIND_FREE, KIND_TAIL, ZERO_FULL};
use crate::desc::{PageDesc, KIND_NONE};
use crate::span::Found;
use crate::types::{Order, Page, ZoneId};

/// An allocated block found from an address inside it
/// ([`Buddy::owner_of`]).
///
/// ```
/// use buddy::{AllocFlags, Order};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::new(2).unwrap(), AllocFlags::NONE).unwrap();
/// // From any address inside the block: its head and order (`virt_to_page`).
/// let r = heap.owner_of(p.ptr.as_ptr().wrapping_add(3 * 4096 + 100)).unwrap();
/// assert_eq!((r.head, r.order), (p.ptr, p.order));
/// assert_eq!(r.owner.block(), Some(p.ptr));
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
/// assert!(heap.owner_of(p.ptr.as_ptr()).is_none(), "free blocks have no owner");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct BlockRef<'a> {
    /// The block's first byte.
    pub head: NonNull<u8>,
    /// The block's order.
    pub order: Order,
    /// The block's owner words.
    pub owner: &'a Owner,
}

/// A block just handed out, with its owner words
/// ([`Buddy::alloc_block`], [`PageAlloc::alloc_block`](crate::PageAlloc::alloc_block)):
/// the descriptor the allocation had in hand, so its holder never looks it
/// up again.
///
/// ```
/// use buddy::{AllocFlags, Order};
/// use core::sync::atomic::Ordering::Relaxed;
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let b = heap.alloc_block(Order::ZERO, AllocFlags::ZEROED).unwrap();
/// assert!(b.page.zero);
/// // The owner words are the holder's: no lookup needed to use them.
/// b.owner.data().store(0x5eed, Relaxed);
/// let r = heap.owner_of(b.page.ptr.as_ptr()).unwrap();
/// assert_eq!(r.owner.data().load(Relaxed), 0x5eed);
/// b.owner.reset();
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(b.page.ptr, b.page.order) };
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Block<'a> {
    /// The block (first byte, order, known zero).
    pub page: Page,
    /// Its owner words, which belong to the holder until it frees the block.
    pub owner: &'a Owner,
}

/// What the buddy thinks of a page ([`Buddy::page_state`]).
///
/// ```
/// use buddy::{AllocFlags, Order, PageState};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// assert_eq!(heap.page_state(core::ptr::null()), PageState::Unmanaged);
/// let p = heap.alloc_pages(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
/// let head = p.ptr.as_ptr();
/// assert_eq!(heap.page_state(head), PageState::Allocated { order: p.order });
/// assert_eq!(heap.page_state(head.wrapping_add(4096)), PageState::Inside);
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
/// // Free again: a head of a free block, or merged into a larger one.
/// assert!(matches!(
///     heap.page_state(head),
///     PageState::Free { .. } | PageState::Inside
/// ));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PageState {
    /// No span covers the address.
    Unmanaged,
    /// The page heads a free block.
    Free {
        /// The free block's order.
        order: Order,
        /// Whether it is known to read as zero.
        zero: bool,
    },
    /// The page heads an allocated block (pages on a pcp list are
    /// allocated from the buddy's point of view).
    Allocated {
        /// The block's order.
        order: Order,
    },
    /// The page is managed (a span covers it) but heads no block: inside a
    /// block, in a hole or in a memmap.
    Inside,
}

impl<P: Platform> Buddy<P> {
    /// The allocated block containing `addr` (any address inside it), its
    /// head, order and owner words: `virt_to_page` + `compound_head`.
    ///
    /// Cost: the span lookup and one descriptor read when `addr` is in the
    /// head page; two for a block allocated with
    /// [`COMP`](crate::AllocFlags::COMP); otherwise at most `max_order` more
    /// descriptor reads (the candidate heads `pfn & !(2^k - 1)`).
    ///
    /// Exact for blocks the caller holds (their descriptors cannot change
    /// under it); for other addresses the answer is a racy snapshot.
    /// `None` if no allocated block contains `addr`.
    #[inline(always)]
    pub fn owner_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        // The common case inline (SLUB's free path asks on every free):
        // the first span, a head page or a tail page of an allocated block.
        let a = addr as usize;
        let shift = self.cfg.page_shift();
        if let Some(found) = self.spans.find_first(a, shift) {
            if let Some(r) = self.owner_in(&found, a, shift) {
                return Some(r);
            }
        }
        self.owner_of_any(a)
    }

    /// The owner words of the allocated block of `order` whose first byte
    /// is `ptr`, if `ptr` is exactly that (the check of a free, as the
    /// buddy's own: aligned to the block, its page's descriptor an
    /// allocated head of this order); `None` otherwise
    /// ([`owner_of`](Self::owner_of) then says what `ptr` is). One span
    /// lookup and one descriptor read: cheaper than `owner_of`, which also
    /// finds blocks from interior addresses.
    ///
    /// ```
    /// use buddy::{AllocFlags, Buddy, Config, Order};
    /// use local_lock::test_platform::TestPlatform;
    ///
    /// let mut mem = vec![0u8; 8 << 20];
    /// let b = Buddy::new(TestPlatform::pinned(1), Config::DEFAULT);
    /// // SAFETY: the memory outlives the allocator and is used by nothing else.
    /// unsafe { b.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
    /// let o1 = Order::new(1).unwrap();
    /// let p = b.alloc_pages(o1, AllocFlags::NONE).unwrap();
    /// assert!(b.head_owner(p.ptr.as_ptr(), o1).is_some());
    /// assert!(b.head_owner(p.ptr.as_ptr(), Order::ZERO).is_none(), "wrong order");
    /// assert!(b.head_owner(p.ptr.as_ptr().wrapping_add(4096), o1).is_none(), "not the head");
    /// // SAFETY: ours, freed once.
    /// unsafe { b.free_pages(p.ptr, o1) };
    /// assert!(b.head_owner(p.ptr.as_ptr(), o1).is_none(), "free");
    /// ```
    #[inline(always)]
    pub fn head_owner(&self, ptr: *const u8, order: Order) -> Option<&Owner> {
        self.head_desc(ptr as usize, order).map(|(_, d)| d.owner())
    }

    /// [`head_owner`](Self::head_owner) with the block's zone (its node's
    /// zone of the type its address gives; one more add on the span
    /// lookup already made): for a per-CPU layer that keeps lists per zone
    /// and must put a page on its own zone's list.
    #[inline(always)]
    pub fn head_owner_zone(&self, ptr: *const u8, order: Order) -> Option<(&Owner, ZoneId)> {
        let a = ptr as usize;
        self.head_desc(a, order)
            .map(|(f, d)| (d.owner(), ZoneId::raw(self.zone_in(&f, a))))
    }

    /// [`head_owner`](Self::head_owner) for a layer that serves one zone
    /// (a per-CPU list's): the owner words if `ptr` heads an allocated
    /// block of `order` in `zone` and in the first span (one span compare,
    /// one zone compare, one descriptor read; issue #22); `None` otherwise,
    /// where [`head_owner_zone`](Self::head_owner_zone) tells a block of
    /// another zone or span from a bad address.
    ///
    /// ```
    /// use buddy::{AllocFlags, Buddy, Config, Order, ZoneId};
    /// use local_lock::test_platform::TestPlatform;
    ///
    /// let mut mem = vec![0u8; 8 << 20];
    /// let b = Buddy::new(TestPlatform::pinned(1), Config::DEFAULT);
    /// // SAFETY: the memory outlives the allocator and is used by nothing else.
    /// unsafe { b.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
    /// let p = b.alloc_pages(Order::ZERO, AllocFlags::NONE).unwrap();
    /// let z = b.zone_of(p.ptr.as_ptr()).unwrap();
    /// assert!(b.head_owner_in(p.ptr.as_ptr(), Order::ZERO, z).is_some());
    /// assert!(b.head_owner_in(p.ptr.as_ptr(), Order::ZERO, ZoneId::new(z.index() + 1)).is_none());
    /// assert!(b.head_owner_in(p.ptr.as_ptr().wrapping_add(8), Order::ZERO, z).is_none());
    /// // SAFETY: ours, freed once.
    /// unsafe { b.free_pages(p.ptr, Order::ZERO) };
    /// assert!(b.head_owner_in(p.ptr.as_ptr(), Order::ZERO, z).is_none(), "free");
    /// ```
    #[inline(always)]
    pub fn head_owner_in(&self, ptr: *const u8, order: Order, zone: ZoneId) -> Option<&Owner> {
        let a = ptr as usize;
        if order > self.cfg.max_order() {
            return None;
        }
        let shift = self.cfg.page_shift();
        let found = self.spans.find_first(a, shift)?;
        if found.info.zone != zone.index() {
            return None;
        }
        let d = found.desc(a >> shift)?;
        (is_head(d.state.load(Ordering::Acquire), KIND_ALLOC, order)
            && d.aux.load(Ordering::Relaxed) as usize == a)
            .then(|| d.owner())
    }

    /// The span and head descriptor of the allocated block of `order` at
    /// `a`, if `a` is exactly its head.
    #[inline(always)]
    fn head_desc(&self, a: usize, order: Order) -> Option<(Found, &PageDesc)> {
        if order > self.cfg.max_order() {
            return None;
        }
        let shift = self.cfg.page_shift();
        let found = match self.spans.find_first(a, shift) {
            Some(f) => f,
            None => self.spans.find(a, shift)?,
        };
        let d = found.desc(a >> shift)?;
        // Every head's `aux` holds its first byte, so `aux == a` is the
        // alignment check (an address inside the page, or a page inside a
        // larger block, fails it): a load of the descriptor's line instead
        // of a mask built from the order (issue #22).
        (is_head(d.state.load(Ordering::Acquire), KIND_ALLOC, order)
            && d.aux.load(Ordering::Relaxed) as usize == a)
            .then_some((found, d))
    }

    /// The allocated block containing `a` in span `found` when `a`'s page
    /// is its head or a stamped tail (two descriptor reads at most).
    #[inline(always)]
    fn owner_in(&self, found: &Found, a: usize, shift: u32) -> Option<BlockRef<'_>> {
        let d = found.desc(a >> shift)?;
        let s = d.state.load(Ordering::Acquire);
        match kind(s) {
            KIND_ALLOC => Some(BlockRef {
                head: NonNull::new(d.aux.load(Ordering::Relaxed))?,
                order: order_of(s),
                owner: d.owner(),
            }),
            KIND_TAIL => {
                let h = d.aux.load(Ordering::Relaxed) as usize;
                self.block_at(found, h >> shift, a)
            }
            _ => None,
        }
    }

    /// [`owner_of`](Self::owner_of) for any span and the slow cases
    /// (unstamped tails: the candidate heads).
    #[inline(never)]
    fn owner_of_any(&self, a: usize) -> Option<BlockRef<'_>> {
        let shift = self.cfg.page_shift();
        let found = self.spans.find(a, shift)?;
        self.owner_in(&found, a, shift)
            .or_else(|| self.owner_of_slow(&found, a >> shift, a))
    }

    #[cold]
    #[inline(never)]
    fn owner_of_slow(&self, found: &Found, pfn: usize, a: usize) -> Option<BlockRef<'_>> {
        let (h, _, kd) = self.covering_head(found, pfn)?;
        if kd != KIND_ALLOC {
            return None;
        }
        self.block_at(found, h, a)
    }

    /// The allocated block headed at `hpfn` if it contains `a`.
    #[inline(always)]
    fn block_at(&self, found: &Found, hpfn: usize, a: usize) -> Option<BlockRef<'_>> {
        let d = found.desc(hpfn)?;
        let s = d.state.load(Ordering::Acquire);
        if kind(s) != KIND_ALLOC {
            return None;
        }
        let o = order_of(s);
        let head = d.aux.load(Ordering::Relaxed);
        let h = head as usize;
        if a >= h && a - h < self.cfg.block_size(o) {
            Some(BlockRef {
                head: NonNull::new(head)?,
                order: o,
                owner: d.owner(),
            })
        } else {
            None
        }
    }

    /// The head (pfn, order, kind) of the free or allocated block that
    /// contains `pfn` as a non-head page, by checking the at most
    /// `max_order` candidate heads `pfn & !(2^k - 1)`: a block of order `k`
    /// containing `pfn` must start there, and only one block can.
    pub(super) fn covering_head(&self, found: &Found, pfn: usize) -> Option<(usize, Order, u32)> {
        for k in 1..=self.cfg.max_order().get() {
            let o = Order::new(k)?;
            let h = pfn & !(o.pages() - 1);
            let Some(d) = found.desc(h) else { continue };
            let s = d.state.load(Ordering::Acquire);
            let kd = kind(s);
            if (kd == KIND_FREE || kd == KIND_ALLOC) && order_of(s) == o {
                return Some((h, o, kd));
            }
        }
        None
    }

    /// What the buddy thinks of the page at `addr` (rounded down to its
    /// page), read under the zone lock: for a pcp checker, "is this page
    /// allocated from the buddy's view, and of what order".
    pub fn page_state(&self, addr: *const u8) -> PageState {
        let a = addr as usize;
        let shift = self.cfg.page_shift();
        let Some(found) = self.spans.find(a, shift) else {
            return PageState::Unmanaged;
        };
        let zone = self.zone_in(&found, a);
        let _g = self.lock_zone(zone);
        let Some(d) = found.desc(a >> shift) else {
            return PageState::Unmanaged;
        };
        let s = d.load_state();
        match kind(s) {
            KIND_FREE => PageState::Free {
                order: order_of(s),
                zero: s & ZERO_FULL == ZERO_FULL,
            },
            KIND_ALLOC => PageState::Allocated { order: order_of(s) },
            KIND_NONE | KIND_TAIL => PageState::Inside,
            _ => PageState::Inside,
        }
    }
}
