//! The gfp semantics of the slow path (`__alloc_pages_slowpath`): the
//! failure report and `NOWARN`, the retry policy (`NORETRY`,
//! `RETRY_MAYFAIL`, `NOFAIL`) around a reclaim hook, `MEMALLOC` /
//! `NOMEMALLOC`, `THISNODE`; and the zonelist's low-then-min passes
//! (issue #20's divergence 4). Each test shows the flag's behaviour next
//! to the same request without it.

use std::format;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;
use local_lock::topology::Topology;

use super::wmark::{reserve_fixture, two_zone_cfg};
use super::{o, Arena, Fx};
use crate::{AllocFlags, Buddy, BuddySource, Config, Order, Page, Stat, Tunables, ZoneId};

/// A buddy whose "page cache" holds pages the reclaim hook gives back,
/// `per_call` pages per call, after `idle` calls that reclaim nothing.
struct Shrinker {
    fx: Fx,
    cache: Mutex<Vec<Page>>,
    per_call: usize,
    idle: AtomicUsize,
    calls: AtomicUsize,
    warned: AtomicUsize,
}

impl Shrinker {
    /// 64 B pages, max order 4, no min watermark, `blocks` blocks all taken:
    /// the pages of the first `cached` blocks (in page order) go to the
    /// cache, the rest stay held.
    fn exhausted(blocks: usize, cached: usize, per_call: usize) -> (Shrinker, Vec<Page>) {
        let fx = Fx::small(blocks);
        let mut all = Vec::new();
        while let Some(p) = fx.alloc_pages(o(0), AllocFlags::NONE) {
            all.push(p);
        }
        all.sort_by_key(|p| p.addr());
        let held = all.split_off(cached * 16);
        // Popped from the end: reclaim gives back pages in address order.
        all.reverse();
        let s = Shrinker {
            fx,
            cache: Mutex::new(all),
            per_call,
            idle: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            warned: AtomicUsize::new(0),
        };
        (s, held)
    }
    fn release(self, held: Vec<Page>) {
        let cache = core::mem::take(&mut *self.cache.lock().unwrap());
        for p in held.into_iter().chain(cache) {
            // SAFETY: ours, freed once.
            unsafe { self.fx.free_pages(p.ptr, p.order) };
        }
        self.fx.check_invariants();
    }
}

// SAFETY: the fixture's raw pointers (its arenas) are only used through
// the buddy, which is `Sync`; the rest is atomics and a mutex.
unsafe impl Sync for Shrinker {}

impl BuddySource for Shrinker {
    type P = TestPlatform;
    fn buddy(&self) -> &Buddy<TestPlatform> {
        &self.fx.b
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
        let mut c = self.cache.lock().unwrap();
        let mut n = 0;
        while n < self.per_call {
            let Some(p) = c.pop() else { break };
            // SAFETY: a page of ours, freed once.
            unsafe { self.fx.free_pages(p.ptr, p.order) };
            n += 1;
        }
        n
    }
    fn warn_alloc(&self, _order: Order, _flags: AllocFlags) {
        self.warned.fetch_add(1, Relaxed);
    }
}

/// Divergence 4: the kernel's `get_page_from_freelist` first tries every
/// allowed zone against its low watermark and only then against min. A
/// Normal zone between min and low is passed over for a DMA32 zone above
/// its low watermark; once both are below low, Normal serves (at min).
#[test]
fn zonelist_tries_low_everywhere_before_min() {
    // Two zones of 128 pages of 64 B; min_free_kbytes 2 = 32 pages: min 16
    // and low 16 + 16/4 = 20 in each.
    let block = 64 << 4;
    let t = Tunables {
        min_free_kbytes: Some(2),
        ..Tunables::KERNEL
    };
    let fx = Fx::build(block, 16, false, |base| {
        two_zone_cfg(64, 4, base + 8 * block, t)
    });
    let (z0, z1) = (ZoneId::new(0), ZoneId::new(1));
    let w = fx.watermarks(z1);
    assert_eq!((w.min, w.low), (16, 20));
    let mut held = Vec::new();
    while fx.nr_free_pages(z1) > 18 {
        held.push(fx.alloc_pages_zone(z1, o(0), AllocFlags::NONE).unwrap());
    }
    // Normal: 18 free, above min (16), below low (20).
    let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(
        fx.zone_of(p.ptr.as_ptr()),
        Some(z0),
        "below low: DMA32 first"
    );
    held.push(p);
    while fx.nr_free_pages(z0) > 19 {
        held.push(fx.alloc_pages_zone(z0, o(0), AllocFlags::NONE).unwrap());
    }
    // Both below low: the min pass, highest zone first.
    let p = fx.alloc_pages(o(0), AllocFlags::NONE).unwrap();
    assert_eq!(
        fx.zone_of(p.ptr.as_ptr()),
        Some(z1),
        "both below low: Normal at min"
    );
    held.push(p);
    assert_eq!(
        fx.stat(Stat::WATERMARK_FAIL),
        0,
        "the low pass counts nothing"
    );
    for p in held {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, p.order) };
    }
    fx.check_invariants();
}

