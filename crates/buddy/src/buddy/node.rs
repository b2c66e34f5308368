//! NUMA nodes (the kernel's `pglist_data`): each node has its own set of
//! the configuration's zone types (node `n`'s zone of type `t` is zone
//! `n * nr_zones + t`; empty zones are allowed, as in Linux), its memory
//! comes from regions tagged with it ([`Buddy::add_region_node`]), and its
//! zonelist lists the nodes with memory by distance (`build_zonelists`),
//! each node's zones from the highest allowed type down.
//!
//! One node (only node 0 has memory) keeps the single-node fast path of
//! [`Buddy::alloc_block`]: the load of its highest zone type
//! ([`NodeTable::fast_top`]) also says whether it may stay on node 0.

use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::Platform;

use super::owner::Block;
use super::Buddy;
use crate::types::{AllocFlags, Order, Page, Stat, ZoneId, MAX_NUMNODES, MAX_ZONE_IDS};
use crate::zone::Mark;

/// The nodes with memory and, per node, its zonelist's node order.
///
/// Written under the resize lock, read lock-free (a reader racing with a
/// region addition sees the old or the new zonelist, both valid).
pub(crate) struct NodeTable {
    /// Bit `n`: node `n` has memory (`N_MEMORY`).
    online: AtomicUsize,
    /// Node 0's top zone type while only node 0 has memory, then
    /// [`NUMA`]: the allocation fast path's one load gives both its
    /// highest zone and whether it may stay on node 0.
    fast_top: AtomicUsize,
    /// Per node `nid` (with or without memory), the nodes with memory by
    /// distance from it: the count in bits 0..4, entry `i` in bits
    /// `4 (i + 1)..4 (i + 2)`.
    order: [AtomicUsize; MAX_NUMNODES],
}

/// [`NodeTable::fast_top`] once a node other than 0 has memory.
pub(crate) const NUMA: usize = usize::MAX;

/// Bits per packed node id in [`NodeTable::order`].
const NODE_BITS: usize = 4;
const _: () = assert!(MAX_NUMNODES < 1 << NODE_BITS && (MAX_NUMNODES + 1) * NODE_BITS <= 32);

impl NodeTable {
    local_lock::const_fn! {
        /// No node has memory yet; `top`: the highest zone type.
        pub(crate) fn new(top: usize) -> NodeTable {
            #[cfg(not(loom))]
            return NodeTable {
                online: AtomicUsize::new(0),
                fast_top: AtomicUsize::new(top),
                order: [const { AtomicUsize::new(0) }; MAX_NUMNODES],
            };
            #[cfg(loom)]
            return NodeTable {
                online: AtomicUsize::new(0),
                fast_top: AtomicUsize::new(top),
                order: core::array::from_fn(|_| AtomicUsize::new(0)),
            };
        }
    }

    /// The highest zone type, or [`NUMA`] once a node other than 0 has
    /// memory.
    #[inline(always)]
    pub(crate) fn fast_top(&self) -> usize {
        self.fast_top.load(Ordering::Relaxed)
    }

    /// The nodes with memory, a bit each.
    #[inline(always)]
    fn online(&self) -> usize {
        self.online.load(Ordering::Acquire)
    }

    /// `nid`'s zonelist node order: `(nodes, n)`.
    fn order(&self, nid: usize) -> ([u8; MAX_NUMNODES], usize) {
        let w = self.order[nid].load(Ordering::Acquire);
        let n = w & ((1 << NODE_BITS) - 1);
        let mut nodes = [0u8; MAX_NUMNODES];
        for (i, slot) in nodes.iter_mut().enumerate().take(n) {
            *slot = ((w >> (NODE_BITS * (i + 1))) & ((1 << NODE_BITS) - 1)) as u8;
        }
        (nodes, n)
    }
}

/// A request's zones in order (flat zone indices).
#[derive(Clone, Copy)]
pub(crate) struct ZoneList {
    zones: [u8; MAX_ZONE_IDS],
    len: usize,
}

impl ZoneList {
    #[inline(always)]
    fn as_slice(&self) -> &[u8] {
        &self.zones[..self.len]
    }
}

impl<P: Platform> Buddy<P> {
    /// `nr_node_ids`: one more than the highest node with memory (at
    /// least 1). Node ids run `0..nr_node_ids()`; some may have no memory.
    #[inline]
    pub fn nr_node_ids(&self) -> usize {
        let on = self.nodes.online();
        (usize::BITS - on.leading_zeros()).max(1) as usize
    }

    /// Whether node `nid` has memory (`node_state(nid, N_MEMORY)`).
    pub fn node_has_memory(&self, nid: usize) -> bool {
        nid < MAX_NUMNODES && self.nodes.online() & (1 << nid) != 0
    }

