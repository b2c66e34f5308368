//! NUMA nodes through slub (issue #20) on a simulated machine: three
//! nodes, each a buddy over its own memory, CPU `c` on node `c`, distances
//! 0-1: 20, 1-2: 15, 0-2: 30 (so node 2's nearest is 1, node 0's is 1).
//! `kmem_cache_alloc_node` / `kmalloc_node` from the requested node while
//! it has memory, fallback by distance, `THISNODE`, `node_match`, remote
//! frees onto the slab's node, per-node counters, `get_any_partial`, and
//! the sheaves' node rule (remote objects bypass them, one barn per node,
//! a node request skips a sheaf object of another node).
#![cfg(not(loom))]

use std::alloc::Layout;
use std::ptr::NonNull;

use buddy::{AllocFlags, Block, BlockRef, Buddy, Config, Order, PageAlloc, Tunables};
use local_lock::test_platform::TestPlatform;
use local_lock::topology::Topology;
use local_lock::Platform;
use slub::{CacheError, Geometry, Kmalloc, KmemCache, SlabFlags, SlubStat, NUMA_NO_NODE};

const PAGE: usize = 4096;

static TOPO: Topology = Topology::uniform(3, 1)
    .with_distance(0, 1, 20)
    .with_distance(1, 2, 15)
    .with_distance(0, 2, 30);

/// A page allocator of three nodes: one buddy per node over its own
/// memory; `page_to_nid` by address range; `alloc_block_node` from the
/// node, then the others by distance unless `THISNODE`.
struct Nodes {
    buddies: Vec<Buddy<TestPlatform>>,
    ranges: Vec<(usize, usize)>,
    /// Nodes reported (more than the buddies: the create check).
    claimed: usize,
}

impl Nodes {
    /// Node `i` gets `pages[i]` pages (leaked memory: the buddies outlive
    /// every test's caches).
    fn new(pages: &[usize]) -> &'static Nodes {
        let mut buddies = Vec::new();
        let mut ranges = Vec::new();
        for &n in pages {
            let layout = Layout::from_size_align(n * PAGE, PAGE << 4).unwrap();
            // SAFETY: non-zero size.
            let mem = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!mem.is_null());
            let b = Buddy::new(
                TestPlatform::pinned(3),
                Config::new(PAGE, 4).with_tunables(Tunables::NO_MIN),
            );
            // SAFETY: zeroed memory, leaked, used by nothing else.
            unsafe { b.add_region(mem, n * PAGE, true) }.unwrap();
            ranges.push((mem as usize, mem as usize + n * PAGE));
            buddies.push(b);
        }
        let claimed = pages.len();
        Box::leak(Box::new(Nodes {
            buddies,
            ranges,
            claimed,
        }))
    }
    fn free_pages(&self, nid: usize) -> usize {
        self.buddies[nid].total_free_pages()
    }
}

// SAFETY: every block comes from one of the buddies, with its owner words;
// `block_of` asks the buddy whose range holds the address.
unsafe impl PageAlloc for Nodes {
    fn page_size(&self) -> usize {
        PAGE
    }
    fn max_order(&self) -> Order {
        Order::new(4).unwrap()
    }
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_block_node(0, order, flags)
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        let nid = self.page_to_nid(ptr.as_ptr());
        // SAFETY: forwarded to the buddy the block came from.
        unsafe { self.buddies[nid].free_pages(ptr, order) }
    }
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        let a = addr as usize;
        let i = self.ranges.iter().position(|&(lo, hi)| lo <= a && a < hi)?;
        self.buddies[i].owner_of(addr)
    }
    fn nr_node_ids(&self) -> usize {
        self.claimed
    }
    fn page_to_nid(&self, addr: *const u8) -> usize {
        let a = addr as usize;
        self.ranges
            .iter()
            .position(|&(lo, hi)| lo <= a && a < hi)
            .unwrap_or(0)
    }
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        if flags.contains(AllocFlags::THISNODE) {
            return self.buddies[nid].alloc_block(order, flags);
        }
        let (order_by, n) = TOPO.nodes_by_distance(nid);
        order_by[..n]
            .iter()
            .find_map(|&i| self.buddies[i as usize].alloc_block(order, flags))
    }
}

