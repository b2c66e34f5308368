//! The page-source contract between the page layers (see
//! `docs/DESIGN.md`, "How a request flows down"): one trait every page
//! allocator of the family implements ([`PageAlloc`]: the buddy, the std
//! heap, pcp's lists and its global heap), whose allocation hands back the
//! block **with** its owner words, and one buddy-side growth hook
//! ([`BuddySource::grow`], talc's `OomHandler`) asked when the buddy is
//! exhausted, and its purge hook ([`BuddySource::purge`]: free memory back
//! to the OS, for [`BuddySource::trim`] and the decay). Layers above the buddy never forward growth: a per-CPU layer
//! holds a [`BuddySource`] and lets it grow; a slab layer holds a
//! [`PageAlloc`].

use core::ptr::NonNull;

use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

use crate::buddy::{Block, BlockRef, Buddy};
use crate::desc::is_pcp_tag;
use crate::error::FreeError;
use crate::slowpath::alloc_slowpath;
use crate::types::{AllocFlags, FreeFlags, Order};

/// Times an allocation asks its [`BuddySource`] to grow before it fails:
/// memory one `grow` added can be taken by other CPUs' refills before the
/// retry (seen as a spurious out-of-memory in a 4-thread `GlobalPcp` test).
pub const MAX_GROW_RETRIES: usize = 16;

