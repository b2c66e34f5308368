//! The cache's memory layout (`repr(C)`): what a process touches of a
//! cache that lives in `.bss` (mm-malloc's caches), page by page.

use core::mem::{offset_of, size_of};
use std::collections::BTreeSet;
use std::vec;

use buddy::Buddy;
use local_lock::std_platform::RseqCpu;
use local_lock::test_platform::TestPlatform;

use super::{CachePadded, KmemCache, KmemCacheNode, MAX_NUMNODES};

/// mm-malloc's cache type: 32 CPU records.
type K = KmemCache<&'static Buddy<TestPlatform>, RseqCpu, 32>;

/// The pages of a cache placed at [`K::FIRST_CPUS_PAD`] that CPUs 0 and
/// 1 touch: the header (up to the hot `fcheck`), node 0, and each CPU's
/// lock slot (stored last CPU first), sheaf words and fast record.
fn pages_touched() -> BTreeSet<usize> {
    let base = K::FIRST_CPUS_PAD;
    let slot = local_lock::LocalLock::<super::CpuLocked, RseqCpu, 32>::SLOT_BYTES;
    let rec = local_lock::this_cpu::SHEAF_RECORD_STRIDE;
    let node = size_of::<CachePadded<KmemCacheNode>>();
    let header = offset_of!(K, name);
    let mut ranges = vec![
        (header, offset_of!(K, fcheck) + 64 - header),
        (offset_of!(K, node0), node),
    ];
    for cpu in 0..2 {
        ranges.push((header - (cpu + 1) * slot, slot));
        ranges.push((offset_of!(K, fast) + cpu * rec, rec));
    }
    ranges
        .into_iter()
        .flat_map(|(at, len)| ((base + at) / 4096)..=((base + at + len - 1) / 4096))
        .collect()
}

/// The first CPUs' lock slots (at the end of the lock, stored last CPU
/// first), the header, node 0 and their sheaf words and fast records (one
/// record per CPU, at the start of their array) share a page: one page
/// per cache. With the sheaf words, the fast records and the nodes in
/// three arrays, two (the fork loop's shell under mm-malloc: 18 pages of
/// its caches resident for 9 classes); Rust's field order put the header
/// and the nodes after all the per-CPU arrays, on pages of their own:
/// five, each faulted in by every process that uses the class, and copied
/// again after each `fork`.
#[test]
fn a_cache_used_by_two_cpus_touches_one_page() {
    let p = pages_touched();
    assert_eq!(p.len(), 1, "pages touched: {p:?}");
    const { assert!((K::FIRST_CPUS_PAD + K::FIRST_CPUS_AT) % 4096 + K::FIRST_CPUS_SPAN <= 4096) };
    assert_eq!(
        K::FIRST_CPUS_AT,
        offset_of!(K, name)
            - 2 * local_lock::LocalLock::<super::CpuLocked, RseqCpu, 32>::SLOT_BYTES
    );
}

/// A private sheaf takes the power of two above its entries, its header
/// and its color, not a page: kmalloc's classes (125 entries for the
/// small ones down to 4 for kmalloc-8k) take 1 KiB down to the private
/// pool's 256 bytes per sheaf, two to four sheaves per class and CPU in
/// every process; each block is mostly entries (128 entries took 2 KiB
/// for 1,048 bytes: `fit_private_sheaf`).
#[test]
fn private_sheaves_are_not_a_page_each() {
    use crate::{kmalloc_sheaf_capacity, GlobalSlub, SlabFlags, KMALLOC_SIZES};
    use local_lock::std_platform::PerThread;

    use super::Geometry;

    let expect = |size: usize| match size {
        ..=256 => 1024,
        512 => 512,
        1024 => 256,
        2048 => 256,
        4096 => 128,
        _ => 64,
    };
    for (i, &size) in KMALLOC_SIZES.iter().enumerate() {
        let cap = kmalloc_sheaf_capacity(i, GlobalSlub::DEFAULT_SHEAVES);
        let c = KmemCache::<crate::GlobalPages, PerThread>::new(
            "t",
            size,
            8,
            SlabFlags::NONE,
            Geometry::new(64),
            crate::GlobalPages,
            PerThread,
        )
        .with_sheaves(cap);
        let bytes = c.private_sheaf_bytes();
        assert_eq!(bytes, expect(size), "kmalloc-{size}: {cap} entries");
        assert!(bytes - c.sheaf_bytes() >= super::sheaf::PRIVATE_SHEAF_COLOR);
        // Blocks above the pool's smallest (256 bytes) are at least 3/4
        // entries.
        if bytes > 256 {
            assert!(
                4 * 8 * cap >= 3 * bytes,
                "kmalloc-{size}: {cap} entries in {bytes} bytes"
            );
        }
    }
}

