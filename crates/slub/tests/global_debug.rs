//! `GlobalSlub` with every debug flag (`slub_debug=FZPU`): threads allocate
//! every class at every alignment up to a page, pass objects to another
//! thread to free, and check contents; red zones, poison and owner records
//! are checked on every operation, the alignment of debug classes (whose
//! stride includes red zones and owner records) is honoured, and at the end
//! every object is gone from the caches.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

use slub::{GlobalSlub, SlabFlags};

static HEAP: GlobalSlub = GlobalSlub::with_flags(SlabFlags::DEBUG_ALL);

#[test]
fn debug_heap_threads_and_alignment() {
    let (tx, rx) = mpsc::channel::<Vec<(usize, Layout, u8)>>();
    let hs: Vec<_> = (0..3u32)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut seed = 0x2545_f491u32.wrapping_mul(t + 1);
                let mut mine = Vec::new();
                for i in 0..3000usize {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    let size = 1 + (seed as usize >> 4) % 9000;
                    let align = 1 << ((seed >> 20) % 13);
                    let l = Layout::from_size_align(size, align).unwrap();
                    // SAFETY: valid layout.
                    let p = unsafe { HEAP.alloc(l) };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "{l:?}");
                    let v = i as u8 | 1;
                    // SAFETY: ours.
                    unsafe { p.write_bytes(v, size) };
                    mine.push((p as usize, l, v));
                    if mine.len() > 50 {
                        tx.send(mine.drain(..25).collect()).unwrap();
                    }
                }
                tx.send(mine).unwrap();
            })
        })
        .collect();
    drop(tx);
    for batch in rx {
        for (p, l, v) in batch {
            // SAFETY: live, `l.size()` long.
            let s = unsafe { std::slice::from_raw_parts(p as *const u8, l.size()) };
            assert!(s.iter().all(|&b| b == v), "contents changed");
            // SAFETY: live block with its layout.
            unsafe { HEAP.dealloc(p as *mut u8, l) };
        }
    }
    for h in hs {
        h.join().unwrap();
    }
    let k = HEAP.kmalloc();
    k.shrink();
    for c in k.caches() {
        assert!(c.is_debug());
        assert_eq!(c.slabinfo().active_objs, 0, "{}", c.slabinfo());
    }
}