/// A page allocator: hands out blocks of `2^order` pages together with
/// their owner words, takes them back, and finds the block (and its owner
/// words) from any address inside it. Implemented by [`Buddy`],
/// [`GlobalBuddy`](crate::GlobalBuddy), and pcp's `Pcp` and `GlobalPcp`;
/// slub's `SlabSource` is this trait.
///
/// ```
/// use buddy::{AllocFlags, Order, PageAlloc};
/// use core::sync::atomic::Ordering::Relaxed;
///
/// /// A two-page buffer from any page allocator of the family (a buddy,
/// /// `GlobalBuddy`, pcp's lists); its owner words remember who asked.
/// fn two_pages<A: PageAlloc>(a: &A, id: usize) -> core::ptr::NonNull<u8> {
///     let b = a.alloc_block(Order::new(1).unwrap(), AllocFlags::NONE).unwrap();
///     b.owner.data().store(id, Relaxed);
///     b.page.ptr
/// }
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = two_pages(&heap, 42);
/// assert_eq!((heap.page_size(), PageAlloc::max_order(&heap).get()), (4096, 4));
/// // From an address inside, the block and the words its holder set.
/// let b = heap.block_of(p.as_ptr().wrapping_add(5000)).unwrap();
/// assert_eq!((b.head, b.order.get()), (p, 1));
/// assert_eq!(b.owner.data().load(Relaxed), 42);
/// b.owner.reset();
/// // SAFETY: our block, of this order, freed once.
/// unsafe { heap.free_block(p, Order::new(1).unwrap()) };
/// ```
///
/// # Safety
///
/// `alloc_block` returns blocks nobody else holds, aligned to their size,
/// with the owner words ([`Owner`](crate::Owner)) of their head descriptor,
/// which belong to the caller until `free_block`; `block_of` answers the
/// block containing an address with those same owner words, for every
/// block the caller holds.
pub unsafe trait PageAlloc: Sync {
    /// Whether [`alloc_private`](Self::alloc_private) serves metadata from
    /// memory that no user of this source can ever reach: memory that
    /// `alloc_block` and `alloc_direct` never handed out and never will
    /// (its own mappings). SLUB then stores its sheaves' object pointers
    /// there plain (a write after free through a dangling pointer cannot
    /// reach them); elsewhere it encodes them with the cache's secret.
    /// False by default.
    const PRIVATE_META: bool = false;
    /// The page size in bytes.
    fn page_size(&self) -> usize;
    /// The largest order `alloc_block` can serve.
    fn max_order(&self) -> Order;
    /// A block of `2^order` pages with its owner words, or `None`.
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>>;
    /// Returns a block.
    ///
    /// # Safety
    ///
    /// `ptr` heads a block of `order` from `alloc_block` that the caller
    /// holds and no longer uses.
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order);
    /// The allocated block containing `addr`, if any (a descriptor lookup:
    /// for frees, which start from an address).
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>>;
    /// A mapping of its own for a request beyond the largest block
    /// (`kmalloc_large` above the largest order), at least `size` bytes
    /// aligned to `align` and recorded so that
    /// [`direct_size`](Self::direct_size) and
    /// [`free_direct`](Self::free_direct) find it from its address alone.
    /// `None` by default (a source without one: such requests fail, as
    /// Linux's kmalloc returns NULL beyond `MAX_PAGE_ORDER`).
    fn alloc_direct(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let _ = (size, align);
        None
    }
    /// The length of the live direct mapping that starts at `addr`
    /// ([`alloc_direct`](Self::alloc_direct)), if any.
    fn direct_size(&self, addr: *const u8) -> Option<usize> {
        let _ = addr;
        None
    }
    /// Unmaps the live direct mapping that starts at `ptr`; false (and
    /// nothing happens) if there is none.
    ///
    /// # Safety
    ///
    /// If `ptr` is such a mapping, the caller holds it and no longer uses it.
    unsafe fn free_direct(&self, ptr: NonNull<u8>) -> bool {
        let _ = ptr;
        false
    }
    /// A block of at least `bytes` bytes of metadata memory that is never
    /// a user's (see [`PRIVATE_META`](Self::PRIVATE_META)), aligned to at
    /// least 64 bytes, contents unspecified; `None` by default (and
    /// whenever `PRIVATE_META` is false: callers use `alloc_block` then).
    fn alloc_private(&self, bytes: usize) -> Option<NonNull<u8>> {
        let _ = bytes;
        None
    }
    /// Takes back a block from [`alloc_private`](Self::alloc_private).
    ///
    /// # Safety
    ///
    /// `ptr` came from `alloc_private(bytes)` and is no longer used.
    unsafe fn free_private(&self, ptr: NonNull<u8>, bytes: usize) {
        let _ = (ptr, bytes);
    }
    /// `nr_node_ids`: the NUMA nodes this source's memory is spread over
    /// (node ids `0..nr_node_ids()`). One by default.
    fn nr_node_ids(&self) -> usize {
        1
    }
    /// `page_to_nid()`: the node of the memory at `addr`, an address inside
    /// a block this source handed out. Node 0 by default.
    fn page_to_nid(&self, addr: *const u8) -> usize {
        let _ = addr;
        0
    }
    /// `alloc_pages_node(nid, ...)`: a block from node `nid` while it has
    /// memory, else from the nearest node that has (by distance), or only
    /// from `nid` with [`AllocFlags::THISNODE`]. By default the node is
    /// ignored ([`alloc_block`](Self::alloc_block)): a source of one node.
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let _ = nid;
        self.alloc_block(order, flags)
    }
    /// Whether this source keeps a page map
    /// ([`page_tag`](Self::page_tag), [`set_page_tags`](Self::set_page_tags));
    /// false by default.
    fn has_page_tags(&self) -> bool {
        false
    }
    /// The page map: the tag [`set_page_tags`](Self::set_page_tags) gave
    /// the page holding `addr`, or 0 (no tag, an address the map does not
    /// cover, or a source without a map: the default). One byte read, for
    /// frees that start from an address (snmalloc's pagemap); a tag is a
    /// hint the caller checks against what it knows, never a proof.
    #[inline(always)]
    fn page_tag(&self, addr: *const u8) -> u8 {
        let _ = addr;
        0
    }
    /// Tags every page of the block headed at `head` of `order`, which the
    /// caller holds (0 clears the tags before the block is freed). Nothing
    /// happens by default.
    fn set_page_tags(&self, head: NonNull<u8>, order: Order, tag: u8) {
        let _ = (head, order, tag);
    }
    /// Where the page map lives, once it exists, for a caller that keeps
    /// the answer and reads the map bytes itself (SLUB's inline free): the
    /// map never moves or shrinks afterwards, and reading its byte of a
    /// covered page (atomically) is [`page_tag`](Self::page_tag). `None`
    /// without a map (the default) or before it exists.
    #[inline(always)]
    fn page_map(&self) -> Option<PageMapView> {
        None
    }
}

/// A page map's place ([`PageAlloc::page_map`]): byte `i` of `map` is the
/// tag of the page at `base + (i << shift)`, for `i` below `pages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMapView {
    /// The first byte of the map (mapped for the rest of the process).
    pub map: *const u8,
    /// The first address covered.
    pub base: usize,
    /// Pages covered (non-zero).
    pub pages: usize,
    /// log2 of the page size.
    pub shift: u32,
}

