//! Vocabulary: page frame numbers, orders, zone ids, request and free flags,
//! the configuration, tunables, watermarks and statistics.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};
use core::ptr::NonNull;

/// Most zones a [`Buddy`](crate::Buddy) can have (the kernel's DMA, DMA32,
/// NORMAL, MOVABLE).
pub const MAX_ZONES: usize = 4;

/// Most NUMA nodes a [`Buddy`](crate::Buddy) can have (the kernel's
/// `MAX_NUMNODES`, `CONFIG_NODES_SHIFT` = 2): node ids `0..MAX_NUMNODES`.
/// Smaller than `local_lock::topology::MAX_NUMNODES` (16) because each node
/// holds a full set of zones inline (`MAX_ZONES` per node); memory of a
/// node at or above it is refused with
/// [`RegionError::BadNode`](crate::RegionError::BadNode).
pub const MAX_NUMNODES: usize = 4;

/// Most zones of all nodes: zone ids `0..MAX_ZONE_IDS` (node `n`'s zone of
/// type `t` is `n * nr_zones + t`, see [`ZoneId`]).
pub const MAX_ZONE_IDS: usize = MAX_ZONES * MAX_NUMNODES;

/// The largest `max_order` a [`Config`] may choose (4 KiB pages: 64 GiB
/// blocks; 16-byte pages: 256 MiB blocks).
pub const ORDER_LIMIT: u8 = 24;

/// Free areas per zone: orders `0..=ORDER_LIMIT`.
pub(crate) const ORDER_SLOTS: usize = ORDER_LIMIT as usize + 1;

// ---------------------------------------------------------------------------
// Pfn, Order, ZoneId
// ---------------------------------------------------------------------------

/// A page frame number: an address divided by the page size (absolute, so
/// natural alignment of a block in pfns is alignment of its address).
///
/// ```
/// use buddy::{Order, Pfn};
/// let p = Pfn(0x1004);
/// let o2 = Order::new(2).unwrap();
/// assert_eq!(p.buddy(o2), Pfn(0x1000), "pfn ^ (1 << order)");
/// assert_eq!(p.parent(o2), Pfn(0x1000));
/// assert!(p.is_aligned(o2) && !p.is_aligned(Order::new(3).unwrap()));
/// assert_eq!(p.align_down(Order::new(3).unwrap()), Pfn(0x1000));
/// assert_eq!(p.to_string(), "pfn 0x1004");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Pfn(pub usize);

