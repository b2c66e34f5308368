//! `GlobalBitmap` as this test binary's `#[global_allocator]`: every
//! allocation of the test harness, the standard library and these tests
//! goes through the bitmap allocator (small blocks) or `mmap` (large ones).
//! Not under miri (mmap).
#![cfg(not(miri))]

use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use percpu_bitmap::GlobalBitmap;

#[global_allocator]
static GLOBAL: GlobalBitmap = GlobalBitmap::new();

/// Serialises the tests that check the heap's invariants.
static CHECK: Mutex<()> = Mutex::new(());

#[test]
fn collections_work() {
    let _g = CHECK.lock().unwrap();
    let mut v: Vec<u64> = Vec::new();
    for i in 0..100_000u64 {
        v.push(i * 3);
    }
    assert_eq!(v.iter().sum::<u64>(), 3 * 99_999 * 100_000 / 2);
    let s: String = (0..5000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(s.len(), 5000);
    let mut m = HashMap::new();
    let mut b = BTreeMap::new();
    for i in 0..20_000u32 {
        m.insert(i, i.to_string());
        b.insert(i.to_string(), i);
    }
    for i in (0..20_000u32).step_by(7) {
        assert_eq!(m[&i], i.to_string());
        assert_eq!(b[&i.to_string()], i);
    }
    drop((v, s, m, b));
    GLOBAL.allocator().check_invariants();
}

#[test]
fn layouts_small_large_aligned_and_zeroed() {
    let _g = CHECK.lock().unwrap();
    let mut blocks = Vec::new();
    for &(size, align) in &[
        (1usize, 1usize),
        (3, 2),
        (4, 4),
        (24, 8),
        (100, 16),
        (4000, 4096),
        (32 << 10, 8),
        ((32 << 10) + 1, 8),
        (1 << 20, 64),
        (100, 8192),
        (5 << 20, 2 << 20),
    ] {
        let layout = Layout::from_size_align(size, align).unwrap();
        for zeroed in [false, true] {
            // SAFETY: non-zero layouts; freed below with the same layout.
            let p = unsafe {
                if zeroed {
                    GLOBAL.alloc_zeroed(layout)
                } else {
                    GLOBAL.alloc(layout)
                }
            };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            // SAFETY: `p` is a live block of `size` bytes.
            unsafe {
                if zeroed {
                    assert!((0..size).all(|i| *p.add(i) == 0), "zeroed {size}");
                }
                core::ptr::write_bytes(p, 0xa5, size);
            }
            blocks.push((p, layout));
        }
    }
    for &(p, layout) in &blocks {
        // SAFETY: still live.
        assert!((0..layout.size()).all(|i| unsafe { *p.add(i) } == 0xa5));
    }
    for (p, layout) in blocks {
        // SAFETY: from GLOBAL with this layout.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
    GLOBAL.allocator().check_invariants();
}

#[test]
fn realloc_keeps_contents() {
    let _g = CHECK.lock().unwrap();
    let mut v: Vec<u8> = Vec::with_capacity(1);
    for i in 0..200_000u32 {
        v.push(i as u8);
        if i % 50_000 == 0 {
            v.shrink_to_fit();
        }
    }
    assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
    drop(v);
    GLOBAL.allocator().check_invariants();
}

/// Threads allocate, fill, verify and free blocks of mixed sizes, some
/// freed by another thread than the one that allocated them.
#[test]
fn threads_stress_with_contents() {
    let _g = CHECK.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Box<[u8]>>>();
    let consumer = std::thread::spawn(move || {
        let mut n = 0usize;
        for batch in rx {
            for b in batch {
                let tag = b[0];
                assert!(b.iter().all(|&x| x == tag), "contents changed");
                n += 1;
            }
        }
        n
    });
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let tx = tx.clone();
            s.spawn(move || {
                let mut x = 0x9E37_79B9u32.wrapping_mul(t as u32 + 1) | 1;
                let mut keep: Vec<Box<[u8]>> = Vec::new();
                for round in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let size = match x % 8 {
                        0..=4 => 1 + (x % 64) as usize,
                        5 | 6 => 1 + (x % 2048) as usize,
                        _ => 1 + (x % 40_000) as usize,
                    };
                    let tag = (round as u8) ^ t;
                    keep.push(vec![tag; size].into_boxed_slice());
                    if keep.len() > 64 {
                        let victim = keep.swap_remove((x as usize / 7) % keep.len());
                        assert!(victim.iter().all(|&b| b == victim[0]));
                    }
                    if round % 500 == 0 {
                        tx.send(keep.drain(..keep.len() / 2).collect()).unwrap();
                    }
                }
                for b in &keep {
                    assert!(b.iter().all(|&x| x == b[0]));
                }
            });
        }
    });
    drop(tx);
    assert!(consumer.join().unwrap() > 0);
    GLOBAL.allocator().check_invariants();
    let s = GLOBAL.allocator().stats();
    assert!(s.nr_alloc >= s.nr_dealloc && s.nr_chunks >= 1, "{s}");
}

#[test]
fn bad_frees_are_reported_not_followed() {
    let _g = CHECK.lock().unwrap();
    let b = Box::new([7u64; 4]);
    let p = Box::into_raw(b) as *mut u8;
    let heap = GLOBAL.allocator();
    // The size comes from the boundary map.
    let pp = percpu_bitmap::PcpuPtr::from_raw(core::ptr::NonNull::new(p).unwrap());
    assert_eq!(heap.size_of(pp), Ok(32));
    let interior =
        percpu_bitmap::PcpuPtr::from_raw(core::ptr::NonNull::new(p.wrapping_add(8)).unwrap());
    assert_eq!(
        heap.try_free(interior).unwrap_err().kind,
        percpu_bitmap::FreeErrorKind::Interior
    );
    assert_eq!(heap.try_free(pp), Ok(32));
    assert_eq!(
        heap.try_free(pp).unwrap_err().kind,
        percpu_bitmap::FreeErrorKind::NotAllocated
    );
    heap.check_invariants();
}
