//! Flushing CPU state back to the node (`flush_cpu_slab`, `flush_all`),
//! `kmem_cache_shrink`, `kmem_cache_destroy`, and the fork support that
//! takes every lock of the cache.

use core::sync::atomic::Ordering as CoreOrdering;

use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;
use local_lock::Platform;

use crate::error::CacheBusy;
use crate::slab::Slab;
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::{Guard, KmemCache, Mode};

/// `KmemCache::idle`: a slab was allocated or discarded since the last
/// idle check.
const IDLE_ACTIVE: u8 = 1;
/// `KmemCache::idle`: a slab was allocated or discarded since the last
/// shrink.
const IDLE_DIRTY: u8 = 2;

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Detaches a CPU's slab and partial chain under its lock, then gives
    /// them back outside it.
    fn flush_guard<'a>(
        &'a self,
        mut g: Guard<'a, P, N>,
        relock: impl Fn() -> Option<Guard<'a, P, N>>,
    ) {
        let sheaves = Self::take_sheaves(&mut g);
        if sheaves != [0, 0] {
            // Sheaves first (their objects go back to slabs), then the CPU
            // slab and partial slabs, which those frees may have refilled.
            drop(g);
            self.drop_sheaves(sheaves);
            g = match relock() {
                Some(g) => g,
                None => return,
            };
        }
        let c = self.fast_of(g.cpu());
        let slab = c.slab.load(Ordering::Relaxed);
        let mut fl = 0;
        if slab != 0 {
            // Slab first, then the freelist with a tid bump: a fast free
            // that still saw the old slab fails its compare-exchange.
            self.set_cpu_slab(c, 0);
            fl = self.c_take_freelist(&mut g);
        }
        let partial = g.partial;
        g.partial = 0;
        g.partial_slabs = 0;
        c.partial_slabs.store(0, CoreOrdering::Relaxed);
        drop(g);
        if slab != 0 {
            // SAFETY: detached from the CPU above; frozen for us.
            self.deactivate_slab(unsafe { Slab::from_addr(slab) }, fl);
            self.stat_here(SlubStat::CPUSLAB_FLUSH);
        }
        if partial != 0 {
            self.unfreeze_partials(partial);
        }
    }

    /// Flushes the calling CPU's slab and partial slabs (`flush_cpu_slab`).
    pub fn flush_local(&self) {
        if self.rcs() {
            self.drop_sheaves(self.take_rcs_local());
        }
        self.flush_guard(self.lock_cpu(), || Some(self.lock_cpu()));
    }

    /// Flushes one CPU, where the platform lets us reach it (see
    /// [`LocalLock::lock_remote`](local_lock::LocalLock::lock_remote)); `false` if it could not.
    pub fn flush_cpu(&self, cpu: usize) -> bool {
        if self.rcs() {
            // Restartable sheaves: exchanged out and the CPU fenced.
            if let Some(sh) = self.take_rcs_remote(cpu) {
                self.drop_sheaves(sh);
            }
        }
        match self.cpu.lock_remote(cpu) {
            Some(g) => {
                self.flush_guard(g, || self.cpu.lock_remote(cpu));
                true
            }
            None => false,
        }
    }

    /// Flushes the calling CPU and every CPU the platform lets us reach
    /// (`flush_all`); returns how many slots could not be reached (pinned
    /// kernel CPUs must flush themselves, e.g. from an IPI; live per-thread
    /// slots are flushed by their threads, at the latest on exit).
    pub fn flush_all(&self) -> usize {
        self.flush_local();
        let mut missed = 0;
        for cpu in 0..N {
            if !self.flush_cpu(cpu) {
                missed += 1;
            }
        }
        missed
    }

    /// Flushes every slot through exclusive access (no other context can
    /// use the cache).
    fn flush_exclusive(&mut self) {
        // Sheaves and the barn first: their objects go back to slabs (and
        // may land on CPU freelists or partial lists, flushed next).
        let mut sheaves: [[usize; 2]; N] = [[0; 2]; N];
        for (i, l) in self.cpu.iter_mut().enumerate() {
            sheaves[i] = [core::mem::take(&mut l.main), core::mem::take(&mut l.spare)];
        }
        for sh in sheaves {
            self.drop_sheaves(sh);
        }
        for i in 0..N {
            let r = self.fast.sheaves(i);
            let sh = [
                local_lock::this_cpu::take_main_in(r),
                r.spare.swap(0, CoreOrdering::Relaxed),
            ];
            self.drop_sheaves(sh);
        }
        self.flush_barn();
        let mut work: [(usize, usize, usize); N] = [(0, 0, 0); N];
        let lockless = self.mode() == Mode::Lockless;
        for (i, l) in self.cpu.iter_mut().enumerate() {
            let c = &self.fast[i];
            let slab = c.slab.load(Ordering::Relaxed);
            c.slab.store(0, Ordering::Relaxed);
            c.slab_base.store(0, CoreOrdering::Relaxed);
            c.slab_objects.store(0, CoreOrdering::Relaxed);
            c.slab_span.store(0, CoreOrdering::Relaxed);
            let fl = if lockless {
                let d = c.fl_tid.load(Ordering::Relaxed);
                c.fl_tid
                    .store(DWord::new(0, Self::next_tid(d.hi, i)), Ordering::Relaxed);
                d.lo
            } else {
                core::mem::take(&mut l.freelist)
            };
            work[i] = (slab, fl, core::mem::take(&mut l.partial));
            l.partial_slabs = 0;
            c.partial_slabs.store(0, CoreOrdering::Relaxed);
        }
        for (slab, fl, partial) in work {
            if slab != 0 {
                // SAFETY: detached above.
                self.deactivate_slab(unsafe { Slab::from_addr(slab) }, fl);
            }
            if partial != 0 {
                self.unfreeze_partials(partial);
            }
        }
    }

    /// `__kmem_cache_shrink`: flushes every reachable CPU, frees the empty
    /// node partial slabs and sorts the rest fullest first (so allocations
    /// fill them and the emptier ones may drain). Returns the slabs freed.
    pub fn shrink(&self) -> usize {
        // The barn first: its full sheaves' objects go back to slabs, and a
        // slab they make partial may be frozen onto this CPU's partial
        // list, which the CPU flush then empties.
        self.flush_barn();
        self.flush_all();
        self.shrink_nodes()
    }

    /// Notes slab-level activity (a slab allocated or discarded) for
    /// [`shrink_if_idle`](Self::shrink_if_idle): one load, and a store only
    /// for the first since the last idle check. Slow paths only.
    #[inline(always)]
    pub(super) fn note_active(&self) {
        if self.idle.load(CoreOrdering::Relaxed) & IDLE_ACTIVE == 0 {
            self.idle
                .fetch_or(IDLE_ACTIVE | IDLE_DIRTY, CoreOrdering::Relaxed);
        }
    }

    /// The idle shrink (the kernel shrinks caches under memory pressure;
    /// here a periodic tick, e.g. the page heap's decay, calls this): a
    /// cache that allocated or discarded a slab since its last shrink, and
    /// none since the previous call, is [`shrink`](Self::shrink)ed: every
    /// CPU's sheaves and slabs it can reach flushed, the barn emptied, the
    /// empty slabs given back to the pages (whose decay then gives them
    /// back to the OS). A cache in use is left alone (it is shrunk one tick
    /// after it stops), and so is one already shrunk (no flush every tick
    /// for a cache whose live objects just stay). Returns the slabs freed.
    /// Call it at a point where the caller holds none of the cache's locks
    /// (never from a fast path).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{Geometry, GlobalPages, KmemCache, SlabFlags};
    /// static CACHE: KmemCache<GlobalPages, PerThread> = KmemCache::new(
    ///     "idle", 64, 8, SlabFlags::NONE, Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
    /// let objs: Vec<_> = (0..10_000).map(|_| CACHE.alloc().unwrap()).collect();
    /// for o in objs {
    ///     // SAFETY: ours, freed once.
    ///     unsafe { CACHE.free(o) };
    /// }
    /// assert_eq!(CACHE.shrink_if_idle(), 0, "active since the last tick");
    /// assert!(CACHE.shrink_if_idle() > 0, "idle for a tick: shrunk");
    /// assert_eq!(CACHE.nr_slabs(), 0);
    /// assert_eq!(CACHE.shrink_if_idle(), 0, "already shrunk");
    /// ```
    pub fn shrink_if_idle(&self) -> usize {
        let s = self.idle.load(CoreOrdering::Relaxed);
        if s & IDLE_ACTIVE != 0 {
            // Active since the last tick: look again at the next.
            self.idle.fetch_and(!IDLE_ACTIVE, CoreOrdering::Relaxed);
            return 0;
        }
        if s & IDLE_DIRTY == 0
            || self
                .idle
                .compare_exchange(IDLE_DIRTY, 0, CoreOrdering::Relaxed, CoreOrdering::Relaxed)
                .is_err()
        {
            return 0;
        }
        let freed = self.shrink();
        // Its own discards are not activity.
        self.idle.store(0, CoreOrdering::Relaxed);
        freed
    }

    /// `__kmem_cache_shrink`'s walk of every node: returns the slabs freed.
    fn shrink_nodes(&self) -> usize {
        (0..self.nr_nodes()).map(|nid| self.shrink_node(nid)).sum()
    }

    /// Node `nid`'s part of [`shrink_nodes`](Self::shrink_nodes).
    fn shrink_node(&self, nid: usize) -> usize {
        const PROMOTE: usize = 32;
        let mut buckets = [0usize; PROMOTE];
        let mut discard = 0;
        let mut n = self.lock_node(nid);
        let mut cur = n.head;
        while cur != 0 {
            // SAFETY: list members are held slabs.
            let s = unsafe { Slab::from_addr(cur) };
            cur = s.next();
            let c = s.state().counters;
            let free = (c.objects - c.inuse) as usize;
            if c.inuse == 0 {
                n.remove(s);
                s.set_next(discard);
                discard = s.addr();
            } else if free <= PROMOTE {
                n.remove(s);
                s.set_next(buckets[free - 1]);
                buckets[free - 1] = s.addr();
            }
        }
        // The fullest (fewest free) end up first; order within a bucket kept.
        for b in buckets.iter().rev() {
            let mut cur = *b;
            while cur != 0 {
                // SAFETY: collected above.
                let s = unsafe { Slab::from_addr(cur) };
                cur = s.next();
                n.add(s, false);
            }
        }
        self.set_nr_partial(nid, &n);
        drop(n);
        let mut freed = 0;
        while discard != 0 {
            // SAFETY: collected above: unlisted, empty.
            let s = unsafe { Slab::from_addr(discard) };
            discard = s.next();
            self.discard_slab(s);
            freed += 1;
        }
        freed
    }

    /// `kmem_cache_destroy` through `&self`, so a `static` cache can be
    /// emptied: [`shrink`](Self::shrink) (every CPU the platform lets this
    /// context reach, the barn, the empty slabs), then [`CacheBusy`] if
    /// objects are still allocated or a CPU the platform cannot reach
    /// still caches some (pinned kernel CPUs flush themselves; live
    /// threads' slots on exit); their slabs are left alone. The cache
    /// stays usable: the next allocation takes new slabs.
    /// [`destroy_exclusive`](Self::destroy_exclusive) reaches every CPU
    /// through `&mut self`.
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{Geometry, GlobalPages, KmemCache, SlabFlags};
    /// static CACHE: KmemCache<GlobalPages, PerThread> = KmemCache::new(
    ///     "scratch", 64, 8, SlabFlags::NONE, Geometry::new(PerThread::OWNED_SLOTS + 1), GlobalPages, PerThread);
    /// let a = CACHE.alloc().unwrap();
    /// assert!(CACHE.destroy().is_err(), "one object is live");
    /// // SAFETY: ours, freed once.
    /// unsafe { CACHE.free(a) };
    /// assert_eq!(CACHE.destroy(), Ok(()));
    /// assert_eq!(CACHE.nr_slabs(), 0);
    /// CACHE.validate();
    /// ```
    pub fn destroy(&self) -> Result<(), CacheBusy> {
        self.shrink();
        self.busy()
    }

    /// [`destroy`](Self::destroy) (its name while `destroy` took
    /// `&mut self`; kept for existing callers).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<_, _>::create("old", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(c.alloc().unwrap()) };
    /// assert_eq!(c.release(), Ok(()));
    /// ```
    pub fn release(&self) -> Result<(), CacheBusy> {
        self.destroy()
    }

    /// [`CacheBusy`] if the cache still has slabs.
    fn busy(&self) -> Result<(), CacheBusy> {
        let slabs = self.nr_slabs();
        if slabs == 0 {
            Ok(())
        } else {
            let info = self.slabinfo();
            Err(CacheBusy {
                name: self.name,
                slabs,
                objects: info.active_objs,
            })
        }
    }

    /// [`destroy`](Self::destroy) through exclusive access: flushes every
    /// CPU's state whatever the platform lets a context reach, frees every
    /// empty slab and reports objects still allocated (whose slabs are
    /// then left alone). Dropping a cache does this.
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let mut c = KmemCache::<_, _>::create("mine", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let a = c.alloc().unwrap();
    /// assert_eq!(c.destroy_exclusive().unwrap_err().objects, 1);
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(a) };
    /// assert_eq!(c.destroy_exclusive(), Ok(()));
    /// ```
    pub fn destroy_exclusive(&mut self) -> Result<(), CacheBusy> {
        self.flush_exclusive();
        self.shrink_nodes();
        self.free_random_seq();
        self.busy()
    }
}

