//! Observability: `/proc/buddyinfo` (`Display`), `/proc/zoneinfo`
//! ([`Buddy::zoneinfo`], [`ZoneInfo`]), counters and the address queries
//! (`page_zone`, pfn, ownership).

use core::fmt;

use local_lock::Platform;

use super::Buddy;
use crate::types::{Order, Pfn, Stat, Watermarks, ZoneId, MAX_ZONES, ORDER_SLOTS};

/// A snapshot of one zone (`/proc/zoneinfo`-style), taken under its lock.
///
/// ```
/// use buddy::{AllocFlags, Order, Stat, ZoneId};
/// # // 1 MiB of zeroed memory, declared first: it outlives the allocator.
/// # let mut mem = vec![0u8; 1 << 20];
/// # // A 1 MiB heap, as in `Buddy`'s example.
/// # let heap = buddy::Buddy::new(
/// #     local_lock::std_platform::StdCpu,
/// #     buddy::Config::new(4096, 4).with_tunables(buddy::Tunables::NO_MIN),
/// # );
/// # // SAFETY: `mem` outlives `heap`, nothing else uses it, and it reads as zero.
/// # unsafe { heap.add_region(mem.as_mut_ptr(), mem.len(), true) }.unwrap();
/// let p = heap.alloc_pages(Order::ZERO, AllocFlags::NONE).unwrap();
/// let info = heap.zone_info(ZoneId::new(0));
/// assert_eq!(info.name, "Normal");
/// assert_eq!(info.free, info.managed - 1);
/// assert_eq!(info.free, heap.nr_free_pages(ZoneId::new(0)));
/// assert_eq!(info.stat(Stat::ALLOC), 1);
/// assert_eq!(info.max_order.get(), 4);
/// // `/proc/zoneinfo`-style text for every zone.
/// assert!(heap.zoneinfo().to_string().contains("Normal"));
/// // SAFETY: our block, freed once.
/// unsafe { heap.free_pages(p.ptr, p.order) };
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ZoneInfo {
    /// The zone.
    pub zone: ZoneId,
    /// Its node.
    pub node: usize,
    /// Its name.
    pub name: &'static str,
    /// Pages given to it.
    pub managed: usize,
    /// Pages on its free lists.
    pub free: usize,
    /// Of those, pages given back to the OS (purged); `free - purged` are
    /// resident.
    pub purged: usize,
    /// Its watermarks.
    pub watermarks: Watermarks,
    /// `lowmem_reserve[j]`.
    pub lowmem_reserve: [usize; MAX_ZONES],
    /// Free blocks per order (both lists).
    pub free_blocks: [usize; ORDER_SLOTS],
    /// Of those, known-zero blocks per order.
    pub zero_blocks: [usize; ORDER_SLOTS],
    /// Event counters, indexed by [`Stat`].
    pub stats: [u64; Stat::COUNT],
    /// The allocator's largest order.
    pub max_order: Order,
    /// The page size in bytes (for the byte figures).
    pub page_size: usize,
}

impl ZoneInfo {
    /// A counter.
    pub fn stat(&self, s: Stat) -> u64 {
        self.stats[s as usize]
    }
}

impl fmt::Display for ZoneInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.max_order.index();
        writeln!(f, "Node {}, zone {:>8}", self.node, self.name)?;
        writeln!(f, "  pages free     {}", self.free)?;
        writeln!(f, "        purged   {}", self.purged)?;
        writeln!(f, "        resident {}", self.free - self.purged)?;
        // The same in bytes: what the zone maps (managed: a std heap maps
        // every page it manages), holds free and resident, and gave back.
        let b = |pages: usize| pages * self.page_size;
        writeln!(
            f,
            "  bytes managed {} free_resident {} purged {}",
            b(self.managed),
            b(self.free - self.purged),
            b(self.purged)
        )?;
        writeln!(f, "        min      {}", self.watermarks.min)?;
        writeln!(f, "        low      {}", self.watermarks.low)?;
        writeln!(f, "        high     {}", self.watermarks.high)?;
        writeln!(f, "        managed  {}", self.managed)?;
        write!(f, "        protection: (")?;
        for (i, r) in self.lowmem_reserve.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        writeln!(f, ")")?;
        write!(f, "  free blocks   ")?;
        for o in 0..=m {
            write!(f, " {:>6}", self.free_blocks[o])?;
        }
        writeln!(f)?;
        write!(f, "  of them zero  ")?;
        for o in 0..=m {
            write!(f, " {:>6}", self.zero_blocks[o])?;
        }
        writeln!(f)?;
        for s in Stat::ALL {
            writeln!(f, "  {:<16} {}", s.name(), self.stats[*s as usize])?;
        }
        Ok(())
    }
}