impl Pfn {
    /// The buddy of the order-`order` block starting here:
    /// `pfn ^ (1 << order)` (`__find_buddy_pfn`).
    #[inline(always)]
    pub const fn buddy(self, order: Order) -> Pfn {
        Pfn(self.0 ^ (1 << order.0))
    }
    /// The order-`order + 1` block that contains this order-`order` block.
    #[inline(always)]
    pub const fn parent(self, order: Order) -> Pfn {
        Pfn(self.0 & !(1 << order.0))
    }
    /// Whether an order-`order` block may start here.
    #[inline(always)]
    pub const fn is_aligned(self, order: Order) -> bool {
        self.0 & (order.pages() - 1) == 0
    }
    /// The start of the naturally aligned order-`order` block holding this
    /// page.
    #[inline(always)]
    pub const fn align_down(self, order: Order) -> Pfn {
        Pfn(self.0 & !(order.pages() - 1))
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

/// A block order: a block of order `k` is `2^k` pages, naturally aligned.
///
/// ```
/// use buddy::{Config, Order, ORDER_LIMIT};
/// // `get_order`: 5 pages need an 8-page block.
/// let o = Order::for_pages(5).unwrap();
/// assert_eq!((o.get(), o.pages()), (3, 8));
/// assert_eq!(Order::new(ORDER_LIMIT + 1), None);
/// // A 5000-byte request takes two 4 KiB pages.
/// assert_eq!(Config::DEFAULT.order_for(5000, 8), Order::new(1));
/// assert_eq!(o.to_string(), "order 3");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Order(u8);

impl Order {
    /// Order 0: one page.
    pub const ZERO: Order = Order(0);

    /// `order` if it is at most [`ORDER_LIMIT`].
    #[inline(always)]
    pub const fn new(order: u8) -> Option<Order> {
        if order <= ORDER_LIMIT {
            Some(Order(order))
        } else {
            None
        }
    }

    /// The order as a number.
    #[inline(always)]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// The order as an index (of `free_area`).
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Pages in a block of this order: `2^order`.
    #[inline(always)]
    pub const fn pages(self) -> usize {
        1 << self.0
    }

    /// The smallest order whose block holds `pages` pages (the kernel's
    /// `get_order`), if it is at most [`ORDER_LIMIT`].
    #[inline]
    pub const fn for_pages(pages: usize) -> Option<Order> {
        if pages <= 1 {
            return Some(Order(0));
        }
        let o = usize::BITS - (pages - 1).leading_zeros();
        if o <= ORDER_LIMIT as u32 {
            Some(Order(o as u8))
        } else {
            None
        }
    }

    /// The order of bit `o` of a free-area bitmap (`zero_bits`,
    /// `dirty_bits`: only orders up to the limit have bits), without
    /// [`new`](Self::new)'s check.
    #[inline(always)]
    pub(crate) const fn of_bit(o: u32) -> Order {
        debug_assert!(o <= ORDER_LIMIT as u32);
        Order(o as u8)
    }

    /// One order up or down (internal arithmetic, within the limit).
    #[inline(always)]
    pub(crate) const fn plus(self, n: u8) -> Order {
        Order(self.0 + n)
    }
    #[inline(always)]
    pub(crate) const fn minus(self, n: u8) -> Order {
        Order(self.0 - n)
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order {}", self.0)
    }
}

/// A zone, by index: zone 0 is the lowest addresses (the kernel's DMA or
/// DMA32), the last zone the highest (NORMAL).
///
/// ```
/// use buddy::{Config, ZoneId, ZoneSpec};
/// const CFG: Config = Config::new(4096, 10).with_zones(&[
///     ZoneSpec { name: "DMA32", end: 1 << 32 },
///     ZoneSpec { name: "Normal", end: usize::MAX },
/// ]);
/// assert_eq!(CFG.zone_of_addr(0x1000), ZoneId::new(0));
/// assert_eq!(CFG.zone_of_addr(1 << 33).index(), 1);
/// // The highest zone wholly below 4 GiB (a 32-bit DMA engine's limit).
/// assert_eq!(CFG.zone_below(1 << 32), Some(ZoneId::new(0)));
/// assert_eq!(CFG.zone_below(1 << 20), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ZoneId(u8);

impl ZoneId {
    /// Zone `index`: a zone type (`0..nr_zones`, node 0's zone of that
    /// type, and what [`AllocFlags::zone_max`] takes), or the zone of type
    /// `t` on node `n` at `n * nr_zones + t` (see
    /// [`Buddy::zone_id`](crate::Buddy::zone_id)).
    ///
    /// # Panics
    ///
    /// If `index >= MAX_ZONE_IDS` (at compile time in a const context).
    pub const fn new(index: usize) -> ZoneId {
        assert!(index < MAX_ZONE_IDS, "ZoneId: index >= MAX_ZONE_IDS");
        ZoneId(index as u8)
    }
    /// The index.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
    /// Zone `index` without the check of [`new`](Self::new): for indices
    /// the buddy computed (a span's zone base plus a type).
    #[inline(always)]
    pub(crate) const fn raw(index: usize) -> ZoneId {
        ZoneId(index as u8)
    }
}

// ---------------------------------------------------------------------------
// Request flags
// ---------------------------------------------------------------------------

/// What an allocation asks for, in the spirit of gfp flags. Combine with
/// `|`; add a zone constraint with [`zone_max`](Self::zone_max).
///
/// | flag | kernel | meaning |
/// |---|---|---|
/// | [`ZEROED`](Self::ZEROED) | `__GFP_ZERO` | the block reads as zero: a known-zero block is taken without clearing, otherwise (only) the non-zero part is cleared, outside the zone lock |
/// | [`ONLY_ZERO`](Self::ONLY_ZERO) | `__GFP_ONLY_ZERO` (seed 003) | only known-zero blocks; never clears, fails instead |
/// | [`HIGH`](Self::HIGH) | `__GFP_HIGH` | may go below the min watermark by half |
/// | [`NONBLOCK`](Self::NONBLOCK) | `ALLOC_NON_BLOCK` | a further quarter of what is left |
/// | [`ATOMIC`](Self::ATOMIC) | `GFP_ATOMIC` | `HIGH | NONBLOCK` |
/// | [`COLD`](Self::COLD) | `__GFP_COLD` (pre-4.15) | take the cold end (tail) of the free list |
/// | [`COMP`](Self::COMP) | `__GFP_COMP` | stamp the tail descriptors, so [`owner_of`](crate::Buddy::owner_of) from any address is two descriptor reads |
/// | [`zone_max`](Self::zone_max) | `gfp_zone()` | the highest zone the block may come from (e.g. a DMA32 zone for "below 4 GiB") |
/// | [`NOWARN`](Self::NOWARN) | `__GFP_NOWARN` | a failure is not reported (`warn_alloc`: the source's [`warn_alloc`](crate::BuddySource::warn_alloc) hook and `Stat::WARN_ALLOC`) |
/// | [`NORETRY`](Self::NORETRY) | `__GFP_NORETRY` | one round of growth and reclaim, then fail |
/// | [`RETRY_MAYFAIL`](Self::RETRY_MAYFAIL) | `__GFP_RETRY_MAYFAIL` | retry while growth or reclaim makes progress, at any order; fail when neither does |
/// | [`NOFAIL`](Self::NOFAIL) | `__GFP_NOFAIL` | never fails (blocking requests of at most the largest order): retries growth and reclaim, then the min reserve, forever |
/// | [`MEMALLOC`](Self::MEMALLOC) | `__GFP_MEMALLOC` | the reclaimer's own requests: `ALLOC_NO_WATERMARKS` once the watermarks refuse, and no reclaim (no recursion) |
/// | [`NOMEMALLOC`](Self::NOMEMALLOC) | `__GFP_NOMEMALLOC` | never the reserves, even with `MEMALLOC` |
/// | [`THISNODE`](Self::THISNODE) | `__GFP_THISNODE` | no fallback beyond the requested node (`ZONELIST_NOFALLBACK`): the node's own zones only, failing rather than taking another node's memory |
///
/// Without a retry flag a request retries while growth or reclaim makes
/// progress, at most [`MAX_GROW_RETRIES`](crate::MAX_GROW_RETRIES) rounds,
/// and a costly one (order above [`COSTLY_ORDER`](Self::COSTLY_ORDER)) does
/// one round (the kernel's `costly_order && !__GFP_RETRY_MAYFAIL`). See
/// [`BuddySource::alloc_or_grow`](crate::BuddySource::alloc_or_grow).
///
/// ```
/// use buddy::{AllocFlags, ZoneId};
/// let f = AllocFlags::ZEROED | AllocFlags::COLD;
/// assert!(f.contains(AllocFlags::ZEROED) && !f.contains(AllocFlags::ONLY_ZERO));
/// assert!(AllocFlags::ONLY_ZERO.contains(AllocFlags::ZEROED));
/// assert_eq!(AllocFlags::HIGH | AllocFlags::NONBLOCK, AllocFlags::ATOMIC);
/// // Zone 0 and below only (e.g. DMA32 for "below 4 GiB").
/// let dma = f.zone_max(ZoneId::new(0));
/// assert_eq!(dma.max_zone(), Some(ZoneId::new(0)));
/// assert_eq!(format!("{dma:?}"), "AllocFlags(ZEROED | COLD | zone_max(0))");
/// assert_eq!(AllocFlags::from_bits_truncate(dma.bits()), dma);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AllocFlags(u32);

impl AllocFlags {
    /// A plain request.
    pub const NONE: AllocFlags = AllocFlags(0);
    /// The block must read as zero (`__GFP_ZERO`).
    pub const ZEROED: AllocFlags = AllocFlags(1 << 0);
    /// Only a known-zero block will do: never clears, fails instead
    /// (seed 003's `__GFP_ONLY_ZERO`). Includes [`ZEROED`](Self::ZEROED).
    pub const ONLY_ZERO: AllocFlags = AllocFlags(1 << 1 | 1 << 0);
    /// High priority (`__GFP_HIGH`): the min watermark is halved.
    pub const HIGH: AllocFlags = AllocFlags(1 << 2);
    /// Cannot block or reclaim (`ALLOC_NON_BLOCK`): the min watermark is
    /// lowered by a further quarter.
    pub const NONBLOCK: AllocFlags = AllocFlags(1 << 3);
    /// `GFP_ATOMIC`: [`HIGH`](Self::HIGH) and [`NONBLOCK`](Self::NONBLOCK).
    pub const ATOMIC: AllocFlags = AllocFlags(1 << 2 | 1 << 3);
    /// Cold hint: take from the tail of the free list (blocks freed cold or
    /// likely to merge), e.g. for pages about to be written by DMA.
    pub const COLD: AllocFlags = AllocFlags(1 << 4);
    /// Compound block (`__GFP_COMP`): stamp every tail descriptor with the
    /// head, so [`owner_of`](crate::Buddy::owner_of) from an interior address
    /// needs no search.
    pub const COMP: AllocFlags = AllocFlags(1 << 5);

    /// No failure report (`__GFP_NOWARN`): a request that fails does not
    /// call the source's [`warn_alloc`](crate::BuddySource::warn_alloc)
    /// hook nor count `Stat::WARN_ALLOC` (it still counts
    /// `Stat::ALLOC_FAIL`).
    pub const NOWARN: AllocFlags = AllocFlags(1 << 12);
    /// Fail rather than retry (`__GFP_NORETRY`): one round of the source's
    /// growth and reclaim hook, then give up.
    pub const NORETRY: AllocFlags = AllocFlags(1 << 13);
    /// Retry while it helps (`__GFP_RETRY_MAYFAIL`): growth and reclaim
    /// are repeated while either makes progress, costly orders included,
    /// and the request fails once neither does.
    pub const RETRY_MAYFAIL: AllocFlags = AllocFlags(1 << 14);
    /// Never fail (`__GFP_NOFAIL`): growth and reclaim are retried, then
    /// the min reserve (as [`HIGH`](Self::HIGH)), forever, with the
    /// platform's back-off between fruitless rounds. Ignored (the request
    /// may fail) with [`NONBLOCK`](Self::NONBLOCK) (it cannot wait) or
    /// above the largest order.
    pub const NOFAIL: AllocFlags = AllocFlags(1 << 15);
    /// The reclaimer's own allocation (`__GFP_MEMALLOC`, `PF_MEMALLOC`):
    /// when the watermarks refuse it, it may take the reserves below them
    /// (`ALLOC_NO_WATERMARKS`, `lowmem_reserve` ignored too), and it never
    /// calls the reclaim hook (reclaim does not recurse).
    pub const MEMALLOC: AllocFlags = AllocFlags(1 << 16);
    /// Never the reserves (`__GFP_NOMEMALLOC`): overrides
    /// [`MEMALLOC`](Self::MEMALLOC), and takes away
    /// [`NONBLOCK`](Self::NONBLOCK)'s lowering of the min watermark
    /// (`gfp_to_alloc_flags` sets `ALLOC_NON_BLOCK` only without it): a
    /// request that must not wait nor dip into reserves (slub's light
    /// attempt at a slab's preferred order).
    pub const NOMEMALLOC: AllocFlags = AllocFlags(1 << 17);
    /// This node only (`__GFP_THISNODE`): the request's zonelist is its
    /// node's zones, no other node's (`ZONELIST_NOFALLBACK`): the node
    /// given to [`alloc_pages_node`](crate::Buddy::alloc_pages_node), or
    /// for [`alloc_pages`](crate::Buddy::alloc_pages) the caller's
    /// [`numa_node_id`](local_lock::Platform::numa_node_id). A node without
    /// memory (or exhausted) fails, where without the flag the request
    /// falls back to the other nodes by distance.
    pub const THISNODE: AllocFlags = AllocFlags(1 << 18);

    /// `PAGE_ALLOC_COSTLY_ORDER`: requests above this order do not retry
    /// without [`RETRY_MAYFAIL`](Self::RETRY_MAYFAIL) or
    /// [`NOFAIL`](Self::NOFAIL).
    pub const COSTLY_ORDER: u8 = 3;

    const ZONE_SHIFT: u32 = 8;
    const ZONE_MASK: u32 = 0xf << Self::ZONE_SHIFT;
    const KNOWN: u32 = 0x3f | Self::ZONE_MASK | 0x7f << 12;

    /// Restricts the request to `zone` and the zones below it (the highest
    /// zone of its zonelist, `gfp_zone()`): a zone **type** (`0..nr_zones`),
    /// which applies on every node of the zonelist.
    #[inline(always)]
    pub const fn zone_max(self, zone: ZoneId) -> AllocFlags {
        let z = if zone.0 as usize >= MAX_ZONES {
            MAX_ZONES as u32 - 1
        } else {
            zone.0 as u32
        };
        AllocFlags((self.0 & !Self::ZONE_MASK) | ((z + 1) << Self::ZONE_SHIFT))
    }

    /// The zone constraint, if any.
    #[inline(always)]
    pub const fn max_zone(self) -> Option<ZoneId> {
        let z = (self.0 & Self::ZONE_MASK) >> Self::ZONE_SHIFT;
        if z == 0 {
            None
        } else {
            Some(ZoneId((z - 1) as u8))
        }
    }

    /// Whether all of `other`'s flag bits are set.
    #[inline(always)]
    pub const fn contains(self, other: AllocFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of flags (the zone constraint of `other` wins if it has
    /// one).
    #[inline(always)]
    pub const fn union(self, other: AllocFlags) -> AllocFlags {
        if other.0 & Self::ZONE_MASK != 0 {
            AllocFlags((self.0 & !Self::ZONE_MASK) | other.0)
        } else {
            AllocFlags(self.0 | other.0)
        }
    }

    /// `self` without `other`'s flag bits (and without the zone constraint
    /// if `other` has one): e.g. the page flags of a slab request, less
    /// [`ZEROED`](Self::ZEROED), which is for the object.
    #[inline(always)]
    pub const fn difference(self, other: AllocFlags) -> AllocFlags {
        let mut bits = self.0 & !(other.0 & !Self::ZONE_MASK);
        if other.0 & Self::ZONE_MASK != 0 {
            bits &= !Self::ZONE_MASK;
        }
        AllocFlags(bits)
    }

    /// The raw bits.
    #[inline(always)]
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits (unknown bits dropped).
    #[inline(always)]
    pub const fn from_bits_truncate(bits: u32) -> AllocFlags {
        AllocFlags(bits & Self::KNOWN)
    }
}

impl BitOr for AllocFlags {
    type Output = AllocFlags;
    #[inline(always)]
    fn bitor(self, rhs: AllocFlags) -> AllocFlags {
        self.union(rhs)
    }
}

impl BitOrAssign for AllocFlags {
    #[inline(always)]
    fn bitor_assign(&mut self, rhs: AllocFlags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for AllocFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(AllocFlags, &str); 13] = [
            (AllocFlags::ONLY_ZERO, "ONLY_ZERO"),
            (AllocFlags::ZEROED, "ZEROED"),
            (AllocFlags::HIGH, "HIGH"),
            (AllocFlags::NONBLOCK, "NONBLOCK"),
            (AllocFlags::COLD, "COLD"),
            (AllocFlags::COMP, "COMP"),
            (AllocFlags::NOWARN, "NOWARN"),
            (AllocFlags::NORETRY, "NORETRY"),
            (AllocFlags::RETRY_MAYFAIL, "RETRY_MAYFAIL"),
            (AllocFlags::NOFAIL, "NOFAIL"),
            (AllocFlags::MEMALLOC, "MEMALLOC"),
            (AllocFlags::NOMEMALLOC, "NOMEMALLOC"),
            (AllocFlags::THISNODE, "THISNODE"),
        ];
        let mut first = true;
        let mut shown = 0;
        f.write_str("AllocFlags(")?;
        for (flag, name) in NAMES {
            if self.contains(flag) && shown & flag.0 != flag.0 {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                shown |= flag.0;
                first = false;
            }
        }
        if let Some(z) = self.max_zone() {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "zone_max({})", z.0)?;
            first = false;
        }
        if first {
            f.write_str("NONE")?;
        }
        f.write_str(")")
    }
}

/// How a block comes back ([`free_pages_flags`](crate::Buddy::free_pages_flags)).
///
/// ```
/// use buddy::{AllocFlags, FreeFlags, Order, Stat};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::ZERO, AllocFlags::ZEROED).unwrap();
/// assert!(p.zero);
/// // SAFETY: our order-0 block, never written (it still reads as zero), freed once.
/// unsafe { heap.free_pages_flags(p.ptr, p.order, FreeFlags::ZERO | FreeFlags::COLD) };
/// assert_eq!(heap.stat(Stat::FREE_ZERO), 1, "freed as still zero: it keeps PG_zero");
/// assert!((FreeFlags::ZERO | FreeFlags::COLD).contains(FreeFlags::COLD));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct FreeFlags(u32);

impl FreeFlags {
    /// A plain free: contents unknown, placement by the kernel's rule.
    pub const NONE: FreeFlags = FreeFlags(0);
    /// The caller knows the block still reads as zero: it keeps PG_zero.
    pub const ZERO: FreeFlags = FreeFlags(1 << 0);
    /// Cold: put the block at the tail of its free list (`FPI_TO_TAIL`).
    pub const COLD: FreeFlags = FreeFlags(1 << 1);
    /// The caller gave the block's memory back to the OS before freeing it
    /// ([`BuddySource::purge`](crate::BuddySource::purge)): it is freed as
    /// purged and known zero, and counted in `Stat::PURGE` /
    /// `Stat::PURGED_BYTES` (the release of a large block at once,
    /// [`PurgePolicy::release_order`]). Implies [`ZERO`](Self::ZERO).
    pub const PURGED: FreeFlags = FreeFlags(1 << 2);

    /// Whether all of `other`'s bits are set.
    #[inline(always)]
    pub const fn contains(self, other: FreeFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for FreeFlags {
    type Output = FreeFlags;
    #[inline(always)]
    fn bitor(self, rhs: FreeFlags) -> FreeFlags {
        FreeFlags(self.0 | rhs.0)
    }
}

// ---------------------------------------------------------------------------
// Page: an allocated block
// ---------------------------------------------------------------------------

/// A block handed out by (or returned to) the buddy: its first byte, order,
/// and whether it is known to read as zero.
///
/// From an allocation, `zero` is true when the block reads as zero: always
/// for a [`ZEROED`](AllocFlags::ZEROED) single allocation (cleared if it was
/// not known zero), and for other requests when the block happened to be
/// known zero. Bulk allocations never clear; `zero` tells. It describes the
/// block when it was handed out: [`free_bulk`](crate::Buddy::free_bulk)
/// ignores it (the holder may have written to the block); only
/// [`free_bulk_keep_zero`](crate::Buddy::free_bulk_keep_zero), whose caller
/// states that its zero-flagged blocks still read as zero, keeps it.
///
/// ```
/// use buddy::{AllocFlags, Order, ZoneId};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::new(1).unwrap(), AllocFlags::ZEROED).unwrap();
/// assert_eq!(p.order.pages(), 2);
/// assert_eq!(p.addr() % 8192, 0, "naturally aligned");
/// assert!(p.zero, "a ZEROED request reads as zero");
/// // SAFETY: the block is ours: two pages.
/// unsafe { p.ptr.as_ptr().write_bytes(0xab, 8192) };
/// // SAFETY: our block, of its order, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
///
/// // Bulk allocation (pcp's refill) says which blocks are known zero.
/// let mut pages = Vec::new();
/// let n = heap.alloc_bulk(ZoneId::new(0), Order::ZERO, AllocFlags::NONE, 8, |p| pages.push(p));
/// assert_eq!(n, 8);
/// // SAFETY: our blocks, freed once (`free_bulk` ignores `Page::zero`).
/// assert_eq!(unsafe { heap.free_bulk(ZoneId::new(0), pages) }, 8);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Page {
    /// The block's first byte (with the provenance of the managed memory).
    pub ptr: NonNull<u8>,
    /// The block's order.
    pub order: Order,
    /// Whether the block is known to read as zero.
    pub zero: bool,
}

// SAFETY: a `Page` is an address and two plain values; it grants nothing by
// itself (freeing it is `unsafe` and validated), so it may move between
// threads (a remote pcp drain frees pages another CPU allocated).
unsafe impl Send for Page {}
// SAFETY: as above; shared references give only reads of plain values.
unsafe impl Sync for Page {}

impl Page {
    /// The block's address.
    #[inline(always)]
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// One zone of a [`Config`].
///
/// ```
/// use buddy::{Config, ZoneSpec};
/// const CFG: Config = Config::new(4096, 10).with_zones(&[
///     ZoneSpec { name: "DMA32", end: 1 << 32 },
///     // The last zone reaches the end of the address space whatever its `end`.
///     ZoneSpec { name: "Normal", end: 0 },
/// ]);
/// assert_eq!(CFG.nr_zones(), 2);
/// assert_eq!(CFG.zones()[0], ZoneSpec { name: "DMA32", end: 1 << 32 });
/// assert_eq!(CFG.zones()[1].end, usize::MAX);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZoneSpec {
    /// Name shown by `/proc/buddyinfo`-style reports ("DMA32", "Normal").
    pub name: &'static str,
    /// First address above the zone (exclusive), a multiple of the largest
    /// block size so buddies never straddle zones. Ignored for the last zone,
    /// which reaches the top of the address space.
    pub end: usize,
}

/// The kernel's watermark and reserve tunables (`/proc/sys/vm`).
///
/// ```
/// use buddy::{Buddy, Config, Tunables, ZoneId};
/// use local_lock::std_platform::StdCpu;
/// let t = Tunables { watermark_scale_factor: 100, ..Tunables::NO_MIN };
/// // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// let mut mem = vec![0u8; 1 << 20];
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(t));
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// assert_eq!(heap.watermarks(ZoneId::new(0)).min, 0);
/// // The sysctls can change at any time: the kernel's defaults give a floor.
/// heap.set_tunables(Tunables::KERNEL);
/// assert_eq!(heap.tunables(), Tunables::KERNEL);
/// assert!(heap.watermarks(ZoneId::new(0)).min > 0);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tunables {
    /// `vm.min_free_kbytes`, split over the zones by size. `None`: the
    /// kernel's default `sqrt(managed_kbytes * 16)` clamped to
    /// `[128, 262144]`.
    pub min_free_kbytes: Option<usize>,
    /// `vm.watermark_scale_factor` (in 1/10000 of a zone): the gap between
    /// min, low and high is at least this fraction of the zone.
    pub watermark_scale_factor: usize,
    /// `vm.lowmem_reserve_ratio[zone]`: zone `i` keeps
    /// `managed(i+1..=j) / ratio[i]` pages from requests that could have
    /// used zone `j > i`. 0 disables the protection of that zone.
    pub lowmem_reserve_ratio: [usize; MAX_ZONES],
}

impl Tunables {
    /// The kernel's defaults (min_free_kbytes from the memory size, scale
    /// factor 10, ratios 256 for the low zones and 32 for NORMAL).
    pub const KERNEL: Tunables = Tunables {
        min_free_kbytes: None,
        watermark_scale_factor: 10,
        lowmem_reserve_ratio: [256, 256, 32, 0],
    };

