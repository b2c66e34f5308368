//! Lists per zone per CPU ([`ZonePcps`], issue #20) on a simulated
//! two-node topology: a CPU of node 0 allocating node 1's pages caches them
//! on its node-1 zone's lists; frees of remote pages land on the remote
//! zone's lists of the freeing CPU; fallback by distance through the
//! lists; drains per zone; a single-zone [`Pcp`] of node 1 keeps its
//! lists to its own zone. Small pages (256 B), cheap under miri.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::vec::Vec;

use buddy::{AllocFlags, Buddy, Config, FreeFlags, Order, Page, PageAlloc, Tunables, ZoneId};
use local_lock::test_platform::TestPlatform;
use local_lock::topology::Topology;

use crate::{Pcp, Policy, ZonePcps};

const PAGE: usize = 256;
const MAX_ORDER: u8 = 4;
const BLOCK: usize = PAGE << MAX_ORDER;
/// Blocks of memory per node.
const BLOCKS: usize = 4;
const O0: Order = Order::ZERO;

/// Two nodes, two CPUs each (CPUs 0, 1 on node 0; 2, 3 on node 1).
static T2: Topology = Topology::uniform(2, 2);

fn platform() -> TestPlatform {
    TestPlatform::pinned(4).with_topology(&T2)
}

/// `BLOCKS` blocks of heap memory per node, added with
/// `add_region_node` (memmap carved from each region).
struct Nodes {
    b: Buddy<TestPlatform>,
    mem: [(*mut u8, Layout); 2],
}

impl Nodes {
    fn new() -> Nodes {
        let b = Buddy::new(
            platform(),
            Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN),
        );
        let layout = Layout::from_size_align(BLOCKS * BLOCK, BLOCK).unwrap();
        let mem = [0, 1].map(|nid| {
            // SAFETY: non-zero size.
            let p = unsafe { alloc_zeroed(layout) };
            assert!(!p.is_null());
            // SAFETY: zeroed, lives as long as `Nodes` (freed after the
            // buddy is dropped), used by nothing else.
            unsafe { b.add_region_node(nid, p, layout.size(), true) }.unwrap();
            (p, layout)
        });
        Nodes { b, mem }
    }

    fn pcps(&self) -> ZonePcps<&Buddy<TestPlatform>, TestPlatform, 4, 2> {
        // Trylock: real per-CPU locks, so `drain_all` reaches every CPU.
        ZonePcps::new_tuned(&self.b, platform(), Policy::Trylock, Some((4, 16)))
    }

    fn nid(&self, p: &Page) -> usize {
        self.b.page_to_nid(p.ptr.as_ptr()).unwrap()
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for (p, l) in self.mem {
            // SAFETY: allocated in `new` with this layout; the buddy no
            // longer hands anything out (the test is over).
            unsafe { dealloc(p, l) };
        }
    }
}

fn lists(p: &ZonePcps<&Buddy<TestPlatform>, TestPlatform, 4, 2>, z: usize) -> usize {
    p.zone(ZoneId::new(z)).unwrap().local_lists().count
}

