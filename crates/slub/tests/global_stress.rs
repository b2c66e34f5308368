//! Multi-threaded stress of `GlobalSlub` used directly (not installed):
//! threads allocate every size class and large blocks, fill them with a
//! per-block pattern, pass some to other threads to free (remote frees),
//! exit and are replaced (their per-thread slots are flushed on exit), and
//! every block's contents are checked before it is freed. At the end every
//! slab can be flushed and shrunk away.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();

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

fn free(b: Block) {
    check(&b);
    // SAFETY: live block with its layout.
    unsafe { HEAP.dealloc(b.0 as *mut u8, b.1) };
}

#[test]
fn threads_allocate_pass_free_and_exit() {
    let iters = if cfg!(debug_assertions) {
        4_000
    } else {
        40_000
    };
    let (tx, rx) = mpsc::channel::<Vec<Block>>();
    let consumer = std::thread::spawn(move || {
        let mut n = 0;
        for batch in rx {
            for b in batch {
                free(b);
                n += 1;
            }
        }
        n
    });
    for generation in 0..4 {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut mine: Vec<Block> = Vec::new();
                    let mut seed = 0x9e37_79b9u32.wrapping_mul(t + 1 + generation * 7);
                    for i in 0..iters {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let size = match seed % 16 {
                            0 => 8193 + (seed as usize >> 8) % 60_000,
                            k => 1 + (seed as usize >> 8) % (1 << (k % 14)),
                        };
                        let align = 1 << ((seed >> 4) % 8);
                        let layout = Layout::from_size_align(size, align).unwrap();
                        let zeroed = seed & 0x200 != 0;
                        // SAFETY: valid layout.
                        let p = unsafe {
                            if zeroed {
                                HEAP.alloc_zeroed(layout)
                            } else {
                                HEAP.alloc(layout)
                            }
                        };
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "{layout:?}");
                        if zeroed {
                            // SAFETY: just allocated.
                            let s = unsafe { std::slice::from_raw_parts(p, size) };
                            assert!(s.iter().all(|&x| x == 0), "zeroed {layout:?} not zero");
                        }
                        let byte = (i as u8) | 1;
                        // SAFETY: ours.
                        unsafe { p.write_bytes(byte, size) };
                        mine.push(Block(p as usize, layout, byte));
                        if mine.len() > 200 {
                            let b = mine.swap_remove(seed as usize % mine.len());
                            free(b);
                        }
                        if i % 300 == 0 && mine.len() > 20 {
                            tx.send(mine.drain(..20).collect()).unwrap();
                        }
                        if i % 1000 == 999 {
                            // realloc across and within classes
                            let b = mine.pop().unwrap();
                            check(&b);
                            let new_size = 1 + (seed as usize) % 12_000;
                            // SAFETY: live block, valid new size.
                            let q = unsafe { HEAP.realloc(b.0 as *mut u8, b.1, new_size) };
                            assert!(!q.is_null());
                            let keep = b.1.size().min(new_size);
                            // SAFETY: realloc keeps the prefix.
                            let s = unsafe { std::slice::from_raw_parts(q, keep) };
                            assert!(s.iter().all(|&x| x == b.2), "realloc lost contents");
                            let l = Layout::from_size_align(new_size, b.1.align()).unwrap();
                            // SAFETY: ours.
                            unsafe { q.write_bytes(b.2, new_size) };
                            mine.push(Block(q as usize, l, b.2));
                        }
                    }
                    for b in mine {
                        free(b);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    drop(tx);
    assert!(consumer.join().unwrap() > 0);
    let k = HEAP.kmalloc();
    // This thread and the exited ones hold nothing: after a flush and a
    // shrink every kmalloc slab but the few kept for min_partial is gone.
    k.flush_all();
    k.shrink();
    // Frees reached the slabs (directly, or by flushing the per-CPU
    // sheaves that took them).
    let s = k.stats();
    assert!(s.get(slub::SlubStat::FREE_SLOWPATH) + s.get(slub::SlubStat::SHEAF_FLUSH) > 0);
    for c in k.caches() {
        let info = c.slabinfo();
        assert_eq!(info.active_objs, 0, "{info}");
        assert!(info.num_slabs <= c.layout().min_partial, "{info}");
    }
}