impl<P: Platform> Buddy<P> {
    /// Number of zone types (zones per node; all nodes' zones:
    /// [`nr_zone_ids`](Self::nr_zone_ids)).
    #[inline(always)]
    pub fn nr_zones(&self) -> usize {
        self.cfg.nr_zones()
    }

    /// The zone of a managed address (`page_zone`: its node's zone of the
    /// type its address gives); `None` if no span covers it.
    #[inline]
    pub fn zone_of(&self, addr: *const u8) -> Option<ZoneId> {
        let a = addr as usize;
        let f = self.spans.find(a, self.cfg.page_shift())?;
        Some(ZoneId::raw(self.zone_in(&f, a)))
    }

    /// Whether a span of this allocator covers `addr`.
    #[inline]
    pub fn owns(&self, addr: *const u8) -> bool {
        self.spans
            .find(addr as usize, self.cfg.page_shift())
            .is_some()
    }

    /// The page frame number of an address.
    #[inline(always)]
    pub fn pfn_of(&self, addr: *const u8) -> Pfn {
        Pfn(addr as usize >> self.cfg.page_shift())
    }

    /// Pages on `zone`'s free lists (`NR_FREE_PAGES`).
    pub fn nr_free_pages(&self, zone: ZoneId) -> usize {
        self.lock_zone(zone.index()).free
    }

    /// Pages on all free lists (every node).
    pub fn total_free_pages(&self) -> usize {
        (0..self.nr_zone_ids())
            .map(|z| self.nr_free_pages(ZoneId::new(z)))
            .sum()
    }

    /// Pages given to all zones (every node).
    pub fn total_managed_pages(&self) -> usize {
        (0..self.nr_zone_ids())
            .map(|z| self.managed_pages(ZoneId::new(z)))
            .sum()
    }

    /// Free blocks of `order` in `zone` (a `/proc/buddyinfo` column).
    pub fn free_blocks(&self, zone: ZoneId, order: Order) -> usize {
        let g = self.lock_zone(zone.index());
        let (z, d) = g.nr_free(order);
        z + d
    }

    /// A counter summed over the zones (every node).
    pub fn stat(&self, s: Stat) -> u64 {
        (0..self.nr_zone_ids())
            .map(|z| self.lock_zone(z).stats[s as usize])
            .sum()
    }

    /// A snapshot of `zone` (copied under its lock, so printing it never
    /// runs under the lock).
    pub fn zone_info(&self, zone: ZoneId) -> ZoneInfo {
        let g = self.lock_zone(zone.index());
        let mut free_blocks = [0; ORDER_SLOTS];
        let mut zero_blocks = [0; ORDER_SLOTS];
        for o in 0..=self.cfg.max_order().get() {
            let (z, d) = g.nr_free(Order::new(o).unwrap_or(Order::ZERO));
            free_blocks[o as usize] = z + d;
            zero_blocks[o as usize] = z;
        }
        ZoneInfo {
            zone,
            node: self.zone_node(zone),
            name: self.cfg.zones()[self.zone_type_of(zone)].name,
            managed: g.managed,
            free: g.free,
            purged: g.purged,
            watermarks: g.wmark,
            lowmem_reserve: g.lowmem_reserve,
            free_blocks,
            zero_blocks,
            stats: g.stats,
            max_order: self.cfg.max_order(),
            page_size: self.cfg.page_size(),
        }
    }

    /// A `/proc/zoneinfo`-style report of every zone of every node.
    pub fn zoneinfo(&self) -> impl fmt::Display + '_ {
        struct Z<'a, P: Platform>(&'a Buddy<P>);
        impl<P: Platform> fmt::Display for Z<'_, P> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for z in 0..self.0.nr_zone_ids() {
                    fmt::Display::fmt(&self.0.zone_info(ZoneId::new(z)), f)?;
                }
                Ok(())
            }
        }
        Z(self)
    }
}

/// `/proc/buddyinfo`: one line per zone of each node with memory (node 0
/// always), free blocks per order.
///
/// ```text
/// Node 0, zone   Normal      1      0      2 ...
/// Node 1, zone   Normal      0      3      1 ...
/// ```
impl<P: Platform> fmt::Display for Buddy<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in 0..self.nr_zone_ids() {
            let info = self.zone_info(ZoneId::new(z));
            if info.node != 0 && !self.node_has_memory(info.node) {
                continue;
            }
            write!(f, "Node {}, zone {:>8}", info.node, info.name)?;
            for o in 0..=self.cfg.max_order().index() {
                write!(f, " {:>6}", info.free_blocks[o])?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
