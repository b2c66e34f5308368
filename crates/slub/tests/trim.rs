//! `GlobalSlub::trim`: freed objects' slabs go back to the pages, the pages
//! to the buddy, and its free blocks to the OS (issue #17). Its own test
//! binary: the pages are shared by every `GlobalSlub`.

use std::alloc::{GlobalAlloc, Layout};

use slub::GlobalSlub;

static H: GlobalSlub = GlobalSlub::new();

#[test]
fn trim_flushes_shrinks_drains_and_purges() {
    let h = &H;
    // The trim alone: the pages' automatic purges (decay, resident cap)
    // paused.
    h.pages().pcp().source().set_decay_paused(true);
    let mut v = Vec::new();
    // 64 MiB of 64 B .. 8 KiB objects.
    for size in [64usize, 512, 2048, 8192] {
        let l = Layout::from_size_align(size, 8).unwrap();
        for _ in 0..(16 << 20) / size {
            // SAFETY: a valid layout.
            let p = unsafe { h.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: ours.
            unsafe { p.write_bytes(0x5a, size) };
            v.push((p, l));
        }
    }
    let live = rss();
    for (p, l) in v {
        // SAFETY: from `alloc` with this layout.
        unsafe { h.dealloc(p, l) };
    }
    let freed = rss();
    let purged = h.trim();
    let after = rss();
    eprintln!(
        "GlobalSlub, 64 MiB of 64 B..8 KiB objects: RSS live {} MiB, freed {} MiB, after trim {} MiB (purged {} MiB)",
        live >> 20,
        freed >> 20,
        after >> 20,
        purged >> 20
    );
    assert!(purged >= 32 << 20, "purged {purged}");
    if live > 0 {
        assert!(after + (32 << 20) <= freed, "RSS did not drop");
    }
}

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}
