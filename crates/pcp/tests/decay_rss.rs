//! Memory freed through `GlobalPcp` goes back to the OS by itself (issue
//! #17): its batch frees reach the buddy through `free_bulk`, not through
//! `GlobalBuddy::dealloc`, and give the buddy's rate-limited decay its
//! chance (`BuddySource::maybe_decay`). No `trim` call here: RSS (read from
//! `/proc/self/statm`) drops only if the batch paths run the decay. One
//! test in this binary so no other test's allocations disturb the RSS.

use std::alloc::{GlobalAlloc, Layout};
use std::time::{Duration, Instant};

use buddy::{PurgePolicy, Stat, GLOBAL_CONFIG};
use pcp::GlobalPcp;

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}

const MIB: usize = 1 << 20;
/// The decay time of the test heap.
const DECAY_MS: u64 = 100;

#[test]
fn batch_frees_run_the_decay() {
    if !std::path::Path::new("/proc/self/statm").exists() {
        return;
    }
    let h = GlobalPcp::with_config(GLOBAL_CONFIG.with_purge(PurgePolicy {
        decay_ms: Some(DECAY_MS),
        retain_pages: Some(0),
        // Not the cap: this tests the path above alone.
        max_resident_pages: None,
        ..PurgePolicy::DEFAULT
    }));
    let small = Layout::from_size_align(4096, 4096).unwrap();
    let mid = Layout::from_size_align(32 << 10, 4096).unwrap();
    // 64 MiB through the per-CPU lists: 32 MiB of order-0 pages, 32 MiB of
    // order-3 blocks, interleaved.
    let mut v = Vec::new();
    for i in 0..(8192 + 1024) {
        let l = if i % 9 == 8 { mid } else { small };
        // SAFETY: a valid layout.
        let p = unsafe { h.alloc(l) };
        assert!(!p.is_null());
        // SAFETY: ours, `l.size()` bytes.
        unsafe { p.write_bytes(0x5a, l.size()) };
        v.push((p, l));
    }
    let live = rss();
    for (p, l) in v {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, l) };
    }
    let freed = rss();
    // A little traffic, as a service keeps doing: enough pages allocated
    // and freed per round that the lists overflow `high` and batches go
    // back to the buddy (the slow path where the decay runs).
    let start = Instant::now();
    let mut after = freed;
    let mut rounds = 0;
    while start.elapsed() < Duration::from_millis(40 * DECAY_MS) {
        std::thread::sleep(Duration::from_millis(DECAY_MS / 4));
        let w: Vec<*mut u8> = (0..512)
            .map(|_| {
                // SAFETY: a valid layout.
                let p = unsafe { h.alloc(small) };
                assert!(!p.is_null());
                p
            })
            .collect();
        for p in w {
            // SAFETY: from `alloc` with this layout.
            unsafe { h.dealloc(p, small) };
        }
        rounds += 1;
        after = rss();
        if after + 48 * MIB <= freed {
            break;
        }
    }
    let purged = h.buddy().stat(Stat::PURGED_BYTES) as usize;
    eprintln!(
        "GlobalPcp, 64 MiB of 4 KiB/32 KiB pages, decay {DECAY_MS} ms: RSS live {} MiB, \
         freed {} MiB, after {} ms ({rounds} rounds of traffic) {} MiB; purged {} MiB \
         in {} blocks, no trim",
        live / MIB,
        freed / MIB,
        start.elapsed().as_millis(),
        after / MIB,
        purged / MIB,
        h.buddy().stat(Stat::PURGE)
    );
    assert!(freed + 8 * MIB > live, "freed memory left before any decay");
    assert!(purged >= 48 * MIB, "purged only {purged} bytes");
    assert!(
        after + 48 * MIB <= freed,
        "RSS {} MiB -> {} MiB: the decay did not run on the batch paths",
        freed / MIB,
        after / MIB
    );
}