    /// No min watermark (a heap that grows on demand, e.g. [`GlobalBuddy`](crate::GlobalBuddy));
    /// low/high still follow the scale factor, reserves still protect low zones.
    pub const NO_MIN: Tunables = Tunables {
        min_free_kbytes: Some(0),
        ..Tunables::KERNEL
    };
}

/// The allocator's shape: page size, largest order, zones and tunables.
/// Built at compile time (`const`) for a `static` allocator.
///
/// ```
/// use buddy::{Config, ZoneSpec};
/// // 4 KiB pages, 4 MiB blocks, a DMA32 zone below 4 GiB and Normal above.
/// const CFG: Config = Config::new(4096, 10).with_zones(&[
///     ZoneSpec { name: "DMA32", end: 1 << 32 },
///     ZoneSpec { name: "Normal", end: usize::MAX },
/// ]);
/// assert_eq!(CFG.max_block_size(), 4 << 20);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Config {
    page_shift: u8,
    max_order: Order,
    nr_zones: u8,
    zones: [ZoneSpec; MAX_ZONES],
    tunables: Tunables,
    purge: PurgePolicy,
}

/// When free memory goes back to the OS, for page sources that can purge
/// ([`BuddySource::purge`](crate::BuddySource::purge); `no_std` sources
/// that do not are unaffected): whole free blocks of at least
/// [`order`](Self::order) are purged by `trim` at once, and by the decay
/// scans (jemalloc's `dirty_decay_ms`, run on slow paths, no background
/// thread) once free for [`decay_ms`](Self::decay_ms), while the zone keeps
/// [`retain_pages`](Self::retain_pages) resident free pages (the kernel's
/// high watermark by default).
///
/// ```
/// use buddy::{Buddy, Config, PurgePolicy, Tunables, ZoneId};
/// use local_lock::std_platform::StdCpu;
/// // Only `trim` purges (no decay), from order 9: clamped to the largest order 4.
/// let policy = PurgePolicy { decay_ms: None, ..PurgePolicy::DEFAULT };
/// let cfg = Config::new(4096, 4).with_tunables(Tunables::NO_MIN).with_purge(policy);
/// assert_eq!(cfg.purge_order().get(), 4);
/// // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// let mut mem = vec![0u8; 1 << 20];
/// let heap = Buddy::new(StdCpu, cfg);
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// // A purge hook must leave the block reading as zero (the OS's
/// // `MADV_DONTNEED` does); this one clears it.
/// let bytes = heap.trim_with(|block, len| {
///     // SAFETY: a free block of `len` bytes of our memory, held by the purge.
///     unsafe { block.as_ptr().write_bytes(0, len) };
///     true
/// });
/// assert!(bytes >= 64 << 10, "at least one 64 KiB block");
/// assert_eq!(heap.nr_purged_pages(ZoneId::new(0)), bytes / 4096);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PurgePolicy {
    /// The smallest order purged (pageblock order 9 with 4 KiB pages by
    /// default; clamped to the largest order).
    pub order: u8,
    /// A free block seen free by two decay scans this many milliseconds
    /// apart is purged; `None`: only `trim` purges. Scans run at most every
    /// quarter of it, so a block is purged after `decay_ms` to `1.5 x
    /// decay_ms` of being free (if slow paths run meanwhile).
    pub decay_ms: Option<u64>,
    /// Resident free pages per zone the decay keeps (`trim` purges them
    /// too); `None`: the zone's high watermark.
    pub retain_pages: Option<usize>,
    /// glibc's mmap threshold for blocks served from the buddy: a block of
    /// at least this order freed through a std heap (`GlobalBuddy`'s
    /// `dealloc`, pcp's frees that bypass its lists, so `GlobalPcp` and
    /// `GlobalSlub` too) is purged before it is freed, so its memory goes
    /// back at once instead of waiting for the decay
    /// ([`BuddySource::free_or_release`](crate::BuddySource::free_or_release)).
    /// Clamped to the largest order. `None` (the default): off; a program
    /// that frees and reallocates large blocks would otherwise pay an
    /// `madvise` and the page faults each time.
    pub release_order: Option<u8>,
    /// The most resident free pages a zone keeps between decay scans
    /// (jemalloc's limit on dirty pages, glibc's `M_TRIM_THRESHOLD`): a
    /// std heap that finds more after a free (its decay hook, at most every
    /// [`CAP_CHECK_MS`] ms, on the same slow paths) purges blocks at or
    /// above the purge order, largest first, down to it at once, whatever
    /// their age. So a burst of large frees goes back within milliseconds,
    /// while a program that frees and reallocates less than this keeps its
    /// pages resident (no `madvise`, no page faults). `None`: no cap (only
    /// the decay and `trim` purge). Default 8192 pages (32 MiB with 4 KiB
    /// pages: the issue's bound on RSS above the live data).
    pub max_resident_pages: Option<usize>,
    /// The cap grows with the heap: a zone keeps up to its pages in use
    /// (managed and not free) shifted right by this many bits, when that
    /// is more than [`max_resident_pages`](Self::max_resident_pages)
    /// (glibc's trim threshold grows with the mmap threshold, jemalloc's
    /// dirty pages are bounded by the decay only). `None` (the default):
    /// the cap is fixed. A C heap with a 128 KiB cap and a 50 MiB working
    /// set purged and faulted the same pages again and again (python's
    /// stdlib tests: 111k page faults, 92k with an 8 MiB cap; glibc 62k),
    /// while a small program's peak RSS wants the small cap.
    pub resident_shift: Option<u8>,
}

