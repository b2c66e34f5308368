//! The pcp as a page source ([`PageAlloc`], the buddy crate's contract):
//! what slub and other holders of whole blocks allocate through. One call
//! per block, which comes back with its owner words.

use core::ptr::NonNull;

use buddy::{AllocFlags, Block, FreeFlags, Order, PageAlloc};
use local_lock::Platform;

use super::{PageSource, Pcp};

// SAFETY: pcp hands out buddy blocks with their head descriptors' owner
// words (the list node, or the buddy's), and finds them through the buddy.
unsafe impl<S: PageSource, L: Platform, const N: usize> PageAlloc for Pcp<S, L, N> {
    page_alloc_from_buddy!();
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        Pcp::alloc_block(self, order, flags)
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.free(ptr, order, FreeFlags::NONE) }
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
