//! Multi-threaded stress of `GlobalPcp` used directly (not as the global
//! allocator): many threads allocate pages of orders 0..=4 (plain and
//! zeroed), fill them with a per-block pattern, pass some to another thread
//! to free, and check contents before every free. At the end everything is
//! drained back to the buddy.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

static HEAP: pcp::GlobalPcp = pcp::GlobalPcp::new();

struct Block(usize, Layout, u8);

fn check(b: &Block) {
    // SAFETY: the block is live and `b.1.size()` long.
    let s = unsafe { std::slice::from_raw_parts(b.0 as *const u8, b.1.size()) };
    assert!(
        s.iter().all(|&x| x == b.2),
        "contents of {:#x} changed",
        b.0
    );
}

#[test]
fn threads_allocate_free_and_pass_pages() {
    let threads = 4;
    let iters = if cfg!(debug_assertions) {
        3_000
    } else {
        20_000
    };
    let (tx, rx) = mpsc::channel::<Vec<Block>>();
    let mut hs = Vec::new();
    for t in 0..threads {
        let tx = tx.clone();
        hs.push(std::thread::spawn(move || {
            let mut mine: Vec<Block> = Vec::new();
            let mut seed = 0x9e37_79b9u32.wrapping_mul(t as u32 + 1);
            for i in 0..iters {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let order = (seed % 5) as usize;
                let layout = Layout::from_size_align(4096 << order, 4096).unwrap();
                let zeroed = seed & 0x100 != 0;
                // SAFETY: valid layout.
                let p = unsafe {
                    if zeroed {
                        HEAP.alloc_zeroed(layout)
                    } else {
                        HEAP.alloc(layout)
                    }
                };
                assert!(!p.is_null());
                assert_eq!(p as usize % 4096, 0);
                if zeroed {
                    // SAFETY: just allocated.
                    let s = unsafe { std::slice::from_raw_parts(p, layout.size()) };
                    assert!(s.iter().all(|&x| x == 0), "zeroed page not zero");
                }
                let byte = (i as u8) | 1;
                // SAFETY: ours.
                unsafe { p.write_bytes(byte, layout.size()) };
                mine.push(Block(p as usize, layout, byte));
                if mine.len() > 64 {
                    let b = mine.swap_remove((seed as usize) % mine.len());
                    check(&b);
                    // SAFETY: live block with its layout.
                    unsafe { HEAP.dealloc(b.0 as *mut u8, b.1) };
                }
                if i % 500 == 0 && mine.len() > 10 {
                    let give: Vec<Block> = mine.drain(..10).collect();
                    tx.send(give).unwrap();
                }
            }
            for b in mine {
                check(&b);
                // SAFETY: live block.
                unsafe { HEAP.dealloc(b.0 as *mut u8, b.1) };
            }
        }));
    }
    drop(tx);
    // Remote frees: this thread frees what the workers passed over.
    for batch in rx {
        for b in batch {
            check(&b);
            // SAFETY: live block, passed to us.
            unsafe { HEAP.dealloc(b.0 as *mut u8, b.1) };
        }
    }
    for h in hs {
        h.join().unwrap();
    }
    // Exited threads' slots are free: drain them and ours.
    HEAP.drain();
    let b = HEAP.buddy();
    assert_eq!(HEAP.pcp().total_count(), 0, "{}", HEAP.pcp().report());
    assert_eq!(
        b.total_free_pages(),
        b.total_managed_pages(),
        "every page back in the buddy"
    );
}
