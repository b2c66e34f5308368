//! Types, splitting, merging, placement, regions and spans.

use std::format;
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use super::{o, Arena, Fx};
use crate::{
    AllocFlags, Buddy, Config, FreeFlags, Order, PageState, Pfn, RegionError, Stat, Tunables,
    ZoneId, ZoneSpec, ORDER_LIMIT,
};

#[test]
fn vocabulary() {
    assert_eq!(Order::for_pages(1), Some(o(0)));
    assert_eq!(Order::for_pages(2), Some(o(1)));
    assert_eq!(Order::for_pages(3), Some(o(2)));
    assert_eq!(Order::for_pages(1024), Some(o(10)));
    assert_eq!(Order::for_pages(1025), Some(o(11)));
    assert_eq!(Order::new(ORDER_LIMIT + 1), None);
    assert_eq!(o(3).pages(), 8);
    assert_eq!(Pfn(12).buddy(o(2)), Pfn(8));
    assert_eq!(Pfn(8).buddy(o(2)), Pfn(12));
    assert_eq!(Pfn(12).parent(o(2)), Pfn(8));
    assert!(Pfn(12).is_aligned(o(2)) && !Pfn(12).is_aligned(o(3)));
    assert_eq!(Pfn(13).align_down(o(2)), Pfn(12));

    let f = AllocFlags::ZEROED | AllocFlags::COLD | AllocFlags::NONE.zone_max(ZoneId::new(1));
    assert!(f.contains(AllocFlags::ZEROED) && f.contains(AllocFlags::COLD));
    assert!(!f.contains(AllocFlags::ONLY_ZERO));
    assert_eq!(f.max_zone(), Some(ZoneId::new(1)));
    assert_eq!(AllocFlags::NONE.max_zone(), None);
    assert!(AllocFlags::ONLY_ZERO.contains(AllocFlags::ZEROED));
    assert!(AllocFlags::ATOMIC.contains(AllocFlags::HIGH | AllocFlags::NONBLOCK));
    assert_eq!(format!("{f:?}"), "AllocFlags(ZEROED | COLD | zone_max(1))");
    assert_eq!(format!("{:?}", AllocFlags::NONE), "AllocFlags(NONE)");
    assert_eq!(AllocFlags::from_bits_truncate(u32::MAX).bits() & 0xff, 0x3f);

    let c = Config::DEFAULT;
    assert_eq!(c.page_size(), 4096);
    assert_eq!(c.max_order(), o(10));
    assert_eq!(c.max_block_size(), 4 << 20);
    assert_eq!(c.order_for(1, 1), Some(o(0)));
    assert_eq!(c.order_for(4096, 8), Some(o(0)));
    assert_eq!(c.order_for(4097, 8), Some(o(1)));
    assert_eq!(c.order_for(10, 64 << 10), Some(o(4)));
    assert_eq!(c.order_for(4 << 20, 8), Some(o(10)));
    assert_eq!(c.order_for((4 << 20) + 1, 8), None);
    assert_eq!(c.order_for(usize::MAX, 8), None);

    let z = Config::new(4096, 10).with_zones(&[
        ZoneSpec {
            name: "DMA",
            end: 16 << 20,
        },
        ZoneSpec {
            name: "DMA32",
            end: 1 << 32,
        },
        ZoneSpec {
            name: "Normal",
            end: 0,
        },
    ]);
    assert_eq!(z.nr_zones(), 3);
    assert_eq!(z.zone_of_addr(0x1000), ZoneId::new(0));
    assert_eq!(z.zone_of_addr(16 << 20), ZoneId::new(1));
    assert_eq!(z.zone_of_addr((1 << 32) - 1), ZoneId::new(1));
    assert_eq!(z.zone_of_addr(1 << 32), ZoneId::new(2));
    assert_eq!(z.zones()[2].end, usize::MAX);
    assert_eq!(z.zone_below(1 << 32), Some(ZoneId::new(1)));
    assert_eq!(z.zone_below(16 << 20), Some(ZoneId::new(0)));
    assert_eq!(z.zone_below(1 << 20), None);
    assert_eq!(z.zone_below(usize::MAX), Some(ZoneId::new(2)));
}

#[test]
#[should_panic(expected = "multiples of the largest block")]
fn zone_end_must_be_block_aligned() {
    let _ = Config::new(4096, 10).with_zones(&[
        ZoneSpec {
            name: "A",
            end: 1 << 20,
        },
        ZoneSpec { name: "B", end: 0 },
    ]);
}

