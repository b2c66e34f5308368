//! Watermarks and reserves (`setup_per_zone_wmarks`,
//! `setup_per_zone_lowmem_reserve`), the tunables that shape them, and the
//! lock-free reads pcp sizes its lists from.

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use super::Buddy;
use crate::types::{AllocFlags, Order, Tunables, Watermarks, ZoneId, MAX_ZONES, MAX_ZONE_IDS};

impl<P: Platform> Buddy<P> {
    /// `setup_per_zone_wmarks` + `setup_per_zone_lowmem_reserve`: the
    /// kernel's formulas from the zones' managed sizes and the tunables:
    /// `min_free_kbytes` shared by every zone of every node in proportion
    /// to its size, each zone's `lowmem_reserve` from the higher zones of
    /// its own node.
    pub(super) fn setup_zones(&self, t: &Tunables) {
        let nz = self.cfg.nr_zones();
        let nzi = self.nr_zone_ids();
        let mut managed = [0usize; MAX_ZONE_IDS];
        for (z, m) in managed.iter_mut().enumerate().take(nzi) {
            *m = self.zones[z].managed.load(Ordering::Relaxed);
        }
        let total: usize = managed.iter().sum();
        let page = self.cfg.page_size() as u128;
        let min_kbytes = match t.min_free_kbytes {
            Some(k) => k as u128,
            None => {
                let kb = total as u128 * page / 1024;
                int_sqrt(kb * 16).clamp(128, 262_144)
            }
        };
        let pages_min = min_kbytes * 1024 / page;
        for z in 0..nzi {
            let (ty, base) = (z % nz, z - z % nz);
            let m = managed[z] as u128;
            let min = if total == 0 {
                0
            } else {
                pages_min * m / total as u128
            };
            let tmp = (min / 4).max(m * t.watermark_scale_factor as u128 / 10_000);
            let sat = |v: u128| v.min(usize::MAX as u128) as usize;
            let wm = Watermarks {
                min: sat(min),
                low: sat(min + tmp),
                high: sat(min + 2 * tmp),
            };
            let mut reserve = [0usize; MAX_ZONES];
            let ratio = t.lowmem_reserve_ratio[ty];
            let clear = ratio == 0 || managed[z] == 0;
            let mut acc = 0usize;
            for j in ty + 1..nz {
                acc += managed[base + j];
                reserve[j] = if clear { 0 } else { acc / ratio };
            }
            let mut g = self.lock_zone(z);
            g.wmark = wm;
            g.lowmem_reserve = reserve;
            drop(g);
            let w = &self.zones[z].wmark;
            w[0].store(wm.min, Ordering::Relaxed);
            w[1].store(wm.low, Ordering::Relaxed);
            w[2].store(wm.high, Ordering::Relaxed);
            for (a, r) in self.zones[z].reserve.iter().zip(reserve) {
                a.store(r, Ordering::Relaxed);
            }
        }
    }

    /// The current tunables.
    pub fn tunables(&self) -> Tunables {
        *self.lock_resize()
    }

    /// Changes the tunables (`sysctl vm.*`) and recomputes watermarks and
    /// reserves.
    pub fn set_tunables(&self, t: Tunables) {
        let mut g = self.lock_resize();
        *g = t;
        self.setup_zones(&g);
    }

    /// Pages given to `zone` (lock-free; for pcp's batch/high).
    #[inline]
    pub fn managed_pages(&self, zone: ZoneId) -> usize {
        self.zones[zone.index()].managed.load(Ordering::Relaxed)
    }

    /// `zone`'s watermarks (lock-free; for pcp's high).
    #[inline]
    pub fn watermarks(&self, zone: ZoneId) -> Watermarks {
        let w = &self.zones[zone.index()].wmark;
        Watermarks {
            min: w[0].load(Ordering::Relaxed),
            low: w[1].load(Ordering::Relaxed),
            high: w[2].load(Ordering::Relaxed),
        }
    }

    /// Whether a request could be served by `zone` now, by the watermark
    /// (exact, under the lock; the block search is not included).
    pub fn watermark_ok(&self, zone: ZoneId, order: Order, flags: AllocFlags) -> bool {
        // `lowmem_reserve[j]` is 0 up to the zone's own type.
        let highest = self.highest_zone(flags);
        self.lock_zone(zone.index())
            .watermark_ok(order, flags, highest)
    }
}

/// Integer square root (floor).
fn int_sqrt(x: u128) -> u128 {
    if x < 2 {
        return x;
    }
    let mut r = x;
    let mut y = r.div_ceil(2);
    while y < r {
        r = y;
        y = (r + x / r) / 2;
    }
    r
}