/// A failure is reported (the source's `warn_alloc`, `Stat::WARN_ALLOC`)
/// unless `NOWARN`; both count `Stat::ALLOC_FAIL`.
#[test]
fn nowarn_silences_the_failure_report() {
    let (s, held) = Shrinker::exhausted(2, 0, 1);
    assert!(s.alloc_or_grow(o(0), AllocFlags::NONE).is_none());
    assert_eq!(s.warned.load(Relaxed), 1);
    assert!(s.alloc_or_grow(o(0), AllocFlags::NOWARN).is_none());
    assert_eq!(s.warned.load(Relaxed), 1, "NOWARN: no report");
    assert_eq!(
        (s.fx.stat(Stat::ALLOC_FAIL), s.fx.stat(Stat::WARN_ALLOC)),
        (2, 1)
    );
    s.release(held);
}

/// Reclaim gives one page a call; an order-1 block forms after two calls
/// (two buddies). By default the slow path retries while reclaim makes
/// progress; `NORETRY` stops after one round.
#[test]
fn noretry_runs_reclaim_once() {
    let (s, held) = Shrinker::exhausted(2, 1, 1);
    assert!(s.alloc_or_grow(o(1), AllocFlags::NORETRY).is_none());
    assert_eq!(s.calls.load(Relaxed), 1, "NORETRY: one reclaim round");
    let (s, held) = {
        s.release(held);
        Shrinker::exhausted(2, 1, 1)
    };
    let p = s
        .alloc_or_grow(o(1), AllocFlags::NONE)
        .expect("retried")
        .page;
    assert_eq!(
        s.calls.load(Relaxed),
        2,
        "default: a second round formed the block"
    );
    assert_eq!(
        (s.fx.stat(Stat::RECLAIM), s.fx.stat(Stat::RECLAIMED_PAGES)),
        (2, 2)
    );
    s.cache.lock().unwrap().push(p);
    s.release(held);
}

/// A costly order (above 3) does one round by default; `RETRY_MAYFAIL`
/// retries while reclaim makes progress (16 rounds for an order-4 block
/// at a page a round), and fails once it makes none.
#[test]
fn retry_mayfail_retries_costly_orders_while_progress() {
    let (s, held) = Shrinker::exhausted(2, 1, 1);
    assert!(s.alloc_or_grow(o(4), AllocFlags::NONE).is_none());
    assert_eq!(s.calls.load(Relaxed), 1, "costly order: one round");
    s.release(held);
    let (s, held) = Shrinker::exhausted(2, 1, 1);
    let p = s
        .alloc_or_grow(o(4), AllocFlags::RETRY_MAYFAIL)
        .expect("16 rounds")
        .page;
    assert_eq!(s.calls.load(Relaxed), 16);
    // Nothing left to reclaim: no progress, it fails.
    assert!(s.alloc_or_grow(o(0), AllocFlags::RETRY_MAYFAIL).is_none());
    assert_eq!(
        s.calls.load(Relaxed),
        17,
        "fails after a round without progress"
    );
    s.cache.lock().unwrap().push(p);
    s.release(held);
}

/// Reclaim makes no progress for 40 calls: a default request gives up
/// after the first; `NOFAIL` keeps retrying and gets the page.
#[test]
fn nofail_retries_until_reclaim_succeeds() {
    let (s, held) = Shrinker::exhausted(2, 1, 1);
    s.idle.store(40, Relaxed);
    assert!(s.alloc_or_grow(o(0), AllocFlags::NONE).is_none());
    assert_eq!(s.calls.load(Relaxed), 1);
    let p = s
        .alloc_or_grow(o(0), AllocFlags::NOFAIL)
        .expect("NOFAIL")
        .page;
    assert_eq!(s.calls.load(Relaxed), 41);
    assert_eq!(s.warned.load(Relaxed), 1, "only the first request failed");
    // NOFAIL cannot wait without blocking: with NONBLOCK it may fail.
    assert!(s
        .alloc_or_grow(o(0), AllocFlags::NOFAIL | AllocFlags::NONBLOCK)
        .is_none());
    s.cache.lock().unwrap().push(p);
    s.release(held);
}

