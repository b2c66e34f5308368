//! Where slabs come from: any page allocator that hands out blocks of
//! `2^order` pages and finds the block (and its owner words) from any
//! address inside it. The pcp lists over the buddy are the default; a kernel
//! may plug in its own.

use core::ptr::NonNull;

use buddy::{AllocFlags, BlockRef, Buddy, FreeFlags, Order, Page};
use local_lock::Platform;
use pcp::{PageSource, Pcp};

/// A page allocator for slabs and large kmalloc blocks.
///
/// # Safety
///
/// `alloc_block` returns blocks nobody else holds, aligned to their size,
/// whose owner words ([`buddy::Owner`]) belong to the caller until
/// `free_block`; `block_of` answers the block containing an address with
/// those same owner words, for every block the caller holds.
pub unsafe trait SlabSource: Sync {
    /// The page size in bytes.
    fn page_size(&self) -> usize;
    /// The largest order `alloc_block` can serve.
    fn max_order(&self) -> Order;
    /// A block of `2^order` pages, or `None`.
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Page>;
    /// Returns a block.
    ///
    /// # Safety
    ///
    /// `ptr` heads a block of `order` from `alloc_block` that the caller
    /// holds and no longer uses.
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order);
    /// The allocated block containing `addr`, if any.
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>>;
}

// SAFETY: the buddy's blocks and owner words satisfy the contract.
unsafe impl<P: Platform> SlabSource for Buddy<P> {
    #[inline]
    fn page_size(&self) -> usize {
        self.config().page_size()
    }
    #[inline]
    fn max_order(&self) -> Order {
        self.config().max_order()
    }
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        self.alloc_pages(order, flags)
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
}

// SAFETY: pcp hands out buddy blocks and passes their owner words on.
unsafe impl<S: PageSource, L: Platform, const N: usize> SlabSource for Pcp<S, L, N> {
    #[inline]
    fn page_size(&self) -> usize {
        self.buddy().config().page_size()
    }
    #[inline]
    fn max_order(&self) -> Order {
        self.buddy().config().max_order()
    }
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        self.alloc(order, flags)
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.free(ptr, order, FreeFlags::NONE) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.buddy().owner_of(addr)
    }
}

// SAFETY: forwarded.
unsafe impl<T: SlabSource + ?Sized> SlabSource for &T {
    #[inline(always)]
    fn page_size(&self) -> usize {
        (**self).page_size()
    }
    #[inline(always)]
    fn max_order(&self) -> Order {
        (**self).max_order()
    }
    #[inline(always)]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Page> {
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
}
