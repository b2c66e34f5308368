//! Large blocks go back at once (issue #17, glibc's mmap threshold for
//! blocks served from the buddy): with a release order, a block of at least
//! that order freed through `GlobalBuddy`'s `dealloc` is purged before it
//! is freed, so RSS (read from `/proc/self/statm`) drops right after the
//! `dealloc`, with no `trim` and no decay. One test in this binary so no
//! other test's allocations disturb the RSS.

use std::alloc::{GlobalAlloc, Layout};

use buddy::{GlobalBuddy, PurgePolicy, Stat, GLOBAL_CONFIG};

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}

const MIB: usize = 1 << 20;

#[test]
fn large_blocks_go_back_when_freed() {
    if !std::path::Path::new("/proc/self/statm").exists() {
        return;
    }
    let h = GlobalBuddy::with_config(GLOBAL_CONFIG.with_purge(PurgePolicy {
        decay_ms: None,
        release_order: Some(10),
        // Not the cap: this tests the path above alone.
        max_resident_pages: None,
        ..PurgePolicy::DEFAULT
    }));
    let big = Layout::from_size_align(4 * MIB, 4096).unwrap();
    let small = Layout::from_size_align(MIB, 4096).unwrap();
    let touch = |l: Layout| {
        // SAFETY: a valid layout.
        let p = unsafe { h.alloc(l) };
        assert!(!p.is_null());
        // SAFETY: ours, `l.size()` bytes.
        unsafe { p.write_bytes(0x5a, l.size()) };
        p
    };
    let bigs: Vec<*mut u8> = (0..16).map(|_| touch(big)).collect();
    let smalls: Vec<*mut u8> = (0..16).map(|_| touch(small)).collect();
    let live = rss();
    for p in bigs {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, big) };
    }
    let after_big = rss();
    for p in smalls {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, small) };
    }
    let after_small = rss();
    eprintln!(
        "GlobalBuddy, release order 10: RSS live {} MiB (16 x 4 MiB + 16 x 1 MiB), \
         after freeing the 4 MiB blocks {} MiB, after freeing the 1 MiB blocks {} MiB \
         (below the release order: kept for the decay or trim)",
        live / MIB,
        after_big / MIB,
        after_small / MIB
    );
    assert_eq!(h.buddy().stat(Stat::PURGE), 16);
    assert_eq!(h.buddy().stat(Stat::PURGED_BYTES), 64 * MIB as u64);
    assert!(
        after_big + 56 * MIB <= live,
        "RSS {} -> {} MiB: the 4 MiB blocks did not go back",
        live / MIB,
        after_big / MIB
    );
    assert!(
        after_small + 8 * MIB > after_big,
        "the 1 MiB blocks stay resident"
    );
    // Served again as known zero, without clearing.
    let cleared = h.buddy().stat(Stat::BYTES_CLEARED);
    // SAFETY: a valid layout.
    let z = unsafe { h.alloc_zeroed(big) };
    // SAFETY: ours, 4 MiB.
    assert!(unsafe { std::slice::from_raw_parts(z, 4 * MIB) }
        .iter()
        .all(|&b| b == 0));
    assert_eq!(h.buddy().stat(Stat::BYTES_CLEARED), cleared);
    // SAFETY: from `alloc_zeroed` with this layout.
    unsafe { h.dealloc(z, big) };
}
