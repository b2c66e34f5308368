//! Page lists linked through the buddy's descriptor owner words.
//!
//! A page on a pcp list is *allocated* from the buddy's point of view, so
//! its head descriptor's owner words belong to the pcp: `data` = previous
//! node, `link` = next node (0 = none), `tag` = [`list_tag`] of the list it
//! is on. Links never live in the page itself: that would destroy the
//! known-zero pages the zero list keeps.
//!
//! A node is the address of the page's descriptor ([`Owner`]), not of the
//! page: walking and unlinking then need no address-to-descriptor lookup
//! (the memmap lives as long as the buddy), and the page itself is
//! `Owner::block()`. Only a page entering the lists is looked up once.
//!
//! Invariant per list: following `link` from `head` ends at `tail` (both 0
//! when empty); `data` of each is its predecessor; each node's `tag` is the
//! list's tag. The live lists keep no length (as the kernel's, whose only
//! count is `pcp->count`): a snapshot counts it ([`PageList::len`]).

use core::ptr::NonNull;

use buddy::{Buddy, Owner};
use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

/// The tag of pages on pcp lists: `0x5043_0000 | zero << 4 | order`
/// ("PC"); SLUB and other owners use other values. The buddy knows it
/// ([`buddy::PCP_TAG`]) and refuses to free a page so tagged: a page on a
/// per-CPU list is held by the lists, not by whoever frees it.
pub const PCP_TAG: u32 = buddy::PCP_TAG;

/// The tag of the list of `order` (`zero`: the zero list).
#[inline(always)]
pub const fn list_tag(order: u8, zero: bool) -> u32 {
    PCP_TAG | ((zero as u32) << 4) | order as u32
}

/// Whether a tag is some pcp list's.
#[inline(always)]
pub const fn is_pcp_tag(tag: u32) -> bool {
    buddy::is_pcp_tag(tag)
}

/// A doubly linked list of pages, head = hot end, tail = cold end.
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order};
/// use core::sync::atomic::Ordering::Relaxed;
/// use pcp::list::{is_pcp_tag, list_tag, PageList};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB buddy and per-thread lists over it (batch 8, high 32), as in
/// # // `Pcp`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// # let pcp = pcp::Pcp::<_, local_lock::std_platform::PerThread>::new_tuned(
/// #     &heap,
/// #     buddy::ZoneId::new(0),
/// #     local_lock::std_platform::PerThread,
/// #     pcp::Policy::Trylock,
/// #     Some((8, 32)),
/// # );
/// assert_eq!(pcp.local_lists().normal[0], PageList::EMPTY);
/// let p = pcp.alloc(Order::ZERO, AllocFlags::NONE).unwrap();
/// // SAFETY: our page, written, then freed once.
/// unsafe {
///     p.ptr.as_ptr().write(1);
///     pcp.free(p.ptr, p.order, FreeFlags::NONE);
/// }
/// let list = pcp.local_lists().normal[0];
/// assert_eq!(list.len, 1);
/// // The node is the page's descriptor (its owner words), tagged with the list.
/// let owner = heap.owner_of(p.ptr.as_ptr()).unwrap().owner;
/// assert_eq!((list.head, list.tail), (owner as *const _ as usize, list.head));
/// assert_eq!(owner.tag().load(Relaxed), list_tag(0, false));
/// assert!(is_pcp_tag(list_tag(3, true)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageList {
    /// First (hottest) node: the address of its page's descriptor, 0 if empty.
    pub head: usize,
    /// Last (coldest) node, 0 if empty.
    pub tail: usize,
    /// Number of pages (blocks) on the list, in a snapshot
    /// ([`Pcp::local_lists`](crate::Pcp::local_lists),
    /// [`Pcp::cpu_lists`](crate::Pcp::cpu_lists)), counted when the copy is
    /// taken. The live lists do not maintain it (issue #22: the kernel's
    /// lists have no length either, only `pcp->count`); it reads 0 there.
    pub len: usize,
}

impl PageList {
    /// An empty list.
    pub const EMPTY: PageList = PageList {
        head: 0,
        tail: 0,
        len: 0,
    };
}

/// The owner words of a page entering a pcp list (one lookup).
#[inline(always)]
pub(crate) fn owner<P: Platform>(buddy: &Buddy<P>, page: usize) -> &Owner {
    match buddy.owner_of(page as *const u8) {
        Some(b) => b.owner,
        None => corrupt(page),
    }
}

/// The descriptor a node names.
///
/// # Safety
///
/// `node` was stored by this module: the address of an `Owner` in the
/// buddy's memmap, which outlives the lists (the lists borrow the buddy).
#[inline(always)]
unsafe fn node<'a>(node: usize) -> &'a Owner {
    // SAFETY: caller's contract; the address was exposed by `push`.
    unsafe { &*core::ptr::with_exposed_provenance::<Owner>(node) }
}