#[test]
#[should_panic(expected = "power of two >= 16")]
fn page_size_checked() {
    let _ = Config::new(8, 3);
}

#[test]
fn descriptor_is_one_cache_line() {
    assert_eq!(Buddy::<TestPlatform>::MEMMAP_ALIGN, 64);
    let b = Buddy::new(TestPlatform::pinned(1), Config::DEFAULT);
    assert_eq!(b.memmap_bytes(4096 * 10), 640);
}

#[test]
fn split_and_merge_back() {
    let fx = Fx::small(1);
    assert_eq!(fx.info(), [0, 0, 0, 0, 1]);
    let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.idx(&p), 0, "expand returns the lowest piece");
    // expand left one block of each lower order.
    assert_eq!(fx.info(), [1, 1, 1, 1, 0]);
    if cfg!(feature = "stats") {
        assert_eq!(fx.stat(Stat::SPLIT), 4);
    }
    fx.check_invariants();
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(0)) };
    assert_eq!(fx.info(), [0, 0, 0, 0, 1]);
    if cfg!(feature = "stats") {
        assert_eq!(fx.stat(Stat::MERGE), 4);
    }
    fx.check_invariants();
}

#[test]
fn smallest_fit_in_address_order_then_exhaustion() {
    let fx = Fx::small(2);
    let mut pages = Vec::new();
    for i in 0..32 {
        let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
        if i < 16 {
            // The first block is split before the second is touched.
            assert_eq!(fx.idx(&p), i, "pages come in address order");
        }
        pages.push(p);
        fx.check_invariants();
    }
    assert!(fx.alloc_pages(o(0), AllocFlags::NONE).is_none());
    assert_eq!(fx.nr_free_pages(ZoneId::new(0)), 0);
    // Free in a scrambled order: everything merges back.
    let mut order: Vec<usize> = (0..32).collect();
    for i in 0..32 {
        order.swap(i, (i * 7 + 3) % 32);
    }
    for i in order {
        // SAFETY: ours.
        unsafe { fx.free_pages(pages[i].ptr, o(0)) };
        fx.check_invariants();
    }
    assert_eq!(fx.info(), [0, 0, 0, 0, 2]);
}

#[test]
fn mixed_orders_fill_exactly() {
    let fx = Fx::small(2);
    let mut got = Vec::new();
    let mut pages = 0;
    // 1 + 2 + 4 + 8 + 16 = 31 pages, then single pages.
    for k in [0u8, 1, 2, 3, 4] {
        let p = fx.alloc_pages(o(k), AllocFlags::NONE).unwrap();
        assert_eq!(fx.idx(&p) % (1 << k), 0, "block aligned to its order");
        pages += 1 << k;
        got.push(p);
    }
    assert!(fx.alloc_pages(o(1), AllocFlags::NONE).is_none());
    let last = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    got.push(last);
    assert_eq!(pages + 1, 32);
    assert!(fx.alloc_pages(o(0), AllocFlags::NONE).is_none());
    assert!(
        fx.alloc_pages(o(5), AllocFlags::NONE).is_none(),
        "above max_order"
    );
    for p in got {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, p.order) };
    }
    fx.check_invariants();
    assert_eq!(fx.info(), [0, 0, 0, 0, 2]);
}

/// The kernel's placement rule: a freed block whose parent's buddy is free
/// (likely to merge soon) goes to the tail, others to the head.
#[test]
fn tail_placement_when_merge_likely() {
    let fx = Fx::small(1);
    let p: Vec<_> = (0..16)
        .map(|_| fx.alloc_pages(o(0), AllocFlags::NONE).unwrap())
        .collect();
    let free = |i: usize| {
        // SAFETY: ours.
        unsafe { fx.free_pages(p[i].ptr, o(0)) };
        fx.check_invariants();
    };
    free(6);
    free(7); // 6-7 merge into an order-1 block.
    free(0); // buddy 1 busy; parent's buddy 2-3 busy: head.
    free(5); // buddy 4 busy; parent's buddy 6-7 free: tail.
    free(10); // buddy 11 busy; parent's buddy 8-9 busy: head.
    assert_eq!(fx.info(), [3, 1, 0, 0, 0]);
    let a = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let b = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    let c = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!([fx.idx(&a), fx.idx(&b), fx.idx(&c)], [10, 0, 5]);
    // COLD takes from the tail; FreeFlags::COLD puts at the tail.
    // SAFETY: ours.
    unsafe {
        fx.free_pages(a.ptr, o(0)); // head
        fx.free_pages_flags(b.ptr, o(0), FreeFlags::COLD); // tail
        fx.free_pages(c.ptr, o(0)); // merge likely: tail (after 0)
    }
    let cold = fx.alloc_pages(o(0), AllocFlags::COLD).unwrap();
    assert_eq!(fx.idx(&cold), 5);
    let cold = fx.alloc_pages(o(0), AllocFlags::COLD).unwrap();
    assert_eq!(fx.idx(&cold), 0);
    let hot = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.idx(&hot), 10);
    fx.check_invariants();
}