/// A buddy allocator with its growth hook, what a per-CPU layer (pcp) sits
/// on: the buddy, and the one way to add memory to it when a zone is
/// exhausted (talc's `OomHandler`; the std heap maps more). Layers above
/// ask through [`alloc_or_grow`](Self::alloc_or_grow) or call
/// [`grow`](Self::grow) themselves after their own refill failed; they
/// never implement or forward it.
///
/// ```
/// use buddy::{AllocFlags, Buddy, BuddySource, Config, Order, Tunables};
/// use local_lock::std_platform::StdCpu;
/// use std::sync::Mutex;
///
/// /// A buddy with a spare region it adds when it runs out (the std heap,
/// /// `GlobalBuddy`, maps more from the OS instead).
/// struct Reserve {
///     // Dropped first (fields drop in order): the memory outlives it.
///     heap: Buddy<StdCpu>,
///     // The spare memory, and whether it was added.
///     spare: Mutex<(Vec<u8>, bool)>,
/// }
/// impl BuddySource for Reserve {
///     type P = StdCpu;
///     fn buddy(&self) -> &Buddy<StdCpu> {
///         &self.heap
///     }
///     fn grow(&self, _order: Order) -> bool {
///         let mut spare = self.spare.lock().unwrap();
///         let (mem, added) = &mut *spare;
///         if *added {
///             return false;
///         }
///         *added = true;
///         // SAFETY: zeroed memory that lives as long as `heap` (its buffer
///         // never moves), added once, used by nothing else.
///         unsafe { self.heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.is_ok()
///     }
/// }
/// let src = Reserve {
///     heap: Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(Tunables::NO_MIN)),
///     spare: Mutex::new((vec![0u8; 256 << 10], false)),
/// };
/// // The buddy starts empty: the first request grows it.
/// let max = Order::new(4).unwrap();
/// assert!(src.buddy().alloc_block(max, AllocFlags::NONE).is_none());
/// let mut held = Vec::new();
/// while let Some(b) = src.alloc_or_grow(max, AllocFlags::NONE) {
///     held.push(b.page);
/// }
/// assert!(!held.is_empty() && src.spare.lock().unwrap().1);
/// // A plain `Buddy` is a source that never grows.
/// assert!(!src.heap.grow(max));
/// for p in held {
///     // SAFETY: our blocks, each freed once.
///     unsafe { src.heap.free_pages(p.ptr, p.order) };
/// }
/// ```
pub trait BuddySource: Sync {
    /// The buddy's platform.
    type P: Platform;
    /// The buddy allocator.
    fn buddy(&self) -> &Buddy<Self::P>;
    /// Called when the buddy could not supply a block of `order`: add
    /// memory if possible and say whether a retry may succeed. Runs outside
    /// every lock of the callers (pcp's lists, slub's caches).
    fn grow(&self, order: Order) -> bool {
        let _ = order;
        false
    }
    /// Gives the memory of a free block back to the OS, keeping its address
    /// range usable (std: `madvise(MADV_DONTNEED)` on private anonymous
    /// memory), and says whether it did; afterwards the block must read as
    /// zero (it is marked known zero). Called by the buddy's purge passes
    /// ([`trim`](Self::trim), [`Buddy::decay_with`]) outside its locks, on
    /// a block nobody holds. The default purges nothing (a `no_std` kernel
    /// need not implement it: its memory is not the OS's).
    fn purge(&self, block: NonNull<u8>, bytes: usize) -> bool {
        let _ = (block, bytes);
        false
    }
    /// Purges every resident free block at or above the purge order now
    /// through [`purge`](Self::purge) (`malloc_trim` for the page level);
    /// returns the bytes purged (0 without a purge hook).
    fn trim(&self) -> usize {
        self.buddy().trim_with(|p, n| self.purge(p, n))
    }
    /// Runs the source's rate-limited decay scan if one is due
    /// ([`Buddy::decay_with`] at most every quarter of the decay time, with
    /// the source's clock) and returns the bytes purged. Layers above call
    /// it on their batch slow paths (pcp's batch frees to the buddy and its
    /// drains), outside their own locks and never on a fast path, so that
    /// memory freed through them goes back to the OS without a
    /// [`trim`](Self::trim). Must be cheap when no scan is due (std's
    /// [`GlobalBuddy`](crate::GlobalBuddy): a clock read and one relaxed
    /// load). The default does nothing (a source without a clock or a
    /// purge hook).
    fn maybe_decay(&self) -> usize {
        0
    }
    /// Called after a block of `order`, at or above the purge order, went
    /// back into the buddy (a std heap's large free, pcp's frees that
    /// bypass its lists), outside the callers' locks: the source's bound on
    /// resident free memory gets checked by the bytes freed, not only by
    /// time (std's [`GlobalBuddy`](crate::GlobalBuddy): the policy's
    /// [`max_resident_pages`](crate::PurgePolicy::max_resident_pages),
    /// checked once half of it was freed in large blocks), then
    /// [`maybe_decay`](Self::maybe_decay). So a burst of large frees goes
    /// back to the OS beyond the bound even when nothing follows it.
    /// Returns the bytes purged. The default is `maybe_decay`.
    fn after_large_free(&self, order: Order) -> usize {
        let _ = order;
        self.maybe_decay()
    }
    /// Frees a block the caller holds into the buddy
    /// ([`Buddy::try_free_pages`] with `flags`), first giving its memory
    /// back to the OS when its order is at least the policy's release order
    /// ([`Config::release_order`](crate::Config::release_order), glibc's
    /// mmap threshold) and [`purge`](Self::purge) agrees: it is then freed
    /// [`FreeFlags::PURGED`] (known zero, counted as a purge). The block is
    /// checked (an allocated block head of this order, not on a per-CPU
    /// list) before anything is purged: a bad free purges nothing and
    /// returns the error, changing nothing. For std heaps' frees of large
    /// blocks (`GlobalBuddy`'s `dealloc`, pcp's frees that bypass its
    /// lists).
    ///
    /// # Safety
    ///
    /// As [`Buddy::try_free_pages`].
    #[inline]
    unsafe fn free_or_release(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), FreeError> {
        let b = self.buddy();
        let purged =
            b.config().release_order().is_some_and(|r| order >= r) && release(self, ptr, order);
        // SAFETY: caller's contract (`free_inner` is `try_free_pages`, called
        // directly so that the heaps' common frees keep `try_free_pages`
        // inlined).
        unsafe {
            b.free_inner(
                ptr,
                order,
                flags,
                purged || flags.contains(FreeFlags::PURGED),
            )
        }
    }
    /// The kernel's page reclaim for a request of `2^order` pages that
    /// may block (`try_to_free_pages`, the shrinkers): free what can be
    /// freed back into the buddy and return the pages reclaimed (0: no
    /// progress). Called by the slow path ([`alloc_slowpath`]) outside
    /// every lock of the callers, never for `NONBLOCK` or `MEMALLOC`
    /// requests; how often depends on the request's retry flags. The
    /// default is the platform's hook,
    /// [`Platform::reclaim_pages`](local_lock::Platform::reclaim_pages)
    /// (node 0), which reclaims nothing unless the platform has one.
    fn reclaim(&self, order: Order, flags: AllocFlags) -> usize {
        let _ = flags;
        self.buddy().platform().reclaim_pages(0, order.get())
    }
    /// `warn_alloc`: a request failed and did not pass
    /// [`NOWARN`](AllocFlags::NOWARN). Called outside every lock; must not
    /// allocate. The default is the platform's
    /// [`warn_alloc`](local_lock::Platform::warn_alloc).
    fn warn_alloc(&self, order: Order, flags: AllocFlags) {
        self.buddy()
            .platform()
            .warn_alloc(order.get(), flags.bits());
    }
    /// [`Buddy::alloc_block`] (the zonelist against the low, then the min
    /// watermark), then the slow path ([`alloc_slowpath`]): rounds of
    /// [`grow`](Self::grow) and, for requests that may block,
    /// [`reclaim`](Self::reclaim), each followed by a retry, as the
    /// request's retry flags say (`NORETRY`, `RETRY_MAYFAIL`, `NOFAIL`;
    /// by default while they make progress, at most [`MAX_GROW_RETRIES`]
    /// rounds, one for costly orders); a failure is reported unless
    /// `NOWARN`.
    #[inline]
    fn alloc_or_grow(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        if let Some(p) = b.alloc_block(order, flags) {
            return Some(p);
        }
        alloc_slowpath(self, order, flags, |f| b.alloc_block(order, f))
    }
    /// [`alloc_or_grow`](Self::alloc_or_grow) for node `nid`
    /// ([`Buddy::alloc_block_node`]: `nid`'s zonelist, only `nid` with
    /// `THISNODE`), then the same slow path retrying on that zonelist.
    /// `None` at once for a node at or above
    /// [`MAX_NUMNODES`](crate::MAX_NUMNODES) (not even `NOFAIL` retries).
    #[inline]
    fn alloc_or_grow_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        if nid >= crate::MAX_NUMNODES {
            return None;
        }
        if let Some(p) = b.alloc_block_node(nid, order, flags) {
            return Some(p);
        }
        alloc_slowpath(self, order, flags, |f| b.alloc_block_node(nid, order, f))
    }
}

