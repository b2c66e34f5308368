//! `struct kmem_cache_node`: a cache's per-node state, one per NUMA node of
//! its page allocator ([`SlabSource::nr_node_ids`](buddy::PageAlloc::nr_node_ids)),
//! and the node side of mm/slub.c: a slab's node (`slab_nid`), the
//! node-specific allocation (`kmem_cache_alloc_node`), `get_partial` with
//! `get_any_partial` and `remote_node_defrag_ratio`, the per-node barns
//! (`get_barn`), per-node counters (`nr_slabs`, `nr_partial`,
//! `total_objects`).
//!
//! A slab's node is the node of its block (`page_to_nid` of its first
//! byte), recorded when the slab is made in its tag (bits 2..7, beside the
//! list bits and the kmalloc class): frees find their node's list from the
//! descriptor they already hold, without another lookup. With one node
//! (every source that keeps `nr_node_ids`'s default) every node question
//! folds to node 0 at compile time: the paths are those of a one-node
//! cache.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize as CoreAtomicUsize, Ordering as CoreOrdering};

use buddy::{AllocFlags, Block, Order};
use local_lock::sync::atomic::Ordering;
use local_lock::sync::SpinLock;
use local_lock::Platform;

use crate::slab::{PartialList, Slab, ON_FULL, ON_PARTIAL};
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::{Barn, KmemCache, NodeBarnGuard, NodeGuard};

/// Most NUMA nodes a cache has node structures for (`MAX_NUMNODES`,
/// `CONFIG_NODES_SHIFT=4`, as [`local_lock::topology::MAX_NUMNODES`]); a
/// page allocator with more is refused at
/// [`create`](KmemCache::create) ([`CacheError::TooManyNodes`](crate::CacheError::TooManyNodes));
/// a cache built by the `const` [`KmemCache::new`] panics at first use.
/// Each node costs a cache about 256 bytes (a cache-padded
/// `kmem_cache_node`), used or not.
pub const MAX_NUMNODES: usize = local_lock::topology::MAX_NUMNODES;

/// `NUMA_NO_NODE`: any node ([`KmemCache::alloc_node`]): the CPU slab of
/// whatever node, partial slabs of the local node first
/// ([`numa_node_id`](local_lock::Platform::numa_node_id)), then of the
/// others, new slabs preferably local. What [`KmemCache::alloc`] asks.
pub const NUMA_NO_NODE: usize = usize::MAX;

/// `s->remote_node_defrag_ratio` of a new cache: 1000 (out of 1024), what
/// sysfs shows as 100.
pub(super) const DEFAULT_REMOTE_NODE_DEFRAG_RATIO: usize = 1000;

/// Where a slab's node lives in its tag: bits 2..7 (below the kmalloc
/// class, above [`ON_PARTIAL`](crate::slab::ON_PARTIAL) and
/// [`ON_FULL`](crate::slab::ON_FULL)).
pub(crate) const NID_SHIFT: u32 = 2;
/// The node bits of a tag (before the shift).
pub(crate) const NID_MASK: u32 = 0x3f;

/// `struct kmem_cache_node`: the partial list under `list_lock`, a debug
/// cache's full list, the node's barn of sheaves, and its counters.
pub(crate) struct KmemCacheNode {
    /// `list_lock` and `partial`.
    pub(crate) list: SpinLock<PartialList<ON_PARTIAL>>,
    /// Debug caches: the full slabs (`n->full`), under `list` then this.
    pub(super) full: SpinLock<PartialList<ON_FULL>>,
    /// The node's barn (`n->barn`), under its own spin lock (IRQs saved).
    pub(super) barn: SpinLock<Barn>,
    /// Racy mirror of the list's `nr_partial`.
    pub(super) nr_partial: CoreAtomicUsize,
    /// `n->nr_slabs`: slabs of this node allocated and not yet freed.
    pub(super) nr_slabs: CoreAtomicUsize,
    /// `n->total_objects`: their objects.
    pub(super) total_objects: CoreAtomicUsize,
}

