//! Lists per zone per CPU (the kernel's `zone->per_cpu_pageset`, one
//! `per_cpu_pages` per zone and CPU): [`ZonePcps`] holds one [`Pcp`] per
//! zone of the buddy (every zone type of every node), so a CPU caches pages
//! of every node it allocates from, each on the lists of the page's own
//! zone, and remote-node pages never mix into the local lists.
//!
//! * **Allocation** (`get_page_from_freelist` -> `rmqueue_pcplist`): the
//!   zonelist of the request's node ([`Buddy::zonelist_node`]: its zones,
//!   then the other nodes' by distance; `THISNODE`: its own only), first
//!   every zone against its low watermark, then against min with the
//!   request's reductions (the lockless `zone_watermark_fast`), each passing
//!   zone's lists on this CPU (refilled from that zone when empty). Orders
//!   above `PAGE_ALLOC_COSTLY_ORDER`, zones without lists, a lock not
//!   available here, and exhausted zonelists go to the buddy's own path
//!   with its slow path
//!   ([`BuddySource::alloc_or_grow_node`](buddy::BuddySource::alloc_or_grow_node)).
//! * **Free**: the block's zone comes with its check (the span lookup:
//!   [`Buddy::head_owner_zone`]); it goes to that zone's lists on the
//!   freeing CPU, whatever node the CPU is on.
//! * **Drains** per zone ([`zone`](ZonePcps::zone)) or of every zone.

use core::ptr::NonNull;

use buddy::{
    AllocFlags, Block, Buddy, FreeFlags, Order, Page, PageAlloc, ZoneId, MAX_NUMNODES, MAX_ZONE_IDS,
};
use local_lock::{Platform, DEFAULT_SLOTS};

use crate::pcp::{PageSource, Pcp, Policy};
use crate::sizing::PAGE_ALLOC_COSTLY_ORDER;

/// One [`Pcp`] per zone of a buddy (`zone->per_cpu_pageset` for every
/// zone): zone `z`'s lists are `zone(z)`, for zone ids `0..Z` (`Z` = the
/// nodes times the zone types the buddy may have: node `n`'s zone of type
/// `t` is `n * nr_zones + t`; zones at or above `Z` have no lists and are
/// served by the buddy). See the module docs.
///
/// ```
/// use buddy::{AllocFlags, Buddy, Config, FreeFlags, Order, Tunables, ZoneId};
/// use local_lock::test_platform::TestPlatform;
/// use local_lock::topology::Topology;
/// use pcp::{Policy, ZonePcps};
///
/// // Two nodes, one CPU each; 256 KiB of zeroed memory per node,
/// // declared first: it outlives the allocator.
/// static T: Topology = Topology::uniform(2, 1);
/// let mut mem = [vec![0u8; 256 << 10], vec![0u8; 256 << 10]];
/// let heap = Buddy::new(
///     TestPlatform::pinned(2).with_topology(&T),
///     Config::new(4096, 4).with_tunables(Tunables::NO_MIN),
/// );
/// for (nid, m) in mem.iter_mut().enumerate() {
///     // SAFETY: the memory outlives `heap`, nothing else uses it, and it
///     // reads as zero.
///     unsafe { heap.add_region_node(nid, m.as_mut_ptr(), m.len(), true) }.unwrap();
/// }
/// // One zone type: zone 0 is node 0's, zone 1 node 1's.
/// let pcps = ZonePcps::<_, TestPlatform, 2, 2>::new_tuned(
///     &heap,
///     TestPlatform::pinned(2).with_topology(&T),
///     Policy::IrqSafe,
///     Some((4, 16)),
/// );
/// // CPU 0 (node 0) asks for node 1's memory: cached on zone 1's lists.
/// let p = pcps.alloc_block_node(1, Order::ZERO, AllocFlags::NONE).unwrap();
/// assert_eq!(heap.page_to_nid(p.page.ptr.as_ptr()), Some(1));
/// assert_eq!(pcps.zone(ZoneId::new(1)).unwrap().local_lists().count, 3, "a batch of 4, less 1");
/// assert_eq!(pcps.zone(ZoneId::new(0)).unwrap().local_lists().count, 0);
/// // SAFETY: ours, freed once: back to zone 1's lists, not node 0's.
/// unsafe { pcps.free(p.page.ptr, p.page.order, FreeFlags::NONE) };
/// assert_eq!(pcps.zone(ZoneId::new(1)).unwrap().local_lists().count, 4);
/// pcps.drain_local();
/// ```
pub struct ZonePcps<
    S: PageSource,
    L: Platform,
    const N: usize = DEFAULT_SLOTS,
    const Z: usize = MAX_ZONE_IDS,
> {
    /// Zone `z`'s lists at `z`.
    pcps: [Pcp<S, L, N>; Z],
}

impl<S: PageSource + Clone, L: Platform + Clone, const N: usize, const Z: usize>
    ZonePcps<S, L, N, Z>
{
    /// Lists for zones `0..Z` of `source`'s buddy, each sized by the
    /// kernel's formulas from its zone ([`Pcp::new`]).
    ///
    /// # Panics
    ///
    /// If `Z` is 0 or above [`MAX_ZONE_IDS`].
    pub fn new(source: S, platform: L, policy: Policy) -> Self {
        Self::new_tuned(source, platform, policy, None)
    }

    /// [`new`](Self::new) with every zone's `(batch, high)` set by hand
    /// ([`Pcp::new_tuned`]).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new), and as [`Pcp::new_tuned`].
    pub fn new_tuned(
        source: S,
        platform: L,
        policy: Policy,
        tuned: Option<(usize, usize)>,
    ) -> Self {
        assert!(
            Z > 0 && Z <= MAX_ZONE_IDS,
            "pcp: ZonePcps: 1..=MAX_ZONE_IDS zones"
        );
        ZonePcps {
            pcps: core::array::from_fn(|z| {
                Pcp::new_tuned(
                    source.clone(),
                    ZoneId::new(z),
                    platform.clone(),
                    policy,
                    tuned,
                )
            }),
        }
    }
}

