//! GlobalBuddy as an allocator object (not installed globally here; the
//! integration test `global_stress` installs it).

use core::alloc::{GlobalAlloc, Layout};
use std::vec::Vec;

use crate::{GlobalBuddy, Stat};

fn check(p: *mut u8, l: Layout, v: u8) {
    assert!(!p.is_null());
    assert_eq!(p as usize % l.align(), 0, "{l:?} misaligned");
    // SAFETY: allocated with `l`.
    let s = unsafe { std::slice::from_raw_parts(p, l.size()) };
    assert!(s.iter().all(|&b| b == v), "{l:?} contents");
}

#[test]
fn every_layout_is_honoured() {
    let g = GlobalBuddy::new();
    let layouts = [
        (1, 1),
        (8, 8),
        (4095, 16),
        (4096, 4096),
        (5000, 8),
        (100, 64 << 10),
        (3 << 20, 8),
        (4 << 20, 4 << 20),
        ((4 << 20) + 1, 8),
        (64, 8 << 20),
        (10 << 20, 16 << 20),
    ];
    let mut held = Vec::new();
    for (i, &(size, align)) in layouts.iter().enumerate() {
        let l = Layout::from_size_align(size, align).unwrap();
        // SAFETY: non-zero sizes.
        let p = unsafe { g.alloc_zeroed(l) };
        check(p, l, 0);
        let v = i as u8 + 1;
        // SAFETY: ours.
        unsafe { p.write_bytes(v, size) };
        held.push((p, l, v));
    }
    assert_eq!(
        g.direct_mappings(),
        3,
        "three layouts above the largest block"
    );
    assert!(g.heap_bytes() >= 8 << 20);
    g.buddy().check_invariants();
    for (p, l, v) in held {
        check(p, l, v);
        // SAFETY: allocated with `l`.
        unsafe { g.dealloc(p, l) };
    }
    assert_eq!(g.direct_mappings(), 0);
    g.buddy().check_invariants();
    assert_eq!(
        g.buddy().total_free_pages(),
        g.buddy().total_managed_pages()
    );
}

#[test]
fn alloc_zeroed_uses_known_zero_memory_and_clears_reused() {
    let g = GlobalBuddy::new();
    let l = Layout::from_size_align(8192, 8).unwrap();
    // SAFETY: valid layout.
    unsafe {
        let p = g.alloc_zeroed(l);
        check(p, l, 0);
        assert_eq!(
            g.buddy().stat(Stat::ZEROED_NO_CLEAR),
            1,
            "fresh mmap: no clearing"
        );
        p.write_bytes(0x5c, 8192);
        g.dealloc(p, l);
        let q = g.alloc_zeroed(l);
        assert_eq!(q, p, "the freed block is reused");
        check(q, l, 0);
        assert_eq!(g.buddy().stat(Stat::BYTES_CLEARED), 8192);
        g.dealloc(q, l);
    }
}

#[test]
fn realloc_in_place_and_moving() {
    let g = GlobalBuddy::new();
    let l = Layout::from_size_align(3000, 8).unwrap();
    // SAFETY: valid layouts; realloc keeps the prefix.
    unsafe {
        let p = g.alloc(l);
        p.write_bytes(7, 3000);
        let q = g.realloc(p, l, 4000);
        assert_eq!(q, p, "same order: in place");
        let l2 = Layout::from_size_align(4000, 8).unwrap();
        q.add(3000).write_bytes(7, 1000);
        let r = g.realloc(q, l2, 20000);
        assert_ne!(r, q);
        check(r, l2, 7);
        r.write_bytes(7, 20000);
        let l3 = Layout::from_size_align(20000, 8).unwrap();
        let s = g.realloc(r, l3, (5 << 20) + 3);
        let l4 = Layout::from_size_align((5 << 20) + 3, 8).unwrap();
        check(s, l3, 7);
        assert_eq!(g.direct_mappings(), 1);
        let t = g.realloc(s, l4, 100);
        let l5 = Layout::from_size_align(100, 8).unwrap();
        check(t, l5, 7);
        assert_eq!(g.direct_mappings(), 0);
        g.dealloc(t, l5);
    }
    g.buddy().check_invariants();
}

#[test]
fn grows_on_demand_and_merges_back() {
    let g = GlobalBuddy::new();
    let l = Layout::from_size_align(1 << 20, 8).unwrap();
    let mut held = Vec::new();
    for i in 0..24 {
        // SAFETY: valid layout.
        let p = unsafe { g.alloc(l) };
        assert!(!p.is_null());
        // SAFETY: ours.
        unsafe { p.write_bytes(i as u8, 1 << 20) };
        held.push(p);
    }
    assert!(g.heap_bytes() >= 24 << 20);
    for (i, p) in held.into_iter().enumerate() {
        check(p, l, i as u8);
        // SAFETY: allocated with `l`.
        unsafe { g.dealloc(p, l) };
    }
    g.buddy().check_invariants();
    let info = g.buddy().zone_info(crate::ZoneId::new(0));
    assert_eq!(
        info.free_blocks[10] << 10,
        info.free,
        "all merged into 4 MiB blocks"
    );
}