#[test]
fn remote_pages_are_cached_on_the_remote_zones_lists() {
    let n = Nodes::new();
    let p = n.pcps();
    let pl = platform();
    // CPU 0 (node 0): local first, then node 1's pages on request.
    let (a, r) = pl.on_cpu(0, || {
        let a = p.alloc(O0, AllocFlags::NONE).unwrap();
        let r = p.alloc_block_node(1, O0, AllocFlags::NONE).unwrap().page;
        (a, r)
    });
    assert_eq!((n.nid(&a), n.nid(&r)), (0, 1));
    pl.on_cpu(0, || {
        assert_eq!((lists(&p, 0), lists(&p, 1)), (3, 3), "one batch each");
    });
    // Freed on CPU 2 (node 1): each to its own zone's lists of CPU 2.
    pl.on_cpu(2, || {
        // SAFETY: ours, each freed once.
        unsafe {
            p.free(a.ptr, a.order, FreeFlags::NONE);
            p.free(r.ptr, r.order, FreeFlags::NONE);
        }
        assert_eq!((lists(&p, 0), lists(&p, 1)), (1, 1));
        let cpu2 = p.zone(ZoneId::new(1)).unwrap().local_lists();
        assert_eq!(cpu2.normal[0].len, 1);
    });
    // Every page accounted for: buddy free + lists = managed.
    assert_eq!(
        n.b.total_free_pages() + p.total_count(),
        n.b.total_managed_pages()
    );
    // Drains per zone: zone 1 only, then everything.
    pl.on_cpu(0, || {
        assert_eq!(p.zone(ZoneId::new(1)).unwrap().drain_local(), 3);
        assert_eq!((lists(&p, 0), lists(&p, 1)), (3, 0));
    });
    let (freed, failed) = p.drain_all();
    assert_eq!((freed, failed), (5, 0));
    assert_eq!(n.b.total_free_pages(), n.b.total_managed_pages());
    n.b.check_invariants();
}

#[test]
fn node_local_through_the_lists_then_by_distance_and_thisnode() {
    let n = Nodes::new();
    let p = n.pcps();
    let pl = platform();
    let per_node = n.b.managed_pages_node(1);
    // CPU 3 (node 1) takes node 1's pages through the lists while node 1
    // passes its watermark (pages on the lists are not free: as the
    // kernel's, the check fails once the zone's free count is 0), then
    // falls back to node 0 (cached on node 0's zone's lists on CPU 3);
    // THISNODE fails then.
    let mut held: Vec<Page> = Vec::new();
    pl.on_cpu(3, || {
        let q = loop {
            let q = p.alloc(O0, AllocFlags::NONE).unwrap();
            if n.nid(&q) != 1 {
                break q;
            }
            held.push(q);
        };
        assert_eq!(n.nid(&q), 0, "node 1 exhausted: node 0");
        assert_eq!(n.b.nr_free_pages_node(1), 0);
        assert_eq!(held.len() + lists(&p, 1), per_node, "node 1's pages first");
        assert_eq!(lists(&p, 0), 3, "cached on node 0's zone's lists");
        assert!(p.alloc(O0, AllocFlags::THISNODE).is_none());
        assert!(PageAlloc::alloc_block_node(&p, 1, O0, AllocFlags::THISNODE).is_none());
        held.push(q);
        for q in held.drain(..) {
            // SAFETY: ours, each freed once.
            unsafe { p.free(q.ptr, q.order, FreeFlags::NONE) };
        }
    });
    assert_eq!(PageAlloc::nr_node_ids(&p), 2);
    assert!(p
        .alloc_block_node(2, O0, AllocFlags::NONE)
        .is_some_and(|b| {
            // SAFETY: ours, freed once (node 2 has no memory: a fallback).
            unsafe { p.free(b.page.ptr, b.page.order, FreeFlags::NONE) };
            true
        }));
    assert!(p.alloc_block_node(99, O0, AllocFlags::NONE).is_none());
    p.drain_all();
    assert_eq!(n.b.total_free_pages(), n.b.total_managed_pages());
    n.b.check_invariants();
}

/// A single-zone `Pcp` of node 1's zone keeps only node 1's pages: node
/// 0's pages freed through it go to the buddy, never on its lists
/// (before lists per node, a page's zone was its address's type only).
#[test]
fn single_zone_pcp_keeps_other_nodes_pages_off_its_lists() {
    let n = Nodes::new();
    let pcp = Pcp::<_, TestPlatform, 4>::new_tuned(
        &n.b,
        ZoneId::new(1),
        platform(),
        Policy::IrqSafe,
        Some((4, 16)),
    );
    let local = n.b.alloc_pages_node(0, O0, AllocFlags::NONE).unwrap();
    let mine = platform().on_cpu(0, || pcp.alloc(O0, AllocFlags::NONE).unwrap());
    assert_eq!((n.nid(&local), n.nid(&mine)), (0, 1));
    assert_eq!(PageAlloc::page_to_nid(&pcp, local.ptr.as_ptr()), 0);
    platform().on_cpu(0, || {
        // SAFETY: ours, each freed once.
        unsafe {
            pcp.free(local.ptr, local.order, FreeFlags::NONE);
            pcp.free(mine.ptr, mine.order, FreeFlags::NONE);
        }
        assert_eq!(pcp.local_lists().count, 4, "only node 1's page joined");
    });
    pcp.drain_all();
    assert_eq!(n.b.total_free_pages(), n.b.total_managed_pages());
    n.b.check_invariants();
}