/// A cache written into zeroed memory leaves the nodes it does not use
/// zero: a cache in `.bss` (mm-malloc's, built in place, its zero pages
/// given back) then keeps only node 0's page. The partial lists held
/// their membership bit as a field (`ON_PARTIAL`, `ON_FULL`), so all 16
/// nodes (a page, across two) stayed resident in every process: 33 pages
/// of mm-malloc's caches in the fork loop's shell for 11 classes, 22 now.
#[test]
// The bytes read include padding, which a typed write leaves uninitialised
// in Rust's abstract machine (miri reports the read): the property is the
// compiled image's, checked natively.
#[cfg_attr(miri, ignore = "reads padding bytes of the native image")]
fn unused_nodes_are_zero() {
    use std::boxed::Box;

    use crate::{GlobalPages, SlabFlags};

    use super::Geometry;

    type C = KmemCache<GlobalPages, RseqCpu, 32>;
    let mut img: Box<core::mem::MaybeUninit<C>> = Box::new_zeroed();
    img.write(C::new(
        "t",
        64,
        8,
        SlabFlags::HARDENED,
        Geometry::new(2),
        GlobalPages,
        RseqCpu::new(),
    ));
    let node = size_of::<CachePadded<KmemCacheNode>>();
    // Nodes 1.. are the array `nodes` (node 0 is a field of its own).
    let at = offset_of!(C, nodes);
    let p = img.as_ptr().cast::<u8>();
    for b in at..at + (MAX_NUMNODES - 1) * node {
        // SAFETY: within the box; the bytes were zeroed before the write
        // (padding keeps them), read as plain bytes.
        let v = unsafe { p.add(b).read_volatile() };
        assert_eq!(
            v,
            0,
            "byte {} of node {}",
            (b - at) % node,
            1 + (b - at) / node
        );
    }
    // SAFETY: written above; dropped once.
    unsafe { img.assume_init_drop() };
}

/// The bytes of a cache built by `build` into zeroed memory.
#[cfg(not(miri))]
fn image_of<C>(build: impl FnOnce(*mut C)) -> std::vec::Vec<u8> {
    use std::boxed::Box;
    let mut img: Box<core::mem::MaybeUninit<C>> = Box::new_zeroed();
    build(img.as_mut_ptr());
    let p = img.as_ptr().cast::<u8>();
    // SAFETY: within the box, read as plain bytes (padding included: the
    // box was zeroed, and a typed write leaves padding as it found it in
    // the compiled image; see `unused_nodes_are_zero`).
    (0..size_of::<C>())
        .map(|b| unsafe { p.add(b).read_volatile() })
        .collect()
}