impl<S: PageSource, L: Platform, const N: usize, const Z: usize> ZonePcps<S, L, N, Z> {
    /// The buddy underneath.
    #[inline(always)]
    pub fn buddy(&self) -> &Buddy<S::P> {
        self.pcps[0].buddy()
    }

    /// Zone `zone`'s lists, if it has some (`zone < Z`).
    #[inline]
    pub fn zone(&self, zone: ZoneId) -> Option<&Pcp<S, L, N>> {
        self.pcps.get(zone.index())
    }

    /// Every zone's lists, zone `z` at `z`.
    pub fn zones(&self) -> &[Pcp<S, L, N>] {
        &self.pcps
    }

    /// A block from the zonelist of this CPU's node
    /// ([`numa_node_id`](local_lock::Platform::numa_node_id) of the lists'
    /// platform); see [`alloc_block_node`](Self::alloc_block_node).
    #[inline]
    pub fn alloc(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        self.alloc_block(order, flags).map(|b| b.page)
    }

    /// [`alloc`](Self::alloc) with the block's owner words.
    #[inline]
    pub fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let nid = self.pcps[0].platform().numa_node_id();
        self.alloc_block_node(nid, order, flags)
    }

    /// `alloc_pages_node(nid, ...)` through the lists: node `nid`'s
    /// zonelist, every zone against its low watermark, then against min,
    /// each passing zone served from its lists on this CPU (see the module
    /// docs); then the buddy's own path and slow path. `None` for a node at
    /// or above [`MAX_NUMNODES`] or when nothing can serve it.
    pub fn alloc_block_node(
        &self,
        nid: usize,
        order: Order,
        flags: AllocFlags,
    ) -> Option<Block<'_>> {
        let b = self.buddy();
        if nid >= MAX_NUMNODES {
            return None;
        }
        if order.get() <= PAGE_ALLOC_COSTLY_ORDER {
            for low in [true, false] {
                for z in b.zonelist_node(nid, flags) {
                    let Some(p) = self.pcps.get(z.index()) else {
                        continue;
                    };
                    if b.watermark_fast(z, order, flags, low) {
                        if let Some(blk) = p.alloc_from_lists(order, flags) {
                            return Some(blk);
                        }
                    }
                }
            }
        }
        self.pcps[0].source().alloc_or_grow_node(nid, order, flags)
    }

    /// Frees a block to the lists of **its own zone** on this CPU (orders
    /// up to `PAGE_ALLOC_COSTLY_ORDER`; see [`Pcp::free`]), or to the buddy
    /// (larger orders, zones without lists).
    ///
    /// # Panics
    ///
    /// As [`Pcp::free`].
    ///
    /// # Safety
    ///
    /// As [`Pcp::free`].
    #[track_caller]
    pub unsafe fn free(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        let (o, z) = self.pcps[0].check_free(ptr, order);
        match self.pcps.get(z.index()) {
            // SAFETY: forwarded contract; validated above, of zone `z`.
            Some(p) => unsafe { p.free_unchecked(ptr, order, flags, o, z) },
            // SAFETY: forwarded contract.
            None => unsafe { self.buddy().free_pages_flags(ptr, order, flags) },
        }
    }

    /// Drains this CPU's lists of every zone; returns the pages freed.
    pub fn drain_local(&self) -> usize {
        self.pcps.iter().map(Pcp::drain_local).sum()
    }

    /// Drains every CPU's lists of every zone ([`Pcp::drain_all`]):
    /// (pages freed, CPUs whose lists could not be reached).
    pub fn drain_all(&self) -> (usize, usize) {
        self.pcps.iter().fold((0, 0), |(n, f), p| {
            let (a, b) = p.drain_all();
            (n + a, f + b)
        })
    }

    /// Pages on every CPU's lists of every zone.
    pub fn total_count(&self) -> usize {
        self.pcps.iter().map(Pcp::total_count).sum()
    }

    /// [`Pcp::check_local`] for every zone: among others, every page on
    /// this CPU's lists of zone `z` is of zone `z`.
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_local(&self) {
        self.pcps.iter().for_each(Pcp::check_local);
    }

    /// [`Pcp::check_all`] for every zone.
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_all(&mut self) {
        self.pcps.iter_mut().for_each(Pcp::check_all);
    }
}

// SAFETY: the blocks of each zone's `Pcp` (buddy blocks with their head
// descriptors' owner words), found through the buddy.
unsafe impl<S: PageSource, L: Platform, const N: usize, const Z: usize> PageAlloc
    for ZonePcps<S, L, N, Z>
{
    page_alloc_from_buddy!();
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        ZonePcps::alloc_block(self, order, flags)
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.free(ptr, order, FreeFlags::NONE) }
    }
    fn alloc_block_node(&self, nid: usize, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        ZonePcps::alloc_block_node(self, nid, order, flags)
    }
}
