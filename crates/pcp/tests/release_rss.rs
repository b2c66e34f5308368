//! Large blocks freed through `GlobalPcp` go back at once with a release
//! order (issue #17): they bypass the per-CPU lists and the buddy's
//! `free_or_release` purges them before freeing them. RSS read from
//! `/proc/self/statm`; one test in this binary.

use std::alloc::{GlobalAlloc, Layout};

use buddy::{PurgePolicy, Stat, GLOBAL_CONFIG};
use pcp::GlobalPcp;

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}

const MIB: usize = 1 << 20;

#[test]
fn large_blocks_freed_through_pcp_go_back_at_once() {
    if !std::path::Path::new("/proc/self/statm").exists() {
        return;
    }
    let h = GlobalPcp::with_config(GLOBAL_CONFIG.with_purge(PurgePolicy {
        decay_ms: None,
        release_order: Some(10),
        // Not the cap: this tests the path above alone.
        max_resident_pages: None,
        ..PurgePolicy::DEFAULT
    }));
    let big = Layout::from_size_align(4 * MIB, 4096).unwrap();
    let v: Vec<*mut u8> = (0..16)
        .map(|_| {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc(big) };
            assert!(!p.is_null());
            // SAFETY: ours, 4 MiB.
            unsafe { p.write_bytes(0x5a, 4 * MIB) };
            p
        })
        .collect();
    let live = rss();
    for p in v {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, big) };
    }
    let after = rss();
    eprintln!(
        "GlobalPcp, release order 10: RSS live {} MiB (16 x 4 MiB), after freeing {} MiB",
        live / MIB,
        after / MIB
    );
    assert_eq!(h.buddy().stat(Stat::PURGE), 16);
    assert!(
        after + 56 * MIB <= live,
        "RSS {} -> {} MiB: the blocks did not go back",
        live / MIB,
        after / MIB
    );
}
