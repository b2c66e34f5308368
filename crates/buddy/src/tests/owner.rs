//! Owner words: reachable from any address of a block, cleared on
//! hand-out, untouched while held, usable as list links.

use core::sync::atomic::Ordering::Relaxed;
use std::vec::Vec;

use local_lock::sync::DWord;

use super::{o, Fx};
use crate::{AllocFlags, Owner, Page, PageState, ZoneId};

fn same(a: &Owner, b: &Owner) -> bool {
    core::ptr::eq(a, b)
}

#[test]
fn owner_of_any_address_with_and_without_comp() {
    let fx = Fx::small(2);
    for flags in [AllocFlags::NONE, AllocFlags::COMP] {
        let p = fx.alloc_pages(o(3), flags).unwrap();
        let head = fx.owner_of(p.ptr.as_ptr()).unwrap();
        assert_eq!(head.head, p.ptr);
        assert_eq!(head.order, o(3));
        for off in (0..512).step_by(7) {
            let r = fx.owner_of(p.ptr.as_ptr().wrapping_add(off)).unwrap();
            assert_eq!(r.head, p.ptr, "offset {off}");
            assert_eq!(r.order, o(3));
            assert!(same(r.owner, head.owner));
        }
        // The next block is free: no owner.
        assert!(fx.owner_of(p.ptr.as_ptr().wrapping_add(512)).is_none());
        assert_eq!(head.owner.order(), Some(o(3)));
        assert_eq!(head.owner.block(), Some(p.ptr));
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, o(3)) };
        assert_eq!(head.owner.order(), None);
    }
    assert!(fx.owner_of(core::ptr::null()).is_none());
    fx.check_invariants();
}

/// Tail stamps of a freed compound block go stale; lookups verify the head
/// and fall back to the candidate-head scan.
#[test]
fn stale_tail_stamps_are_verified() {
    let fx = Fx::small(1);
    let c = fx.alloc_pages(o(3), AllocFlags::COMP).unwrap();
    assert_eq!(fx.idx(&c), 0);
    // SAFETY: ours.
    unsafe { fx.free_pages(c.ptr, o(3)) };
    let a = fx.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    let b = fx.alloc_pages(o(2), AllocFlags::NONE).unwrap();
    assert_eq!((fx.idx(&a), fx.idx(&b)), (0, 4));
    // Page 5 still carries a stamp naming page 0 (now an order-2 block that
    // does not contain it).
    let r = fx.owner_of(fx.page_ptr(5).as_ptr()).unwrap();
    assert_eq!(r.head, b.ptr);
    assert_eq!(r.order, o(2));
    let r = fx
        .owner_of(fx.page_ptr(3).as_ptr().wrapping_add(63))
        .unwrap();
    assert_eq!(r.head, a.ptr);
    // SAFETY: ours.
    unsafe {
        fx.free_pages(a.ptr, o(2));
        fx.free_pages(b.ptr, o(2));
    }
    // Inside a free block: nothing, even with stale stamps.
    assert!(fx.owner_of(fx.page_ptr(5).as_ptr()).is_none());
    fx.check_invariants();
}

/// Every owner word, `prev` included (a free-list link while the block is
/// free), is clear on hand-out from either end of a free list of several
/// blocks: a head's `prev` is null, and a `COLD` allocation's tail gets
/// its link cleared when it is taken (the reset skips `prev`, issue #22).
#[test]
fn owner_words_cleared_when_taken_from_either_end() {
    let fx = Fx::small(1);
    let p: Vec<Page> = (0..4)
        .map(|_| fx.alloc_pages(o(0), AllocFlags::NONE).unwrap())
        .collect();
    for q in &p {
        let w = fx.owner_of(q.ptr.as_ptr()).unwrap().owner;
        w.prev().store(0x5a5a, Relaxed);
        w.data().store(0xdead, Relaxed);
    }
    // Pages 0 and 2 free (their buddies 1 and 3 held): two blocks on the
    // order-0 list, linked to each other.
    // SAFETY: ours.
    unsafe {
        fx.free_pages(p[0].ptr, o(0));
        fx.free_pages(p[2].ptr, o(0));
    }
    fx.check_invariants();
    for flags in [AllocFlags::COLD, AllocFlags::NONE] {
        let q = fx.alloc_pages(o(0), flags).unwrap();
        let w = fx.owner_of(q.ptr.as_ptr()).unwrap().owner;
        assert_eq!(
            (w.prev().load(Relaxed), w.data().load(Relaxed)),
            (0, 0),
            "{flags:?}: page {}",
            fx.idx(&q)
        );
    }
    fx.check_invariants();
}