/// Regions with unaligned edges and holes, memmaps carved from the regions
/// themselves, one region added later, spanning two zones.
#[test]
fn regions_holes_edges_and_later_additions() {
    let page = 256;
    let cfg = Config::new(page, 3);
    let block = cfg.max_block_size(); // 2 KiB
    let arena = Arena::new(16 * block, block, true);
    let split = arena.addr() + 8 * block;
    let cfg = cfg
        .with_zones(&[
            ZoneSpec {
                name: "Low",
                end: split,
            },
            ZoneSpec {
                name: "High",
                end: 0,
            },
        ])
        .with_tunables(Tunables::NO_MIN);
    let b = Buddy::new(TestPlatform::pinned(1), cfg);
    // Region A: [100, 5 blocks + 77): trimmed to pages 1..40 (39 pages);
    // its memmap (39 * 64 B = 2496 B, pages 1..11) is carved from its
    // start.
    // SAFETY: the arena outlives `b`, regions are disjoint.
    let n = unsafe { b.add_region(arena.at(100), 5 * block + 77 - 100, true) }.unwrap();
    assert_eq!(n, 39 - 10);
    // Region B across the zone split: [6 blocks + 1 page, 12 blocks).
    // 47 pages; memmap 47 * 64 = 3008 B -> 12 pages; 35 free pages.
    // SAFETY: as above.
    let n2 = unsafe { b.add_region(arena.at(6 * block + page), 6 * block - page, true) }.unwrap();
    assert_eq!(n2, 47 - 12);
    b.check_invariants();
    assert_eq!(b.total_managed_pages(), n + n2);
    let low = b.managed_pages(ZoneId::new(0));
    let high = b.managed_pages(ZoneId::new(1));
    assert_eq!(low + high, n + n2);
    assert_eq!(high, 32, "zone High: blocks 8..12 of region B");
    // Pages in the hole, in memmaps, or outside every span.
    assert_eq!(
        b.page_state(arena.at(5 * block + 512)),
        PageState::Unmanaged
    );
    assert_eq!(
        b.page_state(arena.at(page)),
        PageState::Inside,
        "memmap page"
    );
    assert_eq!(b.page_state(arena.at(14 * block)), PageState::Unmanaged);
    // Every page can be allocated, each inside a region, none twice.
    let mut all = Vec::new();
    while let Some(p) = b.alloc_pages(o(0), AllocFlags::NONE) {
        let off = p.addr() - arena.addr();
        assert!(
            (11 * page..40 * page).contains(&off)
                || (6 * block + 13 * page..12 * block).contains(&off),
            "page at offset {off:#x} outside the regions' free parts"
        );
        all.push(p);
    }
    assert_eq!(all.len(), n + n2);
    for p in &all {
        // SAFETY: ours.
        unsafe { b.free_pages(p.ptr, o(0)) };
    }
    b.check_invariants();
    // A region added later, in the hole at the end: new span.
    // SAFETY: as above.
    let n3 = unsafe { b.add_region(arena.at(13 * block), 3 * block, false) }.unwrap();
    assert_eq!(n3, 24 - 6);
    assert_eq!(b.total_managed_pages(), n + n2 + n3);
    b.check_invariants();
    // Errors: too small, and nothing changes.
    // SAFETY: as above (rejected).
    let r = unsafe { b.add_region(arena.at(12 * block + 10), 100, true) };
    assert_eq!(r, Err(RegionError::TooSmall));
    // A page-sized region cannot hold its own memmap and a page.
    // SAFETY: as above (rejected).
    let r = unsafe { b.add_region(arena.at(12 * block), page, true) };
    assert_eq!(r, Err(RegionError::TooSmall));
    assert_eq!(b.total_managed_pages(), n + n2 + n3);
    b.check_invariants();
}