/// The purge of [`BuddySource::free_or_release`]: whether the block
/// (checked first: an allocated block head of `order`, not on a per-CPU
/// list) was purged.
#[cold]
#[inline(never)]
fn release<S: BuddySource + ?Sized>(src: &S, ptr: NonNull<u8>, order: Order) -> bool {
    let b = src.buddy();
    let held = b.owner_of(ptr.as_ptr()).is_some_and(|blk| {
        blk.head == ptr && blk.order == order && !is_pcp_tag(blk.owner.tag().load(Relaxed))
    });
    held && src.purge(ptr, b.config().block_size(order))
}

impl<P: Platform> BuddySource for Buddy<P> {
    type P = P;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<P> {
        self
    }
}

impl<S: BuddySource + ?Sized> BuddySource for &S {
    type P = S::P;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<S::P> {
        (**self).buddy()
    }
    fn grow(&self, order: Order) -> bool {
        (**self).grow(order)
    }
    fn reclaim(&self, order: Order, flags: AllocFlags) -> usize {
        (**self).reclaim(order, flags)
    }
    fn warn_alloc(&self, order: Order, flags: AllocFlags) {
        (**self).warn_alloc(order, flags)
    }
    fn purge(&self, block: NonNull<u8>, bytes: usize) -> bool {
        (**self).purge(block, bytes)
    }
    fn trim(&self) -> usize {
        (**self).trim()
    }
    #[inline(always)]
    fn maybe_decay(&self) -> usize {
        (**self).maybe_decay()
    }
    fn after_large_free(&self, order: Order) -> usize {
        (**self).after_large_free(order)
    }
}