impl KmemCacheNode {
    #[cfg(not(loom))]
    pub(super) const fn new() -> Self {
        KmemCacheNode {
            list: SpinLock::new(PartialList::new()),
            full: SpinLock::new(PartialList::new()),
            barn: SpinLock::new(Barn::new()),
            nr_partial: CoreAtomicUsize::new(0),
            nr_slabs: CoreAtomicUsize::new(0),
            total_objects: CoreAtomicUsize::new(0),
        }
    }
    #[cfg(loom)]
    pub(super) fn new() -> Self {
        KmemCacheNode {
            list: SpinLock::new(PartialList::new()),
            full: SpinLock::new(PartialList::new()),
            barn: SpinLock::new(Barn::new()),
            nr_partial: CoreAtomicUsize::new(0),
            nr_slabs: CoreAtomicUsize::new(0),
            total_objects: CoreAtomicUsize::new(0),
        }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// The nodes of the page allocator (`nr_node_ids`): 1 at compile time
    /// for a source that keeps the default.
    #[inline(always)]
    pub fn nr_nodes(&self) -> usize {
        self.source.nr_node_ids()
    }

    /// Whether the source has one node (folds to `true` for the default).
    #[inline(always)]
    pub(super) fn one_node(&self) -> bool {
        self.source.nr_node_ids() == 1
    }

    /// `get_node(s, nid)`.
    #[inline(always)]
    pub(super) fn get_node(&self, nid: usize) -> &KmemCacheNode {
        match nid % super::MAX_NUMNODES {
            0 => &self.node0,
            n => &self.nodes[n - 1],
        }
    }

    /// `slab_nid(slab)`: the node recorded in the slab's tag.
    #[inline(always)]
    pub(super) fn slab_nid(&self, s: Slab<'_>) -> usize {
        if self.one_node() {
            0
        } else {
            ((s.tag() >> NID_SHIFT) & NID_MASK) as usize
        }
    }

    /// `numa_mem_id()`: the node the caller runs on, as a node of the
    /// source (a platform node beyond the source's nodes counts as the
    /// last one).
    #[inline(always)]
    pub(super) fn local_node(&self) -> usize {
        if self.one_node() {
            0
        } else {
            self.platform().numa_node_id().min(self.nr_nodes() - 1)
        }
    }

    /// The node of CPU `cpu` (the barn its sheaves trade with).
    #[inline(always)]
    pub(super) fn cpu_node(&self, cpu: usize) -> usize {
        if self.one_node() {
            0
        } else {
            self.platform().cpu_to_node(cpu).min(self.nr_nodes() - 1)
        }
    }

    /// `node_match(slab, node)`.
    #[inline(always)]
    pub(super) fn node_match(&self, s: Slab<'_>, node: usize) -> bool {
        node == NUMA_NO_NODE || self.slab_nid(s) == node
    }

    /// `spin_lock_irqsave(&get_node(s, nid)->list_lock)`.
    pub(super) fn lock_node(&self, nid: usize) -> NodeGuard<'_, P> {
        let platform = self.cpu.platform();
        let flags = platform.irq_save();
        NodeGuard {
            g: core::mem::ManuallyDrop::new(self.get_node(nid).list.lock()),
            platform,
            flags,
        }
    }

