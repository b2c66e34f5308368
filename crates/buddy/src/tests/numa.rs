//! NUMA nodes (`pglist_data`) on a simulated topology
//! (`TestPlatform::with_topology`): node-local allocation, fallback by
//! distance, `THISNODE`, frees to the page's own node, per-node counters
//! and buddyinfo lines, bad node ids. Small pages (64 B), so cheap under
//! miri.

use std::string::ToString;
use std::vec;
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;
use local_lock::topology::Topology;

use super::wmark::two_zone_cfg;
use super::{o, Arena};
use crate::{
    AllocFlags, Buddy, Config, Page, PageAlloc, RegionError, Stat, Tunables, ZoneId, MAX_NUMNODES,
};

const PAGE: usize = 64;
const MAX_ORDER: u8 = 4;
const BLOCK: usize = PAGE << MAX_ORDER;

/// Three nodes, one CPU each, asymmetric distances: 0-1 20, 0-2 30, 1-2
/// 15. By distance, node 0: 0 1 2; node 1: 1 2 0; node 2: 2 1 0.
static T3: Topology = Topology::uniform(3, 1)
    .with_distance(0, 1, 20)
    .with_distance(0, 2, 30)
    .with_distance(1, 2, 15);

/// A buddy whose arena holds `pieces` largest blocks, piece `i` a span
/// of node `node_of(i)` (memmaps placed apart), all added.
struct NumaFx {
    b: Buddy<TestPlatform>,
    arena: Arena,
    _mm: Vec<Arena>,
}

impl NumaFx {
    fn new(cfg: impl FnOnce(usize) -> Config, pieces: &[usize]) -> NumaFx {
        let arena = Arena::new(pieces.len() * BLOCK, BLOCK, true);
        let b = Buddy::new(
            TestPlatform::pinned(3).with_topology(&T3),
            cfg(arena.addr()),
        );
        let mut mm = Vec::new();
        for (i, &nid) in pieces.iter().enumerate() {
            let m = Arena::new(
                b.memmap_bytes(BLOCK),
                Buddy::<TestPlatform>::MEMMAP_ALIGN,
                false,
            );
            // SAFETY: the arena and the memmaps live as long as the
            // fixture; each piece is added once.
            unsafe {
                b.add_span_node(nid, arena.at(i * BLOCK), BLOCK, m.ptr, false)
                    .unwrap();
                assert_eq!(
                    b.add_region_node(nid, arena.at(i * BLOCK), BLOCK, true),
                    Ok(BLOCK / PAGE)
                );
            }
            mm.push(m);
        }
        b.check_invariants();
        NumaFx { b, arena, _mm: mm }
    }

    /// One zone, one block per node.
    fn three() -> NumaFx {
        NumaFx::new(
            |_| Config::new(PAGE, MAX_ORDER).with_tunables(Tunables::NO_MIN),
            &[0, 1, 2],
        )
    }

    /// `f` on a CPU of node `cpu` (one CPU per node).
    fn on<R>(&self, cpu: usize, f: impl FnOnce() -> R) -> R {
        self.b.platform().on_cpu(cpu, f)
    }

    fn nid(&self, p: &Page) -> usize {
        self.b.page_to_nid(p.ptr.as_ptr()).unwrap()
    }

    /// Takes every page of node `nid` (THISNODE order 0).
    fn drain_node(&self, nid: usize) -> Vec<Page> {
        let mut v = Vec::new();
        while let Some(p) = self.b.alloc_pages_node(nid, o(0), AllocFlags::THISNODE) {
            assert_eq!(self.nid(&p), nid);
            v.push(p);
        }
        assert_eq!(self.b.nr_free_pages_node(nid), 0);
        v
    }

    fn free(&self, v: Vec<Page>) {
        for p in v {
            // SAFETY: ours, freed once.
            unsafe { self.b.free_pages(p.ptr, p.order) };
        }
        self.b.check_invariants();
    }
}

#[test]
fn zonelists_follow_distance() {
    let fx = NumaFx::three();
    assert_eq!(fx.b.nr_node_ids(), 3);
    let order = |n| fx.b.node_order(n, false).collect::<Vec<_>>();
    assert_eq!(order(0), [0, 1, 2]);
    assert_eq!(order(1), [1, 2, 0]);
    assert_eq!(order(2), [2, 1, 0]);
    // A node without memory still has a zonelist (by its distances).
    assert_eq!(order(3), [0, 1, 2]);
    assert_eq!(fx.b.node_order(1, true).collect::<Vec<_>>(), [1]);
    assert_eq!(fx.b.node_order(3, true).count(), 0);
    assert_eq!(fx.b.node_order(99, false).count(), 0);
    let zl = fx.on(2, || fx.b.zonelist(AllocFlags::NONE).collect::<Vec<_>>());
    assert_eq!(zl, [ZoneId::new(2), ZoneId::new(1), ZoneId::new(0)]);
}

