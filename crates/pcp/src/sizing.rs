//! `batch` and `high` as the kernel computes them (mm/page_alloc.c,
//! `zone_batchsize`, `zone_highsize`, `nr_pcp_free`), as pure functions so
//! they are tested on their own.

/// Orders that have per-CPU lists: `0..=PAGE_ALLOC_COSTLY_ORDER`.
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;
/// Number of per-CPU list orders.
pub const NR_PCP_ORDERS: usize = PAGE_ALLOC_COSTLY_ORDER as usize + 1;

/// `zone_batchsize`: about a quarter of a megabyte's worth of pages, at most
/// 1/4096 of the zone, rounded to `2^n - 1` (deliberately not a power of two,
/// so successive refills do not keep hitting the same cache colours): 63 on
/// a large zone with 4 KiB pages.
pub const fn zone_batchsize(managed_pages: usize, page_size: usize) -> usize {
    let mut batch = managed_pages >> 10;
    let cap = (1 << 20) / page_size;
    if batch > cap {
        batch = cap;
    }
    batch /= 4;
    if batch < 1 {
        batch = 1;
    }
    // rounddown_pow_of_two(batch + batch / 2) - 1, at least 1.
    let v = batch + batch / 2;
    let p = 1usize << (usize::BITS - 1 - v.leading_zeros());
    if p > 1 {
        p - 1
    } else {
        1
    }
}

/// `zone_highsize`: the zone's low watermark shared out between the CPUs,
/// but at least `4 * batch` so a list can absorb a few batches.
pub const fn zone_highsize(low_wmark: usize, nr_cpus: usize, batch: usize) -> usize {
    let cpus = if nr_cpus == 0 { 1 } else { nr_cpus };
    let high = low_wmark / cpus;
    if high < 4 * batch {
        4 * batch
    } else {
        high
    }
}

/// `nr_pcp_free`: how many pages a free that reached `high` returns to the
/// buddy: `batch << free_factor`, clamped to `[batch, high - batch]` (so the
/// list keeps at least a batch). `free_factor` grows while frees continue
/// without allocations and is halved by allocations.
pub const fn nr_pcp_free(batch: usize, high: usize, free_factor: u32) -> usize {
    let min = batch;
    let max = if high > 2 * batch {
        high - batch
    } else {
        batch
    };
    let want = if free_factor >= usize::BITS {
        usize::MAX
    } else {
        batch.saturating_mul(1 << free_factor)
    };
    if want < min {
        min
    } else if want > max {
        max
    } else {
        want
    }
}

/// Largest useful `free_factor` (beyond it `nr_pcp_free` is clamped anyway).
pub const MAX_FREE_FACTOR: u32 = 5;

/// Pages to refill for an order: `batch` pages for order 0, otherwise
/// `max(batch >> order, 2)` blocks (kernel: `nr_pcp_alloc`).
pub const fn refill_blocks(batch: usize, order: u8) -> usize {
    let b = batch >> order;
    if b < 2 {
        2
    } else {
        b
    }
}

/// The most pages one CPU's lists may hold (`high`): 2^20 (4 GiB of 4 KiB
/// pages; the kernel's `percpu_pagelist_high_fraction` keeps `high` to an
/// eighth of the zone). Larger values are refused by
/// [`Pcp::set_batch_high`](crate::Pcp::set_batch_high), as are values whose batch arithmetic
/// (`batch << free_factor`) could overflow.
pub const MAX_HIGH: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_matches_the_kernel() {
        // 1 GiB zone of 4 KiB pages: 262144 pages -> 63.
        assert_eq!(zone_batchsize(262_144, 4096), 63);
        // 16 GiB: capped at 1 MiB / 4 KiB = 256 -> 64 -> 96 -> 64 - 1.
        assert_eq!(zone_batchsize(4 << 20, 4096), 63);
        // Small zone, 16 MiB: 4096 pages >> 10 = 4, /4 = 1 -> rounddown(1) - 1 -> 1.
        assert_eq!(zone_batchsize(4096, 4096), 1);
        // 64 MiB: 16384 >> 10 = 16, /4 = 4, 4 + 2 = 6 -> 4 - 1 = 3.
        assert_eq!(zone_batchsize(16_384, 4096), 3);
        // 256 MiB: 65536 >> 10 = 64, /4 = 16, 24 -> 16 - 1 = 15.
        assert_eq!(zone_batchsize(65_536, 4096), 15);
        assert_eq!(zone_batchsize(0, 4096), 1);
    }

    #[test]
    fn high_is_at_least_four_batches() {
        assert_eq!(zone_highsize(1000, 2, 63), 500);
        assert_eq!(zone_highsize(100, 2, 63), 252);
        assert_eq!(zone_highsize(100, 0, 1), 100);
    }

    #[test]
    fn drain_size_grows_and_is_clamped() {
        let (batch, high) = (63, 378);
        assert_eq!(nr_pcp_free(batch, high, 0), 63);
        assert_eq!(nr_pcp_free(batch, high, 1), 126);
        assert_eq!(nr_pcp_free(batch, high, 2), 252);
        assert_eq!(nr_pcp_free(batch, high, 3), 315, "clamped to high - batch");
        assert_eq!(nr_pcp_free(batch, high, 64), 315);
        // high too small to keep a batch: free one batch.
        assert_eq!(nr_pcp_free(63, 100, 3), 63);
    }

    #[test]
    fn refill_sizes() {
        assert_eq!(refill_blocks(63, 0), 63);
        assert_eq!(refill_blocks(63, 3), 7);
        assert_eq!(refill_blocks(3, 3), 2);
    }
}
