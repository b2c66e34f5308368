//! `GlobalBuddy` gives free memory back to the OS: freed large blocks are
//! purged by `trim` (RSS read from `/proc/self/statm` drops), purged pages
//! served as zeroed read zero without clearing, and the decay purges
//! blocks left free for the decay time. One test per binary section, run
//! in order in one test so no other test's allocations disturb the RSS.

use std::alloc::{GlobalAlloc, Layout};

use buddy::{Config, GlobalBuddy, PurgePolicy, Stat, Tunables, GLOBAL_CONFIG};

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}

const MIB: usize = 1 << 20;
const BLOCK: usize = 4 * MIB;

fn touch_blocks(h: &GlobalBuddy, n: usize) -> Vec<*mut u8> {
    let l = Layout::from_size_align(BLOCK, 4096).unwrap();
    (0..n)
        .map(|i| {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: ours, BLOCK bytes.
            unsafe { p.write_bytes(i as u8 | 1, BLOCK) };
            p
        })
        .collect()
}

fn free_blocks(h: &GlobalBuddy, v: Vec<*mut u8>) {
    let l = Layout::from_size_align(BLOCK, 4096).unwrap();
    for p in v {
        // SAFETY: from `touch_blocks` with this layout.
        unsafe { h.dealloc(p, l) };
    }
}

#[test]
fn trim_and_decay_give_memory_back() {
    if !std::path::Path::new("/proc/self/statm").exists() {
        return;
    }
    // No decay and no cap here: only trim purges.
    let h = GlobalBuddy::with_config(GLOBAL_CONFIG.with_purge(PurgePolicy {
        decay_ms: None,
        max_resident_pages: None,
        ..PurgePolicy::DEFAULT
    }));
    let n = 64; // 256 MiB
    let start = rss();
    let v = touch_blocks(&h, n);
    let live = rss();
    free_blocks(&h, v);
    let freed = rss();
    let purged = h.trim();
    let after = rss();
    eprintln!(
        "GlobalBuddy, {n} x 4 MiB: RSS live {} MiB, freed {} MiB, after trim {} MiB (purged {} MiB; heap {} MiB mapped)",
        live / MIB,
        freed / MIB,
        after / MIB,
        purged / MIB,
        h.heap_bytes() / MIB
    );
    assert!(purged >= n * BLOCK, "purged {purged}");
    assert!(freed + 8 * MIB > live, "nothing left before the trim");
    assert!(
        after + n * BLOCK - 16 * MIB <= freed,
        "RSS {freed} -> {after}: did not drop by ~{} MiB",
        n * 4
    );
    // The memmap too: the descriptors of the purged blocks' tail pages
    // (4 MiB of descriptors for 256 MiB of heap) went back with them.
    assert!(
        after <= start + 2 * MIB,
        "RSS {} KiB after trim, {} KiB before the heap: the memmap stayed?",
        after >> 10,
        start >> 10
    );
    let zi = h.buddy().zone_info(buddy::ZoneId::new(0));
    assert_eq!(zi.purged * 4096, h.heap_bytes());
    assert_eq!(h.trim(), 0, "nothing left to purge");

    // Purged blocks served as zeroed: known zero, no clearing, read zero.
    let l = Layout::from_size_align(BLOCK, 4096).unwrap();
    let cleared = h.buddy().stat(Stat::BYTES_CLEARED);
    let no_clear = h.buddy().stat(Stat::ZEROED_NO_CLEAR);
    let z: Vec<*mut u8> = (0..n)
        .map(|_| {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc_zeroed(l) };
            assert!(!p.is_null());
            // SAFETY: ours, BLOCK bytes.
            let s = unsafe { std::slice::from_raw_parts(p, BLOCK) };
            assert!(s.iter().all(|&b| b == 0), "purged block not zero");
            p
        })
        .collect();
    assert_eq!(h.buddy().stat(Stat::BYTES_CLEARED), cleared);
    assert_eq!(h.buddy().stat(Stat::ZEROED_NO_CLEAR), no_clear + n as u64);
    assert!(
        rss() < after + 16 * MIB,
        "reading purged pages maps the shared zero page only"
    );
    free_blocks(&h, z);
    drop(h);

    // Decay: blocks free for the decay time are purged on a slow path (a
    // large free, or an explicit decay()).
    let h = GlobalBuddy::with_config(
        Config::new(4096, 10)
            .with_tunables(Tunables::NO_MIN)
            .with_purge(PurgePolicy {
                decay_ms: Some(40),
                retain_pages: Some(0),
                // The decay alone (no resident cap).
                max_resident_pages: None,
                ..PurgePolicy::DEFAULT
            }),
    );
    let v = touch_blocks(&h, 16);
    free_blocks(&h, v);
    let before = rss();
    let mut purged = h.decay(); // may stamp only
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        purged += h.decay();
    }
    let after = rss();
    eprintln!(
        "decay 40 ms: RSS {} MiB -> {} MiB, purged {} MiB",
        before / MIB,
        after / MIB,
        purged / MIB
    );
    assert!(purged >= 16 * BLOCK);
    assert!(after + 16 * BLOCK - 8 * MIB <= before);

    // The default policy's cap on resident free pages (32 MiB): a burst of
    // large frees goes back at once, beyond the cap, with no trim and no
    // waiting for the decay.
    let h2 = GlobalBuddy::new();
    let start = rss();
    let v = touch_blocks(&h2, 32); // 128 MiB
                                   // Each large free checks the cap (`decay_large`): nothing needs to
                                   // follow the burst.
    free_blocks(&h2, v);
    let purged = h2.buddy().stat(Stat::PURGED_BYTES) as usize;
    let capped = rss();
    eprintln!(
        "default cap: 32 x 4 MiB freed: RSS {} MiB above the start (purged {} MiB at once)",
        capped.saturating_sub(start) / MIB,
        purged / MIB
    );
    assert!(purged >= 90 * MIB, "purged {purged}");
    assert!(capped <= start + 40 * MIB, "RSS {capped}, start {start}");
    let zi = h2.buddy().zone_info(buddy::ZoneId::new(0));
    assert!((zi.free - zi.purged) * 4096 <= 32 * MIB);
    drop(h2);

    // Paused, the decay purges nothing (and reads no clock); resumed, it
    // does at its next chance.
    h.set_decay_paused(true);
    assert!(h.decay_paused());
    let v = touch_blocks(&h, 4);
    free_blocks(&h, v);
    for _ in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(h.decay(), 0, "paused");
    }
    h.set_decay_paused(false);
    let mut purged = h.decay();
    for _ in 0..20 {
        if purged >= 4 * BLOCK {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        purged += h.decay();
    }
    assert!(purged >= 4 * BLOCK, "resumed: purged {purged}");
}
