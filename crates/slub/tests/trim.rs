//! `GlobalSlub::trim`: freed objects' slabs go back to the pages, the pages
//! to the buddy, and its free blocks to the OS (issue #17). Its own test
//! binary: the pages are shared by every `GlobalSlub`.

use slub::GlobalSlub;

mod common;

static H: GlobalSlub = GlobalSlub::new();

#[test]
fn trim_flushes_shrinks_drains_and_purges() {
    let h = &H;
    // The trim alone: the pages' automatic purges (decay, resident cap)
    // paused.
    h.pages().pcp().source().set_decay_paused(true);
    // 64 MiB of 64 B .. 8 KiB objects.
    let v = common::fill(h, 16 << 20);
    let live = rss();
    common::free_all(h, v);
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
