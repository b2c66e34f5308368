//! Drains (`drain_local_pages`, `drain_pages(cpu)`, `drain_all_pages`),
//! the decay of the auto-tuned `high` (`decay_pcp_high`, run by the
//! kernel's vmstat refresh) and background zeroing (seed 003's `prezero`).

use buddy::Order;
use local_lock::sync::atomic::Ordering::Relaxed;
use local_lock::Platform;

use super::{Guard, PageSource, Pcp};
use crate::error::DrainError;
use crate::list::{list_tag, owner};
use crate::sizing::{decay_pcp_high, NR_PCP_ORDERS};
use crate::stats::PcpStat;

impl<S: PageSource, L: Platform, const N: usize> Pcp<S, L, N> {
    /// Returns every page of the locked CPU's lists to the buddy.
    fn drain_locked(&self, g: &mut Guard<'_, L, N>) -> usize {
        if Self::count(g) == 0 {
            return 0;
        }
        let cpu = g.cpu();
        let n = self.free_pcppages_bulk(g, usize::MAX, 0);
        debug_assert_eq!(Self::count(g), 0);
        self.stat(cpu, PcpStat::DRAIN, 1);
        self.stat(cpu, PcpStat::DRAIN_PAGES, n as u64);
        n
    }

    /// `decay_pcp_high` on the locked CPU: lowers its tuned `high` by an
    /// eighth (not below `high_min`, nor below `count - (batch << 5)`) and
    /// frees what lies above it, in one batch (one zone-lock hold). Returns
    /// the kernel's `todo` (0 when there is nothing left to decay) and the
    /// pages freed.
    fn decay_locked(&self, g: &mut Guard<'_, L, N>) -> (usize, usize) {
        let (high_min, high_max) = (self.high_min.load(Relaxed), self.high_max.load(Relaxed));
        let batch = self.batch.load(Relaxed);
        let mut todo = 0;
        // A new sysctl range applies first (the kernel sets each CPU's high
        // directly; here it is clamped at its next use).
        let high = g.high.max(high_min).min(high_max);
        g.high = decay_pcp_high(high, Self::count(g), batch, high_min);
        if g.high > high_min {
            todo += 1;
        }
        let mut freed = 0;
        if Self::count(g) > g.high {
            let to_drain = Self::count(g) - g.high;
            let cpu = g.cpu();
            freed = self.free_pcppages_bulk(g, to_drain, 0);
            self.stat(cpu, PcpStat::FREE_BATCH, 1);
            todo += 1;
        }
        (todo, freed)
    }

    /// `decay_pcp_high` for this CPU (what the kernel's vmstat refresh,
    /// `refresh_cpu_vm_stats`, does about once a second): a CPU that stopped
    /// freeing gets its tuned `high` lowered by an eighth toward `high_min`,
    /// and the pages above it return to the buddy in one batch. Call it
    /// periodically (an idle loop, a housekeeping thread); no-op when `high`
    /// is fixed. Returns the pages freed.
    pub fn decay_pcp_high(&self) -> usize {
        let n = self.decay_locked(&mut self.lock_irqsave()).1;
        self.batched(n)
    }

    /// After `n` pages went back to the buddy with the lists' lock dropped:
    /// the source's decay gets its chance if any did
    /// ([`after_batch`](Self::after_batch)). Returns `n`.
    #[inline]
    fn batched(&self, n: usize) -> usize {
        if n > 0 {
            self.after_batch();
        }
        n
    }

    /// [`decay_pcp_high`](Self::decay_pcp_high) for `cpu`'s lists, from here
    /// where the platform allows (as [`drain_cpu`](Self::drain_cpu)); returns
    /// the pages freed.
    pub fn decay_pcp_high_cpu(&self, cpu: usize) -> Result<usize, DrainError> {
        self.decay_pcp_high_cpu_inner(cpu).map(|n| self.batched(n))
    }

    fn decay_pcp_high_cpu_inner(&self, cpu: usize) -> Result<usize, DrainError> {
        if cpu == self.platform().current_cpu() {
            let mut g = self.lock_irqsave();
            if g.cpu() == cpu {
                return Ok(self.decay_locked(&mut g).1);
            }
        }
        match self.lock_remote(cpu) {
            Some(mut g) => Ok(self.decay_locked(&mut g).1),
            None => Err(DrainError::NotAllowed),
        }
    }

    /// Drains this CPU's lists (`drain_local_pages`); returns the pages freed.
    pub fn drain_local(&self) -> usize {
        let n = self.drain_locked(&mut self.lock_irqsave());
        self.batched(n)
    }