type Cache = KmemCache<&'static Nodes, TestPlatform, 4>;

fn cache(src: &'static Nodes, flags: SlabFlags) -> (TestPlatform, Cache) {
    let p = TestPlatform::pinned(3).with_topology(&TOPO);
    let c = KmemCache::create("numa", 256, 8, flags, src, p).unwrap();
    (p, c)
}

/// Flushes every CPU from the CPU itself (a pinned test platform does
/// not reach other CPUs' slots), then destroys: nothing may be left.
fn finish(p: &TestPlatform, c: Cache) {
    for cpu in 0..3 {
        p.set_cpu(cpu);
        c.flush_local();
    }
    p.set_cpu(0);
    check_counts(&c);
    c.destroy().unwrap();
    assert_eq!(c.nr_slabs(), 0);
}

fn nid(src: &Nodes, o: NonNull<u8>) -> usize {
    src.page_to_nid(o.as_ptr())
}

/// Every node's slabs add up to the cache's, and each list holds only
/// slabs of its node (`validate` checks the node in every tag).
fn check_counts(c: &Cache) {
    c.validate();
    let slabs: usize = (0..3).map(|n| c.node_nr_slabs(n)).sum();
    assert_eq!(slabs, c.nr_slabs());
    assert_eq!(c.slabinfo().num_slabs, slabs);
    let objs: usize = (0..3).map(|n| c.node_total_objects(n)).sum();
    assert_eq!(c.slabinfo().num_objs, objs);
}

