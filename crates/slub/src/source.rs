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
pub use buddy::PageAlloc as SlabSource;
