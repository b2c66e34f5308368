//! The dispatchers and the fast paths: `alloc`, `free` and `try_free`
//! choose by the cache's [`Fast`](super::Fast) byte between the sheaf fast
//! paths (`alloc_from_pcs`, `free_to_pcs_ptr`), the locked fast paths
//! (`alloc_locked`, `free_locked`), the lockless `(freelist, tid)` path
//! (`alloc_lockless`) and the out-of-line first-use / debug dispatchers.
//! Everything they miss goes down to the sheaf slow paths
//! ([`sheaf`](super::sheaf)) or the slab layer
//! ([`slab_path`](super::slab_path)).

use core::ptr::NonNull;
use core::sync::atomic::Ordering as CoreOrdering;

use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;
use local_lock::{this_cpu_cmpxchg_double, Platform};

use buddy::AllocFlags;

use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::{Fast, FreePtr, KmemCache, Mode, Sheaf};

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// `kmem_cache_zalloc`: [`alloc`](Self::alloc), the object zeroed
    /// (its [`object_size`](Self::object_size) bytes).
    ///
    /// ```
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<_, _>::create("zeroed", 48, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let a = c.alloc().unwrap();
    /// // SAFETY: a live 48-byte object of ours, freed once.
    /// unsafe {
    ///     a.as_ptr().write_bytes(0xff, 48);
    ///     c.free(a);
    /// }
    /// let z = c.zalloc().unwrap();
    /// // SAFETY: as above.
    /// assert!(unsafe { core::slice::from_raw_parts(z.as_ptr(), 48) }.iter().all(|&b| b == 0));
    /// ```
    #[inline]
    #[track_caller]
    pub fn zalloc(&self) -> Option<NonNull<u8>> {
        let p = self.alloc()?;
        // SAFETY: a fresh object of `object_size` bytes.
        unsafe { p.as_ptr().write_bytes(0, self.object_size()) };
        Some(p)
    }

    /// `kmem_cache_alloc(s, gfp)`: [`alloc`](Self::alloc) with the
    /// request's gfp flags, which reach the page allocator when a new slab
    /// is needed (`allocate_slab`: the preferred order tried with
    /// `NOWARN | NORETRY` and no reclaim or reserves, then the minimum
    /// order with `gfp` as given: `NOFAIL`, `RETRY_MAYFAIL`, `MEMALLOC`,
    /// `HIGH`/`ATOMIC`, `NOWARN`, a zone limit...). `ZEROED` zeroes the
    /// object (`__GFP_ZERO`: [`zalloc`](Self::zalloc)); `ONLY_ZERO`,
    /// `COLD` and `COMP` are page-level and ignored. Without page-level
    /// flags this is `alloc`; with them the object comes from the slab
    /// path (the CPU slab, partial slabs, a new slab), not the sheaves.
    ///
    /// ```
    /// use buddy::AllocFlags;
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<_, _>::create("gfp", 48, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let p = c.alloc_flags(AllocFlags::NOWARN | AllocFlags::ZEROED).unwrap();
    /// // SAFETY: a live 48-byte object of ours.
    /// assert!(unsafe { core::slice::from_raw_parts(p.as_ptr(), 48) }.iter().all(|&b| b == 0));
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(p) };
    /// ```
    #[inline]
    #[track_caller]
    pub fn alloc_flags(&self, gfp: AllocFlags) -> Option<NonNull<u8>> {
        let page = gfp.difference(Self::OBJECT_GFP);
        let p = if page == AllocFlags::NONE {
            self.alloc()?
        } else {
            self.alloc_gfp(page, core::panic::Location::caller())?
        };
        if gfp.contains(AllocFlags::ZEROED) {
            // SAFETY: a fresh object of `object_size` bytes.
            unsafe { p.as_ptr().write_bytes(0, self.object_size()) };
        }
        Some(p)
    }

    /// Flags that are about the object or a single block, never passed to
    /// a slab's page allocation.
    pub(super) const OBJECT_GFP: AllocFlags = AllocFlags::ONLY_ZERO
        .union(AllocFlags::COLD)
        .union(AllocFlags::COMP);

    /// The slab path with page-level gfp flags.
    #[cold]
    #[inline(never)]
    fn alloc_gfp(
        &self,
        gfp: AllocFlags,
        loc: &'static core::panic::Location<'static>,
    ) -> Option<NonNull<u8>> {
        self.mode();
        if self.flags.is_debug() {
            return self.alloc_debug(loc, gfp);
        }
        self.slab_alloc_slow_gfp(self.lock_cpu(), gfp)
    }

    /// Allocates an object (`kmem_cache_alloc`); `None` when the page
    /// allocator has no slab to give.
    #[inline(always)]
    #[track_caller]
    pub fn alloc(&self) -> Option<NonNull<u8>> {
        let f = self.dispatch.load(CoreOrdering::Acquire);
        // The default (`GlobalSlub::new()`) first.
        if f == Fast::RseqHardened as u8 {
            self.alloc_rcs::<true>()
        } else if f == Fast::Rseq as u8 {
            self.alloc_rcs::<false>()
        } else if f == Fast::SheavesHardened as u8 {
            match self.alloc_from_pcs::<true>() {
                Some(o) => Some(o),
                None => self.alloc_pcs_fallback(),
            }
        } else if f & Fast::Sheaves as u8 != 0 {
            match self.alloc_from_pcs::<false>() {
                Some(o) => Some(o),
                None => self.alloc_pcs_fallback(),
            }
        } else if f & Fast::Locked as u8 != 0 {
            if f & Fast::HARDENED != 0 {
                self.alloc_locked::<true>()
            } else {
                self.alloc_locked::<false>()
            }
        } else if f == Fast::Lockless as u8 {
            self.alloc_lockless()
        } else {
            self.alloc_special(core::panic::Location::caller())
        }
    }

    /// The slab path of a sheaf cache (the trylock failed: re-entry from an
    /// interrupt; or no sheaf could be had).
    #[cold]
    #[inline(never)]
    fn alloc_pcs_fallback(&self) -> Option<NonNull<u8>> {
        if self.mode() == Mode::Lockless {
            self.alloc_lockless()
        } else {
            self.alloc_slow_locked()
        }
    }

    /// `alloc` on first use (of any cache, sheaves or not) and for debug
    /// caches: the dispatch byte is [`Fast::Special`] (sheaf caches then
    /// dispatch inline to `alloc_from_pcs`).
    #[inline(never)]
    fn alloc_special(&self, loc: &'static core::panic::Location<'static>) -> Option<NonNull<u8>> {
        let m = self.mode();
        if self.flags.is_debug() {
            return self.alloc_debug(loc, AllocFlags::NONE);
        }
        if self.rcs() {
            return if self.hardened() {
                self.alloc_rcs::<true>()
            } else {
                self.alloc_rcs::<false>()
            };
        }
        if self.sheaf_capacity != 0 {
            let o = if self.hardened() {
                self.alloc_from_pcs::<true>()
            } else {
                self.alloc_from_pcs::<false>()
            };
            if o.is_some() {
                return o;
            }
        }
        if m == Mode::Lockless {
            self.alloc_lockless()
        } else if self.hardened() && self.ctor.is_some() {
            // The free pointer is after the object: the slab path, which
            // takes the CPU freelist first and honours the offset.
            self.alloc_slow_locked()
        } else if self.hardened() {
            self.alloc_locked::<true>()
        } else {
            self.alloc_locked::<false>()
        }
    }

    /// The lockless fast path: read `(freelist, tid)` (tid and freelist in
    /// one load, so a stale object never pairs with a newer tid), then the
    /// slab; compare-exchange `(object, tid) -> (next, next tid)` on the
    /// CPU we run on ([`this_cpu_cmpxchg_double`]: one instruction on x86;
    /// here "pin (preemption off), same CPU?, compare-exchange, unpin", as
    /// the generic per-CPU ops do: nothing else is disabled).
    #[inline]
    pub(super) fn alloc_lockless(&self) -> Option<NonNull<u8>> {
        let p = self.cpu.platform();
        loop {
            let cpu = p.current_cpu();
            let c = &self.fast[cpu];
            let d = c.fl_tid.load(Ordering::Acquire);
            let slab = c.slab.load(Ordering::Relaxed);
            if d.lo == 0 || slab == 0 {
                let g = self.lock_cpu();
                return self.slab_alloc_slow(g);
            }
            let next = self.get_fp(d.lo);
            if !self.fp_ok(
                next,
                c.slab_base.load(CoreOrdering::Relaxed),
                c.slab_objects.load(CoreOrdering::Relaxed),
            ) {
                self.recheck_lockless(cpu, d);
                continue;
            }
            if this_cpu_cmpxchg_double(
                p,
                cpu,
                &c.fl_tid,
                d,
                DWord::new(next, Self::next_tid(d.hi, cpu)),
            ) {
                self.clear_fp(d.lo);
                c.stats.inc(SlubStat::ALLOC_FASTPATH);
                return Some(Self::obj_ptr(d.lo));
            }
            c.stats.inc(SlubStat::CMPXCHG_DOUBLE_CPU_FAIL);
        }
    }

    /// A lockless fast path read a free pointer outside the CPU slab: a
    /// race (an interrupt or a remote flush changed the CPU's freelist or
    /// slab meanwhile: retry), or a corrupted freelist, which is reported
    /// when, under the local lock (no flush can be half done), the same
    /// freelist head still holds it.
    #[cold]
    #[inline(never)]
    fn recheck_lockless(&self, cpu: usize, d: DWord) {
        let g = self.lock_cpu();
        if g.cpu() != cpu {
            return;
        }
        let c = self.fast_of(cpu);
        if c.fl_tid.load(Ordering::Acquire) != d {
            return;
        }
        let base = c.slab_base.load(CoreOrdering::Relaxed);
        let next = self.get_fp(d.lo);
        if !self.fp_ok(next, base, c.slab_objects.load(CoreOrdering::Relaxed)) {
            drop(g);
            self.bad_freelist(base, d.lo, next, "points outside its slab");
        }
    }

    /// The fast path under the local lock (PREEMPT_RT, no lock-free
    /// double-word CAS, or the per-thread std platform, where taking the
    /// pinned lock costs no atomic instruction).
    #[inline]
    fn alloc_locked<const H: bool>(&self) -> Option<NonNull<u8>> {
        let mut g = self.lock_cpu();
        let fl = g.freelist;
        if fl != 0 {
            let cpu = g.cpu();
            let w = self.fp_word_fast::<H>(fl);
            let next = if H {
                w.load(CoreOrdering::Relaxed) ^ self.fp_key(fl)
            } else {
                w.load(CoreOrdering::Relaxed)
            };
            if H {
                // The next object must be one of the CPU slab (a write
                // after free cannot send the next allocation elsewhere),
                // and the one handed out no longer reads as free.
                let c = self.fast_of(cpu);
                let base = c.slab_base.load(CoreOrdering::Relaxed);
                let span = c.slab_span.load(CoreOrdering::Relaxed);
                // One range check (null passes: `min`); a pointer inside
                // the slab but off an object boundary cannot be made
                // without the secret.
                if next.min(next.wrapping_sub(base)) >= span {
                    g.unlock();
                    self.bad_freelist(base, fl, next, "points outside its slab");
                }
                w.store(FreePtr::NULL.raw(), CoreOrdering::Relaxed);
            }
            g.freelist = next;
            // Locked mode: the tid only counts transactions (no CAS reads
            // it), so no CPU-naming start value is needed.
            g.tid = g.tid.wrapping_add(Self::TID_STEP);
            self.stat_cpu(cpu, SlubStat::ALLOC_FASTPATH);
            g.unlock();
            return Some(Self::obj_ptr(fl));
        }
        // The slow path re-takes the lock: passing the guard along would
        // keep it in memory on the fast path.
        g.unlock();
        self.alloc_slow_locked()
    }

    #[inline(never)]
    fn alloc_slow_locked(&self) -> Option<NonNull<u8>> {
        self.slab_alloc_slow(self.lock_cpu())
    }

    /// Frees an object (`kmem_cache_free`).
    ///
    /// # Panics
    ///
    /// If `ptr` is not an object of this cache (foreign, inside an object,
    /// of another cache) or is freed twice in a row (the kernel's naive
    /// check), naming the problem; nothing is changed.
    ///
    /// # Safety
    ///
    /// `ptr` was allocated from this cache and is not used afterwards.
    #[inline]
    #[track_caller]
    pub unsafe fn free(&self, ptr: NonNull<u8>) {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.try_free(ptr) } {
            panic!("kmem_cache_free({}): {e}", self.name)
        }
    }

    /// [`free`](Self::free) that reports bad input instead of panicking.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free), for a pointer that passes the checks.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn try_free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let f = self.dispatch.load(CoreOrdering::Acquire);
        // `kfree` -> `virt_to_slab` (validates) -> `free_to_pcs`; the
        // default (`GlobalSlub::new()`) first.
        if f == Fast::RseqHardened as u8 {
            return self.free_rcs::<true>(ptr);
        } else if f == Fast::Rseq as u8 {
            return self.free_rcs::<false>(ptr);
        } else if f == Fast::SheavesHardened as u8 {
            if self.free_to_pcs_ptr::<true>(ptr)? {
                return Ok(());
            }
        } else if f & Fast::Sheaves as u8 != 0 {
            if self.free_to_pcs_ptr::<false>(ptr)? {
                return Ok(());
            }
        } else if f & Fast::Locked as u8 != 0 {
            let done = if f & Fast::HARDENED != 0 {
                self.free_locked::<true>(ptr)?
            } else {
                self.free_locked::<false>(ptr)?
            };
            if done {
                return Ok(());
            }
        }
        // The slab path (sheaves: a failed trylock, no sheaf; locked: an
        // object outside the CPU slab).
        // SAFETY: forwarded.
        unsafe { self.try_free_other(ptr, f, core::panic::Location::caller()) }
    }

    /// Locked fast free: an object of the CPU slab is recognised by its
    /// address (the CPU slab is this cache's, held by this CPU) and pushed
    /// onto the CPU freelist; `Ok(false)` sends the caller to the slab
    /// path. Hardened (`H`): refused if it reads as free.
    #[inline(always)]
    fn free_locked<const H: bool>(&self, ptr: NonNull<u8>) -> Result<bool, FreeError> {
        let mut g = self.lock_cpu();
        let cpu = g.cpu();
        let c = self.fast_of(cpu);
        let a = ptr.as_ptr().addr();
        let base = c.slab_base.load(CoreOrdering::Relaxed);
        let objects = c.slab_objects.load(CoreOrdering::Relaxed);
        if self.obj_index(a.wrapping_sub(base), objects).is_none() {
            g.unlock();
            return Ok(false);
        }
        let obj = ptr.as_ptr().expose_provenance();
        let fl = g.freelist;
        let w = self.fp_word_fast::<H>(obj);
        if H {
            // On a freelist of this slab already: its free pointer decodes
            // to null or to an object of the slab.
            let key = self.fp_key(obj);
            let d = w.load(CoreOrdering::Relaxed) ^ key;
            if d.min(d.wrapping_sub(base)) < c.slab_span.load(CoreOrdering::Relaxed) {
                g.unlock();
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
            w.store(fl ^ key, CoreOrdering::Relaxed);
        } else {
            if fl == obj {
                g.unlock();
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
            w.store(fl, CoreOrdering::Relaxed);
        }
        g.freelist = obj;
        g.tid = g.tid.wrapping_add(Self::TID_STEP);
        self.stat_cpu(cpu, SlubStat::FREE_FASTPATH);
        g.unlock();
        Ok(true)
    }

    /// `try_free` beyond the inlined paths: the lockless mode, an object
    /// outside the CPU slab on the locked mode, a sheaf free the sheaves
    /// could not take, first use, debug caches.
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free).
    #[inline(never)]
    unsafe fn try_free_other(
        &self,
        ptr: NonNull<u8>,
        f: u8,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        if f == Fast::Special as u8 {
            // SAFETY: forwarded.
            return unsafe { self.free_special(ptr, loc) };
        }
        let (s, obj) = self.slab_of(ptr)?;
        // SAFETY: forwarded; validated.
        unsafe { self.free_validated(s, obj) }
    }

    /// `try_free` on first use (of any cache, sheaves or not) and for
    /// debug caches: the dispatch byte is [`Fast::Special`] (sheaf caches
    /// then dispatch inline to `free_to_pcs_ptr`).
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free).
    #[inline]
    unsafe fn free_special(
        &self,
        ptr: NonNull<u8>,
        loc: &'static core::panic::Location<'static>,
    ) -> Result<(), FreeError> {
        self.mode();
        if self.flags.is_debug() {
            return self.free_debug(ptr, loc);
        }
        if self.rcs() {
            return if self.hardened() {
                self.free_rcs::<true>(ptr)
            } else {
                self.free_rcs::<false>(ptr)
            };
        }
        if self.sheaf_capacity != 0 {
            let done = if self.hardened() {
                self.free_to_pcs_ptr::<true>(ptr)?
            } else {
                self.free_to_pcs_ptr::<false>(ptr)?
            };
            if done {
                return Ok(());
            }
        }
        let (s, obj) = self.slab_of(ptr)?;
        // SAFETY: forwarded; validated.
        unsafe { self.free_validated(s, obj) }
    }

    /// The free path of a sheaf cache: validates `ptr` (by the CPU's
    /// validated range, else the descriptor lookup) and pushes it onto the
    /// main sheaf; `Ok(false)` sends the caller to the slab path.
    #[inline(always)]
    fn free_to_pcs_ptr<const H: bool>(&self, ptr: NonNull<u8>) -> Result<bool, FreeError> {
        let Some(g) = self.try_lock_cpu() else {
            return Ok(false);
        };
        let a = ptr.as_ptr().addr();
        let gen = self.fcheck.gen.load(CoreOrdering::Relaxed);
        if !self.in_validated_range(&g, a, gen) {
            // The lookup runs outside the lock: nothing that may unwind
            // runs under it, so the guard stays in registers.
            g.unlock();
            return self.free_to_pcs_miss(ptr, gen);
        }
        let obj = ptr.as_ptr().expose_provenance();
        let w = self.fp_word_fast::<H>(obj);
        let r = if H {
            self.random.load(CoreOrdering::Relaxed)
        } else {
            0
        };
        // Already free in a sheaf: marked with the secret. (An object on
        // a slab freelist is found by the slab paths' full check.)
        if H && Self::marked_free(w, r) {
            g.unlock();
            return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
        }
        if g.main != 0 {
            let main = Sheaf(g.main);
            let n = main.size();
            if !H && n > 0 && main.get(n - 1) == obj {
                g.unlock();
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
            if n < self.sheaf_capacity {
                if H {
                    // Marked free (its free pointer encodes null), and
                    // stored encoded.
                    w.store(r, CoreOrdering::Relaxed);
                    main.set(n, self.entry_of(obj));
                } else {
                    main.set(n, obj);
                }
                main.set_size(n + 1);
                self.stat_cpu(g.cpu(), SlubStat::FREE_PCS);
                g.unlock();
                return Ok(true);
            }
        }
        // The slow path re-takes the lock: passing the guard along would
        // keep it in memory on the fast path.
        g.unlock();
        self.free_to_pcs_relock(obj)
    }

    /// A sheaf free outside the CPU's validated range: the descriptor
    /// lookup, then (under the lock again) the range recorded and the push.
    #[inline(never)]
    fn free_to_pcs_miss(&self, ptr: NonNull<u8>, gen: usize) -> Result<bool, FreeError> {
        let (base, objects) = self.validate_range_mapped(ptr)?;
        let obj = ptr.as_ptr().expose_provenance();
        if self.looks_free(obj, base, objects * self.lay.size) {
            return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
        }
        let Some(mut g) = self.try_lock_cpu() else {
            return Ok(false);
        };
        if !self.one_node() && self.block_nid(ptr) != self.cpu_node(g.cpu()) {
            // `slab_free`: an object of another node than this CPU's
            // bypasses the sheaves (`slab_nid(slab) == numa_mem_id()`);
            // its range is not recorded, so the inline path never takes
            // it either.
            g.unlock();
            return Ok(false);
        }
        g.vbase = base;
        g.vobjects = objects;
        g.vspan = objects * self.lay.size;
        g.vgen = gen;
        self.free_to_pcs_slow(g, ptr.as_ptr().expose_provenance())
    }

    /// [`free_to_pcs_slow`](Self::free_to_pcs_slow) from scratch (the
    /// state is re-read under the lock).
    #[inline(never)]
    pub(super) fn free_to_pcs_relock(&self, obj: usize) -> Result<bool, FreeError> {
        match self.try_lock_cpu() {
            Some(g) => self.free_to_pcs_slow(g, obj),
            None => Ok(false),
        }
    }

    /// The descriptor lookup of a sheaf free outside the CPU's validated
    /// range: the slab's first byte and object count.
    #[inline(never)]
    pub(super) fn validate_range(&self, ptr: NonNull<u8>) -> Result<(usize, usize), FreeError> {
        let (_, _, b) = self.slab_block_of(ptr)?;
        Ok((b.head.as_ptr().addr(), self.objects_of(b.order)))
    }

    /// Allocation from the per-CPU sheaves: pop from main; else swap with
    /// a non-empty spare; else trade the empty main for a full sheaf at the
    /// barn; else refill it from slabs. `None` sends the caller to the slab
    /// path (a failed trylock: re-entry from an interrupt; no memory).
    #[inline(always)]
    pub(super) fn alloc_from_pcs<const H: bool>(&self) -> Option<NonNull<u8>> {
        let g = self.try_lock_cpu()?;
        if g.main != 0 {
            let main = Sheaf(g.main);
            let n = main.size();
            // 1..=capacity (a size beyond it is reported by the slow path).
            if n.wrapping_sub(1) < self.sheaf_capacity {
                let i = n - 1;
                let mut o = main.get(i);
                if H {
                    o ^= self.entry_key();
                    if !self.in_slabs(o) {
                        g.unlock();
                        self.bad_sheaf(main, i, o)
                    }
                }
                main.set_size(i);
                self.stat_cpu(g.cpu(), SlubStat::ALLOC_PCS);
                g.unlock();
                if H {
                    self.fp_word_fast::<H>(o).store(0, CoreOrdering::Relaxed);
                }
                return Some(Self::obj_ptr(o));
            }
        }
        // The slow path re-takes the lock (see `free_to_pcs_ptr`).
        g.unlock();
        self.alloc_from_pcs_relock()
    }

    /// [`alloc_from_pcs_slow`](Self::alloc_from_pcs_slow) from scratch.
    #[inline(never)]
    fn alloc_from_pcs_relock(&self) -> Option<NonNull<u8>> {
        self.alloc_from_pcs_slow(self.try_lock_cpu()?)
    }
}
