//! `batch` and `high` as the kernel computes them (mm/page_alloc.c,
//! `zone_batchsize`, `zone_highsize`, `nr_pcp_free`, `nr_pcp_high`,
//! `decay_pcp_high` of Linux 6.7+), as pure functions so
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

/// `CONFIG_PCP_BATCH_SCALE_MAX` (default 5): `free_count` stops growing at
/// `batch << PCP_BATCH_SCALE_MAX`, a high-order `free_high` frees at most
/// that many pages, and `decay_pcp_high` keeps at least `count` minus that.
pub const PCP_BATCH_SCALE_MAX: u32 = 5;

/// `MIN_PERCPU_PAGELIST_HIGH_FRACTION`: the automatically tuned `high_max`
/// is `zone_highsize` of an eighth of the zone's managed pages.
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: usize = 8;

/// `PCPF_PREV_FREE_HIGH_ORDER`: the previous free of this CPU was of order
/// `1..=PAGE_ALLOC_COSTLY_ORDER`.
pub const PCPF_PREV_FREE_HIGH_ORDER: u8 = 0x01;
/// `PCPF_FREE_HIGH_BATCH`: this CPU's share of the cache holds more than
/// three batches (set from cacheinfo in the kernel; here by hand), so a
/// `free_high` keeps at least a batch on the lists.
pub const PCPF_FREE_HIGH_BATCH: u8 = 0x02;

/// `zone_highsize(zone, batch, cpu_online, MIN_PERCPU_PAGELIST_HIGH_FRACTION)`:
/// the most `pcp->high` may grow to (`high_max`), at most [`MAX_HIGH`].
pub const fn zone_highsize_max(managed_pages: usize, nr_cpus: usize, batch: usize) -> usize {
    let h = zone_highsize(
        managed_pages / MIN_PERCPU_PAGELIST_HIGH_FRACTION,
        nr_cpus,
        batch,
    );
    if h > MAX_HIGH {
        MAX_HIGH
    } else {
        h
    }
}

/// `nr_pcp_free` (Linux 6.7): how many pages a free that reached `high`
/// returns to the buddy. A `free_high` (consecutive high-order frees) frees
/// `min(count, batch << PCP_BATCH_SCALE_MAX)`; otherwise `free_count` (the
/// pages freed since the last allocations) clamped to `[batch, high - batch]`,
/// so the list keeps at least a batch and a long run of frees returns large
/// batches (fewer zone-lock holds).
pub const fn nr_pcp_free(
    batch: usize,
    high: usize,
    count: usize,
    free_count: usize,
    free_high: bool,
) -> usize {
    if free_high {
        let m = batch << PCP_BATCH_SCALE_MAX;
        return if count < m { count } else { m };
    }
    // PCP disabled or boot pageset.
    if high < batch {
        return 1;
    }
    let min = batch;
    let max = high - batch;
    // clamp_t(int, free_count, min, max): max wins when max < min.
    let v = if free_count < min { min } else { free_count };
    if v > max {
        max
    } else {
        v
    }
}

/// `nr_pcp_high` (Linux 6.7): the `high` a free compares `count` with, and
/// the CPU's tuned `*high` updated. `*high` is first clamped to
/// `[high_min, high_max]` (a new sysctl value takes effect here); a
/// `free_high` lowers it by `batch << PCP_BATCH_SCALE_MAX` and returns 0
/// (free now); with `high_min == high_max` (fixed by hand) it is returned
/// as is; otherwise, when `count` reached it, it grows to hold the pages
/// freed since the last allocations plus a batch (`free_count + batch`),
/// up to `high_max`. The comparison uses the value before the growth: this
/// free still returns a batch, the next ones find room. (The kernel's
/// `ZONE_RECLAIM_ACTIVE`/`ZONE_BELOW_HIGH` branches need reclaim and the
/// zone's watermark flags, which this crate does not have.)
#[inline(always)]
pub fn nr_pcp_high(
    high: &mut usize,
    count: usize,
    free_count: usize,
    batch: usize,
    high_min: usize,
    high_max: usize,
    free_high: bool,
) -> usize {
    let h = clamp(*high, high_min, high_max);
    *high = h;
    if h == 0 {
        return 0;
    }
    if free_high {
        *high = max(h.saturating_sub(batch << PCP_BATCH_SCALE_MAX), high_min);
        return 0;
    }
    if high_min == high_max {
        return h;
    }
    if count >= h {
        let need_high = free_count + batch;
        if h < need_high {
            *high = clamp(need_high, high_min, high_max);
        }
    }
    h
}

/// `decay_pcp_high` (Linux 6.7): the new `high` of a CPU that has not freed
/// much lately: an eighth lower, but not below `high_min`, nor below
/// `count - (batch << PCP_BATCH_SCALE_MAX)` (a decay frees at most that
/// many pages at once, to bound its latency).
pub const fn decay_pcp_high(high: usize, count: usize, batch: usize, high_min: usize) -> usize {
    if high <= high_min {
        return high;
    }
    let a = count.saturating_sub(batch << PCP_BATCH_SCALE_MAX);
    let b = high - (high >> 3);
    let m = if a > b { a } else { b };
    if m > high_min {
        m
    } else {
        high_min
    }
}