#[test]
fn owner_words_cleared_on_hand_out_and_kept_while_held() {
    let fx = Fx::small(1);
    let p = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    let w = fx.owner_of(p.ptr.as_ptr()).unwrap().owner;
    assert_eq!(w.pair().load(Relaxed), DWord::new(0, 0));
    assert_eq!(
        (
            w.data().load(Relaxed),
            w.link().load(Relaxed),
            w.tag().load(Relaxed)
        ),
        (0, 0, 0)
    );
    // The 16-byte aligned pair takes a double-word compare-exchange.
    assert_eq!(w.pair() as *const _ as usize % 16, 0);
    assert_eq!(
        w.pair()
            .compare_exchange(DWord::new(0, 0), DWord::new(0xf00, 3), Relaxed, Relaxed),
        Ok(DWord::new(0, 0))
    );
    assert!(w
        .pair()
        .compare_exchange(DWord::new(0, 0), DWord::new(1, 1), Relaxed, Relaxed)
        .is_err());
    w.data().store(0xcafe, Relaxed);
    w.link().store(0xbeef, Relaxed);
    w.tag().store(7, Relaxed);
    // Other allocations and frees around it do not touch the words.
    let mut others = Vec::new();
    for _ in 0..6 {
        others.push(fx.alloc_pages(o(0), AllocFlags::NONE).unwrap());
    }
    for q in others {
        // SAFETY: ours.
        unsafe { fx.free_pages(q.ptr, o(0)) };
    }
    let r = fx.owner_of(p.ptr.as_ptr().wrapping_add(100)).unwrap().owner;
    assert_eq!(r.pair().load(Relaxed), DWord::new(0xf00, 3));
    assert_eq!(
        (
            r.data().load(Relaxed),
            r.link().load(Relaxed),
            r.tag().load(Relaxed)
        ),
        (0xcafe, 0xbeef, 7)
    );
    // SAFETY: ours.
    unsafe { fx.free_pages(p.ptr, o(1)) };
    let q = fx.alloc_pages(o(1), AllocFlags::NONE).unwrap();
    assert_eq!(q.ptr, p.ptr);
    let r = fx.owner_of(q.ptr.as_ptr()).unwrap().owner;
    assert_eq!(
        r.pair().load(Relaxed),
        DWord::new(0, 0),
        "cleared for the new holder"
    );
    assert_eq!(r.tag().load(Relaxed), 0);
    w.reset();
    // SAFETY: ours.
    unsafe { fx.free_pages(q.ptr, o(1)) };
}

/// What pcp does: pages taken in bulk are "allocated" to the buddy and
/// linked through their owner words, so their memory stays untouched and
/// known-zero pages stay zero; then returned in bulk, still zero.
#[test]
fn pcp_style_list_in_owner_words() {
    let fx = Fx::small(1);
    let z = ZoneId::new(0);
    let mut head = 0usize;
    let mut n = 0;
    let took = fx.alloc_bulk(z, o(0), AllocFlags::NONE, 8, |p: Page| {
        assert!(p.zero);
        let w = fx.owner_of(p.ptr.as_ptr()).unwrap().owner;
        w.link().store(head, Relaxed);
        w.tag().store(0x9c9, Relaxed);
        head = p.addr();
        n += 1;
    });
    assert_eq!((took, n), (8, 8));
    // The pcp checker's question.
    let mut cur = head;
    let mut pages = Vec::new();
    while cur != 0 {
        let p: *const u8 = std::ptr::without_provenance(cur);
        assert_eq!(fx.page_state(p), PageState::Allocated { order: o(0) });
        let w = fx.owner_of(p).unwrap().owner;
        assert_eq!(w.tag().load(Relaxed), 0x9c9);
        pages.push(Page {
            ptr: w.block().unwrap(),
            order: w.order().unwrap(),
            zero: true,
        });
        cur = w.link().load(Relaxed);
    }
    assert_eq!(pages.len(), 8);
    // SAFETY: ours, never written.
    let freed = unsafe { fx.free_bulk_keep_zero(z, pages) };
    assert_eq!(freed, 8);
    let i = fx.zone_info(z);
    assert_eq!(
        (i.free_blocks[4], i.zero_blocks[4]),
        (1, 1),
        "merged back, still zero"
    );
    fx.check_invariants();
}

/// A holder's owner words are cleared when its block comes back (the
/// allocation no longer stores them): through a merge, a bulk free and
/// the pcp tag, every later hand-out reads zero.
#[test]
fn owner_words_a_holder_left_are_cleared_by_the_free() {
    let fx = Fx::small(1);
    let dirty = |p: &Page| {
        let w = fx.owner_of(p.ptr.as_ptr()).unwrap().owner;
        w.pair().store(DWord::new(1, 2), Relaxed);
        w.data().store(3, Relaxed);
        w.link().store(4, Relaxed);
        w.tag().store(5, Relaxed);
    };
    let clean = |p: &Page| {
        let w = fx.owner_of(p.ptr.as_ptr()).unwrap().owner;
        assert_eq!(
            w.pair().load(Relaxed),
            DWord::new(0, 0),
            "page {}",
            fx.idx(p)
        );
        assert_eq!(
            (
                w.data().load(Relaxed),
                w.link().load(Relaxed),
                w.tag().load(Relaxed)
            ),
            (0, 0, 0),
            "page {}",
            fx.idx(p)
        );
    };
    for round in 0..2 {
        let p: Vec<Page> = (0..8)
            .map(|_| fx.alloc_pages(o(0), AllocFlags::NONE).unwrap())
            .collect();
        p.iter().for_each(&clean);
        p.iter().for_each(&dirty);
        // SAFETY: ours, freed once.
        unsafe {
            if round == 0 {
                p.iter().for_each(|q| fx.free_pages(q.ptr, o(0)));
            } else {
                fx.free_bulk(ZoneId::new(0), p.iter().copied());
            }
        }
        fx.check_invariants();
        // The pages merged: an order-3 block out of them reads zero too.
        let b = fx.alloc_pages(o(3), AllocFlags::NONE).unwrap();
        clean(&b);
        // SAFETY: ours.
        unsafe { fx.free_pages(b.ptr, o(3)) };
    }
    fx.check_invariants();
}
