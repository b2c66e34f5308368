//! Observability and checking: counters, list snapshots, the
//! `/proc/zoneinfo`-style report and the list checker.

use core::fmt;
#[cfg(any(test, feature = "invariants"))]
use core::ptr::NonNull;

#[cfg(any(test, feature = "invariants"))]
use buddy::PageState;
use buddy::Stat;
#[cfg(any(test, feature = "invariants"))]
use buddy::{Buddy, Order, ZoneId};
use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

#[cfg(any(test, feature = "invariants"))]
use super::free::verify_zero;
use super::{CpuCounters, CpuPages, Guard, PageSource, Pcp};
#[cfg(any(test, feature = "invariants"))]
use crate::list::list_tag;
use crate::sizing::NR_PCP_ORDERS;
use crate::stats::PcpStats;

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// Counters summed over the CPUs.
    pub fn stats(&self) -> PcpStats {
        let mut s = PcpStats::ZERO;
        for c in &self.counters {
            s.merge(&cpu_stats(c));
        }
        s
    }

    /// One CPU's counters.
    pub fn cpu_stats(&self, cpu: usize) -> PcpStats {
        cpu_stats(&self.counters[cpu % N])
    }

    /// Pages on `cpu`'s lists (racy snapshot).
    pub fn cpu_count(&self, cpu: usize) -> usize {
        self.cpus.published(cpu)
    }

    /// Pages on all CPUs' lists (racy snapshot).
    pub fn total_count(&self) -> usize {
        (0..N).map(|cpu| self.cpus.published(cpu)).sum()
    }

    /// A report in the style of the buddy's (`/proc/zoneinfo`'s pagesets):
    /// the lists' sizes, the buddy zone's free, purged and resident pages
    /// with its purge counts (`purge`, `purged_bytes`: memory given back to
    /// the OS), each CPU's lists, and the counters.
    pub fn report(&self) -> impl fmt::Display + '_ {
        Report(self)
    }

    /// The local CPU's lists, for tests and reports: a copy taken under the
    /// lock, each list's [`len`](crate::list::PageList::len) counted.
    pub fn local_lists(&self) -> CpuPages {
        self.snapshot(&self.lock_irqsave())
    }

    /// A copy of `cpu`'s lists (per-order lengths of the normal and zero
    /// lists, count, drain scale), taken under its lock, if this CPU may
    /// reach it (its own CPU; any CPU on a locked platform).
    pub fn cpu_lists(&self, cpu: usize) -> Option<CpuPages> {
        {
            let g = self.lock_irqsave();
            if g.cpu() == cpu {
                return Some(self.snapshot(&g));
            }
        }
        self.lock_remote(cpu).map(|g| self.snapshot(&g))
    }

    /// Checks this CPU's lists: `count == Σ len << order`, links and tags
    /// consistent, every listed page allocated in the buddy with the list's
    /// order and of this pcp's zone (node included: no other node's page
    /// on these lists), zero-list pages read as zero. Panics on a
    /// violation.
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_local(&self) {
        let g = self.lock_irqsave();
        self.check_lists(&g, g.cpu());
    }

    /// Checks every CPU's lists (exclusive access, so every strategy).
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_all(&mut self) {
        let Self {
            cpus, source, zone, ..
        } = self;
        for cpu in 0..N {
            let count = cpus.published(cpu);
            let pages = cpus.get_mut(cpu);
            check_cpu(source.buddy(), pages, count, cpu, *zone);
        }
    }

    /// A copy of one CPU's lists (held by the caller) with each list's
    /// length counted and its `high` as its next use sees it (clamped to
    /// the current range; the free path stores the clamp lazily).
    fn snapshot(&self, g: &Guard<'_, L, N>) -> CpuPages {
        let mut c = **g;
        c.count = Self::count(g);
        for l in c.normal.iter_mut().chain(c.zero.iter_mut()) {
            *l = l.counted();
        }
        if c.high != 0 {
            let (lo, hi) = self.high_range();
            c.high = c.high.max(lo).min(hi);
        }
        c
    }

    #[cfg(any(test, feature = "invariants"))]
    fn check_lists(&self, g: &Guard<'_, L, N>, cpu: usize) {
        check_cpu(self.buddy(), g, Self::count(g), cpu, self.zone);
    }
}

