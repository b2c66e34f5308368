//! The SLUB statistics printer of `slub-prodcons`: what one producer/consumer
//! run did to a cache's counters ([`StatsRun`]), printed in seed 004's
//! `grep . *` format and per 1000 allocations beside the seed's
//! `skbuff_head_cache` figures ([`SEED_004`]).

use std::fmt::Write as _;

use slub::{SlubStat, SlubStats};

use crate::measure::fmt_num;

/// What one fixed producer/consumer run did to a cache's statistics.
pub struct StatsRun {
    /// Objects passed.
    pub objects: u64,
    /// Wall time of the run (the slower worker's, each timed from the
    /// start barrier to its last object).
    pub secs: f64,
    /// The producer's and the consumer's CPU (slot) numbers.
    pub cpus: [usize; 2],
    /// Per-CPU deltas, indexed by CPU.
    pub per_cpu: Vec<SlubStats>,
    /// Their sum.
    pub total: SlubStats,
}

/// A statistics run with the names the notes print: the cache's (for its
/// heading) and a short one (for the per-1000 columns).
pub(super) type NamedRun = (String, String, StatsRun);

/// Seed 004's `/sys/kernel/slab/skbuff_head_cache` statistics (Linux 3.2-rc,
/// 8 CPUs, 192 B objects, 21 per order-0 slab, cpu_partial 30, min_partial
/// 5; CPU 0 the softirq producer, CPU 4 the main consumer): the totals.
/// Items the 2011 kernel did not have are absent.
pub const SEED_004: [(SlubStat, u64); 23] = [
    (SlubStat::ALLOC_FASTPATH, 89_181_782),
    (SlubStat::ALLOC_SLOWPATH, 4_430_371),
    (SlubStat::FREE_FASTPATH, 21_192_924),
    (SlubStat::FREE_SLOWPATH, 71_825_749),
    (SlubStat::FREE_FROZEN, 67_988_498),
    (SlubStat::FREE_ADD_PARTIAL, 0),
    (SlubStat::FREE_REMOVE_PARTIAL, 18),
    (SlubStat::ALLOC_FROM_PARTIAL, 412_658),
    (SlubStat::ALLOC_SLAB, 2_831_313),
    (SlubStat::ALLOC_REFILL, 593_417),
    (SlubStat::ALLOC_NODE_MISMATCH, 0),
    (SlubStat::FREE_SLAB, 2_831_186),
    (SlubStat::CPUSLAB_FLUSH, 0),
    (SlubStat::DEACTIVATE_FULL, 0),
    (SlubStat::DEACTIVATE_EMPTY, 2_831_168),
    (SlubStat::DEACTIVATE_TO_HEAD, 0),
    (SlubStat::DEACTIVATE_TO_TAIL, 0),
    (SlubStat::DEACTIVATE_REMOTE_FREES, 0),
    (SlubStat::DEACTIVATE_BYPASS, 3_836_954),
    (SlubStat::ORDER_FALLBACK, 0),
    (SlubStat::CMPXCHG_DOUBLE_CPU_FAIL, 0),
    (SlubStat::CMPXCHG_DOUBLE_FAIL, 1),
    (SlubStat::CPU_PARTIAL_ALLOC, 592_991),
];

/// Seed 004's `cpu_partial_free` (listed apart: the array above keeps the
/// kernel's item order of `enum stat_item`).
pub const SEED_004_CPU_PARTIAL_FREE: u64 = 4_429_836;

/// The seed's figure for `s`, if the 2011 kernel counted it.
pub fn seed_004(s: SlubStat) -> Option<u64> {
    if s == SlubStat::CPU_PARTIAL_FREE {
        return Some(SEED_004_CPU_PARTIAL_FREE);
    }
    SEED_004.iter().find(|e| e.0 == s).map(|e| e.1)
}

/// The statistics in seed 004's `grep . *` format: `item:total C1=.. C2=..`
/// (non-zero items; the CPUs are the run's slot numbers).
pub fn seed_format(run: &StatsRun) -> Vec<String> {
    let mut out = Vec::new();
    for &s in SlubStat::ALL {
        let total = run.total.get(s);
        if total == 0 {
            continue;
        }
        let mut line = format!("{}:{total}", s.name().to_lowercase());
        for (cpu, d) in run.per_cpu.iter().enumerate() {
            let v = d.get(s);
            if v != 0 {
                let _ = write!(line, " C{cpu}={v}");
            }
        }
        out.push(line);
    }
    out
}

/// Allocations a run's figures are per: the objects it passed (its only
/// allocations: no warm-up). Not `alloc_fastpath + alloc_slowpath`, the
/// seed's sum: allocations from a sheaf count as `alloc_pcs` instead, and
/// objects of a bulk allocation taken from the CPU freelist count in
/// neither.
fn allocs(run: &StatsRun) -> f64 {
    run.objects as f64
}