#[inline(always)]
fn clamp(v: usize, lo: usize, hi: usize) -> usize {
    // The kernel's clamp(): min(max(v, lo), hi).
    min(max(v, lo), hi)
}

#[inline(always)]
fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn min(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}

/// Blocks to refill for an order from a page count `batch` (the tail of the
/// kernel's `nr_pcp_alloc`): `max(batch >> order, 2)` blocks when `batch > 1`;
/// a batch of 1 (a small zone, a boot pageset: lists that should not keep
/// pages) stays 1 block (`if (batch > 1) batch = max(batch >> order, 2)`).
pub const fn refill_blocks(batch: usize, order: u8) -> usize {
    if batch <= 1 {
        return batch;
    }
    let b = batch >> order;
    if b < 2 {
        2
    } else {
        b
    }
}

/// `nr_pcp_alloc` (Linux 6.7+): how many blocks of `order` a refill of a
/// CPU's empty list asks the buddy for, updating the CPU's tuned `*high`
/// and `*alloc_factor`. `*high` is clamped to `[high_min, high_max]`; below
/// `batch` the lists are disabled (1 block). Order 0 asks for
/// `batch << alloc_factor` pages, higher orders for `batch`; with a tuned
/// range `*high` grows by that many pages (up to `high_max`: a larger `high`
/// would have spared the zone). For order 0 the request is capped at
/// `max_nr_alloc = max(high - count - batch, batch)`, and `alloc_factor`
/// (reset by halving on every free) grows only while the scaled batch fits
/// in it (`batch << alloc_factor <= max_nr_alloc`), at most to
/// [`PCP_BATCH_SCALE_MAX`]: consecutive refills without frees double, but
/// never past what `high` can hold. (The kernel's `ZONE_BELOW_HIGH` test
/// needs the zone's watermark flags, which this crate does not have.)
#[inline]
pub fn nr_pcp_alloc(
    high: &mut usize,
    alloc_factor: &mut u8,
    count: usize,
    base_batch: usize,
    high_min: usize,
    high_max: usize,
    order: u8,
) -> usize {
    let mut h = clamp(*high, high_min, high_max);
    *high = h;
    // PCP disabled or boot pageset.
    if h < base_batch {
        return 1;
    }
    let mut batch = if order != 0 {
        base_batch
    } else {
        base_batch << *alloc_factor
    };
    if high_min != high_max {
        h = min(h + batch, high_max);
        *high = h;
    }
    if order == 0 {
        let max_nr_alloc = max(h.saturating_sub(count + base_batch), base_batch);
        if batch <= max_nr_alloc && u32::from(*alloc_factor) < PCP_BATCH_SCALE_MAX {
            *alloc_factor += 1;
        }
        batch = min(batch, max_nr_alloc);
    }
    refill_blocks(batch, order)
}