#[test]
fn node_local_while_it_has_memory_then_nearest() {
    let fx = NumaFx::three();
    let per_node = BLOCK / PAGE;
    for cpu in 0..3 {
        let v: Vec<Page> = (0..per_node)
            .map(|_| {
                fx.on(cpu, || fx.b.alloc_pages(o(0), AllocFlags::NONE))
                    .unwrap()
            })
            .collect();
        assert!(v.iter().all(|p| fx.nid(p) == cpu), "cpu {cpu}: local first");
        fx.free(v);
    }
    // Node 2's CPU with node 2 exhausted: node 1 (15) before node 0 (30).
    let held = fx.drain_node(2);
    let p = fx
        .on(2, || fx.b.alloc_pages(o(0), AllocFlags::NONE))
        .unwrap();
    assert_eq!(fx.nid(&p), 1);
    let held1 = fx.drain_node(1);
    let q = fx
        .on(2, || fx.b.alloc_pages(o(0), AllocFlags::NONE))
        .unwrap();
    assert_eq!(fx.nid(&q), 0);
    // Node 1's CPU with node 1 exhausted and node 2 refilled: node 2 (15)
    // before node 0 (20).
    fx.free(held);
    let r = fx
        .on(1, || fx.b.alloc_pages(o(0), AllocFlags::NONE))
        .unwrap();
    assert_eq!(fx.nid(&r), 2, "node 1 exhausted: node 2 (15) before 0 (20)");
    fx.free(vec_of(&[p, q, r]));
    fx.free(held1);
    assert_eq!(fx.b.total_free_pages(), 3 * per_node);
}

fn vec_of(p: &[Page]) -> Vec<Page> {
    p.to_vec()
}

#[test]
fn fallback_order_from_node_zero() {
    let fx = NumaFx::three();
    let h0 = fx.drain_node(0);
    let a = fx.b.alloc_pages_node(0, o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.nid(&a), 1, "node 0 exhausted: node 1 (20) before 2 (30)");
    let h1 = fx.drain_node(1);
    let b = fx.b.alloc_pages_node(0, o(0), AllocFlags::NONE).unwrap();
    assert_eq!(fx.nid(&b), 2);
    fx.free(vec_of(&[a, b]));
    fx.free(h0);
    fx.free(h1);
}

#[test]
fn thisnode_fails_instead_of_falling_back() {
    let fx = NumaFx::three();
    let held = fx.drain_node(1);
    assert!(fx
        .b
        .alloc_pages_node(1, o(0), AllocFlags::THISNODE)
        .is_none());
    assert!(fx
        .on(1, || fx.b.alloc_pages(o(0), AllocFlags::THISNODE))
        .is_none());
    let p = fx
        .on(1, || fx.b.alloc_pages(o(0), AllocFlags::NONE))
        .unwrap();
    assert_eq!(fx.nid(&p), 2, "without THISNODE: the nearest node");
    // Through the page-source contract (slow path included): same.
    assert!(PageAlloc::alloc_block_node(&fx.b, 1, o(0), AllocFlags::THISNODE).is_none());
    let q = PageAlloc::alloc_block_node(&fx.b, 1, o(0), AllocFlags::NONE).unwrap();
    assert_eq!(PageAlloc::page_to_nid(&fx.b, q.page.ptr.as_ptr()), 2);
    fx.free(vec_of(&[p, q.page]));
    fx.free(held);
}

#[test]
fn frees_go_to_the_pages_node_and_counters_add_up() {
    let fx = NumaFx::three();
    let per_node = BLOCK / PAGE;
    // From node 0's CPU, two node-1 blocks and one local one.
    let v: Vec<Page> = [1, 1, 0]
        .iter()
        .map(|&n| {
            fx.on(0, || fx.b.alloc_pages_node(n, o(1), AllocFlags::NONE))
                .unwrap()
        })
        .collect();
    assert_eq!(fx.b.nr_free_pages_node(1), per_node - 4);
    assert_eq!(fx.b.nr_free_pages_node(0), per_node - 2);
    let sum = |f: &dyn Fn(usize) -> usize| (0..MAX_NUMNODES).map(f).sum::<usize>();
    assert_eq!(
        sum(&|n| fx.b.nr_free_pages_node(n)),
        fx.b.total_free_pages()
    );
    assert_eq!(
        sum(&|n| fx.b.managed_pages_node(n)),
        fx.b.total_managed_pages()
    );
    assert_eq!(fx.b.managed_pages_node(2), per_node);
    assert_eq!(
        (0..3)
            .map(|n| fx.b.stat_node(n, Stat::ZONE_FAIL))
            .sum::<u64>(),
        fx.b.stat(Stat::ZONE_FAIL)
    );
    #[cfg(feature = "stats")]
    assert_eq!(
        (
            fx.b.stat_node(0, Stat::ALLOC),
            fx.b.stat_node(1, Stat::ALLOC)
        ),
        (1, 2)
    );
    // Freed from node 2's CPU: back to node 1's zone and node 0's.
    fx.on(2, || fx.free(v));
    for n in 0..3 {
        assert_eq!(fx.b.nr_free_pages_node(n), per_node);
        assert_eq!(fx.b.free_blocks(ZoneId::new(n), o(MAX_ORDER)), 1, "merged");
    }
}