    /// The barn of node `nid`, locked (IRQs saved).
    pub(super) fn lock_barn(&self, nid: usize) -> NodeBarnGuard<'_, P> {
        let platform = self.cpu.platform();
        let flags = platform.irq_save();
        NodeBarnGuard {
            g: core::mem::ManuallyDrop::new(self.get_node(nid).barn.lock()),
            platform,
            flags,
        }
    }

    /// `get_barn(s)`: the barn of the node the caller runs on.
    #[inline(always)]
    pub(super) fn get_barn(&self) -> NodeBarnGuard<'_, P> {
        self.lock_barn(self.local_node())
    }

    /// Stores node `nid`'s partial count mirror from its locked list.
    #[inline(always)]
    pub(super) fn set_nr_partial(&self, nid: usize, n: &NodeGuard<'_, P>) {
        self.get_node(nid)
            .nr_partial
            .store(n.nr_partial, CoreOrdering::Relaxed);
    }

    /// A block for a new slab: `alloc_pages_node(node, ...)` with several
    /// nodes (the local node for [`NUMA_NO_NODE`], falling back by distance
    /// unless `THISNODE`), plain `alloc_pages` with one.
    #[inline(always)]
    pub(super) fn alloc_slab_block(
        &self,
        order: Order,
        gfp: AllocFlags,
        node: usize,
    ) -> Option<Block<'_>> {
        if self.one_node() {
            self.source.alloc_block(order, gfp)
        } else {
            let nid = if node == NUMA_NO_NODE {
                self.local_node()
            } else {
                node
            };
            self.source.alloc_block_node(nid, order, gfp)
        }
    }

    /// The node of a new slab's block (`page_to_nid`).
    #[inline(always)]
    pub(super) fn block_nid(&self, base: NonNull<u8>) -> usize {
        if self.one_node() {
            0
        } else {
            self.source
                .page_to_nid(base.as_ptr())
                .min(super::MAX_NUMNODES - 1)
        }
    }

    /// `get_partial`: a slab from node `node`'s partial list (the local
    /// node for [`NUMA_NO_NODE`]); unless the request is for that node
    /// only (`node` given and `THISNODE`), then from the other nodes'
    /// lists ([`get_any_partial`](Self::get_any_partial)).
    pub(super) fn get_partial(
        &self,
        node: usize,
        gfp: AllocFlags,
    ) -> Option<(Slab<'static>, usize)> {
        let search = if node == NUMA_NO_NODE {
            self.local_node()
        } else {
            node
        };
        let r = self.get_partial_node(search);
        if r.is_some() || self.one_node() {
            return r;
        }
        if node != NUMA_NO_NODE && gfp.contains(AllocFlags::THISNODE) {
            return None;
        }
        self.get_any_partial()
    }

    /// `get_any_partial`: with probability `remote_node_defrag_ratio /
    /// 1024`, the partial lists of the nodes by distance from the local
    /// node (`node_zonelist(mempolicy_slab_node())`), each only while it
    /// holds more than `min_partial` slabs. The kernel draws `get_cycles()
    /// % 1024`; here a Weyl sequence per cache mixed by splitmix64 (a
    /// relaxed add, on this path only).
    fn get_any_partial(&self) -> Option<(Slab<'static>, usize)> {
        let ratio = self.defrag_ratio.load(CoreOrdering::Relaxed);
        if ratio == 0 {
            return None;
        }
        let x = self
            .node_rng
            .fetch_add(0x9e37_79b9_7f4a_7c15, CoreOrdering::Relaxed) as u64;
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if (z % 1024) as usize > ratio {
            return None;
        }
        let (order, n) = self.nodes_by_distance(self.local_node());
        for &nid in &order[..n] {
            let nid = nid as usize;
            if self.get_node(nid).nr_partial.load(CoreOrdering::Relaxed) > self.lay.min_partial {
                if let Some(r) = self.get_partial_node(nid) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// The source's nodes ordered by the platform's distance from `from`
    /// (ties by node id, `build_zonelists`' node order), `from` first:
    /// [`Topology::nodes_by_distance`](local_lock::topology::Topology::nodes_by_distance)
    /// over the platform's `node_distance(from, _)`.
    pub(super) fn nodes_by_distance(&self, from: usize) -> ([u8; MAX_NUMNODES], usize) {
        let n = self.nr_nodes();
        let p = self.platform();
        let mut t = local_lock::topology::Topology::uniform(n, 1);
        for b in 0..n {
            t = t.with_distance(from, b, p.node_distance(from, b));
        }
        t.nodes_by_distance(from)
    }

    /// `get_partial_node`: takes the first usable slab of node `nid`'s
    /// partial list (frozen, its freelist taken) and moves more to the CPU
    /// partial list until it holds half its limit.
    fn get_partial_node(&self, nid: usize) -> Option<(Slab<'static>, usize)> {
        if self.get_node(nid).nr_partial.load(CoreOrdering::Relaxed) == 0 {
            return None;
        }
        let mut n = self.lock_node(nid);
        let mut object: Option<(Slab<'static>, usize)> = None;
        let mut partial_slabs = 0;
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            cur = s.next();
            let t = self.acquire_slab(&mut n, s, object.is_none());
            if t == 0 {
                break;
            }
            if object.is_none() {
                object = Some((s, t));
                self.stat_here(SlubStat::ALLOC_FROM_PARTIAL);
            } else {
                self.put_cpu_partial(s, false);
                self.stat_here(SlubStat::CPU_PARTIAL_NODE);
                partial_slabs += 1;
            }
            if self.lay.cpu_partial == 0 || partial_slabs > self.lay.cpu_partial_slabs / 2 {
                break;
            }
        }
        self.set_nr_partial(nid, &n);
        object
    }

    /// Allocates an object from node `nid` (`kmem_cache_alloc_node(s,
    /// gfp, nid)`), or from any node with [`NUMA_NO_NODE`]. The sheaves
    /// serve a request for the local node (an object of another node found
    /// in them is put back); otherwise the slab path: a CPU slab of another
    /// node is deactivated ([`ALLOC_NODE_MISMATCH`](SlubStat::ALLOC_NODE_MISMATCH)),
    /// then node `nid`'s partial slabs, a new slab of node `nid` (tried
    /// without reclaim first), then, unless `gfp` has
    /// [`THISNODE`](AllocFlags::THISNODE), the other nodes' partial slabs
    /// by distance and a new slab wherever the page allocator falls back
    /// to. A node beyond the page allocator's counts as `NUMA_NO_NODE`
    /// (the kernel's `slab_nodes` check).
    ///
    /// ```
    /// use buddy::AllocFlags;
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags, NUMA_NO_NODE};
    /// let c = KmemCache::<_, _>::create("node", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let a = c.alloc_node(0, AllocFlags::NONE).unwrap();
    /// let b = c.alloc_node(NUMA_NO_NODE, AllocFlags::THISNODE).unwrap();
    /// assert_eq!(c.nr_nodes(), 1);
    /// assert_eq!(c.node_nr_slabs(0), c.nr_slabs());
    /// // SAFETY: ours, each freed once.
    /// unsafe {
    ///     c.free(a);
    ///     c.free(b);
    /// }
    /// ```
    #[track_caller]
    pub fn alloc_node(&self, nid: usize, gfp: AllocFlags) -> Option<NonNull<u8>> {
        let node = if nid < self.nr_nodes() {
            nid
        } else {
            NUMA_NO_NODE
        };
        if node == NUMA_NO_NODE || self.one_node() {
            return self.alloc_flags(gfp);
        }
        let page = gfp.difference(Self::OBJECT_GFP);
        let p = self.alloc_node_inner(node, page, core::panic::Location::caller())?;
        if gfp.contains(AllocFlags::ZEROED) {
            // SAFETY: a fresh object of `object_size` bytes.
            unsafe { p.as_ptr().write_bytes(0, self.object_size()) };
        }
        Some(p)
    }

    /// [`alloc_node`](Self::alloc_node) for a node of the source, with the
    /// page-level flags.
    #[inline(never)]
    fn alloc_node_inner(
        &self,
        node: usize,
        gfp: AllocFlags,
        loc: &'static core::panic::Location<'static>,
    ) -> Option<NonNull<u8>> {
        self.mode();
        if self.flags.is_debug() {
            return self.alloc_debug_node(loc, gfp, node);
        }
        if self.sheaf_capacity != 0 && gfp == AllocFlags::NONE && node == self.local_node() {
            if let Some(o) = self.alloc_from_pcs_node(node) {
                return Some(o);
            }
        }
        // `slab_alloc_node`'s fast path: the CPU freelist if the CPU slab
        // is of the node (here under the local lock).
        let mut g = self.lock_cpu();
        let cpu = g.cpu();
        let slab = self.fast_of(cpu).slab.load(Ordering::Relaxed);
        // SAFETY: the CPU slab is held (frozen) by this CPU.
        if slab != 0 && self.node_match(unsafe { Slab::from_addr(slab) }, node) {
            let fl = self.c_freelist(&g);
            if fl != 0 {
                self.stat_cpu(cpu, SlubStat::ALLOC_FASTPATH);
                return Some(self.load_freelist(&mut g, fl));
            }
        }
        self.slab_alloc_slow_node(g, gfp, node)
    }

    /// `alloc_from_pcs` for a node-specific request from the local node:
    /// an object of the sheaves if it is of `node` (one found of another
    /// node, after a CPU migration or a fallback slab, goes back to the
    /// sheaf and the caller takes the slab path).
    fn alloc_from_pcs_node(&self, node: usize) -> Option<NonNull<u8>> {
        let o = if self.hardened() {
            self.alloc_from_pcs::<true>()
        } else {
            self.alloc_from_pcs::<false>()
        }?;
        if self.block_nid(o) == node {
            return Some(o);
        }
        // Back onto the main sheaf it came from (it has room now), past
        // the free path's node check; else to its slab.
        if self.free_to_pcs_relock(o.as_ptr().expose_provenance()) != Ok(true) {
            // SAFETY: just allocated from this cache, handed back unused.
            unsafe { self.free(o) };
        }
        None
    }

    /// Slabs of node `nid` (`n->nr_slabs`, `/sys/kernel/slab/<cache>/slabs`'
    /// `N<nid>=` figure).
    pub fn node_nr_slabs(&self, nid: usize) -> usize {
        self.get_node(nid).nr_slabs.load(CoreOrdering::Relaxed)
    }

    /// Slabs on node `nid`'s partial list (`n->nr_partial`).
    pub fn node_nr_partial(&self, nid: usize) -> usize {
        self.lock_node(nid).nr_partial
    }

    /// Objects in node `nid`'s slabs (`n->total_objects`).
    pub fn node_total_objects(&self, nid: usize) -> usize {
        self.get_node(nid).total_objects.load(CoreOrdering::Relaxed)
    }

    /// Full and empty sheaves in node `nid`'s barn (a racy snapshot).
    pub fn node_barn_sheaves(&self, nid: usize) -> (usize, usize) {
        let b = self.lock_barn(nid);
        (b.nr_full, b.nr_empty)
    }

    /// `remote_node_defrag_ratio` as sysfs shows it: 0..=100.
    pub fn remote_node_defrag_ratio(&self) -> usize {
        self.defrag_ratio.load(CoreOrdering::Relaxed) / 10
    }

    /// Sets `remote_node_defrag_ratio` as sysfs takes it (0..=100, stored
    /// times 10 out of 1024): how often an allocation whose local node has
    /// no partial slab looks at other nodes' partial lists before taking a
    /// new slab. 0 keeps allocations node-local. Values above 100 are
    /// refused (`false`), as sysfs does.
    pub fn set_remote_node_defrag_ratio(&self, percent: usize) -> bool {
        if percent > 100 {
            return false;
        }
        self.defrag_ratio.store(percent * 10, CoreOrdering::Relaxed);
        true
    }

    /// The nodes' counters summed: slabs and objects.
    pub(super) fn sum_nodes(&self) -> (usize, usize) {
        let mut slabs = 0;
        let mut objects = 0;
        for nid in 0..self.nr_nodes() {
            let n = self.get_node(nid);
            slabs += n.nr_slabs.load(CoreOrdering::Relaxed);
            objects += n.total_objects.load(CoreOrdering::Relaxed);
        }
        (slabs, objects)
    }
}