/// How often (ms, at most) a std heap checks
/// [`PurgePolicy::max_resident_pages`] (one zone-lock acquisition each).
pub const CAP_CHECK_MS: u64 = 10;

impl PurgePolicy {
    /// The default: order 9, 5 s decay (purged within 7.5 s), keep the
    /// high watermark resident.
    pub const DEFAULT: PurgePolicy = PurgePolicy {
        order: 9,
        decay_ms: Some(5000),
        retain_pages: None,
        release_order: None,
        max_resident_pages: Some(8192),
        resident_shift: None,
    };
}

impl PurgePolicy {
    /// Purging only by `trim`, of free blocks from `order` up: no decay,
    /// no resident cap (test harnesses and benchmarks that decide when
    /// memory goes back).
    ///
    /// ```
    /// let p = buddy::PurgePolicy::trim_only(1);
    /// assert_eq!((p.order, p.decay_ms, p.max_resident_pages), (1, None, None));
    /// ```
    pub const fn trim_only(order: u8) -> PurgePolicy {
        PurgePolicy {
            order,
            decay_ms: None,
            max_resident_pages: None,
            ..PurgePolicy::DEFAULT
        }
    }
}

impl Default for PurgePolicy {
    fn default() -> Self {
        PurgePolicy::DEFAULT
    }
}

