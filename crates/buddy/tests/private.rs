//! `GlobalBuddy`'s private pages (`PageAlloc::alloc_private`): metadata
//! memory from its own mappings, never a heap block, reused once freed.
#![cfg(all(feature = "std", not(miri)))] // mmap

use buddy::{GlobalBuddy, Order, PageAlloc};

static HEAP: GlobalBuddy = GlobalBuddy::new();

#[test]
fn private_blocks_are_aligned_outside_the_heap_and_reused() {
    const { assert!(<GlobalBuddy as PageAlloc>::PRIVATE_META) };
    // The heap exists (a block from it) ...
    let b = HEAP
        .alloc_block(Order::ZERO, buddy::AllocFlags::NONE)
        .unwrap();
    let mut got = Vec::new();
    for o in 0..=3u8 {
        let order = Order::new(o).unwrap();
        let p = HEAP.alloc_private(order).unwrap();
        let a = p.as_ptr() as usize;
        assert_eq!(a % (4096 << o), 0, "naturally aligned");
        // ... and a private block is none of it.
        assert!(HEAP.block_of(p.as_ptr()).is_none(), "not a heap block");
        assert_eq!(HEAP.page_tag(p.as_ptr()), 0);
        // SAFETY: a fresh private block of `4096 << o` bytes, ours.
        unsafe { core::ptr::write_bytes(p.as_ptr(), 0xa5, 4096 << o) };
        got.push((p, order));
    }
    assert!(
        HEAP.alloc_private(Order::new(4).unwrap()).is_none(),
        "orders up to 3"
    );
    let (p0, o0) = got[0];
    // SAFETY: ours, freed once.
    unsafe { HEAP.free_private(p0, o0) };
    assert_eq!(HEAP.alloc_private(o0), Some(p0), "a freed block is reused");
    for (p, o) in got {
        // SAFETY: ours, freed once (p0 re-allocated above).
        unsafe { HEAP.free_private(p, o) };
    }
    // SAFETY: the heap block from above, freed once.
    unsafe { HEAP.free_block(b.page.ptr, Order::ZERO) };
}