/// The sentence the table's batch note ends with: whether the bulk calls of
/// the sheaves row went through its sheaves (the batched statistics run of
/// `GlobalSlub` among `runs` says).
pub(super) fn bulk_sheaves_note(runs: &[NamedRun]) -> &'static str {
    match runs
        .iter()
        .find(|(_, short, _)| short.contains('x') && short.ends_with(" GS"))
    {
        Some((_, _, r))
            if r.total.get(SlubStat::ALLOC_PCS) + r.total.get(SlubStat::FREE_PCS) == 0 =>
        {
            " Here alloc_bulk / free_bulk bypass the sheaves (the batched statistics run of GlobalSlub \
             counts no alloc_pcs and no free_pcs): in batches, that row is the slab path's bulk \
             calls, not the sheaves'."
        }
        Some(_) => {
            " alloc_bulk / free_bulk take from and return to the sheaves first (alloc_pcs, free_pcs in the \
             batched statistics run of GlobalSlub)."
        }
        None => "",
    }
}

/// The notes printed after the `slub-prodcons` table: `runs` (of `objects`
/// objects each; batches of `batch` in the batched ones) in seed 004's
/// `grep . *` format, then per 1000 allocations beside the seed's figures.
pub(super) fn stats_notes(runs: &[NamedRun], objects: u64, batch: usize) -> Vec<String> {
    let mut notes = Vec::new();
    notes.push(String::new());
    notes.push(format!(
        "SLUB statistics of one run of {objects} objects per cache after the table (producer on the first CPU, consumer on \
         the second; C<n> = the slot the thread ran on: the real CPU for GlobalSlub (RseqCpu), the kernel platform's \
         CPU 1 (producer) and 2 (consumer) for the KmemCache), one by one at 64 and 256 B, then in batches of {batch} \
         at 256 B (alloc_bulk / free_bulk), in seed 004's `grep . *` format:"
    ));
    if !cfg!(feature = "slub-stats") {
        notes.push(
            "(GlobalSlub's restartable fast paths count only with CONFIG_SLUB_STATS: its alloc_pcs / free_pcs below are \
             the slow paths' share; every object is counted with `--features slub-stats`, which costs 36 instructions \
             per pair and is off so the timed rows measure GlobalSlub as users get it)"
                .to_string(),
        );
    }
    for (name, _, run) in runs {
        notes.push(format!(
            "-- {name}: producer C{}, consumer C{}; {:.1} ns/object ({} Mobj/s)",
            run.cpus[0],
            run.cpus[1],
            run.secs * 1e9 / run.objects as f64,
            fmt_num(run.objects as f64 / run.secs / 1e6)
        ));
        notes.extend(seed_format(run).into_iter().map(|l| format!("   {l}")));
    }
    notes.push(String::new());
    notes.push(format!(
        "per 1000 allocations (objects passed), beside seed 004 (skbuff_head_cache, 192 B, 21 objects per slab, 93.6 M \
         allocations; '-' = not counted by the 2011 kernel); columns: size (x{batch}: in batches), GS = GlobalSlub's \
         kmalloc cache (sheaves), GS-nosh = GlobalSlub without sheaves, lockless = the KmemCache on Kernel<UserHooks>:"
    ));
    let mut head = format!("  {:<24}", "item");
    for (_, short, _) in runs {
        let _ = write!(head, " {short:>15}");
    }
    let _ = write!(head, " {:>12}", "seed 004");
    notes.push(head);
    let seed_allocs = 89_181_782.0 + 4_430_371.0;
    for &s in SlubStat::ALL {
        let seed = seed_004(s);
        if runs.iter().all(|(_, _, r)| r.total.get(s) == 0) && seed.unwrap_or(0) == 0 {
            continue;
        }
        let mut line = format!("  {:<24}", s.name().to_lowercase());
        for (_, _, r) in runs {
            let _ = write!(
                line,
                " {:>15.2}",
                r.total.get(s) as f64 * 1000.0 / allocs(r).max(1.0)
            );
        }
        match seed {
            Some(v) => {
                let _ = write!(line, " {:>12.2}", v as f64 * 1000.0 / seed_allocs);
            }
            None => {
                let _ = write!(line, " {:>12}", "-");
            }
        }
        notes.push(line);
    }
    notes.push(
        "the seed's pathology is alloc_slab = free_slab = deactivate_empty at ~30 per 1000 allocations: the consumer's \
         CPU partial list gets slabs that empty there and go back to the page allocator, while the producer keeps \
         allocating new ones."
            .into(),
    );
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_004_items_are_the_kernels() {
        assert_eq!(seed_004(SlubStat::ALLOC_FASTPATH), Some(89_181_782));
        assert_eq!(seed_004(SlubStat::CPU_PARTIAL_FREE), Some(4_429_836));
        assert_eq!(seed_004(SlubStat::CPU_PARTIAL_DRAIN), None);
        // free_slowpath = free_frozen + the rest of the slow frees.
        assert!(seed_004(SlubStat::FREE_SLOWPATH) >= seed_004(SlubStat::FREE_FROZEN));
    }
}
