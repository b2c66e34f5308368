//! Where slabs come from: any page allocator that hands out blocks of
//! `2^order` pages **with** their owner words and finds the block (and its
//! owner words) from any address inside it: the buddy crate's
//! [`PageAlloc`](buddy::PageAlloc), the one page-source contract of the
//! family, implemented by the buddy, `GlobalBuddy`, pcp's `Pcp` (the
//! default) and `GlobalPcp`; a kernel may plug in its own. A slab or sheaf
//! allocation is one `alloc_block` call whose [`Block`](buddy::Block)
//! carries the descriptor: no second lookup.

/// A page allocator for slabs and large kmalloc blocks: the buddy crate's
/// [`PageAlloc`](buddy::PageAlloc) under the name slub has always used.
///
/// ```
/// use buddy::{Buddy, Config};
/// use local_lock::std_platform::PerThread;
/// use local_lock::test_platform::TestPlatform;
/// use slub::{GlobalPages, KmemCache, SlabFlags, SlabSource};
///
/// // A cache over any page allocator.
/// fn cache_over<S: SlabSource>(pages: S) -> KmemCache<S, PerThread> {
///     KmemCache::create("any_source", 512, 8, SlabFlags::NONE, pages, PerThread).unwrap()
/// }
/// // The std program's shared pages ...
/// let c = cache_over(GlobalPages);
/// let p = c.alloc().unwrap();
/// assert!(c.source().block_of(p.as_ptr()).is_some(), "its slab is one block");
/// // SAFETY: ours, freed once.
/// unsafe { c.free(p) };
/// // ... or a buddy over 1 MiB of memory of one's own.
/// let layout = std::alloc::Layout::from_size_align(1 << 20, 4096).unwrap();
/// // SAFETY: non-zero size.
/// let mem = unsafe { std::alloc::alloc_zeroed(layout) };
/// let b = Buddy::new(TestPlatform::pinned(1), Config::new(4096, 8));
/// // SAFETY: zeroed memory nobody else uses, leaked (outlives `b`).
/// unsafe { b.add_region(mem, 1 << 20, true).unwrap() };
/// let c = cache_over(&b);
/// assert_eq!(c.source().page_size(), 4096);
/// let p = c.alloc().unwrap();
/// assert!(b.total_free_pages() < b.total_managed_pages(), "the slab came from `b`");
/// // SAFETY: ours, freed once.
/// unsafe { c.free(p) };
/// ```
pub use buddy::PageAlloc as SlabSource;