    /// Zones of all nodes up to [`nr_node_ids`](Self::nr_node_ids): zone
    /// ids `0..nr_zone_ids()`.
    #[inline]
    pub fn nr_zone_ids(&self) -> usize {
        self.nr_node_ids() * self.cfg.nr_zones()
    }

    /// Node `nid`'s zone of type `zone_type` (`NODE_DATA(nid)->node_zones`),
    /// `None` for a node at or above [`MAX_NUMNODES`] or a type at or
    /// above [`nr_zones`](Self::nr_zones).
    pub fn zone_id(&self, nid: usize, zone_type: ZoneId) -> Option<ZoneId> {
        let nz = self.cfg.nr_zones();
        (nid < MAX_NUMNODES && zone_type.index() < nz)
            .then(|| ZoneId::new(nid * nz + zone_type.index()))
    }

    /// The node of `zone` (`zone_to_nid`).
    #[inline]
    pub fn zone_node(&self, zone: ZoneId) -> usize {
        zone.index() / self.cfg.nr_zones()
    }

    /// The type of `zone` (`zone_idx`): its index within its node.
    #[inline]
    pub fn zone_type(&self, zone: ZoneId) -> ZoneId {
        ZoneId::new(self.zone_type_of(zone))
    }

    /// [`zone_type`](Self::zone_type) as an index; no division for node 0.
    #[inline(always)]
    pub(crate) fn zone_type_of(&self, zone: ZoneId) -> usize {
        let (i, nz) = (zone.index(), self.cfg.nr_zones());
        if i < nz {
            i
        } else {
            i % nz
        }
    }

    /// `page_to_nid`: the node of the managed address `addr`, `None` if no
    /// span covers it.
    #[inline]
    pub fn page_to_nid(&self, addr: *const u8) -> Option<usize> {
        let f = self.spans.find(addr as usize, self.cfg.page_shift())?;
        Some(self.spans.nid(f.idx))
    }

    /// The node order of `nid`'s zonelist: the nodes with memory, nearest
    /// first (`nid` itself first if it has memory); only `nid` with
    /// `thisnode` (`__GFP_THISNODE`), nothing if it has no memory.
    pub fn node_order(&self, nid: usize, thisnode: bool) -> impl Iterator<Item = usize> {
        let (nodes, n) = if nid >= MAX_NUMNODES {
            ([0; MAX_NUMNODES], 0)
        } else if thisnode {
            (
                [nid as u8; MAX_NUMNODES],
                usize::from(self.node_has_memory(nid)),
            )
        } else {
            self.nodes.order(nid)
        };
        nodes.into_iter().take(n).map(usize::from)
    }

    /// The zones a request for node `nid` tries, in order (`node_zonelist`):
    /// its [`node_order`](Self::node_order), each node's zones from the
    /// request's highest allowed type down.
    pub(crate) fn node_zonelist(&self, nid: usize, flags: AllocFlags) -> ZoneList {
        let nz = self.cfg.nr_zones();
        let highest = self.highest_zone(flags);
        let mut zl = ZoneList {
            zones: [0; MAX_ZONE_IDS],
            len: 0,
        };
        for node in self.node_order(nid, flags.contains(AllocFlags::THISNODE)) {
            for t in (0..=highest).rev() {
                zl.zones[zl.len] = (node * nz + t) as u8;
                zl.len += 1;
            }
        }
        zl
    }

    /// The zones a request from this CPU tries, in order: its node's
    /// zonelist ([`numa_node_id`](local_lock::Platform::numa_node_id); node
    /// 0's zones from the highest allowed type down on one node).
    pub fn zonelist(&self, flags: AllocFlags) -> impl Iterator<Item = ZoneId> {
        self.zonelist_node(self.platform.numa_node_id(), flags)
    }

    /// The zones a request for node `nid` tries, in order
    /// (`node_zonelist(nid, gfp)`): `nid`'s zones from the highest allowed
    /// type down, then the other nodes' by distance (only `nid`'s with
    /// `THISNODE`; none for a node at or above [`MAX_NUMNODES`]). For a
    /// per-CPU layer with lists per zone walking it as
    /// `get_page_from_freelist` does.
    pub fn zonelist_node(&self, nid: usize, flags: AllocFlags) -> impl Iterator<Item = ZoneId> {
        let zl = self.node_zonelist(nid, flags);
        zl.zones
            .into_iter()
            .take(zl.len)
            .map(|z| ZoneId::raw(z.into()))
    }

