//! Allocation statistics (`mm/percpu-stats.c`).

/// Allocation statistics (`percpu-stats.c`), kept under `pcpu_lock`.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, Stats};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
/// assert_eq!(a.stats().nr_alloc, 0);
/// let p = a.alloc(10, 4).unwrap();
/// let q = a.alloc(100, 8).unwrap();
/// a.free(p);
/// let s: Stats = a.stats();
/// assert_eq!((s.nr_alloc, s.nr_dealloc, s.nr_cur_alloc, s.nr_max_alloc), (2, 1, 1, 2));
/// assert_eq!((s.min_alloc_size, s.max_alloc_size), (12, 100), "sizes rounded to 4 bytes");
/// assert_eq!((s.nr_chunks, s.chunks_created), (1, 1));
/// assert!(s.to_string().starts_with("Percpu Memory Statistics\n  nr_alloc            :            2"));
/// a.free(q);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful allocations.
    pub nr_alloc: u64,
    /// Frees.
    pub nr_dealloc: u64,
    /// Live allocations.
    pub nr_cur_alloc: u64,
    /// Most live allocations seen.
    pub nr_max_alloc: u64,
    /// Smallest request served (bytes, rounded to 4).
    pub min_alloc_size: usize,
    /// Largest request served.
    pub max_alloc_size: usize,
    /// Dynamic chunks now.
    pub nr_chunks: usize,
    /// Most dynamic chunks seen.
    pub nr_max_chunks: usize,
    /// Dynamic chunks created.
    pub chunks_created: u64,
    /// Dynamic chunks destroyed.
    pub chunks_destroyed: u64,
    /// Populated pages (per unit) over all chunks.
    pub nr_populated: usize,
    /// Wholly free populated pages counted for atomic requests
    /// (`pcpu_nr_empty_pop_pages`).
    pub nr_empty_pop_pages: isize,
    /// Atomic requests that failed.
    pub atomic_failures: u64,
    /// Balance runs.
    pub balance_runs: u64,
}

impl core::fmt::Display for Stats {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(f, "Percpu Memory Statistics")?;
        writeln!(f, "  nr_alloc            : {:>12}", self.nr_alloc)?;
        writeln!(f, "  nr_dealloc          : {:>12}", self.nr_dealloc)?;
        writeln!(f, "  nr_cur_alloc        : {:>12}", self.nr_cur_alloc)?;
        writeln!(f, "  nr_max_alloc        : {:>12}", self.nr_max_alloc)?;
        writeln!(f, "  nr_chunks           : {:>12}", self.nr_chunks)?;
        writeln!(f, "  nr_max_chunks       : {:>12}", self.nr_max_chunks)?;
        writeln!(f, "  chunks_created      : {:>12}", self.chunks_created)?;
        writeln!(f, "  chunks_destroyed    : {:>12}", self.chunks_destroyed)?;
        writeln!(f, "  min_alloc_size      : {:>12}", self.min_alloc_size)?;
        writeln!(f, "  max_alloc_size      : {:>12}", self.max_alloc_size)?;
        writeln!(f, "  nr_populated        : {:>12}", self.nr_populated)?;
        writeln!(f, "  nr_empty_pop_pages  : {:>12}", self.nr_empty_pop_pages)?;
        writeln!(f, "  atomic_failures     : {:>12}", self.atomic_failures)?;
        write!(f, "  balance_runs        : {:>12}", self.balance_runs)
    }
}