impl Config {
    /// The kernel's default shape: 4 KiB pages, `MAX_ORDER` 10 (4 MiB
    /// blocks), one zone "Normal", kernel tunables.
    pub const DEFAULT: Config = Config::new(4096, 10);

    /// Pages of `page_size` bytes (a power of two, at least 16) and blocks up
    /// to `max_order`, one zone "Normal", kernel tunables.
    ///
    /// # Panics
    ///
    /// On an invalid shape (at compile time in a const context).
    pub const fn new(page_size: usize, max_order: u8) -> Config {
        assert!(
            page_size.is_power_of_two() && page_size >= 16,
            "buddy::Config: page size must be a power of two >= 16"
        );
        assert!(
            max_order <= ORDER_LIMIT,
            "buddy::Config: max_order above ORDER_LIMIT"
        );
        let page_shift = page_size.trailing_zeros();
        assert!(
            page_shift + (max_order as u32) < usize::BITS - 1,
            "buddy::Config: largest block does not fit the address space"
        );
        const NONE: ZoneSpec = ZoneSpec {
            name: "",
            end: usize::MAX,
        };
        let mut zones = [NONE; MAX_ZONES];
        zones[0] = ZoneSpec {
            name: "Normal",
            end: usize::MAX,
        };
        Config {
            page_shift: page_shift as u8,
            max_order: Order(max_order),
            nr_zones: 1,
            zones,
            tunables: Tunables::KERNEL,
            purge: PurgePolicy::DEFAULT,
        }
    }

