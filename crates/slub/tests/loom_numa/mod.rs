//! Loom model of the per-node list locks (issue #20): two CPUs on
//! different nodes work one cache's two `kmem_cache_node`s at once. Each
//! frees an object of the *other* node's full slab (a remote-node free:
//! the slab goes onto its own node's partial list under that node's
//! `list_lock`) and then asks for an object of the other node
//! (`kmem_cache_alloc_node`: its CPU slab is of the wrong node and is
//! deactivated onto its own node's list, `ALLOC_NODE_MISMATCH`, then the
//! requested node's partial list is searched). Every object must be
//! handed out once, every slab end on its node's list, nothing leak.
//!
//! A module of `tests/loom.rs` (so CI's loom run has it). Run:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p slub
//! --release --test loom two_nodes`.
//!
//! Memory: two loom buddies (`buddy::loom_support::Heap`) of 8 pages of
//! 64 bytes, one per node; 32-byte objects, slabs of order 0 (2 objects:
//! few operations, within loom's default branch limit).
//! The loom platform has no topology (every CPU reads as node 0), so the
//! model names its nodes in the requests: the lists and locks exercised
//! are the slabs' nodes', which come from the page source.

use std::ptr::NonNull;

use buddy::loom_support::{spawn, Heap};
use buddy::{AllocFlags, Block, BlockRef, Order, PageAlloc};
use local_lock::loom_platform::LoomPlatform;
use local_lock::Strategy;
use loom::sync::Arc;
use slub::{Geometry, KmemCache, SlabFlags, SlubStat};

const PAGE: usize = 64;
const PAGES: usize = 8;
const OBJ: usize = 32;

/// Two nodes, one heap each, and each heap's first byte (found once by
/// taking its whole block: node lookups are then address compares, which
/// add no loom branches).
struct TwoNodes([Heap; 2], [usize; 2]);

impl TwoNodes {
    fn new(p: &LoomPlatform) -> TwoNodes {
        let h = [Heap::new(p, PAGE, 3), Heap::new(p, PAGE, 3)];
        let all = Order::new(3).unwrap();
        let lo = [0, 1].map(|i| {
            let b = h[i].alloc_block(all, AllocFlags::NONE).unwrap();
            b.owner.reset();
            let a = b.page.ptr;
            // SAFETY: just allocated, unused.
            unsafe { h[i].free_block(a, all) };
            a.as_ptr() as usize
        });
        TwoNodes(h, lo)
    }
}

// SAFETY: every block comes from one of the heaps, which keep the
// contract; `block_of` and frees go to the heap holding the address.
unsafe impl PageAlloc for TwoNodes {
    fn page_size(&self) -> usize {
        PAGE
    }
    fn max_order(&self) -> Order {
        self.0[0].max_order()
    }
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_block_node(0, order, flags)
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        let nid = self.page_to_nid(ptr.as_ptr());
        // SAFETY: forwarded to the heap of the block.
        unsafe { self.0[nid].free_block(ptr, order) }
    }
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.0[self.page_to_nid(addr)].block_of(addr)
    }
    fn nr_node_ids(&self) -> usize {
        2
    }
    fn page_to_nid(&self, addr: *const u8) -> usize {
        let a = addr as usize;
        usize::from(!(self.1[0] <= a && a < self.1[0] + PAGE * PAGES))
    }
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.0[nid].alloc_block(order, flags);
        if b.is_some() || flags.contains(AllocFlags::THISNODE) {
            return b;
        }
        self.0[1 - nid].alloc_block(order, flags)
    }
}

type Cache = KmemCache<TwoNodes, LoomPlatform, 2>;

/// `buddy::loom_support::run` with a higher branch limit: one execution
/// of this model (two heaps built, twelve slab-path operations, the
/// destroy's buddy merges) takes more than loom's default 1000 branches.
/// Prints the executions explored.
fn run(name: &str, body: impl Fn() + Send + Sync + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = b.max_branches.max(10_000);
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let body = std::sync::Arc::new(body);
    let t = std::time::Instant::now();
    b.check(move || {
        r.fetch_add(1, Relaxed);
        let body = body.clone();
        spawn(move || body()).join().unwrap()
    });
    println!(
        "loom {name}: {} executions (preemption bound {:?}) in {:.2?}",
        runs.load(Relaxed),
        b.preemption_bound,
        t.elapsed()
    );
}