#[test]
fn buddyinfo_has_a_line_per_node_zone() {
    let fx = NumaFx::three();
    let p = fx.b.alloc_pages_node(1, o(0), AllocFlags::NONE).unwrap();
    let s = fx.b.to_string();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{s}");
    assert!(lines[0].starts_with("Node 0, zone   Normal"), "{s}");
    assert!(
        lines[1].starts_with("Node 1, zone   Normal      1      1      1      1      0"),
        "{s}"
    );
    assert!(
        lines[2].starts_with("Node 2, zone   Normal      0      0      0      0      1"),
        "{s}"
    );
    let zi = fx.b.zoneinfo().to_string();
    assert!(zi.contains("Node 2, zone   Normal"), "{zi}");
    fx.free(vec_of(&[p]));
}

#[test]
fn bad_node_ids_are_refused_not_panics() {
    let fx = NumaFx::three();
    for nid in [3, MAX_NUMNODES, 99, usize::MAX] {
        assert!(fx
            .b
            .alloc_pages_node(nid, o(0), AllocFlags::THISNODE)
            .is_none());
        assert_eq!(fx.b.nr_free_pages_node(nid), 0);
        assert!(fx.b.zone_id(nid, ZoneId::new(0)).is_none() || nid < MAX_NUMNODES);
    }
    // Node 3 has no memory: it falls back; THISNODE fails.
    assert!(fx
        .b
        .alloc_pages_node(3, o(0), AllocFlags::NONE)
        .is_some_and(|p| {
            fx.free(vec_of(&[p]));
            true
        }));
    for nid in [MAX_NUMNODES, usize::MAX] {
        assert!(fx.b.alloc_pages_node(nid, o(0), AllocFlags::NONE).is_none());
        let nofail = AllocFlags::NOFAIL | AllocFlags::NOWARN;
        assert!(PageAlloc::alloc_block_node(&fx.b, nid, o(0), nofail).is_none());
    }
    let extra = Arena::new(BLOCK, BLOCK, true);
    // SAFETY: refused, nothing is added.
    let r = unsafe { fx.b.add_region_node(MAX_NUMNODES, extra.ptr, BLOCK, true) };
    assert_eq!(r, Err(RegionError::BadNode));
    // SAFETY: refused (a node-1 span, or added before): nothing is added.
    let r = unsafe { fx.b.add_region_node(0, fx.arena.at(BLOCK), PAGE, true) };
    assert_eq!(r, Err(RegionError::BadNode));
    // SAFETY: refused.
    let r = unsafe {
        fx.b.add_span_node(MAX_NUMNODES, extra.ptr, BLOCK, extra.ptr, true)
    };
    assert_eq!(r, Err(RegionError::BadNode));
    fx.b.check_invariants();
}

/// Two zone types on two nodes (node 0 and node 1 alternate pieces
/// across the DMA32/Normal boundary): each node has both zones, the
/// zonelist takes node 0's Normal, DMA32, then node 1's; `zone_max`
/// applies on every node.
#[test]
fn zones_per_node_and_zone_max() {
    let fx = NumaFx::new(
        |base| two_zone_cfg(PAGE, MAX_ORDER, base + 2 * BLOCK, Tunables::NO_MIN),
        &[0, 1, 0, 1],
    );
    let b = &fx.b;
    let z = |n: usize| ZoneId::new(n);
    assert_eq!(b.zone_id(1, z(0)), Some(z(2)));
    assert_eq!((b.zone_node(z(3)), b.zone_type(z(3))), (1, z(1)));
    for zone in 0..4 {
        assert_eq!(b.managed_pages(z(zone)), BLOCK / PAGE);
    }
    assert_eq!(b.zone_of(fx.arena.at(3 * BLOCK)), Some(z(3)));
    let zl = fx.on(0, || b.zonelist(AllocFlags::NONE).collect::<Vec<_>>());
    assert_eq!(zl, [z(1), z(0), z(3), z(2)]);
    let dma = AllocFlags::NONE.zone_max(z(0));
    let zl = fx.on(1, || b.zonelist(dma).collect::<Vec<_>>());
    assert_eq!(zl, [z(2), z(0)]);
    // Node 1's DMA32 zone serves a DMA request from node 1's CPU.
    let p = fx.on(1, || b.alloc_pages(o(0), dma)).unwrap();
    assert_eq!(b.zone_of(p.ptr.as_ptr()), Some(z(2)));
    let s = b.to_string();
    assert_eq!(s.lines().count(), 4, "{s}");
    assert!(
        s.lines()
            .nth(2)
            .unwrap()
            .starts_with("Node 1, zone    DMA32"),
        "{s}"
    );
    fx.free(vec_of(&[p]));
}