    /// The same shape with these zones (lowest first).
    ///
    /// # Panics
    ///
    /// If there are none or more than [`MAX_ZONES`], or the ends of all but
    /// the last zone are not increasing multiples of the largest block size.
    pub const fn with_zones(mut self, zones: &[ZoneSpec]) -> Config {
        assert!(
            !zones.is_empty() && zones.len() <= MAX_ZONES,
            "buddy::Config: 1..=MAX_ZONES zones"
        );
        let block = self.max_block_size();
        let mut i = 0;
        let mut prev = 0;
        while i < zones.len() {
            let mut z = zones[i];
            if i + 1 == zones.len() {
                z.end = usize::MAX;
            } else {
                assert!(
                    z.end.is_multiple_of(block) && z.end > prev,
                    "buddy::Config: zone ends must increase and be multiples of the largest block"
                );
                prev = z.end;
            }
            self.zones[i] = z;
            i += 1;
        }
        self.nr_zones = zones.len() as u8;
        self
    }

    /// The same shape with these tunables.
    pub const fn with_tunables(mut self, tunables: Tunables) -> Config {
        self.tunables = tunables;
        self
    }

    /// The same shape with this purge policy.
    pub const fn with_purge(mut self, purge: PurgePolicy) -> Config {
        self.purge = purge;
        self
    }