/// `new_in_zeroed` over zero memory gives `new`'s cache byte for byte
/// (the per-CPU records and nodes it does not write are zero in `new`'s),
/// for hardened, debug and plain caches on the restartable, per-thread
/// and test platforms.
#[test]
#[cfg_attr(miri, ignore = "reads padding bytes of the native image")]
fn new_in_zeroed_is_new() {
    #[cfg(not(miri))]
    {
        use local_lock::std_platform::PerThread;

        use crate::{GlobalPages, SlabFlags};

        use super::Geometry;

        fn check<P: local_lock::Platform + Copy, const N: usize>(
            p: P,
            flags: SlabFlags,
            size: usize,
        ) {
            type C<P, const N: usize> = KmemCache<GlobalPages, P, N>;
            let typed = image_of::<C<P, N>>(|c| {
                // SAFETY: the box's memory, aligned.
                unsafe {
                    c.write(C::<P, N>::new(
                        "t",
                        size,
                        8,
                        flags,
                        Geometry::new(4),
                        GlobalPages,
                        p,
                    ))
                };
                // SAFETY: just written.
                unsafe { (*c).set_sheaves(32) };
            });
            let in_place = image_of::<C<P, N>>(|c| {
                // SAFETY: the box's memory, zeroed and aligned.
                unsafe {
                    C::<P, N>::new_in_zeroed(
                        c,
                        "t",
                        size,
                        8,
                        flags,
                        Geometry::new(4),
                        GlobalPages,
                        p,
                    )
                };
                // SAFETY: just written.
                unsafe { (*c).set_sheaves(32) };
            });
            // Compared: every byte outside the header (the per-CPU records,
            // the nodes, the platform) up to the last field's end, which `new_in_zeroed` leaves as the
            // zero memory had them. The header's fields are written from
            // the one list both constructors expand (`cache_header!`); its
            // bytes are not compared, the padding inside its fields being
            // whatever a typed write copied there (a debug build's differ).
            // (node 0, written by both after the header, counts as header)
            let header = offset_of!(C<P, N>, name)..offset_of!(C<P, N>, fast);
            // (nor the padding after the last field, up to the records'
            // alignment: a typed write of the whole cache copies it)
            let end = offset_of!(C<P, N>, nodes)
                + (MAX_NUMNODES - 1) * size_of::<CachePadded<KmemCacheNode>>();
            let compared = |b: usize| !header.contains(&b) && b < end;
            let diff: std::vec::Vec<usize> = (0..typed.len())
                .filter(|&b| compared(b) && typed[b] != in_place[b])
                .collect();
            assert!(
                diff.is_empty(),
                "{size} B {flags:?}: bytes differ at {diff:?}"
            );
            assert!(typed.iter().any(|&b| b != 0));
        }
        for flags in [SlabFlags::HARDENED, SlabFlags::NONE, SlabFlags::DEBUG_ALL] {
            for size in [8, 64, 1000, 4096] {
                check::<RseqCpu, 32>(RseqCpu::new(), flags, size);
                check::<PerThread, 64>(PerThread, flags, size);
                check::<TestPlatform, 8>(TestPlatform::pinned(4), flags, size);
            }
        }
    }
}

/// A cache written in place over zero memory (`new_in_zeroed`) serves,
/// takes back, validates and destroys as `new`'s does, on the per-thread
/// and test platforms, hardened, plain and with every debug flag (over
/// the test buddy: miri runs it).
#[test]
fn a_cache_built_in_place_works() {
    use std::boxed::Box;
    use std::vec::Vec;

    use buddy::PageAlloc;
    use local_lock::std_platform::PerThread;

    use crate::testing::Mem;
    use crate::SlabFlags;

    use super::Geometry;

    fn check<P: local_lock::Platform + Copy, const N: usize>(p: P, flags: SlabFlags) {
        type C<'a, P, const N: usize> = KmemCache<&'a Buddy<TestPlatform>, P, N>;
        let m = Mem::new(2);
        let src = &*m.buddy;
        let g = Geometry {
            page_size: src.page_size(),
            nr_cpus: 4,
            max_order: 3,
            page_max_order: src.max_order().get(),
        };
        let mut img: Box<core::mem::MaybeUninit<C<'_, P, N>>> = Box::new_zeroed();
        // SAFETY: the box's memory, zeroed, aligned, ours.
        unsafe {
            C::<'_, P, N>::new_in_zeroed(img.as_mut_ptr(), "in-place", 96, 8, flags, g, src, p)
        };
        // SAFETY: written above.
        let c = unsafe { img.assume_init_mut() };
        c.set_sheaves(16);
        assert_eq!(c.name(), "in-place");
        let n = if cfg!(miri) { 20 } else { 100 };
        let objs: Vec<_> = (0..n).map(|_| c.alloc().expect("an object")).collect();
        for (i, o) in objs.iter().enumerate() {
            // SAFETY: ours, 96 bytes.
            unsafe { o.as_ptr().write_bytes(i as u8, 96) };
        }
        c.validate();
        for o in objs {
            // SAFETY: allocated above, freed once.
            unsafe { c.free(o) };
        }
        c.validate();
        assert_eq!(c.destroy(), Ok(()), "every object came back");
    }
    // (under miri, one of them: the six take minutes)
    check::<TestPlatform, 8>(TestPlatform::pinned(4), SlabFlags::HARDENED);
    if cfg!(miri) {
        return;
    }
    check::<TestPlatform, 8>(TestPlatform::pinned(4), SlabFlags::NONE);
    check::<TestPlatform, 8>(TestPlatform::pinned(4), SlabFlags::DEBUG_ALL);
    for flags in [SlabFlags::HARDENED, SlabFlags::NONE, SlabFlags::DEBUG_ALL] {
        check::<PerThread, 64>(PerThread, flags);
    }
}
