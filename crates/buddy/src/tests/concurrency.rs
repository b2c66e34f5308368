//! Threads sharing one zone (std platform, real concurrency): content
//! patterns survive, blocks freed by other threads than their allocator
//! (slab-style remote frees, found through `owner_of`), all merges back.

use core::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::vec::Vec;

use local_lock::std_platform::StdCpu;

use super::Arena;
use crate::{AllocFlags, Buddy, Config, Order, Page, Tunables};

const THREADS: usize = if cfg!(miri) { 2 } else { 4 };
const OPS: usize = if cfg!(miri) { 40 } else { 4000 };

fn check_fill(p: &Page, size: usize, v: u8) {
    // SAFETY: the test holds the block.
    let s = unsafe { std::slice::from_raw_parts(p.ptr.as_ptr(), size) };
    assert!(s.iter().all(|&b| b == v), "block {:p} corrupted", p.ptr);
}

#[test]
fn threads_alloc_free_and_free_remotely() {
    let cfg = Config::new(256, 5).with_tunables(Tunables::NO_MIN);
    let block = cfg.max_block_size();
    let blocks = if cfg!(miri) { 4 } else { 32 };
    let arena = Arena::new(blocks * block, block, true);
    let b = Buddy::new(StdCpu::new(), cfg);
    // SAFETY: the arena outlives `b`; memmap carved from it.
    let managed = unsafe { b.add_region(arena.ptr, arena.len(), true) }.unwrap();
    let shared: Mutex<Vec<(Page, u8)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (b, shared) = (&b, &shared);
            s.spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut live: Vec<(Page, u8)> = Vec::new();
                for i in 0..OPS {
                    let r = next();
                    if r % 3 != 0 || live.is_empty() {
                        let order = Order::new((r >> 8) as u8 % 4).unwrap();
                        let flags = if r & 0x100 != 0 {
                            AllocFlags::ZEROED | AllocFlags::COMP
                        } else {
                            AllocFlags::NONE
                        };
                        let Some(p) = b.alloc_pages(order, flags) else {
                            continue;
                        };
                        let size = 256 << order.get();
                        if flags.contains(AllocFlags::ZEROED) {
                            check_fill(&p, size, 0);
                        }
                        let v = (t * 64 + i % 60 + 1) as u8;
                        // SAFETY: ours.
                        unsafe { p.ptr.as_ptr().write_bytes(v, size) };
                        let w = b.owner_of(p.ptr.as_ptr()).unwrap().owner;
                        w.data().store(p.addr() ^ v as usize, Relaxed);
                        if r & 0x200 != 0 {
                            shared.lock().unwrap().push((p, v));
                        } else {
                            live.push((p, v));
                        }
                    } else {
                        let (p, v) = if r & 0x400 != 0 {
                            match shared.lock().unwrap().pop() {
                                Some(x) => x,
                                None => continue,
                            }
                        } else {
                            live.swap_remove((r >> 16) as usize % live.len())
                        };
                        let size = 256 << p.order.get();
                        check_fill(&p, size, v);
                        let inner = p.ptr.as_ptr().wrapping_add((r >> 24) as usize % size);
                        let br = b.owner_of(inner).unwrap();
                        assert_eq!((br.head, br.order), (p.ptr, p.order));
                        assert_eq!(br.owner.data().load(Relaxed), p.addr() ^ v as usize);
                        // SAFETY: ours (or handed over through `shared`).
                        unsafe { b.free_pages(p.ptr, p.order) };
                    }
                }
                for (p, v) in live {
                    check_fill(&p, 256 << p.order.get(), v);
                    // SAFETY: ours.
                    unsafe { b.free_pages(p.ptr, p.order) };
                }
            });
        }
    });
    for (p, v) in shared.into_inner().unwrap() {
        check_fill(&p, 256 << p.order.get(), v);
        // SAFETY: handed over.
        unsafe { b.free_pages(p.ptr, p.order) };
    }
    b.check_invariants();
    assert_eq!(b.total_free_pages(), managed);
}