/// 64 pages of 64 B with a min watermark of 16: a plain request stops at
/// min; `NONBLOCK` goes a quarter below, not with `NOMEMALLOC`; `NOFAIL`
/// then takes the min reserve (as `HIGH`); `MEMALLOC` goes below every
/// watermark without calling reclaim; `NOMEMALLOC` overrides it.
#[test]
fn nofail_and_memalloc_reach_the_reserves() {
    let t = Tunables {
        min_free_kbytes: Some(1),
        ..Tunables::KERNEL
    };
    let fx = Fx::with(Config::new(64, 4).with_tunables(t), 4, false);
    let s = Shrinker {
        fx,
        cache: Mutex::new(Vec::new()),
        per_call: 1,
        idle: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
        warned: AtomicUsize::new(0),
    };
    let z = ZoneId::new(0);
    let mut held = Vec::new();
    while let Some(b) = s.alloc_or_grow(o(0), AllocFlags::NOWARN) {
        held.push(b.page);
    }
    assert_eq!(s.fx.nr_free_pages(z), 16, "plain stops at min");
    assert_eq!(s.calls.load(Relaxed), 1);
    // NONBLOCK lowers min by a quarter (12), not with NOMEMALLOC.
    let light = AllocFlags::NONBLOCK | AllocFlags::NOMEMALLOC | AllocFlags::NOWARN;
    assert!(s.alloc_or_grow(o(0), light).is_none());
    held.push(s.alloc_or_grow(o(0), AllocFlags::NONBLOCK).unwrap().page);
    assert_eq!(s.calls.load(Relaxed), 1, "NONBLOCK requests never reclaim");
    held.push(
        s.alloc_or_grow(o(0), AllocFlags::NOFAIL)
            .expect("min reserve")
            .page,
    );
    assert_eq!(s.fx.nr_free_pages(z), 14);
    let calls = s.calls.load(Relaxed);
    assert!(s
        .alloc_or_grow(
            o(0),
            AllocFlags::MEMALLOC | AllocFlags::NOMEMALLOC | AllocFlags::NOWARN
        )
        .is_none());
    while let Some(b) = s.alloc_or_grow(o(0), AllocFlags::MEMALLOC | AllocFlags::NOWARN) {
        held.push(b.page);
    }
    assert_eq!(s.fx.nr_free_pages(z), 0, "MEMALLOC: no watermark");
    assert_eq!(
        s.calls.load(Relaxed),
        calls + 1,
        "only the failing NOMEMALLOC one reclaimed"
    );
    assert_eq!(s.fx.stat(Stat::NO_WATERMARKS), 14);
    s.release(held);
}

/// `THISNODE`: only node 0 has memory; from a CPU of node 1 (a node
/// without memory) the request fails instead of falling back to node 0.
#[test]
fn thisnode_does_not_fall_back_to_another_node() {
    static T: Topology = Topology::uniform(2, 1);
    let arena = Arena::new(1 << 20, 64 << 10, true);
    let b = Buddy::new(
        TestPlatform::pinned(2).with_topology(&T),
        Config::new(4096, 4).with_tunables(Tunables::NO_MIN),
    );
    // SAFETY: zeroed memory that outlives `b` (declared first), used by
    // nothing else.
    unsafe { b.add_region(arena.ptr, arena.len(), true) }.unwrap();
    let p = b.platform();
    let on = |cpu: usize, f: AllocFlags| p.on_cpu(cpu, || b.alloc_pages(o(0), f));
    let a = on(0, AllocFlags::THISNODE).expect("node 0: its own memory");
    assert!(
        on(1, AllocFlags::THISNODE).is_none(),
        "node 1 has no memory"
    );
    let c = on(1, AllocFlags::NONE).expect("without THISNODE: node 0's");
    for q in [a, c] {
        // SAFETY: ours.
        unsafe { b.free_pages(q.ptr, q.order) };
    }
}

/// The new flags print by name and survive `bits` / `from_bits_truncate`.
#[test]
fn gfp_flags_debug_and_bits() {
    let f = AllocFlags::NOWARN | AllocFlags::RETRY_MAYFAIL | AllocFlags::THISNODE;
    assert_eq!(
        format!("{f:?}"),
        "AllocFlags(NOWARN | RETRY_MAYFAIL | THISNODE)"
    );
    assert_eq!(AllocFlags::from_bits_truncate(f.bits()), f);
    let g = AllocFlags::ZEROED | AllocFlags::NOFAIL | AllocFlags::MEMALLOC | AllocFlags::NOMEMALLOC;
    assert_eq!(
        g.difference(AllocFlags::ZEROED),
        AllocFlags::NOFAIL | AllocFlags::MEMALLOC | AllocFlags::NOMEMALLOC
    );
    assert_eq!(format!("{:?}", AllocFlags::NORETRY), "AllocFlags(NORETRY)");
}

/// `alloc_block_low` (the low pass a per-CPU layer of an upper zone makes
/// over the lower zones) keeps the `lowmem_reserve` the lower zones owe
/// the request's own highest zone (found by the riscv kernel's zone test:
/// a pcp of Normal took DMA's reserve when the pass was asked as a DMA
/// request).
#[test]
fn low_pass_over_lower_zones_keeps_their_reserve() {
    let fx = reserve_fixture();
    let z0 = ZoneId::new(0);
    assert_eq!(fx.zone_info(z0).lowmem_reserve[1], 8);
    let dma = AllocFlags::NONE.zone_max(z0);
    let mut held = Vec::new();
    while fx.nr_free_pages(z0) > 8 {
        held.push(fx.alloc_pages_zone(z0, o(0), dma).unwrap());
    }
    assert!(
        fx.alloc_block_low(z0, o(0), AllocFlags::NONE).is_none(),
        "a Normal request owes DMA its reserve"
    );
    let b = fx
        .alloc_block_low(z0, o(0), dma)
        .expect("a DMA request does not");
    held.push(b.page);
    for p in held {
        // SAFETY: ours.
        unsafe { fx.free_pages(p.ptr, p.order) };
    }
    fx.check_invariants();
}
