//! The pcp as a page source ([`PageAlloc`], the buddy crate's contract):
//! what slub and other holders of whole blocks allocate through. One call
//! per block, which comes back with its owner words.

use core::ptr::NonNull;

use buddy::{AllocFlags, Block, BlockRef, FreeFlags, Order, PageAlloc};
use local_lock::Platform;

use super::{PageSource, Pcp};

// SAFETY: pcp hands out buddy blocks with their head descriptors' owner
// words (the list node, or the buddy's), and finds them through the buddy.
unsafe impl<S: PageSource, L: Platform, const N: usize> PageAlloc for Pcp<S, L, N> {
    #[inline]
    fn page_size(&self) -> usize {
        self.buddy().config().page_size()
    }
    #[inline]
    fn max_order(&self) -> Order {
        self.buddy().config().max_order()
    }
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        Pcp::alloc_block(self, order, flags)
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