// SAFETY: the buddy's blocks are naturally aligned, held by the caller
// until freed, and `alloc_block`/`owner_of` give their head descriptor's
// owner words.
unsafe impl<P: Platform> PageAlloc for Buddy<P> {
    #[inline]
    fn page_size(&self) -> usize {
        self.config().page_size()
    }
    #[inline]
    fn max_order(&self) -> Order {
        self.config().max_order()
    }
    /// The buddy's zonelist passes, then the slow path with the
    /// platform's reclaim hook ([`BuddySource::alloc_or_grow`]).
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_or_grow(order, flags)
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.free_pages(ptr, order) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.owner_of(addr)
    }
    #[inline]
    fn nr_node_ids(&self) -> usize {
        Buddy::nr_node_ids(self)
    }
    /// The node of the span covering `addr` (0 if none does).
    #[inline]
    fn page_to_nid(&self, addr: *const u8) -> usize {
        Buddy::page_to_nid(self, addr).unwrap_or(0)
    }
    /// [`BuddySource::alloc_or_grow_node`].
    #[inline]
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_or_grow_node(nid, order, flags)
    }
}

// SAFETY: forwarded.
unsafe impl<T: PageAlloc + ?Sized> PageAlloc for &T {
    const PRIVATE_META: bool = T::PRIVATE_META;
    #[inline(always)]
    fn alloc_private(&self, bytes: usize) -> Option<NonNull<u8>> {
        (**self).alloc_private(bytes)
    }
    #[inline(always)]
    unsafe fn free_private(&self, ptr: NonNull<u8>, bytes: usize) {
        // SAFETY: forwarded.
        unsafe { (**self).free_private(ptr, bytes) }
    }
    #[inline(always)]
    fn page_size(&self) -> usize {
        (**self).page_size()
    }
    #[inline(always)]
    fn max_order(&self) -> Order {
        (**self).max_order()
    }
    #[inline(always)]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        (**self).alloc_block(order, flags)
    }
    #[inline(always)]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { (**self).free_block(ptr, order) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        (**self).block_of(addr)
    }
    #[inline(always)]
    fn alloc_direct(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        (**self).alloc_direct(size, align)
    }
    #[inline(always)]
    fn direct_size(&self, addr: *const u8) -> Option<usize> {
        (**self).direct_size(addr)
    }
    #[inline(always)]
    unsafe fn free_direct(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: forwarded.
        unsafe { (**self).free_direct(ptr) }
    }
    #[inline(always)]
    fn nr_node_ids(&self) -> usize {
        (**self).nr_node_ids()
    }
    #[inline(always)]
    fn page_to_nid(&self, addr: *const u8) -> usize {
        (**self).page_to_nid(addr)
    }
    #[inline(always)]
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        (**self).alloc_block_node(nid, order, flags)
    }
    #[inline(always)]
    fn has_page_tags(&self) -> bool {
        (**self).has_page_tags()
    }
    #[inline(always)]
    fn page_tag(&self, addr: *const u8) -> u8 {
        (**self).page_tag(addr)
    }
    #[inline(always)]
    fn set_page_tags(&self, head: NonNull<u8>, order: Order, tag: u8) {
        (**self).set_page_tags(head, order, tag)
    }
    #[inline(always)]
    fn page_map(&self) -> Option<PageMapView> {
        (**self).page_map()
    }
}