    /// `alloc_pages_node(nid, order, flags)`: a block from node `nid`'s
    /// zones while they pass the watermarks, else from the other nodes by
    /// distance (the kernel's passes, each over the whole zonelist: low
    /// watermark, then min, then `MEMALLOC`'s none); only from `nid` with
    /// [`THISNODE`](AllocFlags::THISNODE). `None` for a node id at or above
    /// [`MAX_NUMNODES`] or when no zone can serve it.
    #[inline]
    pub fn alloc_pages_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Page> {
        self.alloc_block_node(nid, order, flags).map(|b| b.page)
    }

    /// [`alloc_pages_node`](Self::alloc_pages_node) with the block's owner
    /// words (the [`PageAlloc`](crate::PageAlloc) node contract).
    pub fn alloc_block_node(
        &self,
        nid: usize,
        order: Order,
        flags: AllocFlags,
    ) -> Option<Block<'_>> {
        if order > self.cfg.max_order() || nid >= MAX_NUMNODES {
            return None;
        }
        let zl = self.node_zonelist(nid, flags);
        let highest = self.highest_zone(flags);
        if zl.len > 1 {
            for &z in zl.as_slice() {
                let z = usize::from(z);
                if self.zone_watermark_fast(z, order, flags, highest, Mark::Low) {
                    if let Some(b) = self.alloc_from_outline(z, order, flags, highest, Mark::Low) {
                        return Some(b);
                    }
                }
            }
        }
        for &z in zl.as_slice() {
            let z = usize::from(z);
            if let Some(b) = self.alloc_from_outline(z, order, flags, highest, Mark::Min) {
                return Some(b);
            }
        }
        if flags.contains(AllocFlags::MEMALLOC) && !flags.contains(AllocFlags::NOMEMALLOC) {
            return self.alloc_no_watermarks(order, flags, highest, zl.as_slice());
        }
        None
    }

    /// [`alloc_block`](Self::alloc_block) when a node other than 0 has
    /// memory or the request is `THISNODE`: the zonelist of the caller's
    /// node.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_block_numa(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.alloc_block_node(self.platform.numa_node_id(), order, flags)
    }

    /// Records that node `nid` has memory and rebuilds every node's
    /// zonelist order (`build_all_zonelists`). Resize lock held.
    pub(super) fn node_set_memory(&self, nid: usize) {
        let on = self.nodes.online.load(Ordering::Relaxed);
        if on & (1 << nid) != 0 {
            return;
        }
        let on = on | 1 << nid;
        for n in 0..MAX_NUMNODES {
            self.nodes.order[n].store(self.build_zonelist(n, on), Ordering::Release);
        }
        self.nodes.online.store(on, Ordering::Release);
        if on & !1 != 0 {
            self.nodes.fast_top.store(NUMA, Ordering::Release);
        }
    }

    /// `build_zonelists(nid)`: the nodes of `online` by the platform's
    /// [`node_distance`](local_lock::Platform::node_distance) from `nid`,
    /// nearest first, ties by node id (the kernel's `find_next_best_node`
    /// without its load-balancing penalty), packed as in
    /// [`NodeTable::order`].
    fn build_zonelist(&self, nid: usize, online: usize) -> usize {
        let mut nodes = [0usize; MAX_NUMNODES];
        let mut n = 0;
        for m in (0..MAX_NUMNODES).filter(|m| online & (1 << m) != 0) {
            nodes[n] = m;
            n += 1;
        }
        let key = |m: usize| (self.platform.node_distance(nid, m), m != nid, m);
        nodes[..n].sort_unstable_by_key(|&m| key(m));
        let mut w = n;
        for (i, m) in nodes[..n].iter().enumerate() {
            w |= m << (NODE_BITS * (i + 1));
        }
        w
    }

    /// Pages on node `nid`'s free lists (`NR_FREE_PAGES` of the node).
    pub fn nr_free_pages_node(&self, nid: usize) -> usize {
        self.node_zones(nid).map(|z| self.nr_free_pages(z)).sum()
    }

    /// Pages given to node `nid`'s zones (`node_present_pages`, managed).
    pub fn managed_pages_node(&self, nid: usize) -> usize {
        self.node_zones(nid).map(|z| self.managed_pages(z)).sum()
    }

    /// A counter summed over node `nid`'s zones (the node's vm counters).
    pub fn stat_node(&self, nid: usize, s: Stat) -> u64 {
        self.node_zones(nid)
            .map(|z| self.lock_zone(z.index()).stats[s as usize])
            .sum()
    }

    /// Node `nid`'s zones (none for a node at or above [`MAX_NUMNODES`]).
    pub fn node_zones(&self, nid: usize) -> impl Iterator<Item = ZoneId> {
        let nz = self.cfg.nr_zones();
        let r = if nid < MAX_NUMNODES {
            nid * nz..(nid + 1) * nz
        } else {
            0..0
        };
        r.map(ZoneId::new)
    }
}