    /// The purge policy.
    #[inline(always)]
    pub const fn purge(&self) -> PurgePolicy {
        self.purge
    }

    /// The smallest order released at once when freed (the policy's
    /// [`release_order`](PurgePolicy::release_order), clamped to
    /// `max_order`), or `None`.
    #[inline(always)]
    pub const fn release_order(&self) -> Option<Order> {
        match self.purge.release_order {
            Some(o) if o < self.max_order.0 => Some(Order(o)),
            Some(_) => Some(self.max_order),
            None => None,
        }
    }

    /// The smallest order purged (the policy's, clamped to `max_order`).
    #[inline(always)]
    pub const fn purge_order(&self) -> Order {
        if self.purge.order < self.max_order.0 {
            Order(self.purge.order)
        } else {
            self.max_order
        }
    }

    /// Bytes per page.
    #[inline(always)]
    pub const fn page_size(&self) -> usize {
        1 << self.page_shift
    }
    /// log2 of the page size.
    #[inline(always)]
    pub const fn page_shift(&self) -> u32 {
        self.page_shift as u32
    }
    /// The largest order (`MAX_ORDER`, 6.4+ meaning).
    #[inline(always)]
    pub const fn max_order(&self) -> Order {
        self.max_order
    }
    /// Bytes in a block of the largest order.
    #[inline(always)]
    pub const fn max_block_size(&self) -> usize {
        1 << (self.page_shift + self.max_order.0)
    }
    /// Bytes in a block of `order`.
    #[inline(always)]
    pub const fn block_size(&self, order: Order) -> usize {
        1 << (self.page_shift + order.0)
    }
    /// Number of zones.
    #[inline(always)]
    pub const fn nr_zones(&self) -> usize {
        self.nr_zones as usize
    }
    /// The zones' specifications.
    #[inline(always)]
    pub fn zones(&self) -> &[ZoneSpec] {
        &self.zones[..self.nr_zones as usize]
    }
    /// The tunables the allocator starts with.
    #[inline(always)]
    pub const fn tunables(&self) -> Tunables {
        self.tunables
    }

    /// The zone an address belongs to (`page_zone`).
    #[inline(always)]
    pub const fn zone_of_addr(&self, addr: usize) -> ZoneId {
        // One zone (the common shape): no walk (one compare on pcp's free
        // path, issue #22).
        if self.nr_zones <= 1 {
            return ZoneId(0);
        }
        let mut i = 0;
        while i + 1 < self.nr_zones as usize {
            if addr < self.zones[i].end {
                return ZoneId(i as u8);
            }
            i += 1;
        }
        ZoneId(i as u8)
    }

    /// The highest zone whose addresses all lie below `limit` (e.g. "below
    /// 4 GiB" for a 32-bit DMA engine), if any.
    pub const fn zone_below(&self, limit: usize) -> Option<ZoneId> {
        let mut i = self.nr_zones as usize;
        while i > 0 {
            i -= 1;
            let end = if i + 1 == self.nr_zones as usize {
                usize::MAX
            } else {
                self.zones[i].end
            };
            if end <= limit || (end == usize::MAX && limit == usize::MAX) {
                return Some(ZoneId(i as u8));
            }
        }
        None
    }

