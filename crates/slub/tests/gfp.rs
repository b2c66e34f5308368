//! gfp flags through slub (issue #20): `kmem_cache_alloc(s, gfp)` and
//! `kmalloc(size, gfp)` pass the request's flags to the page allocator
//! when a slab (or a large block) is needed, so the buddy's slow path
//! (reclaim hook, retry policy, reserves, failure report) acts on them.
#![cfg(not(loom))]

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use buddy::{
    AllocFlags, Block, BlockRef, Buddy, BuddySource, Config, Order, Page, PageAlloc, Stat, Tunables,
};
use local_lock::test_platform::TestPlatform;
use slub::{KmemCache, SlabFlags};

const PAGE: usize = 4096;
const PAGES: usize = 256;

/// A buddy with a reclaim hook (a page cache of `held` pages, given back
/// 64 at a time after `idle` calls that reclaim nothing) and a failure
/// report counter: a kernel's page allocator with its shrinkers.
struct Reclaimable {
    buddy: Buddy<TestPlatform>,
    held: Mutex<Vec<Page>>,
    idle: AtomicUsize,
    calls: AtomicUsize,
    warned: AtomicUsize,
}

impl BuddySource for Reclaimable {
    type P = TestPlatform;
    fn buddy(&self) -> &Buddy<TestPlatform> {
        &self.buddy
    }
    fn reclaim(&self, _order: Order, _flags: AllocFlags) -> usize {
        self.calls.fetch_add(1, Relaxed);
        if self
            .idle
            .fetch_update(Relaxed, Relaxed, |i| i.checked_sub(1))
            .is_ok()
        {
            return 0;
        }
        let mut h = self.held.lock().unwrap();
        let n = h.len().min(64);
        for p in h.drain(..n) {
            // SAFETY: a page of ours, freed once.
            unsafe { self.buddy.free_pages(p.ptr, p.order) };
        }
        n
    }
    fn warn_alloc(&self, _order: Order, _flags: AllocFlags) {
        self.warned.fetch_add(1, Relaxed);
    }
}

// SAFETY: the buddy's blocks and owner words, through its slow path.
unsafe impl PageAlloc for Reclaimable {
    fn page_size(&self) -> usize {
        PAGE
    }
    fn max_order(&self) -> Order {
        self.buddy.config().max_order()
    }
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_or_grow(order, flags)
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.buddy.free_pages(ptr, order) }
    }
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.buddy.owner_of(addr)
    }
}

/// 1 MiB, min watermark 64 KiB (16 pages): ordinary requests fail at min;
/// the rest of the buddy sits in the reclaimable page cache.
fn exhausted(mem: *mut u8) -> Reclaimable {
    let t = Tunables {
        min_free_kbytes: Some(64),
        ..Tunables::KERNEL
    };
    let buddy = Buddy::new(
        TestPlatform::pinned(1),
        Config::new(PAGE, 4).with_tunables(t),
    );
    // SAFETY: zeroed memory that outlives the buddy, used by nothing else.
    unsafe { buddy.add_region(mem, PAGES * PAGE, true) }.unwrap();
    let mut held = Vec::new();
    while let Some(p) = buddy.alloc_pages(Order::ZERO, AllocFlags::NONE) {
        held.push(p);
    }
    Reclaimable {
        buddy,
        held: Mutex::new(held),
        idle: AtomicUsize::new(usize::MAX),
        calls: AtomicUsize::new(0),
        warned: AtomicUsize::new(0),
    }
}

#[test]
fn kmem_cache_alloc_flags_reach_the_page_allocator() {
    let layout = Layout::from_size_align(PAGES * PAGE, PAGE).unwrap();
    // SAFETY: non-zero size.
    let mem = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!mem.is_null());
    {
        let src = exhausted(mem);
        let c = KmemCache::<_, _, 1>::create(
            "gfp",
            1024,
            8,
            SlabFlags::NONE,
            &src,
            TestPlatform::pinned(1),
        )
        .unwrap();
        // NOWARN: the failure is not reported.
        assert!(c.alloc().is_none());
        assert_eq!(src.warned.load(Relaxed), 1, "a plain failure is reported");
        assert!(c.alloc_flags(AllocFlags::NOWARN).is_none());
        assert_eq!(src.warned.load(Relaxed), 1, "NOWARN: not reported");
        // MEMALLOC: a slab from below the min watermark, no reclaim.
        let calls = src.calls.load(Relaxed);
        let mut objs = Vec::new();
        while let Some(p) = c.alloc_flags(AllocFlags::MEMALLOC | AllocFlags::NOWARN) {
            objs.push(p);
        }
        assert!(objs.len() >= 4, "the reserves held at least one slab");
        assert!(src.buddy.stat(Stat::NO_WATERMARKS) >= 1);
        assert_eq!(
            src.calls.load(Relaxed),
            calls,
            "the reclaimer does not reclaim"
        );
        // NOFAIL: reclaim makes no progress for 3 calls; a plain request
        // gives up at the first, NOFAIL waits for the fourth.
        src.idle.store(3, Relaxed);
        assert!(c.alloc_flags(AllocFlags::NOWARN).is_none());
        src.idle.store(3, Relaxed);
        let calls = src.calls.load(Relaxed);
        objs.push(c.alloc_flags(AllocFlags::NOFAIL).expect("NOFAIL"));
        assert_eq!(src.calls.load(Relaxed), calls + 4);
        // ZEROED is the object's (`kmem_cache_zalloc`).
        let z = c
            .alloc_flags(AllocFlags::ZEROED | AllocFlags::NOWARN)
            .unwrap();
        // SAFETY: a live object of 1024 bytes.
        assert!(unsafe { std::slice::from_raw_parts(z.as_ptr(), 1024) }
            .iter()
            .all(|&b| b == 0));
        objs.push(z);
        for p in objs {
            // SAFETY: ours, freed once.
            unsafe { c.free(p) };
        }
        drop(c);
        for p in src.held.lock().unwrap().drain(..) {
            // SAFETY: ours, freed once.
            unsafe { src.buddy.free_pages(p.ptr, p.order) };
        }
    }
    // SAFETY: allocated above with this layout; the buddy is gone.
    unsafe { std::alloc::dealloc(mem, layout) };
}
