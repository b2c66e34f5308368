//! `GlobalBuddy::remap_direct`: a recorded direct mapping grows and
//! shrinks with `mremap`, its record following it.
#![cfg(feature = "std")]

use core::alloc::{GlobalAlloc, Layout};

use buddy::GlobalBuddy;

#[test]
#[cfg_attr(miri, ignore = "mmap/mremap")]
fn remap_direct_moves_the_mapping_and_its_record() {
    static HEAP: GlobalBuddy = GlobalBuddy::new();
    let mib = 1 << 20;
    let l = Layout::from_size_align(8 * mib, 8).unwrap();
    // SAFETY: a non-zero layout.
    let p = unsafe { HEAP.alloc(l) };
    assert!(!p.is_null());
    assert_eq!(HEAP.direct_size(p), Some(8 * mib));
    // SAFETY: our 8 MiB block.
    unsafe { p.write_bytes(7, 8 * mib) };
    // SAFETY: our mapping; only `q` is used afterwards.
    let q = unsafe { HEAP.remap_direct(p, 16 * mib + 1) }
        .unwrap()
        .as_ptr();
    assert_eq!(HEAP.direct_size(q), Some(16 * mib + 4096));
    if q != p {
        assert_eq!(HEAP.direct_size(p), None, "the old record is gone");
    }
    // SAFETY: within the resized mapping.
    unsafe {
        assert_eq!((*q, *q.add(8 * mib - 1)), (7, 7));
        q.add(16 * mib).write(1);
    }
    // SAFETY: as above.
    let r = unsafe { HEAP.remap_direct(q, mib) }.unwrap().as_ptr();
    assert_eq!(r, q, "shrinking stays in place");
    assert_eq!(HEAP.direct_size(r), Some(mib));
    assert_eq!(HEAP.direct_mappings(), 1);
    // Not a direct mapping: nothing happens.
    let small = Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero layout.
    let b = unsafe { HEAP.alloc(small) };
    // SAFETY: a heap block, not a mapping: refused.
    assert!(unsafe { HEAP.remap_direct(b, 8 * mib) }.is_none());
    // SAFETY: ours, freed once each.
    unsafe {
        HEAP.dealloc(b, small);
        assert!(HEAP.free_direct(r));
    }
    assert_eq!(HEAP.direct_mappings(), 0);
}