/// A span declared with its own memmap; its memory added in two halves
/// merges into one largest block (fresh memory merges with free
/// neighbours).
#[test]
fn span_with_placed_memmap_and_halves_merging() {
    let cfg = Config::new(64, 4).with_tunables(Tunables::NO_MIN);
    let block = cfg.max_block_size();
    let arena = Arena::new(2 * block, block, true);
    let b = Buddy::new(TestPlatform::pinned(1), cfg);
    let mm = Arena::new(b.memmap_bytes(2 * block), 64, false);
    // SAFETY: arena and memmap outlive `b`.
    unsafe {
        assert_eq!(
            b.add_span(arena.at(1), block, mm.ptr, false),
            Err(RegionError::BadSpan)
        );
        assert_eq!(
            b.add_span(arena.ptr, 2 * block, mm.at(8), false),
            Err(RegionError::BadSpan)
        );
        b.add_span(arena.ptr, 2 * block, mm.ptr, false).unwrap();
        assert_eq!(
            b.add_span(arena.at(block), block, mm.ptr, false),
            Err(RegionError::Overlap)
        );
        assert_eq!(b.add_region(arena.ptr, block / 2, true), Ok(8));
    }
    let i = b.zone_info(ZoneId::new(0));
    assert_eq!(&i.free_blocks[..5], &[0, 0, 0, 1, 0]);
    // SAFETY: as above.
    unsafe {
        assert_eq!(b.add_region(arena.at(block / 2), block / 2, true), Ok(8));
    }
    let i = b.zone_info(ZoneId::new(0));
    assert_eq!(&i.free_blocks[..5], &[0, 0, 0, 0, 1], "halves merged");
    assert_eq!(i.zero_blocks[4], 1, "both halves zero: merged block zero");
    b.check_invariants();
    // The second block of the span is a hole until added.
    assert_eq!(b.page_state(arena.at(block)), PageState::Inside);
    assert!(b.owns(arena.at(block)));
}

#[test]
fn buddyinfo_and_zoneinfo_reports() {
    let fx = Fx::small(3);
    let p = fx.alloc_pages(o(1), AllocFlags::ZEROED).unwrap();
    let s = format!("{}", *fx);
    assert_eq!(
        s,
        "Node 0, zone   Normal      0      1      1      1      2\n"
    );
    let zi = format!("{}", fx.zoneinfo());
    assert!(zi.contains("pages free     46"), "{zi}");
    assert!(zi.contains("managed  48"), "{zi}");
    assert!(zi.contains("zeroed_request   1"), "{zi}");
    assert!(zi.contains("zeroed_no_clear  1"), "{zi}");
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(1)) };
    assert_eq!(
        format!("{}", *fx),
        "Node 0, zone   Normal      0      0      0      0      3\n"
    );
}

#[test]
fn page_state_and_zone_of() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    assert_eq!(
        fx.page_state(p.ptr.as_ptr()),
        PageState::Allocated { order: o(2) }
    );
    assert_eq!(fx.page_state(fx.page_ptr(1).as_ptr()), PageState::Inside);
    assert_eq!(
        fx.page_state(fx.page_ptr(4).as_ptr()),
        PageState::Free {
            order: o(2),
            zero: true
        }
    );
    assert_eq!(fx.page_state(core::ptr::null()), PageState::Unmanaged);
    assert_eq!(fx.zone_of(p.ptr.as_ptr()), Some(ZoneId::new(0)));
    assert_eq!(fx.zone_of(core::ptr::null()), None);
    assert_eq!(fx.pfn_of(p.ptr.as_ptr()), Pfn(p.addr() >> 6));
    assert_eq!(
        fx.zonelist(AllocFlags::NONE).collect::<Vec<_>>(),
        [ZoneId::new(0)]
    );
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(2)) };
}

#[test]
fn global_alloc_for_a_fixed_heap() {
    use core::alloc::{GlobalAlloc, Layout};
    let fx = Fx::small(2);
    let b: &Buddy<TestPlatform> = &fx;
    // SAFETY: GlobalAlloc contract: valid layouts, matching deallocs.
    unsafe {
        let l = Layout::from_size_align(100, 8).unwrap();
        let p = b.alloc(l);
        assert!(!p.is_null());
        assert_eq!(b.page_state(p), PageState::Allocated { order: o(1) });
        let l2 = Layout::from_size_align(10, 512).unwrap();
        let q = b.alloc_zeroed(l2);
        assert_eq!(q as usize % 512, 0);
        assert!(std::slice::from_raw_parts(q, 512).iter().all(|&x| x == 0));
        assert!(
            b.alloc(Layout::from_size_align(2048, 8).unwrap()).is_null(),
            "above max block"
        );
        b.dealloc(p, l);
        b.dealloc(q, l2);
    }
    fx.check_invariants();
    assert_eq!(fx.info(), [0, 0, 0, 0, 2]);
}