/// The most pages one CPU's lists may hold (`high`): 2^20 (4 GiB of 4 KiB
/// pages; the kernel's `percpu_pagelist_high_fraction` keeps `high` to an
/// eighth of the zone). Larger values are refused by
/// [`Pcp::set_batch_high`](crate::Pcp::set_batch_high), as are values whose batch arithmetic
/// (`batch << PCP_BATCH_SCALE_MAX`) could overflow.
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
    fn drain_size_follows_free_count_and_is_clamped() {
        let (batch, high) = (63, 378);
        assert_eq!(
            nr_pcp_free(batch, high, 400, 0, false),
            63,
            "at least a batch"
        );
        assert_eq!(nr_pcp_free(batch, high, 400, 100, false), 100);
        assert_eq!(nr_pcp_free(batch, high, 400, 252, false), 252);
        assert_eq!(
            nr_pcp_free(batch, high, 400, 1000, false),
            315,
            "clamped to high - batch"
        );
        // high too small to keep a batch: high - batch wins (clamp_t).
        assert_eq!(nr_pcp_free(63, 100, 100, 1000, false), 37);
        // PCP disabled / boot pageset.
        assert_eq!(nr_pcp_free(63, 10, 10, 1000, false), 1);
        // free_high: as much as possible, at most batch << PCP_BATCH_SCALE_MAX.
        assert_eq!(nr_pcp_free(63, 0, 100, 0, true), 100);
        assert_eq!(nr_pcp_free(63, 0, 5000, 0, true), 63 << 5);
    }

    #[test]
    fn high_max_is_an_eighth_of_the_zone_per_cpu() {
        // 1 GiB zone, 2 CPUs: 262144 / 8 / 2.
        assert_eq!(zone_highsize_max(262_144, 2, 63), 16_384);
        // Small zone: at least 4 batches.
        assert_eq!(zone_highsize_max(1000, 2, 63), 252);
        assert_eq!(zone_highsize_max(usize::MAX, 1, 63), MAX_HIGH);
    }

    #[test]
    fn nr_pcp_high_grows_to_hold_the_freed_pages() {
        let (batch, min, max) = (8, 32, 200);
        // Fresh CPU (high 0): clamped up to high_min.
        let mut high = 0;
        assert_eq!(nr_pcp_high(&mut high, 10, 10, batch, min, max, false), 32);
        assert_eq!(high, 32);
        // count reached high after 40 frees: the limit rises to 48 for the
        // next frees, this one still compares with 32.
        assert_eq!(nr_pcp_high(&mut high, 32, 40, batch, min, max, false), 32);
        assert_eq!(high, 48);
        // ... up to high_max.
        assert_eq!(nr_pcp_high(&mut high, 48, 256, batch, min, max, false), 48);
        assert_eq!(high, 200);
        // Below high: unchanged.
        assert_eq!(nr_pcp_high(&mut high, 10, 256, batch, min, max, false), 200);
        assert_eq!(high, 200);
        // A lowered high_max takes effect at once.
        assert_eq!(nr_pcp_high(&mut high, 10, 256, batch, min, 100, false), 100);
        assert_eq!(high, 100);
        // free_high: free now, and lower high by batch << 5 (not below high_min).
        assert_eq!(nr_pcp_high(&mut high, 10, 256, batch, min, max, true), 0);
        assert_eq!(high, min);
        // Fixed by hand (high_min == high_max): never tuned.
        let mut high = 0;
        assert_eq!(nr_pcp_high(&mut high, 100, 256, batch, 40, 40, false), 40);
        assert_eq!(high, 40);
        // high 0: disabled.
        let mut high = 0;
        assert_eq!(nr_pcp_high(&mut high, 1, 1, 1, 0, 0, false), 0);
    }

    #[test]
    fn decay_lowers_high_by_an_eighth_down_to_high_min() {
        let (batch, min) = (8, 32);
        assert_eq!(decay_pcp_high(200, 0, batch, min), 175);
        assert_eq!(decay_pcp_high(36, 0, batch, min), 32);
        assert_eq!(decay_pcp_high(32, 0, batch, min), 32);
        assert_eq!(
            decay_pcp_high(20, 0, batch, min),
            20,
            "below high_min: left alone"
        );
        // Keep count - (batch << 5) at least: bounded latency.
        assert_eq!(decay_pcp_high(1000, 1000, batch, min), 875);
        assert_eq!(decay_pcp_high(1000, 1000, 1, min), 968);
        let mut h = 2000;
        let mut steps = 0;
        while h > min {
            h = decay_pcp_high(h, 0, batch, min);
            steps += 1;
        }
        assert_eq!(h, min);
        assert!(steps < 40, "{steps}");
    }

    #[test]
    fn refill_sizes() {
        assert_eq!(refill_blocks(63, 0), 63);
        assert_eq!(refill_blocks(63, 3), 7);
        assert_eq!(refill_blocks(3, 3), 2);
    }

    #[test]
    fn refill_of_a_one_page_batch_stays_one_block() {
        // nr_pcp_alloc: `if (batch > 1) batch = max(batch >> order, 2)`.
        for order in 0..=PAGE_ALLOC_COSTLY_ORDER {
            assert_eq!(refill_blocks(1, order), 1, "order {order}");
        }
        assert_eq!(refill_blocks(2, 3), 2);
    }

    #[test]
    fn alloc_factor_grows_only_while_the_scaled_batch_fits_below_high() {
        // nr_pcp_alloc (Linux 6.7+), high fixed at 64 (high_min == high_max),
        // batch 8, lists emptied between refills: 8, 16, 32 pages, then the
        // next doubling (64) exceeds max_nr_alloc = 64 - 0 - 8 = 56, so the
        // factor stops at 3 (not PCP_BATCH_SCALE_MAX) and refills are capped.
        let (mut high, mut factor) = (64, 0u8);
        let sizes: [usize; 5] =
            core::array::from_fn(|_| nr_pcp_alloc(&mut high, &mut factor, 0, 8, 64, 64, 0));
        assert_eq!(sizes, [8, 16, 32, 56, 56]);
        assert_eq!(factor, 3);
        // A fuller list leaves less room: max(64 - 40 - 8, 8) = 16.
        let mut factor = 1;
        assert_eq!(nr_pcp_alloc(&mut high, &mut factor, 40, 8, 64, 64, 0), 16);
        assert_eq!(factor, 2);
        // A high range large enough: the factor caps at PCP_BATCH_SCALE_MAX.
        let (mut high, mut factor) = (0, 0u8);
        for _ in 0..10 {
            nr_pcp_alloc(&mut high, &mut factor, 0, 8, 64, 1 << 16, 0);
        }
        assert_eq!(u32::from(factor), PCP_BATCH_SCALE_MAX);
        // Higher orders neither scale nor grow the factor.
        let mut factor = 2;
        assert_eq!(nr_pcp_alloc(&mut high, &mut factor, 0, 8, 64, 64, 3), 2);
        assert_eq!(factor, 2);
        // Disabled lists (high < batch): one block.
        assert_eq!(nr_pcp_alloc(&mut 0, &mut 0, 0, 8, 0, 0, 0), 1);
    }
}