    /// The order of the block that honours `size` and `align` (a `Layout`),
    /// if it is at most `max_order`.
    #[inline]
    pub const fn order_for(&self, size: usize, align: usize) -> Option<Order> {
        let bytes = if size > align { size } else { align };
        let pages = match bytes.checked_add(self.page_size() - 1) {
            Some(b) => b >> self.page_shift,
            None => return None,
        };
        match Order::for_pages(pages) {
            Some(o) if o.0 <= self.max_order.0 => Some(o),
            _ => None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}

// ---------------------------------------------------------------------------
// Watermarks and statistics
// ---------------------------------------------------------------------------

/// A zone's watermarks in pages (`_watermark[WMARK_MIN..=WMARK_HIGH]`).
///
/// `min` is the floor for ordinary requests (the kernel's slow path with no
/// reclaim to wait for), [`HIGH`](AllocFlags::HIGH) and
/// [`ATOMIC`](AllocFlags::ATOMIC) requests may go below it by the kernel's
/// fractions; `low` is where kswapd would be woken (and what pcp derives its
/// `high` from); `high` is the balance goal.
///
/// ```
/// use buddy::{AllocFlags, Buddy, Config, Order, ZoneId};
/// use local_lock::std_platform::StdCpu;
/// // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// let mut mem = vec![0u8; 1 << 20];
/// // The kernel's tunables: min_free_kbytes 128 on a 1 MiB zone.
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4));
/// // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let w = heap.watermarks(ZoneId::new(0));
/// assert_eq!(w.min, 128 / 4, "128 KiB in 4 KiB pages");
/// assert!(w.min < w.low && w.low < w.high);
/// assert!(heap.watermark_ok(ZoneId::new(0), Order::ZERO, AllocFlags::NONE));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Watermarks {
    /// `WMARK_MIN`.
    pub min: usize,
    /// `WMARK_LOW = min + max(min/4, managed * scale / 10000)`.
    pub low: usize,
    /// `WMARK_HIGH = low + max(min/4, managed * scale / 10000)`.
    pub high: usize,
}

local_lock::stat_items! {
    /// Per-zone event counters, summed over zones on read
    /// ([`Buddy::stat`](crate::Buddy::stat)); the text names are this
    /// crate's report names.
    ///
    /// ```
    /// use buddy::{AllocFlags, Order, Stat};
    /// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
    /// # let mut mem = vec![0u8; 1 << 20];
    /// # // A 1 MiB heap, as in `Buddy`'s example.
    /// # let heap = buddy::Buddy::new(
    /// #     local_lock::std_platform::StdCpu,
    /// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
    /// # );
    /// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
    /// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
    /// assert_eq!(Stat::MERGE.name(), "merge");
    /// assert_eq!(Stat::ALL.len(), Stat::COUNT);
    /// let p = heap.alloc_pages(Order::ZERO, AllocFlags::NONE).unwrap();
    /// assert_eq!(heap.stat(Stat::ALLOC), 1);
    /// assert_eq!(heap.stat(Stat::ZONE_FAIL), 0);
    /// // SAFETY: our block, freed once.
    /// unsafe { heap.free_pages(p.ptr, p.order) };
    /// assert_eq!(heap.stat(Stat::FREE), 1);
    /// ```
    pub enum Stat;
    /// One zone's counters, or their sum.
    ///
    /// ```
    /// use buddy::{Stat, ZoneStats};
    /// let mut a = ZoneStats::ZERO;
    /// a.inc(Stat::ALLOC);
    /// a.add(Stat::SPLIT, 3);
    /// let mut sum = a;
    /// sum.merge(&a); // two zones' counters
    /// assert_eq!(sum.get(Stat::SPLIT), 6);
    /// assert_eq!(a.delta(&sum), a, "what changed from `a` to `sum`");
    /// // One `name value` line per item (zeros included).
    /// assert_eq!(a.to_string().lines().count(), Stat::COUNT);
    /// ```
    pub struct ZoneStats [width = 16, zeros = true];
    items {
        /// Blocks handed out (single and bulk; `stats` feature, else 0).
        ALLOC = "alloc",
        /// Attempts on this zone that found no block or failed the watermark
        /// (the request then fell back to a lower zone, or failed).
        ZONE_FAIL = "zone_fail",
        /// Of those, attempts stopped by the watermark (with `lowmem_reserve`).
        WATERMARK_FAIL = "watermark_fail",
        /// Blocks returned (single and bulk; `stats` feature, else 0).
        FREE = "free",
        /// Blocks returned as still zero (`free_pages_zeroed`).
        FREE_ZERO = "free_zero",
        /// Halvings in `expand` (`stats` feature, else 0).
        SPLIT = "split",
        /// Buddy merges in `__free_one_page` (`stats` feature, else 0).
        MERGE = "merge",
        /// Single requests with `ZEROED` served by this zone.
        ZEROED_REQUEST = "zeroed_request",
        /// Of those, served from known-zero memory without clearing a byte.
        ZEROED_NO_CLEAR = "zeroed_no_clear",
        /// Of those, that had to clear the block (or only its non-zero half).
        ZEROED_CLEARED = "zeroed_cleared",
        /// Bytes cleared for `ZEROED` requests.
        BYTES_CLEARED = "bytes_cleared",
        /// `ONLY_ZERO` attempts this zone had no known-zero block for.
        ONLY_ZERO_FAIL = "only_zero_fail",
        /// Known-zero blocks handed to requests that did not ask for zeroes (the
        /// zero information is spent; bulk blocks report it in `Page::zero`).
        ZERO_SPENT = "zero_spent",
        /// Free blocks given back to the OS (purged: `trim` or decay).
        PURGE = "purge",
        /// Bytes purged.
        PURGED_BYTES = "purged_bytes",
        /// Requests that failed after the slow path (growth, reclaim,
        /// retries), counted in the request's highest zone.
        ALLOC_FAIL = "alloc_fail",
        /// Of those, reported (`warn_alloc`: not `NOWARN`).
        WARN_ALLOC = "warn_alloc",
        /// Requests served below the min watermark because of `MEMALLOC`
        /// (`ALLOC_NO_WATERMARKS`).
        NO_WATERMARKS = "no_watermarks",
        /// Rounds of the source's reclaim hook run by blocking requests.
        RECLAIM = "reclaim",
        /// Pages the reclaim hook said it reclaimed.
        RECLAIMED_PAGES = "reclaimed_pages",
    }
}
