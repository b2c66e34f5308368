//! The standard library's `Allocator` (feature `nightly`, nightly Rust):
//! `std`'s `Vec` and `Box` in a cache, in kmalloc and in the global heap.
#![cfg(all(feature = "nightly", not(loom)))]
#![feature(allocator_api)]

use local_lock::std_platform::PerThread;
use slub::{GlobalPages, GlobalSlub, KmemCache, SlabFlags};

static HEAP: GlobalSlub = GlobalSlub::new();

#[test]
#[cfg_attr(miri, ignore = "GlobalPages maps memory with mmap")]
fn std_collections_live_in_the_caches() {
    let cache = KmemCache::<_, _>::create("u64", 8, 8, SlabFlags::HARDENED, GlobalPages, PerThread)
        .unwrap();
    let empty: Vec<u64, _> = Vec::new_in(&cache);
    assert!(empty.is_empty());
    // One object holds one u64 (a push on an empty Vec asks for four).
    let mut v: Vec<u64, _> = Vec::with_capacity_in(1, &cache);
    v.push(42);
    assert_eq!(v[0], 42);
    // A second element does not fit the 8-byte object.
    assert!(v.try_reserve(1).is_err());
    let b = Box::new_in(7u64, &cache);
    assert_eq!(*b, 7);

    let mut k: Vec<u8, _> = Vec::new_in(HEAP.kmalloc());
    k.extend((0..5000).map(|i| i as u8));
    assert_eq!(k[4999], (4999 % 256) as u8);
    k.shrink_to_fit();

    let mut g: Vec<u32, _> = Vec::new_in(&HEAP);
    g.extend(0..100_000);
    assert_eq!(
        g.iter().map(|&x| u64::from(x)).sum::<u64>(),
        99_999 * 100_000 / 2
    );
    let z = Box::<[u8], _>::new_zeroed_slice_in(4096, &HEAP);
    // SAFETY: zeroed bytes are valid u8s.
    assert!(unsafe { z.assume_init() }.iter().all(|&x| x == 0));
}
