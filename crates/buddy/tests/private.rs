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
    // Sheaf-sized requests (34 words for 32 entries) up to 32 KiB.
    for bytes in [272usize, 256, 4096, 5000, 32 << 10] {
        let p = HEAP.alloc_private(bytes).unwrap();
        let a = p.as_ptr() as usize;
        let size = bytes.max(256).next_power_of_two();
        assert_eq!(a % size, 0, "aligned to its power-of-two size");
        // ... and a private block is none of the heap.
        assert!(HEAP.block_of(p.as_ptr()).is_none(), "not a heap block");
        assert_eq!(HEAP.page_tag(p.as_ptr()), 0);
        // SAFETY: a fresh private block of at least `bytes` bytes, ours.
        unsafe { core::ptr::write_bytes(p.as_ptr(), 0xa5, bytes) };
        got.push((p, bytes));
    }
    assert!(HEAP.alloc_private((32 << 10) + 1).is_none(), "up to 32 KiB");
    // A sheaf of 32 entries takes 512 bytes, not a page: eight share one.
    let small: Vec<_> = (0..8).map(|_| HEAP.alloc_private(272).unwrap()).collect();
    let pages: std::collections::BTreeSet<usize> =
        small.iter().map(|p| p.as_ptr() as usize / 4096).collect();
    assert!(pages.len() <= 2, "packed: {pages:?}");
    for p in small {
        // SAFETY: ours, freed once.
        unsafe { HEAP.free_private(p, 272) };
    }
    let (p0, b0) = got[0];
    // SAFETY: ours, freed once.
    unsafe { HEAP.free_private(p0, b0) };
    assert_eq!(HEAP.alloc_private(b0), Some(p0), "a freed block is reused");
    for (p, bytes) in got {
        // SAFETY: ours, freed once (p0 re-allocated above).
        unsafe { HEAP.free_private(p, bytes) };
    }
    // SAFETY: the heap block from above, freed once.
    unsafe { HEAP.free_block(b.page.ptr, Order::ZERO) };
}