    /// Drains this CPU's lists if the policy lets this context take them
    /// (the allocation path's lock: none in an interrupt that hit the
    /// holder); for the allocation slow path, as the kernel's
    /// `drain_all_pages` after direct reclaim failed: pages on the lists
    /// do not count as free to the watermarks. Returns the pages freed.
    pub(super) fn drain_local_for_alloc(&self) -> usize {
        let Some(mut g) = self.lock() else { return 0 };
        let n = self.drain_locked(&mut g);
        drop(g);
        self.batched(n)
    }

    /// Drains `cpu`'s lists from here (`drain_pages(cpu)`): directly under
    /// its lock, on every platform under [`Policy::Trylock`](crate::Policy::Trylock)
    /// (a real per-CPU spin lock, Linux 6.0+), otherwise where the platform
    /// allows (locked strategy; a per-thread slot whose thread has exited);
    /// the local lists if `cpu` is this CPU, else [`DrainError::NotAllowed`].
    pub fn drain_cpu(&self, cpu: usize) -> Result<usize, DrainError> {
        self.drain_cpu_inner(cpu).map(|n| self.batched(n))
    }

    fn drain_cpu_inner(&self, cpu: usize) -> Result<usize, DrainError> {
        if cpu == self.platform().current_cpu() {
            // Pinned platforms name the current CPU reliably only while
            // pinned; take the lock and look again.
            let mut g = self.lock_irqsave();
            if g.cpu() == cpu {
                return Ok(self.drain_locked(&mut g));
            }
        }
        match self.lock_remote(cpu) {
            Some(mut g) => Ok(self.drain_locked(&mut g)),
            None => Err(DrainError::NotAllowed),
        }
    }

    /// Drains every CPU with pages on its lists (`drain_all_pages`: memory
    /// pressure, CPU offline); returns `(pages freed, CPUs that could not be
    /// drained from here)`.
    pub fn drain_all(&self) -> (usize, usize) {
        let mut freed = 0;
        let mut refused = 0;
        for cpu in 0..N.min(self.platform().nr_cpus().max(1)) {
            if self.cpus.published(cpu) == 0 {
                continue;
            }
            match self.drain_cpu(cpu) {
                Ok(n) => freed += n,
                Err(DrainError::NotAllowed) => refused += 1,
            }
        }
        (freed, refused)
    }

    /// Background zeroing (seed 003): moves at most `budget` pages from the
    /// cold end of this CPU's normal lists to its zero lists by clearing
    /// them (outside the lock, one page at a time). For an idle loop or a
    /// helper thread. Returns the pages zeroed.
    pub fn prezero(&self, budget: usize) -> usize {
        self.prezero_with(budget, || self.lock())
    }

    /// [`prezero`](Self::prezero) for another CPU's lists, where the
    /// platform allows remote access (a helper thread on a locked platform).
    pub fn prezero_cpu(&self, cpu: usize, budget: usize) -> Result<usize, DrainError> {
        if self.lock_remote(cpu).is_none() {
            return Err(DrainError::NotAllowed);
        }
        Ok(self.prezero_with(budget, || self.lock_remote(cpu)))
    }

    fn prezero_with<'a>(
        &'a self,
        budget: usize,
        lock: impl Fn() -> Option<Guard<'a, L, N>>,
    ) -> usize {
        let mut done = 0;
        while done < budget {
            let Some(mut g) = lock() else { break };
            let b = self.buddy();
            let Some((o, p)) =
                (0..NR_PCP_ORDERS).find_map(|o| g.normal[o].pop(true).map(|p| (o, p)))
            else {
                break;
            };
            let c = Self::count(&g) - (1 << o);
            self.set_count(&mut g, c);
            drop(g);
            let bytes = b
                .config()
                .block_size(Order::new(o as u8).unwrap_or(Order::ZERO));
            // SAFETY: the page was taken off the list; nobody else holds it.
            unsafe { p.as_ptr().write_bytes(0, bytes) };
            let Some(mut g) = lock() else {
                // SAFETY: the page is ours and zero.
                unsafe { b.free_pages_zeroed(p, Order::new(o as u8).unwrap_or(Order::ZERO)) };
                break;
            };
            g.zero[o].push(
                owner(b, p.as_ptr() as usize),
                list_tag(o as u8, true),
                false,
            );
            let c = Self::count(&g) + (1 << o);
            self.set_count(&mut g, c);
            let cpu = g.cpu();
            self.stat(cpu, PcpStat::PREZERO_PAGES, 1 << o);
            done += 1 << o;
        }
        done
    }
}
