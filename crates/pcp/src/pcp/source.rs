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
    fn nr_node_ids(&self) -> usize {
        self.buddy().nr_node_ids()
    }
    fn page_to_nid(&self, addr: *const u8) -> usize {
        self.buddy().page_to_nid(addr).unwrap_or(0)
    }
    /// The lists for a request to the node of the zone they cache;
    /// another node's request goes to the buddy's node path (lists of
    /// every zone: [`ZonePcps`](crate::ZonePcps)).
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.buddy();
        if nid == b.zone_node(self.zone()) && b.node_has_memory(nid) {
            Pcp::alloc_block(self, order, flags)
        } else {
            self.source().alloc_or_grow_node(nid, order, flags)
        }
    }
}