fn setup() -> (LoomPlatform, Arc<Cache>) {
    let p = LoomPlatform::new(2, Strategy::Pinned);
    let g = Geometry {
        page_size: PAGE,
        nr_cpus: 1,
        max_order: 0,
        page_max_order: 3,
    };
    let src = TwoNodes::new(&p);
    let c = KmemCache::create_with(
        "loom_numa",
        OBJ,
        8,
        SlabFlags::NO_CPU_PARTIAL,
        g,
        src,
        p.clone(),
    )
    .unwrap();
    assert_eq!(c.layout().oo.objects, 2);
    (p, Arc::new(c))
}

/// Allocates from `node`, checks the node, writes a pattern.
fn take(c: &Cache, node: usize, v: u8) -> usize {
    let o = c
        .alloc_node(node, AllocFlags::NONE)
        .expect("the heaps have room");
    assert_eq!(
        c.source().page_to_nid(o.as_ptr()),
        node,
        "served from the node asked"
    );
    // SAFETY: ours.
    unsafe { o.as_ptr().write_bytes(v, OBJ) };
    o.as_ptr() as usize
}

/// Checks the pattern (an object handed out twice would be overwritten)
/// and frees.
fn give(c: &Cache, o: usize, v: u8) {
    let p = o as *mut u8;
    // SAFETY: ours until the free.
    let s = unsafe { std::slice::from_raw_parts(p, OBJ) };
    assert!(s.iter().all(|&b| b == v), "object {o:#x} handed out twice");
    // SAFETY: allocated from `c`, freed once.
    unsafe { c.free(NonNull::new(p).unwrap()) };
}

#[test]
fn two_nodes_list_locks() {
    run("two_nodes_list_locks", || {
        let (p, c) = setup();
        // CPU 0: node 0's slab A full, slab B its CPU slab (one taken).
        p.set_cpu(0);
        let a: Vec<usize> = (0..3).map(|i| take(&c, 0, i as u8)).collect();
        // CPU 1: node 1's slab C full, slab D its CPU slab.
        p.set_cpu(1);
        let b: Vec<usize> = (0..3).map(|i| take(&c, 1, 0x40 + i as u8)).collect();
        p.set_cpu(0);
        let t = {
            let (p, c) = (p.clone(), c.clone());
            let o = a[0];
            spawn(move || {
                p.set_cpu(1);
                // Remote-node free: A onto node 0's list.
                give(&c, o, 0);
                // Node 0 wanted: D leaves CPU 1 for node 1's list.
                take(&c, 0, 0x99)
            })
        };
        give(&c, b[0], 0x40);
        let mine = take(&c, 1, 0x88);
        let theirs = t.join().unwrap();
        assert!(c.stats().get(SlubStat::ALLOC_NODE_MISMATCH) == 2);
        give(&c, mine, 0x88);
        give(&c, theirs, 0x99);
        for (i, o) in a.iter().enumerate().skip(1) {
            give(&c, *o, i as u8);
        }
        for (i, o) in b.iter().enumerate().skip(1) {
            give(&c, *o, 0x40 + i as u8);
        }
        for cpu in 0..2 {
            p.set_cpu(cpu);
            c.flush_local();
        }
        p.set_cpu(0);
        let mut c = Arc::try_unwrap(c).ok().expect("all threads joined");
        c.validate_exclusive();
        assert_eq!(c.node_nr_slabs(0) + c.node_nr_slabs(1), c.nr_slabs());
        assert_eq!(c.destroy_exclusive(), Ok(()));
        assert_eq!(c.nr_slabs(), 0);
        for h in &c.source().0 {
            assert_eq!(
                h.b.total_free_pages(),
                PAGES,
                "every slab back in its buddy"
            );
        }
    });
}
