//! The global default flags (`slub_debug=` of this crate): caches created
//! after `set_default_flags` get them (own process: the default is global).
#![cfg(not(loom))]

use local_lock::std_platform::PerThread;
use slub::{default_flags, set_default_flags, GlobalPages, KmemCache, SlabFlags};

#[test]
fn caches_created_after_the_default_get_it() {
    let plain: KmemCache<GlobalPages, PerThread> = KmemCache::create(
        "plain",
        64,
        8,
        SlabFlags::NONE,
        GlobalPages,
        PerThread::new(),
    )
    .unwrap();
    set_default_flags(SlabFlags::DEBUG_ALL);
    assert_eq!(default_flags(), SlabFlags::DEBUG_ALL);
    let debug: KmemCache<GlobalPages, PerThread> = KmemCache::create(
        "debug",
        64,
        8,
        SlabFlags::NONE,
        GlobalPages,
        PerThread::new(),
    )
    .unwrap();
    set_default_flags(SlabFlags::NONE);
    assert!(!plain.is_debug());
    assert!(debug.is_debug());
    assert!(debug.layout().red_left_pad > 0);
    let o = debug.alloc().unwrap();
    // SAFETY: ours.
    unsafe { debug.free(o) };
    let q = plain.alloc().unwrap();
    // SAFETY: ours.
    unsafe { plain.free(q) };
}