/// A node-allocation step of the state machine below.
#[derive(Clone, Debug)]
enum NodeOp {
    /// `alloc_pages_node(nid)` (`nid` up to 4: node 3 has no memory, 4 is
    /// out of range), or `alloc_pages` from CPU `nid` when `local`.
    Alloc {
        nid: usize,
        order: u8,
        thisnode: bool,
        local: bool,
    },
    /// Frees held block `idx % len` from CPU `cpu`.
    Free { idx: usize, cpu: usize },
}

fn node_op() -> impl proptest::strategy::Strategy<Value = NodeOp> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0usize..=4, 0u8..=MAX_ORDER, any::<bool>(), any::<bool>())
            .prop_map(|(nid, order, thisnode, local)| NodeOp::Alloc { nid, order, thisnode, local }),
        2 => (any::<usize>(), 0usize..3).prop_map(|(idx, cpu)| NodeOp::Free { idx, cpu }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Random node requests and frees on three nodes: each allocation comes
    /// from the first node of the request's zonelist (by distance; its own
    /// only with THISNODE) that has a free block of the order (no
    /// watermarks here), or fails when none has; frees go back to the
    /// page's node wherever they run; per-node counters add up and the
    /// invariants hold after every step; everything merges back.
    #[test]
    fn node_requests_follow_the_zonelist(
        ops in proptest::collection::vec(node_op(), 1..if cfg!(miri) { 10 } else { 80 }),
    ) {
        let fx = NumaFx::three();
        let b = &fx.b;
        let has_block = |n: usize, o: u8| {
            (o..=MAX_ORDER).any(|k| b.free_blocks(ZoneId::new(n), crate::Order::new(k).unwrap()) > 0)
        };
        let mut held: Vec<Page> = Vec::new();
        for op in &ops {
            match *op {
                NodeOp::Alloc { nid, order, thisnode, local } => {
                    let flags = if thisnode { AllocFlags::THISNODE } else { AllocFlags::NONE };
                    let (nid, local) = if local { (nid % 3, true) } else { (nid, false) };
                    // The zonelist from the topology itself (nodes 0-2 have
                    // memory), not from the buddy's tables.
                    let mut zl: Vec<usize> = match (thisnode, nid < 3) {
                        _ if nid >= MAX_NUMNODES => Vec::new(),
                        (true, true) => vec![nid],
                        (true, false) => Vec::new(),
                        (false, _) => (0..3).collect(),
                    };
                    zl.sort_by_key(|&n| (T3.node_distance(nid, n), n));
                    let expect = zl.into_iter().find(|&n| has_block(n, order));
                    let p = if local {
                        fx.on(nid, || b.alloc_pages(o(order), flags))
                    } else {
                        b.alloc_pages_node(nid, o(order), flags)
                    };
                    proptest::prop_assert_eq!(p.map(|p| fx.nid(&p)), expect);
                    held.extend(p);
                }
                NodeOp::Free { idx, cpu } => {
                    if held.is_empty() {
                        continue;
                    }
                    let p = held.swap_remove(idx % held.len());
                    let (n, before) = (fx.nid(&p), b.nr_free_pages_node(fx.nid(&p)));
                    // SAFETY: ours, freed once.
                    fx.on(cpu, || unsafe { b.free_pages(p.ptr, p.order) });
                    proptest::prop_assert_eq!(b.nr_free_pages_node(n), before + p.order.pages());
                }
            }
            let per_node: usize = (0..MAX_NUMNODES).map(|n| b.nr_free_pages_node(n)).sum();
            proptest::prop_assert_eq!(per_node, b.total_free_pages());
            b.check_invariants();
        }
        fx.free(held);
        for n in 0..3 {
            proptest::prop_assert_eq!(b.nr_free_pages_node(n), BLOCK / PAGE);
        }
    }
}