#[cold]
#[inline(never)]
fn corrupt(page: usize) -> ! {
    panic!("pcp: page {page:#x} on a per-CPU list is not an allocated buddy block (list corrupted)")
}

impl PageList {
    /// Pushes the page whose descriptor is `o` at the head (hot) or the
    /// tail (cold).
    #[inline]
    pub(crate) fn push(&mut self, o: &Owner, tag: u32, cold: bool) {
        // Nodes are stored in atomic words: expose the descriptor's
        // provenance so `node` can take it back.
        let n = (o as *const Owner).expose_provenance();
        o.tag().store(tag, Relaxed);
        if self.head == 0 {
            o.data().store(0, Relaxed);
            o.link().store(0, Relaxed);
            self.head = n;
            self.tail = n;
        } else if cold {
            o.data().store(self.tail, Relaxed);
            o.link().store(0, Relaxed);
            // SAFETY: `tail` is a node of this list.
            unsafe { node(self.tail) }.link().store(n, Relaxed);
            self.tail = n;
        } else {
            o.data().store(0, Relaxed);
            o.link().store(self.head, Relaxed);
            // SAFETY: `head` is a node of this list.
            unsafe { node(self.head) }.data().store(n, Relaxed);
            self.head = n;
        }
    }

    /// Pops from the head (hot) or the tail (cold); the page's owner words
    /// are cleared (they belong to the next holder).
    #[inline]
    pub(crate) fn pop(&mut self, cold: bool) -> Option<NonNull<u8>> {
        self.pop_owner(cold).map(|(p, _)| p)
    }

    /// [`pop`](Self::pop) that also returns the page's descriptor (the
    /// node), so an allocation hands it on without a lookup. `'a` is at
    /// most the life of the buddy whose memmap holds the nodes (the caller
    /// ties it to its borrow of the lists' owner).
    #[inline]
    pub(crate) fn pop_owner<'a>(&mut self, cold: bool) -> Option<(NonNull<u8>, &'a Owner)> {
        if self.head == 0 {
            return None;
        }
        let n = if cold { self.tail } else { self.head };
        // SAFETY: nodes of this list name live descriptors.
        let o = unsafe { node(n) };
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        } else if cold {
            let prev = o.data().load(Relaxed);
            // SAFETY: a node of this list.
            unsafe { node(prev) }.link().store(0, Relaxed);
            self.tail = prev;
        } else {
            let next = o.link().load(Relaxed);
            // SAFETY: a node of this list.
            unsafe { node(next) }.data().store(0, Relaxed);
            self.head = next;
        }
        o.data().store(0, Relaxed);
        o.link().store(0, Relaxed);
        o.tag().store(0, Relaxed);
        match o.block() {
            Some(p) => Some((p, o)),
            None => corrupt(n),
        }
    }

    /// This list with [`len`](Self::len) counted (a snapshot's copy).
    pub(crate) fn counted(mut self) -> PageList {
        let mut n = 0;
        let mut cur = self.head;
        while cur != 0 {
            n += 1;
            // SAFETY: nodes of this list name live descriptors (the caller
            // holds the lists).
            cur = unsafe { node(cur) }.link().load(Relaxed);
        }
        self.len = n;
        self
    }

    /// Walks the list checking links and tags, that it ends at `tail` within
    /// `limit` nodes (no cycle), and that each node is the descriptor the
    /// buddy has for its page; calls `f` on each page and returns the number
    /// of nodes. Panics with a description on the first inconsistency.
    #[cfg(any(test, feature = "invariants"))]
    pub(crate) fn check<P: Platform>(
        &self,
        buddy: &Buddy<P>,
        tag: u32,
        limit: usize,
        mut f: impl FnMut(usize),
    ) -> usize {
        let mut prev = 0usize;
        let mut cur = self.head;
        let mut n = 0usize;
        while cur != 0 {
            // SAFETY: nodes name live descriptors (checked against the buddy below).
            let o = unsafe { node(cur) };
            let page = o.block().map_or(0, |p| p.as_ptr() as usize);
            assert!(
                core::ptr::eq(owner(buddy, page), o),
                "pcp: node {cur:#x} is not the descriptor of its page {page:#x}"
            );
            assert_eq!(
                o.tag().load(Relaxed),
                tag,
                "pcp: page {page:#x} has tag {:#x}, list {tag:#x}",
                o.tag().load(Relaxed)
            );
            assert_eq!(
                o.data().load(Relaxed),
                prev,
                "pcp: page {page:#x}: prev link broken"
            );
            f(page);
            n += 1;
            assert!(
                n <= limit,
                "pcp: list {tag:#x} longer than the {limit} pages listed (cycle?)"
            );
            prev = cur;
            cur = o.link().load(Relaxed);
        }
        assert_eq!(self.tail, prev, "pcp: list {tag:#x} tail mismatch");
        n
    }
}