fn cpu_stats(c: &CpuCounters) -> PcpStats {
    let mut s = PcpStats::ZERO;
    for (i, a) in c.stats.iter().enumerate() {
        s.0[i] = a.load(Relaxed);
    }
    s
}

#[cfg(any(test, feature = "invariants"))]
fn check_cpu<P: Platform>(b: &Buddy<P>, pages: &CpuPages, count: usize, cpu: usize, zone: ZoneId) {
    let mut total = 0usize;
    for o in 0..NR_PCP_ORDERS {
        for zero in [false, true] {
            let list = if zero {
                &pages.zero[o]
            } else {
                &pages.normal[o]
            };
            // No list links more blocks than the buddy manages pages.
            let limit = b.total_managed_pages();
            let n = list.check(b, list_tag(o as u8, zero), limit, |page| {
                match b.page_state(page as *const u8) {
                    PageState::Allocated { order } if order.index() == o => {}
                    s => panic!(
                        "pcp: CPU {cpu} lists page {page:#x} (order {o}) but the buddy says {s:?}"
                    ),
                }
                let z = b.zone_of(page as *const u8);
                assert_eq!(
                    z,
                    Some(zone),
                    "pcp: CPU {cpu} lists page {page:#x} of zone {z:?} on zone {zone:?}'s lists"
                );
                if zero {
                    verify_zero(
                        NonNull::new(page as *mut u8).expect("listed page is non-null"),
                        b.config()
                            .block_size(Order::new(o as u8).expect("pcp order")),
                    );
                }
            });
            total += n << o;
        }
    }
    assert_eq!(
        count, total,
        "pcp: CPU {cpu} count {count} != Σ blocks linked << order = {total}"
    );
}

struct Report<'a, S: PageSource, L: Platform, const N: usize>(&'a Pcp<S, L, N>);

impl<S: PageSource, L: Platform, const N: usize> fmt::Display for Report<'_, S, L, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let (batch, high) = p.batch_high();
        let (_, high_max) = p.high_range();
        writeln!(
            f,
            "pcp zone {} policy {:?}: batch {batch} high {high} high_max {high_max}, {} pages on lists",
            p.zone.index(),
            p.policy,
            p.total_count()
        )?;
        // The buddy zone underneath: its free pages, how many of them went
        // back to the OS, and the purges so far (issue #17), so a report
        // shows memory returned (`trim`, the decay).
        let z = p.buddy().zone_info(p.zone);
        writeln!(
            f,
            "  buddy zone {} {}: free {} purged {} resident {} pages; {} {} {} {}",
            z.zone.index(),
            z.name,
            z.free,
            z.purged,
            z.free - z.purged,
            Stat::PURGE.name(),
            z.stat(Stat::PURGE),
            Stat::PURGED_BYTES.name(),
            z.stat(Stat::PURGED_BYTES),
        )?;
        for cpu in 0..N.min(p.platform().nr_cpus().max(1)) {
            let c = p.cpu_count(cpu);
            if c == 0 {
                continue;
            }
            write!(f, "  cpu {cpu:>3}: count {c:>5}")?;
            match p.cpu_lists(cpu) {
                Some(l) => {
                    write!(f, "  normal")?;
                    for o in 0..NR_PCP_ORDERS {
                        write!(f, " {:>4}", l.normal[o].len)?;
                    }
                    write!(f, "  zero")?;
                    for o in 0..NR_PCP_ORDERS {
                        write!(f, " {:>4}", l.zero[o].len)?;
                    }
                    writeln!(
                        f,
                        "  high {} free_count {} flags {:#x}",
                        l.high, l.free_count, l.flags
                    )?;
                }
                None => writeln!(f, "  (lists not reachable from this CPU)")?,
            }
        }
        write!(f, "{}", p.stats())
    }
}
