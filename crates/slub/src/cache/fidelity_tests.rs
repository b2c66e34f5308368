//! White-box tests of the sheaves' fidelity to mm/slub.c (issue #20's
//! divergences): states the single-object paths never reach on their own
//! (a barn at its empty limit, a partly filled spare) are built directly.

use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use super::{Barn, Sheaf};
use crate::testing::{destroy_all_back, Cache, Mem, CPUS};
use crate::{KmemCache, SlabFlags, SlubStat};

/// A cache of 100-byte objects with sheaves of 4, whose barn holds full
/// sheaves (CPU 1 freed what CPU 0 allocated) and some empty ones; the
/// platform is back on CPU 0.
fn cache_with_a_stocked_barn(m: &Mem) -> (Cache<'_>, TestPlatform) {
    let p = TestPlatform::pinned(CPUS);
    let c = KmemCache::create("fidelity", 100, 8, SlabFlags::NONE, &*m.buddy, p)
        .unwrap()
        .with_sheaves(4);
    let objs: Vec<_> = (0..48).map(|_| c.alloc().unwrap()).collect();
    p.set_cpu(1);
    for o in objs {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(o) };
    }
    p.set_cpu(0);
    let again: Vec<_> = (0..8).map(|_| c.alloc().unwrap()).collect();
    for o in again {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(o) };
    }
    assert!(c.barn_sheaves().0 > 0, "{:?}", c.barn_sheaves());
    (c, p)
}

#[test]
fn barn_replace_empty_sheaf_keeps_our_empty_sheaf_beyond_the_empty_limit() {
    // barn_replace_empty_sheaf: "We ignore the limit on empty sheaves as
    // the number of sheaves doesn't change."
    let m = Mem::new(16);
    let (c, p) = cache_with_a_stocked_barn(&m);
    while c.barn_sheaves().1 < Barn::MAX_EMPTY {
        c.put_empty(c.new_sheaf().unwrap());
    }
    let (full, empty) = c.barn_sheaves();
    assert_eq!(empty, Barn::MAX_EMPTY);
    let freed = c.stats().get(SlubStat::SHEAF_FREE);
    let full_one = c.barn_get_full(c.new_sheaf().unwrap()).unwrap();
    assert_eq!(c.barn_sheaves(), (full - 1, Barn::MAX_EMPTY + 1));
    assert_eq!(c.stats().get(SlubStat::SHEAF_FREE), freed);
    c.retire_sheaf(full_one);
    destroy_all_back(c, p, &m);
}

#[test]
fn with_no_spare_a_full_main_takes_an_empty_sheaf_from_the_barn_first() {
    // __pcs_replace_full_main: `if (!pcs->spare) { empty =
    // barn_get_empty_sheaf(barn); ... }` before allocating one.
    let m = Mem::new(16);
    let (c, p) = cache_with_a_stocked_barn(&m);
    let y = c.alloc().unwrap();
    // CPU 2 starts with no sheaf: its first allocation installs a full one
    // from the barn (main 3 of 4, no spare), a free fills it again.
    p.set_cpu(2);
    let x = c.alloc().unwrap();
    // SAFETY: ours, freed once each.
    unsafe { c.free(x) };
    let (_, empty) = c.barn_sheaves();
    assert!(empty > 0);
    let before = c.stats();
    // SAFETY: ours, freed once.
    unsafe { c.free(y) };
    let d = before.delta(&c.stats());
    assert_eq!(d.get(SlubStat::SHEAF_ALLOC), 0, "{d}");
    assert_eq!(c.barn_sheaves().1, empty - 1);
    destroy_all_back(c, p, &m);
}

#[test]
fn a_full_main_swaps_with_a_spare_that_has_room() {
    // __pcs_replace_full_main: `if (pcs->spare->size < s->sheaf_capacity)
    // swap(pcs->main, pcs->spare)`, not only an empty spare.
    let m = Mem::new(16);
    let (c, p) = cache_with_a_stocked_barn(&m);
    let (y1, y2) = (c.alloc().unwrap(), c.alloc().unwrap());
    p.set_cpu(3);
    let x1 = c.alloc().unwrap();
    let x2 = c.alloc().unwrap().as_ptr().expose_provenance();
    // A spare holding one object (x2), as a race or a bulk operation
    // leaves it.
    let sp: Sheaf = c.new_sheaf().unwrap();
    c.mark_free(x2);
    c.sheaf_set(sp, 0, x2);
    sp.set_size(1);
    {
        let mut g = c.try_lock_cpu().unwrap();
        assert_eq!(g.spare, 0);
        g.spare = sp.0;
    }
    // SAFETY: ours, freed once each: main is full again.
    unsafe {
        c.free(x1);
        c.free(y1);
    }
    let before = c.stats();
    // SAFETY: ours, freed once.
    unsafe { c.free(y2) };
    let d = before.delta(&c.stats());
    assert_eq!(d.get(SlubStat::SHEAF_SWAP), 1, "{d}");
    assert_eq!(d.get(SlubStat::BARN_PUT), 0, "{d}");
    assert_eq!(Sheaf(c.try_lock_cpu().unwrap().main).size(), 2);
    destroy_all_back(c, p, &m);
}

#[test]
fn randomised_slabs_follow_the_caches_fisher_yates_sequence() {
    // init_cache_random_seq / shuffle_freelist: every slab is linked in the
    // order of one per-cache random permutation (a Fisher-Yates shuffle),
    // walked from a random position: two slabs are rotations of the same
    // cycle, whose steps are not one constant stride (an affine
    // permutation, `(mul * k + start) % n`, would be).
    let m = Mem::new(4);
    let p = TestPlatform::pinned(CPUS);
    let mut c: Cache<'_> =
        KmemCache::create("random", 64, 8, SlabFlags::RANDOM_FREELIST, &*m.buddy, p).unwrap();
    let per = c.layout().oo.objects as usize;
    let size = c.layout().size;
    let slab = |c: &Cache<'_>| -> (Vec<usize>, Vec<core::ptr::NonNull<u8>>) {
        let objs: Vec<_> = (0..per).map(|_| c.alloc().unwrap()).collect();
        let base = objs.iter().map(|o| o.as_ptr() as usize).min().unwrap();
        let idx = objs
            .iter()
            .map(|o| (o.as_ptr() as usize - base) / size)
            .collect();
        (idx, objs)
    };
    let (a, oa) = slab(&c);
    let (b, ob) = slab(&c);
    for idx in [&a, &b] {
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..per).collect::<Vec<_>>(), "a permutation");
    }
    let steps: Vec<usize> = a.windows(2).map(|w| (w[1] + per - w[0]) % per).collect();
    assert!(
        steps.iter().any(|&s| s != steps[0]),
        "an affine walk: {a:?}"
    );
    let r = b.iter().position(|&i| i == a[0]).unwrap();
    let rotated: Vec<usize> = b[r..].iter().chain(&b[..r]).copied().collect();
    assert_eq!(rotated, a, "both slabs walk the cache's one sequence");
    for o in oa.into_iter().chain(ob) {
        // SAFETY: allocated above, freed once.
        unsafe { c.free(o) };
    }
    assert_eq!(c.destroy_exclusive(), Ok(()));
    drop(c);
    assert!(
        m.all_free(),
        "slabs and the sequence's block back in the buddy"
    );
}