/// A step of the state machine below.
#[derive(Clone, Debug)]
enum ZOp {
    /// On CPU `cpu`: `alloc_block_node(nid)` (node 2 has no memory, 4 is
    /// out of range), or `alloc` (the CPU's node) when `local`.
    Alloc {
        cpu: usize,
        nid: usize,
        order: u8,
        thisnode: bool,
        local: bool,
    },
    /// On CPU `cpu`, frees held block `idx % len`.
    Free { cpu: usize, idx: usize },
    /// On CPU `cpu`, drains its lists of zone `zone` (or all with 2).
    Drain { cpu: usize, zone: usize },
}

fn zop() -> impl proptest::strategy::Strategy<Value = ZOp> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0usize..4, 0usize..=4, 0u8..=3, any::<bool>(), any::<bool>())
            .prop_map(|(cpu, nid, order, thisnode, local)| ZOp::Alloc { cpu, nid, order, thisnode, local }),
        3 => (0usize..4, any::<usize>()).prop_map(|(cpu, idx)| ZOp::Free { cpu, idx }),
        1 => (0usize..4, 0usize..3).prop_map(|(cpu, zone)| ZOp::Drain { cpu, zone }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 48 },
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Random node requests, frees and drains from four CPUs of two
    /// nodes through the lists of every zone: every block handed out for
    /// a node with THISNODE is that node's; after every step each CPU's
    /// lists of zone `z` hold only zone `z`'s pages (the checker), and
    /// buddy free + lists + held = managed; at the end everything merges
    /// back.
    #[test]
    fn zone_lists_hold_only_their_zones_pages(
        ops in proptest::collection::vec(zop(), 1..if cfg!(miri) { 10 } else { 60 }),
    ) {
        let n = Nodes::new();
        let mut p = n.pcps();
        let pl = platform();
        let managed = n.b.total_managed_pages();
        let mut held: Vec<Page> = Vec::new();
        for op in &ops {
            match *op {
                ZOp::Alloc { cpu, nid, order, thisnode, local } => {
                    let f = if thisnode { AllocFlags::THISNODE } else { AllocFlags::NONE };
                    let o = Order::new(order).unwrap();
                    let b = pl.on_cpu(cpu, || {
                        if local {
                            p.alloc(o, f)
                        } else {
                            p.alloc_block_node(nid, o, f).map(|b| b.page)
                        }
                    });
                    let want = if local { cpu / 2 } else { nid };
                    if let Some(b) = b {
                        proptest::prop_assert!(want < 4);
                        if thisnode {
                            proptest::prop_assert_eq!(n.nid(&b), want);
                        }
                        held.push(b);
                    }
                }
                ZOp::Free { cpu, idx } => {
                    if !held.is_empty() {
                        let b = held.swap_remove(idx % held.len());
                        // SAFETY: ours, freed once.
                        pl.on_cpu(cpu, || unsafe { p.free(b.ptr, b.order, FreeFlags::NONE) });
                    }
                }
                ZOp::Drain { cpu, zone } => {
                    pl.on_cpu(cpu, || match p.zone(ZoneId::new(zone)) {
                        Some(z) => z.drain_local(),
                        None => p.drain_local(),
                    });
                }
            }
            let live: usize = held.iter().map(|b| b.order.pages()).sum();
            proptest::prop_assert_eq!(n.b.total_free_pages() + p.total_count() + live, managed);
            p.check_all();
        }
        for b in held.drain(..) {
            // SAFETY: ours, freed once.
            unsafe { p.free(b.ptr, b.order, FreeFlags::NONE) };
        }
        p.drain_all();
        proptest::prop_assert_eq!(n.b.total_free_pages(), managed);
        n.b.check_invariants();
    }
}