#[test]
fn alloc_node_is_served_from_the_requested_node() {
    let src = Nodes::new(&[64, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    assert_eq!(c.nr_nodes(), 3);
    let mut held = Vec::new();
    for node in [2, 0, 1, 2] {
        for _ in 0..40 {
            let o = c.alloc_node(node, AllocFlags::NONE).unwrap();
            assert_eq!(nid(src, o), node);
            held.push(o);
        }
    }
    // Plain allocation: the node of the CPU (`numa_node_id`).
    p.set_cpu(1);
    let o = c.alloc().unwrap();
    assert_eq!(nid(src, o), 1);
    held.push(o);
    p.set_cpu(0);
    assert!(c.node_nr_slabs(0) >= 1 && c.node_nr_slabs(1) >= 1 && c.node_nr_slabs(2) >= 2);
    check_counts(&c);
    for o in held {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}

#[test]
fn node_match_deactivates_a_cpu_slab_of_another_node() {
    let src = Nodes::new(&[64, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let a = c.alloc_node(0, AllocFlags::NONE).unwrap();
    assert_eq!(c.stats().get(SlubStat::ALLOC_NODE_MISMATCH), 0);
    // The CPU slab is of node 0: a request for node 1 gives it back.
    let b = c.alloc_node(1, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, b), 1);
    assert_eq!(c.stats().get(SlubStat::ALLOC_NODE_MISMATCH), 1);
    assert_eq!(c.node_nr_partial(0), 1, "node 0's slab is on node 0's list");
    assert_eq!(c.node_nr_partial(1), 0, "node 1's slab is the CPU slab");
    // Node 1 again: the CPU slab's freelist (the fast path).
    let fast = c.stats().get(SlubStat::ALLOC_FASTPATH);
    let b2 = c.alloc_node(1, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, b2), 1);
    assert_eq!(c.stats().get(SlubStat::ALLOC_FASTPATH), fast + 1);
    // SAFETY: ours, freed once.
    unsafe { c.free(b2) };
    // Any node: the CPU slab (node 1) serves, no mismatch.
    let d = c.alloc_node(NUMA_NO_NODE, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, d), 1);
    assert_eq!(c.stats().get(SlubStat::ALLOC_NODE_MISMATCH), 1);
    // Node 0 again: its partial slab comes back from node 0's list.
    let e = c.alloc_node(0, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, e), 0);
    assert_eq!(c.stats().get(SlubStat::ALLOC_NODE_MISMATCH), 2);
    assert!(c.stats().get(SlubStat::ALLOC_FROM_PARTIAL) >= 1);
    check_counts(&c);
    for o in [a, b, d, e] {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}

#[test]
fn an_exhausted_node_falls_back_by_distance_unless_thisnode() {
    // Node 2 holds two pages: one order-0 slab of 16 objects at most.
    let src = Nodes::new(&[64, 64, 2]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let per_slab = c.layout().oo.objects as usize;
    let mut on2 = Vec::new();
    while src.free_pages(2) >= 1 << c.layout().oo.order || on2.len() % per_slab != 0 {
        let o = c.alloc_node(2, AllocFlags::THISNODE).unwrap();
        assert_eq!(nid(src, o), 2);
        on2.push(o);
    }
    // THISNODE: node 2 is full, no other node's memory.
    assert!(c
        .alloc_node(2, AllocFlags::THISNODE | AllocFlags::NOWARN)
        .is_none());
    // Without it: the nearest node to 2 is node 1 (15), not node 0 (30).
    let o = c.alloc_node(2, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, o), 1, "fallback to the nearest node");
    assert_eq!(c.node_nr_slabs(0), 0);
    check_counts(&c);
    // SAFETY: ours, freed once.
    unsafe { c.free(o) };
    // NOFAIL: the node-only first try is `GFP_NOWAIT | __GFP_THISNODE`
    // (the request's retry flags dropped), so it fails at once on the
    // exhausted node and the second try falls back (with NOFAIL kept,
    // the first try would retry node 2 forever).
    c.flush_local();
    let o = c.alloc_node(2, AllocFlags::NOFAIL).unwrap();
    assert_eq!(nid(src, o), 1, "NOFAIL falls back too");
    // SAFETY: ours, freed once.
    unsafe { c.free(o) };
    for o in on2 {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}

#[test]
fn remote_frees_go_to_the_slabs_node() {
    let src = Nodes::new(&[64, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let per_slab = c.layout().oo.objects as usize;
    // CPU 1 (node 1) fills three slabs.
    p.set_cpu(1);
    let objs: Vec<_> = (0..3 * per_slab).map(|_| c.alloc().unwrap()).collect();
    assert!(objs.iter().all(|&o| nid(src, o) == 1));
    c.flush_local();
    // CPU 0 (node 0) frees one object of each: remote-node frees.
    p.set_cpu(0);
    let mut rest = Vec::new();
    for (i, o) in objs.into_iter().enumerate() {
        if i % per_slab == 0 {
            // SAFETY: ours, freed once.
            unsafe { c.free(o) };
        } else {
            rest.push(o);
        }
    }
    // The full slabs went onto CPU 0's partial list (frozen); its flush
    // unfreezes them onto node 1's list, never node 0's.
    c.flush_local();
    assert_eq!(c.node_nr_partial(1), 3);
    assert_eq!(c.node_nr_partial(0), 0);
    assert_eq!(c.node_nr_slabs(0), 0);
    check_counts(&c);
    for o in rest {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}

#[test]
fn get_any_partial_takes_remote_partials_by_the_defrag_ratio() {
    let src = Nodes::new(&[128, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let per_slab = c.layout().oo.objects as usize;
    let min_partial = c.layout().min_partial;
    // Node 0 gets more partial slabs than min_partial.
    let objs: Vec<_> = (0..(min_partial + 3) * per_slab)
        .map(|_| c.alloc().unwrap())
        .collect();
    for (i, o) in objs.iter().enumerate() {
        if i % per_slab == 0 {
            // SAFETY: ours, freed once.
            unsafe { c.free(*o) };
        }
    }
    c.flush_all();
    let partial0 = c.node_nr_partial(0);
    assert!(partial0 > min_partial, "{partial0} partial slabs on node 0");
    // Ratio 0: node 1's CPU takes a new slab of node 1.
    assert!(c.set_remote_node_defrag_ratio(0));
    assert!(!c.set_remote_node_defrag_ratio(101));
    p.set_cpu(1);
    let a = c.alloc().unwrap();
    assert_eq!(nid(src, a), 1);
    assert_eq!(c.node_nr_partial(0), partial0);
    // Ratio 100 (1000/1024): once node 1's slab is full, node 1 has no
    // partial slab and node 0 more than min_partial: its partial slabs are
    // taken (a new slab of node 1 only if the draw says no).
    assert!(c.set_remote_node_defrag_ratio(100));
    assert_eq!(c.remote_node_defrag_ratio(), 100);
    let mut more = Vec::new();
    let remote = loop {
        let o = c.alloc().unwrap();
        more.push(o);
        if nid(src, o) == 0 {
            break true;
        }
        if more.len() > 4 * per_slab {
            break false;
        }
    };
    assert!(remote, "a remote partial slab taken");
    assert!(c.node_nr_partial(0) < partial0);
    let b = more.pop().unwrap();
    check_counts(&c);
    p.set_cpu(0);
    for o in objs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % per_slab != 0)
        .map(|(_, o)| o)
        .chain([a, b])
        .chain(more)
    {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}

#[test]
fn sheaves_keep_local_objects_and_barns_are_per_node() {
    let src = Nodes::new(&[64, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let c = c.with_sheaves(8);
    // Node 1's objects, allocated on CPU 1.
    p.set_cpu(1);
    let objs: Vec<_> = (0..32).map(|_| c.alloc().unwrap()).collect();
    assert!(objs.iter().all(|&o| nid(src, o) == 1));
    // Freed on CPU 0: none enters CPU 0's sheaves.
    p.set_cpu(0);
    let pcs = c.stats().get(SlubStat::FREE_PCS);
    for o in &objs[..16] {
        // SAFETY: ours, freed once.
        unsafe { c.free(*o) };
    }
    assert_eq!(
        c.stats().get(SlubStat::FREE_PCS),
        pcs,
        "remote objects bypass"
    );
    // Bulk: the same rule.
    // SAFETY: ours, freed once.
    unsafe { c.free_bulk(&objs[16..24]) };
    assert_eq!(
        c.stats().get(SlubStat::FREE_PCS),
        pcs,
        "bulk: remote bypass"
    );
    // Freed on CPU 1: into its sheaves, and full ones into node 1's barn.
    p.set_cpu(1);
    for o in &objs[24..] {
        // SAFETY: ours, freed once.
        unsafe { c.free(*o) };
    }
    assert!(c.stats().get(SlubStat::FREE_PCS) >= pcs + 8);
    let more: Vec<_> = (0..40).map(|_| c.alloc().unwrap()).collect();
    for o in &more {
        // SAFETY: ours, freed once.
        unsafe { c.free(*o) };
    }
    assert_eq!(c.node_barn_sheaves(0), (0, 0), "node 0's barn untouched");
    let (f1, e1) = c.node_barn_sheaves(1);
    assert!(f1 + e1 >= 1, "node 1's barn traded");
    assert_eq!(c.barn_sheaves(), (f1, e1));
    // A node-specific request from the sheaves: local only.
    let x = c.alloc_node(1, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, x), 1);
    let y = c.alloc_node(2, AllocFlags::NONE).unwrap();
    assert_eq!(nid(src, y), 2);
    // SAFETY: ours, freed once.
    unsafe {
        c.free(x);
        c.free(y);
    }
    c.shrink();
    finish(&p, c);
}

#[test]
fn debug_caches_list_slabs_on_their_node() {
    let src = Nodes::new(&[64, 64, 64]);
    let (p, c) = cache(
        src,
        SlabFlags::CONSISTENCY_CHECKS.union(SlabFlags::RED_ZONE),
    );
    let a = c.alloc_node(2, AllocFlags::NONE).unwrap();
    p.set_cpu(1);
    let b = c.alloc().unwrap();
    assert_eq!((nid(src, a), nid(src, b)), (2, 1));
    check_counts(&c);
    // SAFETY: ours, freed once.
    unsafe {
        c.free(a);
        c.free(b);
    }
    finish(&p, c);
}

#[test]
fn kmalloc_node_small_and_large() {
    let src = Nodes::new(&[256, 256, 256]);
    let p = TestPlatform::pinned(3).with_topology(&TOPO);
    let k = Kmalloc::<_, _, 4>::new(src, p, Geometry::new(3));
    for node in 0..3 {
        for size in [8, 100, 3000, 40_000] {
            let o = k.kmalloc_node(size, 8, node, AllocFlags::THISNODE).unwrap();
            assert_eq!(nid(src, o), node, "{size} B on node {node}");
            // SAFETY: ours, freed once.
            unsafe { k.kfree(o.as_ptr()) };
        }
    }
    let o = k
        .kmalloc_node(64, 8, NUMA_NO_NODE, AllocFlags::NONE)
        .unwrap();
    assert_eq!(nid(src, o), 0, "CPU 0's node");
    // SAFETY: ours, freed once.
    unsafe { k.kfree(o.as_ptr()) };
}

#[test]
fn too_many_nodes_is_refused_at_create() {
    let src = Nodes::new(&[4]);
    let big: &'static Nodes = Box::leak(Box::new(Nodes {
        buddies: Vec::new(),
        ranges: Vec::new(),
        claimed: slub::MAX_NUMNODES + 1,
    }));
    let _ = src;
    let r =
        KmemCache::<_, _, 4>::create("big", 64, 8, SlabFlags::NONE, big, TestPlatform::pinned(1));
    assert_eq!(
        r.err(),
        Some(CacheError::TooManyNodes(slub::MAX_NUMNODES + 1))
    );
    assert_eq!(
        TestPlatform::pinned(3).with_topology(&TOPO).nr_node_ids(),
        3
    );
}

/// Sheaves refilled from a fallback slab hold objects of another node: a
/// node-specific request finds one on top, puts it back and takes the slab
/// path, which gives back the CPU slab of the wrong node and finds the
/// requested node's partial slab.
#[test]
fn alloc_node_skips_a_sheaf_object_of_another_node() {
    // Node 0: 4 pages (sheaf blocks and one or two slabs).
    let src = Nodes::new(&[4, 64, 64]);
    let (p, c) = cache(src, SlabFlags::NONE);
    let c = c.with_sheaves(8);
    let mut held = Vec::new();
    while held.iter().all(|&o| nid(src, o) == 0) {
        held.push(c.alloc().unwrap());
        assert!(held.len() < 200, "node 0 never ran out");
    }
    // A node-0 object freed on CPU 1 (remote: to its slab, node 0's list).
    let i = held.iter().position(|&o| nid(src, o) == 0).unwrap();
    let o0 = held.swap_remove(i);
    p.set_cpu(1);
    // SAFETY: ours, freed once.
    unsafe { c.free(o0) };
    // Its full slab was frozen onto CPU 1's partial list: to node 0's.
    c.flush_local();
    p.set_cpu(0);
    assert_eq!(c.node_nr_partial(0), 1);
    let before = c.stats();
    let x = c.alloc_node(0, AllocFlags::NONE).unwrap();
    let after = c.stats();
    assert_eq!(nid(src, x), 0, "node 0's partial slab");
    let d = |st| after.get(st) - before.get(st);
    // Popped from the sheaf and put back (its object is of node 1), then
    // the CPU slab (the fallback slab of node 1) given back.
    assert_eq!(d(SlubStat::ALLOC_PCS), 1);
    assert_eq!(d(SlubStat::FREE_PCS), 1);
    assert_eq!(d(SlubStat::ALLOC_NODE_MISMATCH), 1);
    assert_eq!(c.node_nr_partial(0), 0, "node 0's partial slab was taken");
    held.push(x);
    for o in held {
        // SAFETY: ours, freed once.
        unsafe { c.free(o) };
    }
    finish(&p, c);
}