// Fork support (issue #14 item 13; see `crate::fork`).
#[cfg(all(feature = "std", not(loom)))]
impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Takes every lock of the cache in the lock order and keeps them, for
    /// `fork`: every node's `list_lock` and full list (node by node), the per-CPU lock
    /// words of `locked_cpus` (slots the platform always locks: every slot
    /// of [`RseqCpu`](local_lock::std_platform::RseqCpu), the per-thread
    /// platform's overflow slot), then the barn (a leaf: nothing is taken
    /// while it is held).
    ///
    /// # Safety
    ///
    /// The slots of `locked_cpus` are protected by the locked strategy for
    /// every context that uses them.
    pub unsafe fn fork_lock(&self, locked_cpus: core::ops::Range<usize>) {
        let nodes = || (0..self.nr_nodes()).map(|i| self.get_node(i));
        for n in nodes() {
            n.list.lock_for_fork();
            n.full.lock_for_fork();
        }
        for cpu in locked_cpus {
            // SAFETY: caller's contract.
            unsafe { self.cpu.fork_lock_slot(cpu) };
        }
        for n in nodes() {
            n.barn.lock_for_fork();
        }
    }

    /// Releases what [`fork_lock`](Self::fork_lock) took (same
    /// `locked_cpus`), in the parent or in the forked child.
    ///
    /// # Safety
    ///
    /// Taken by `fork_lock` on this thread (in a child: on the thread that
    /// forked).
    pub unsafe fn fork_unlock(&self, locked_cpus: core::ops::Range<usize>) {
        let nodes = || (0..self.nr_nodes()).rev().map(|i| self.get_node(i));
        // SAFETY: caller's contract: each is held, its guard forgotten.
        unsafe {
            for n in nodes() {
                n.barn.force_unlock();
            }
            for cpu in locked_cpus.rev() {
                self.cpu.fork_unlock_slot(cpu);
            }
            for n in nodes() {
                n.full.force_unlock();
                n.list.force_unlock();
            }
        }
    }
}
