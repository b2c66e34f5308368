//! Purged pages served as known zero read zero, under concurrency (issue
//! #17): threads allocate blocks of every order through a `GlobalPcp`
//! (half of them zeroed, checked), write them and free them, while
//! another thread trims, and the policy purges by itself (a 20 ms decay,
//! a resident cap of 1 MiB, purge order 4): every zeroed block, whether
//! cleared or taken known zero from a purged block, must read zero.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use buddy::{PurgePolicy, Stat, GLOBAL_CONFIG};
use pcp::GlobalPcp;

static H: GlobalPcp = GlobalPcp::with_config(GLOBAL_CONFIG.with_purge(PurgePolicy {
    order: 4,
    decay_ms: Some(20),
    retain_pages: Some(0),
    release_order: None,
    max_resident_pages: Some(256),
    resident_shift: None,
}));

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Whether `len` bytes at `p` read zero (every byte of the first and last
/// page, one word in 64 elsewhere).
fn reads_zero(p: *mut u8, len: usize) -> bool {
    // SAFETY: the caller's block of `len` bytes.
    let s = unsafe { std::slice::from_raw_parts(p, len) };
    let edge = len.min(4096);
    s[..edge].iter().all(|&b| b == 0)
        && s[len - edge..].iter().all(|&b| b == 0)
        && s.chunks(512).all(|c| c[..8].iter().all(|&b| b == 0))
}

#[test]
fn purged_pages_read_zero_when_served_known_zero() {
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let stop = &stop;
            s.spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t + 1) | 1;
                let mut ring: Vec<(*mut u8, Layout)> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let r = xorshift(&mut rng);
                    let order = (r % 11) as u32;
                    let len = 4096usize << order;
                    let l = Layout::from_size_align(len, 4096).unwrap();
                    let zeroed = r & (1 << 8) != 0;
                    // SAFETY: a valid layout.
                    let p = unsafe {
                        if zeroed {
                            H.alloc_zeroed(l)
                        } else {
                            H.alloc(l)
                        }
                    };
                    assert!(!p.is_null());
                    if zeroed {
                        assert!(reads_zero(p, len), "zeroed block of order {order} not zero");
                    }
                    // Dirty it (first and last page, one word in 64).
                    // SAFETY: ours, `len` bytes.
                    unsafe {
                        p.write_bytes(0xa5, len.min(4096));
                        p.add(len - len.min(4096)).write_bytes(0xa5, len.min(4096));
                        let mut off = 0;
                        while off < len {
                            p.add(off).write_bytes(0xa5, 8);
                            off += 512;
                        }
                    }
                    ring.push((p, l));
                    if ring.len() > 12 {
                        let (q, ql) = ring.swap_remove((r >> 16) as usize % ring.len());
                        // SAFETY: from `alloc` with this layout, freed once.
                        unsafe { H.dealloc(q, ql) };
                    }
                }
                for (q, ql) in ring {
                    // SAFETY: as above.
                    unsafe { H.dealloc(q, ql) };
                }
            });
        }
        s.spawn(|| {
            while t0.elapsed() < Duration::from_millis(1500) {
                H.trim();
                std::thread::sleep(Duration::from_millis(3));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let b = H.buddy();
    eprintln!(
        "purges {} ({} MiB), zeroed served without clearing {}",
        b.stat(Stat::PURGE),
        b.stat(Stat::PURGED_BYTES) >> 20,
        b.stat(Stat::ZEROED_NO_CLEAR)
    );
    assert!(b.stat(Stat::PURGE) > 0, "nothing purged");
    assert!(
        b.stat(Stat::ZEROED_NO_CLEAR) > 0,
        "no known-zero block served"
    );
}