/// One region across two zone types (one span, whose pages are not all of
/// one zone: the free fast path's zone compare cannot answer): frees reach
/// the lists of the zone their page is in, a page of the other zone goes
/// back to the buddy, and a double free is still refused.
#[test]
fn a_span_across_zone_types_frees_to_its_zones_lists() {
    let layout = Layout::from_size_align(BLOCKS * BLOCK, BLOCK).unwrap();
    // SAFETY: non-zero size.
    let mem = unsafe { alloc_zeroed(layout) };
    assert!(!mem.is_null());
    let mid = mem as usize + 2 * BLOCK;
    let zones = [
        buddy::ZoneSpec {
            name: "Low",
            end: mid,
        },
        buddy::ZoneSpec {
            name: "High",
            end: usize::MAX,
        },
    ];
    {
        let b = Buddy::new(
            platform(),
            Config::new(PAGE, MAX_ORDER)
                .with_zones(&zones)
                .with_tunables(Tunables::NO_MIN),
        );
        // SAFETY: zeroed, outlives `b` (freed below), used by nothing else.
        unsafe { b.add_region(mem, layout.size(), true) }.unwrap();
        let (lo, hi) = (ZoneId::new(0), ZoneId::new(1));
        let pcp: Pcp<_, _, 4> = Pcp::new_tuned(&b, hi, platform(), Policy::IrqSafe, Some((4, 16)));
        let pages: Vec<Page> = (0..6)
            .map(|_| pcp.alloc(O0, AllocFlags::NONE).unwrap())
            .collect();
        assert!(pages.iter().all(|p| p.ptr.as_ptr() as usize >= mid));
        let before = pcp.local_lists().count;
        for p in &pages {
            // SAFETY: ours, freed once.
            unsafe { pcp.free(p.ptr, p.order, FreeFlags::NONE) };
        }
        assert_eq!(pcp.local_lists().count, before + 6, "back on the lists");
        // SAFETY: on the lists now: refused, nothing changes.
        let e = unsafe { pcp.try_free(pages[0].ptr, O0, FreeFlags::NONE) }.unwrap_err();
        assert_eq!(e.kind, crate::BadFreeKind::OnPcpList);
        // A page of the lower zone, freed through these lists: the buddy's.
        let low = b
            .alloc_pages(O0, AllocFlags::NONE.zone_max(lo))
            .expect("a low page");
        assert!((low.ptr.as_ptr() as usize) < mid);
        let free_lo = b.nr_free_pages(lo);
        // SAFETY: ours, freed once.
        unsafe { pcp.free(low.ptr, low.order, FreeFlags::NONE) };
        assert_eq!(b.nr_free_pages(lo), free_lo + 1);
        assert_eq!(pcp.local_lists().count, before + 6);
        // The lower zone's lists refuse a page of the upper zone (the span
        // starts in the lower zone: its first page's zone is not every
        // page's).
        let lo_pcp: Pcp<_, _, 4> =
            Pcp::new_tuned(&b, lo, platform(), Policy::IrqSafe, Some((4, 16)));
        let high = b.alloc_pages(O0, AllocFlags::NONE).expect("a high page");
        assert!((high.ptr.as_ptr() as usize) >= mid);
        let free_hi = b.nr_free_pages(hi);
        // SAFETY: ours, freed once.
        unsafe { lo_pcp.free(high.ptr, high.order, FreeFlags::NONE) };
        assert_eq!(b.nr_free_pages(hi), free_hi + 1, "to the buddy");
        assert_eq!(lo_pcp.local_lists().count, 0);
        pcp.check_local();
        pcp.drain_local();
        assert_eq!(b.total_free_pages(), b.total_managed_pages());
    }
    // SAFETY: allocated above with this layout; the buddy is gone.
    unsafe { dealloc(mem, layout) };
}
