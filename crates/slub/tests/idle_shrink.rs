//! The idle shrink (issue #17): a `GlobalSlub` whose caches stop being
//! used gives their memory back by itself, with no `trim`: the pages'
//! decay tick marks the idle shrink due, the next slow path shrinks the
//! caches that stayed idle (sheaves, barn, CPU and partial slabs flushed,
//! empty slabs back to the pages), and the buddy's decay purges the blocks
//! they freed. Its own test binary (RSS, and the pages shared by every
//! `GlobalSlub`).

use std::alloc::{GlobalAlloc, Layout};
use std::time::{Duration, Instant};

use slub::GlobalSlub;

mod common;

static H: GlobalSlub = GlobalSlub::new();

/// Resident bytes of this process (`/proc/self/statm`), 0 where there is
/// none.
fn rss() -> usize {
    local_lock::os::resident_bytes().unwrap_or(0)
}

#[test]
fn idle_caches_shrink_and_their_pages_decay_without_trim() {
    let h = &H;
    // Some unrelated activity first, so the start figure includes it.
    let small = Layout::from_size_align(32, 8).unwrap();
    let big = Layout::from_size_align(4 << 20, 4096).unwrap();
    let churn = || {
        // A few pairs through the 32 B cache (its sheaf empties now and
        // then: the slow path, where a due idle shrink runs), and a 4 MiB
        // block through the pages (a large free: the buddy's decay tick).
        let v: Vec<*mut u8> = (0..300)
            // SAFETY: a valid layout.
            .map(|_| unsafe { h.alloc(small) })
            .collect();
        for p in v {
            // SAFETY: from `alloc` with this layout, freed once.
            unsafe { h.dealloc(p, small) };
        }
        // SAFETY: as above.
        unsafe {
            let p = h.alloc(big);
            assert!(!p.is_null());
            h.dealloc(p, big);
        }
    };
    churn();
    let start = rss();
    // 48 MiB of 64 B .. 8 KiB objects, written, then all freed.
    let v = common::fill(h, 12 << 20);
    let live = rss();
    common::free_all(h, v);
    let freed = rss();
    if live == 0 {
        return; // no /proc
    }
    // The default decay (5 s, scans every 1.25 s): the idle caches shrink
    // at the second tick after they stopped, their blocks are purged one
    // decay time after a scan first saw them free.
    let slabs = || -> usize { h.kmalloc().caches().iter().map(|c| c.nr_slabs()).sum() };
    let t = Instant::now();
    let mut now = freed;
    while t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        churn();
        now = rss();
        if now < start + (12 << 20) && slabs() <= 16 {
            break;
        }
    }
    eprintln!(
        "GlobalSlub, 48 MiB of 64 B..8 KiB objects: RSS start {} MiB, live {} MiB, freed {} MiB, {} MiB after {:.1} s with no trim",
        start >> 20,
        live >> 20,
        freed >> 20,
        now >> 20,
        t.elapsed().as_secs_f64()
    );
    let zi = h.pages().buddy().zone_info(buddy::ZoneId::new(0));
    let left = slabs();
    eprintln!(
        "zone: free {} purged {} pages; heap {} MiB; slabs left {left}",
        zi.free,
        zi.purged,
        h.pages().pcp().source().heap_bytes() >> 20
    );
    // (The default policy's cap on resident free pages may already have
    // purged some of the pages the caches gave back while freeing.)
    assert!(freed > start + (24 << 20), "freeing alone kept little");
    // Without the idle shrink about a hundred slabs stay (sheaves, barn,
    // CPU and partial slabs of caches nobody uses any more) and about
    // 15 MiB with them.
    assert!(
        left <= 16,
        "{left} slabs left: the idle caches were not shrunk"
    );
    assert!(
        now < start + (16 << 20),
        "RSS {} MiB, start {} MiB: the idle caches did not give their memory back",
        now >> 20,
        start >> 20
    );
}
