//! `kmem_cache_alloc_bulk` / `kmem_cache_free_bulk`: the sheaves first
//! (`alloc_from_pcs_bulk`, `free_to_pcs_bulk`, the per-window routing of
//! `free_bulk_pcs`), then slabs: the CPU freelist under one local-lock hold
//! (`alloc_bulk_slab`) and detached freelists per slab with the kernel's
//! look-ahead (`free_bulk_windows`); `try_free_bulk` validates the whole
//! array first.

use core::ptr::NonNull;
use core::sync::atomic::Ordering as CoreOrdering;

use buddy::{AllocFlags, Order};
use local_lock::Platform;

use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::slab::Slab;
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::{CpuLocked, Guard, KmemCache, Sheaf, NUMA_NO_NODE};

/// Objects per window of a bulk free (validated as a whole before any change).
const BULK_WINDOW: usize = 64;

/// The last slab a bulk free or a sheaf flush found
/// ([`slab_of_run`](KmemCache::slab_of_run)): its head, object count and
/// descriptor; no slab yet while `objects` is 0.
pub(super) struct LastSlab {
    base: usize,
    objects: usize,
    slab: usize,
}

impl LastSlab {
    /// No slab found yet.
    pub(super) const fn new() -> Self {
        Self {
            base: 0,
            objects: 0,
            slab: 0,
        }
    }

    /// The first object of the slab last found.
    #[inline(always)]
    pub(super) fn base(&self) -> usize {
        self.base
    }

    /// The object count of the slab last found.
    #[inline(always)]
    pub(super) fn objects(&self) -> usize {
        self.objects
    }
}

/// Entries the bulk paths move per restartable section (a stack buffer
/// of this many words).
const BULK_RUN: usize = 64;

/// The largest [`check_bulk`](KmemCache::check_bulk) array whose
/// duplicates [`dedup_small`] finds (a sheaf's worth and more).
const DEDUP_MAX: usize = 256;

/// Finds a pointer that appears twice in `objs` (at most [`DEDUP_MAX`])
/// with an open-addressing table of the addresses on the stack (up to 4
/// KiB, twice the array's length rounded up to a power of two, only that
/// part cleared): one hash and usually one probe per pointer, nothing
/// written outside the table. Sorting copies of the addresses (the larger
/// arrays' way) took a fifth of the consumer's time in `slub-prodcons`'s
/// batches of 64 (`kmem_cache_free_bulk` of 64 objects: the sort's
/// compares of random addresses mispredict).
fn dedup_small(objs: &[NonNull<u8>]) -> Result<(), FreeError> {
    let n = objs.len();
    debug_assert!(n <= DEDUP_MAX);
    let size = (2 * n).next_power_of_two().max(2);
    let bits = size.trailing_zeros();
    let mut buf = [core::mem::MaybeUninit::<usize>::uninit(); 2 * DEDUP_MAX];
    let tab = &mut buf[..size];
    for t in tab.iter_mut() {
        t.write(0);
    }
    // SAFETY: every slot of `tab` was just initialised.
    let tab = unsafe { &mut *(tab as *mut [core::mem::MaybeUninit<usize>] as *mut [usize]) };
    for p in objs {
        // (Non-null: 0 marks an empty slot.)
        let a = p.as_ptr().addr();
        // Fibonacci hashing of the address above its alignment.
        let mut i = (a >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - bits);
        loop {
            let v = tab[i];
            if v == 0 {
                tab[i] = a;
                break;
            }
            if v == a {
                return Err(FreeError::new(a, FreeErrorKind::DoubleFree));
            }
            i = (i + 1) & (size - 1);
        }
    }
    Ok(())
}

/// Chains parked by [`Chains`] besides the current one.
const PARKED: usize = 3;

/// A detached freelist being built: objects of slab `slab` linked from
/// `head` (the latest added) to `tail` (the first); `count` 0: none.
#[derive(Clone, Copy)]
struct Chain {
    slab: usize,
    head: usize,
    tail: usize,
    count: usize,
}

/// The open detached freelists of a bulk free or a sheaf flush
/// (`build_detached_freelist`): each object joins the chain of its slab,
/// so that a slab takes its objects with one `do_slab_free`. A sheaf's
/// objects come in runs of one slab, so the current chain usually takes
/// the next object; a few more stay parked for slabs that interleave.
/// The kernel looks ahead from each chain's tail instead, giving up after
/// three misses: a walk over the objects per chain.
pub(super) struct Chains {
    cur: Chain,
    parked: [Chain; PARKED],
    parked_len: usize,
}

impl Chains {
    /// The current chain's slab, head (its latest object) and length.
    #[inline(always)]
    pub(super) fn current(&self) -> (usize, usize, usize) {
        (self.cur.slab, self.cur.head, self.cur.count)
    }

    /// Sets the current chain's head and length (a caller that linked
    /// objects onto it itself, each to the previous head).
    #[inline(always)]
    pub(super) fn set_current(&mut self, head: usize, count: usize) {
        self.cur.head = head;
        self.cur.count = count;
    }

    /// No chain open.
    pub(super) const fn new() -> Self {
        const NONE: Chain = Chain {
            slab: 0,
            head: 0,
            tail: 0,
            count: 0,
        };
        Self {
            cur: NONE,
            parked: [NONE; PARKED],
            parked_len: 0,
        }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// `kmem_cache_alloc_bulk`: fills `out` with objects under one
    /// local-lock hold (the slow path runs where the CPU freelist runs dry),
    /// advancing the tid once per hold. Returns `out.len()`, or 0 when the
    /// page allocator runs out (the objects taken so far are freed again,
    /// as the kernel does, and `out` is all `None`). The element type is
    /// the one `pcp::Pcp::alloc_bulk` fills; [`free_bulk`](Self::free_bulk)
    /// takes the objects back as `NonNull<u8>`.
    #[track_caller]
    pub fn alloc_bulk(&self, out: &mut [Option<NonNull<u8>>]) -> usize {
        // SAFETY: `Option<NonNull<u8>>` has the layout of `*mut u8` (the
        // null-pointer optimisation is guaranteed), `None` being null.
        let raw = unsafe { &mut *(out as *mut [Option<NonNull<u8>>] as *mut [*mut u8]) };
        self.alloc_bulk_raw(raw)
    }

    /// Fills `out` one object at a time from `one`; all or nothing (the
    /// objects taken are freed again when `one` runs out).
    #[track_caller]
    fn alloc_bulk_each(&self, out: &mut [*mut u8], one: impl Fn() -> Option<NonNull<u8>>) -> usize {
        for i in 0..out.len() {
            match one() {
                Some(o) => out[i] = o.as_ptr(),
                None => {
                    for p in &mut out[..i] {
                        // SAFETY: taken just above.
                        unsafe { self.free(NonNull::new_unchecked(*p)) };
                        *p = core::ptr::null_mut();
                    }
                    return 0;
                }
            }
        }
        out.len()
    }

    /// [`alloc_bulk`](Self::alloc_bulk) on raw pointers (a sheaf's slots
    /// are this type).
    #[track_caller]
    fn alloc_bulk_raw(&self, out: &mut [*mut u8]) -> usize {
        // First use decides the paths (`rcs()` reads the dispatch byte).
        self.mode();
        if self.flags.is_debug() {
            // Debug caches check every object: one at a time (owners
            // recorded at the caller of `alloc_bulk`).
            let loc = core::panic::Location::caller();
            return self.alloc_bulk_each(out, || self.alloc_debug(loc, AllocFlags::NONE));
        }
        if self.rcs() {
            if self.bulk_sections() {
                return self.alloc_bulk_rcs(out);
            }
            // Restartable sheaves: one pop (a section) per object, with
            // the sheaf slow paths (barn, refill) as they run out.
            return if self.hardened() {
                self.alloc_bulk_each(out, || self.alloc_rcs::<true>())
            } else {
                self.alloc_bulk_each(out, || self.alloc_rcs::<false>())
            };
        }
        // Sheaves first (`alloc_from_pcs_bulk`), then slabs for the rest.
        let from_pcs = if self.sheaf_capacity != 0 {
            self.alloc_from_pcs_bulk(out)
        } else {
            0
        };
        if from_pcs == out.len() {
            return from_pcs;
        }
        if self.alloc_bulk_slab(&mut out[from_pcs..]) == 0 {
            for p in &mut out[..from_pcs] {
                // SAFETY: taken from this cache just above.
                unsafe { self.free(NonNull::new_unchecked(*p)) };
                *p = core::ptr::null_mut();
            }
            return 0;
        }
        if self.hardened() {
            // Handed out: no longer free (see `looks_free`).
            for p in &out[from_pcs..] {
                self.clear_fp(p.addr());
            }
        }
        out.len()
    }

    /// `alloc_from_pcs_bulk`: fills `out` from this CPU's sheaves (main,
    /// then a non-empty spare, then full sheaves from the barn; no refill:
    /// once the barn has no full sheaf the caller continues from slabs,
    /// rather than copying pointers twice). Returns how many it filled.
    fn alloc_from_pcs_bulk(&self, out: &mut [*mut u8]) -> usize {
        let mut i = 0;
        while i < out.len() {
            let Some(mut g) = self.try_lock_cpu() else {
                break;
            };
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n > 0 {
                    if n > self.sheaf_capacity {
                        g.unlock();
                        self.bad_sheaf_size(main, n);
                    }
                    let batch = n.min(out.len() - i);
                    for k in 0..batch {
                        let o = match self.sheaf_get(main, n - batch + k) {
                            Ok(o) => o,
                            Err(o) => {
                                // The objects popped so far stay in the sheaf.
                                g.unlock();
                                self.bad_sheaf(main, n - batch + k, o)
                            }
                        };
                        self.clear_fp(o);
                        out[i + k] = core::ptr::with_exposed_provenance_mut(o);
                    }
                    main.set_size(n - batch);
                    self.fast_of(g.cpu()).stats.add(SlubStat::ALLOC_PCS, batch);
                    i += batch;
                    g.unlock();
                    continue;
                }
                if g.spare != 0 && Sheaf(g.spare).size() > 0 {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    g.unlock();
                    continue;
                }
            }
            let empty = core::mem::take(&mut g.main);
            g.unlock();
            // A CPU's first sheaf (the kernel's CPUs always have a main).
            let empty = if empty != 0 {
                Sheaf(empty)
            } else {
                match self.new_sheaf() {
                    Some(e) => e,
                    None => break,
                }
            };
            match self.barn_get_full(empty) {
                Some(full) => self.install_main(full),
                None => {
                    self.install_main(empty);
                    break;
                }
            }
        }
        i
    }

    /// Installs a detached sheaf as this CPU's main, or (another context
    /// installed one meanwhile, or the trylock fails) retires it.
    fn install_main(&self, sh: Sheaf) {
        match self.try_lock_cpu() {
            Some(mut g) if g.main == 0 => {
                g.main = sh.0;
                g.unlock();
            }
            Some(g) => {
                g.unlock();
                self.retire_sheaf(sh);
            }
            None => self.retire_sheaf(sh),
        }
    }

    /// `free_to_pcs_bulk`: pushes validated objects onto this CPU's
    /// sheaves (main, an empty-enough spare, empty sheaves traded at the
    /// barn for full ones); returns how many it took (the rest go to
    /// slabs: the barn has its limit of full sheaves, or no memory).
    fn free_to_pcs_bulk(&self, objs: &[NonNull<u8>]) -> usize {
        let cap = self.sheaf_capacity;
        let mut i = 0;
        while i < objs.len() {
            let Some(mut g) = self.try_lock_cpu() else {
                break;
            };
            if g.main != 0 {
                let main = Sheaf(g.main);
                let n = main.size();
                if n < cap {
                    let batch = (cap - n).min(objs.len() - i);
                    for k in 0..batch {
                        let o = objs[i + k].as_ptr().expose_provenance();
                        self.mark_free(o);
                        self.sheaf_set(main, n + k, o);
                    }
                    main.set_size(n + batch);
                    self.fast_of(g.cpu()).stats.add(SlubStat::FREE_PCS, batch);
                    i += batch;
                    g.unlock();
                    continue;
                }
                if g.spare != 0 && Sheaf(g.spare).size() < cap {
                    let c: &mut CpuLocked = &mut g;
                    core::mem::swap(&mut c.main, &mut c.spare);
                    self.stat_cpu(g.cpu(), SlubStat::SHEAF_SWAP);
                    g.unlock();
                    continue;
                }
            }
            let full = core::mem::take(&mut g.main);
            g.unlock();
            let empty = if full == 0 {
                self.new_sheaf()
            } else {
                match self.barn_put_full(Sheaf(full)) {
                    Ok(e) => Some(e),
                    Err(f) => {
                        self.install_main(f);
                        None
                    }
                }
            };
            match empty {
                Some(e) => self.install_main(e),
                None => break,
            }
        }
        i
    }

    /// A window of [`free_bulk`](Self::free_bulk) onto the sheaves: every
    /// pointer validated first (by the CPU's validated range, else the
    /// descriptor lookup; an error leaves everything untouched), then as
    /// many pushed as the sheaves take ([`free_to_pcs_bulk`](Self::free_to_pcs_bulk));
    /// returns how many.
    fn free_window_to_pcs(&self, window: &[NonNull<u8>]) -> Result<usize, FreeError> {
        let Some(mut g) = self.try_lock_cpu() else {
            return Ok(0);
        };
        let gen = self.fcheck.gen.load(CoreOrdering::Relaxed);
        for p in window {
            if !self.in_validated_range(&g, p.as_ptr().addr(), gen) {
                match self.validate_range(*p) {
                    Ok((base, objects)) => {
                        g.vbase = base;
                        g.vobjects = objects;
                        g.vspan = objects * self.lay.size;
                        g.vgen = gen;
                    }
                    Err(e) => {
                        g.unlock();
                        return Err(e);
                    }
                }
            }
        }
        g.unlock();
        Ok(self.free_to_pcs_bulk(window))
    }

    /// The slab part of [`alloc_bulk`](Self::alloc_bulk): the CPU freelist
    /// under one local-lock hold (one tid bump), the slow path as needed;
    /// all or nothing.
    pub(super) fn alloc_bulk_slab(&self, out: &mut [*mut u8]) -> usize {
        let n = out.len();
        let mut i = 0;
        let mut g = self.lock_cpu();
        let mut fl = self.c_freelist(&g);
        let cpu_slab = |g: &Guard<'_, P, N>| {
            let c = self.fast_of(g.cpu());
            (
                c.slab_base.load(CoreOrdering::Relaxed),
                c.slab_objects.load(CoreOrdering::Relaxed),
            )
        };
        let (mut base, mut objects) = cpu_slab(&g);
        // The words the walk needs, read once (`FpKeys`).
        let (k, lay) = (self.fp_keys(), self.lay);
        while i < n {
            if fl == 0 {
                // Hand the (empty) freelist back with one tid bump, then
                // let the slow path refill and take one object.
                self.c_set_freelist(&mut g, 0);
                // (A new slab's objects come by address, as many as fit.)
                // (Without clearing a new slab's words: every caller
                // writes each object's word, `refill_sheaf` marking them
                // free, `alloc_bulk_raw` clearing them.)
                match self.slab_alloc_slow_into(
                    g,
                    AllocFlags::NONE,
                    NUMA_NO_NODE,
                    &mut out[i..],
                    false,
                ) {
                    0 => {
                        // SAFETY: taken from this cache just above.
                        unsafe { self.undo_bulk_slab(&mut out[..i], true) };
                        return 0;
                    }
                    k => i += k,
                }
                g = self.lock_cpu();
                fl = self.c_freelist(&g);
                (base, objects) = cpu_slab(&g);
                continue;
            }
            out[i] = Self::obj_ptr(fl).as_ptr();
            let next = k.next(fl);
            if k.hardened
                && next != 0
                && lay.object_index(next.wrapping_sub(base), objects).is_none()
            {
                // Nothing taken so far is lost: the freelist is handed
                // back up to `fl`, whose pointer is bad.
                self.c_set_freelist(&mut g, fl);
                drop(g);
                // SAFETY: taken from this cache just above.
                unsafe { self.undo_bulk_slab(&mut out[..i], false) };
                self.bad_freelist(base, fl, next, "points outside its slab");
            }
            fl = next;
            i += 1;
        }
        self.c_set_freelist(&mut g, fl);
        n
    }

    /// Gives the objects a failed [`alloc_bulk_slab`](Self::alloc_bulk_slab)
    /// took back to their slabs, one at a time through
    /// [`do_slab_free`](Self::do_slab_free) (never through the sheaves: a
    /// sheaf refill may be what failed), nulling the entries if `null`.
    ///
    /// # Safety
    ///
    /// Every pointer of `objs` was just allocated from this cache and is
    /// not used afterwards.
    unsafe fn undo_bulk_slab(&self, objs: &mut [*mut u8], null: bool) {
        for p in objs {
            self.clear_fp(p.addr());
            // SAFETY: taken from this cache (caller's contract).
            let ptr = unsafe { NonNull::new_unchecked(*p) };
            // SAFETY: a validated object of that slab, a chain of one.
            let r = self
                .slab_of(ptr)
                .and_then(|(s, obj)| unsafe { self.do_slab_free(s, obj, obj, 1) });
            if let Err(e) = r {
                panic!("kmem_cache_free({}): {e}", self.name)
            }
            if null {
                *p = core::ptr::null_mut();
            }
        }
    }

    /// `kmem_cache_free_bulk`: frees every pointer of `objs`. Objects are
    /// grouped per slab into detached freelists (`build_detached_freelist`:
    /// from the end of the array, gathering objects of the same slab with a
    /// look-ahead of 3 misses), and each group is freed with one
    /// compare-exchange (or one push onto the CPU freelist).
    ///
    /// # Panics
    ///
    /// If a pointer is not an object of this cache, is already free, or
    /// appears twice in `objs`, naming it; the whole array is checked
    /// before anything is freed, so nothing is.
    ///
    /// # Safety
    ///
    /// Every pointer was allocated from this cache, appears once, and is
    /// not used afterwards.
    #[track_caller]
    pub unsafe fn free_bulk(&self, objs: &[NonNull<u8>]) {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.try_free_bulk(objs) } {
            panic!("kmem_cache_free_bulk({}): {e}", self.name)
        }
    }

    /// [`free_bulk`](Self::free_bulk) that reports the first bad pointer
    /// instead of panicking.
    ///
    /// The whole array is validated before anything changes: an `Err`
    /// means no object of `objs` was freed. Refused: a pointer that is not
    /// an object of this cache (foreign, interior, of another cache), an
    /// object already free (in a hardened cache: its free-pointer word
    /// reads as free; in a debug cache: on its slab's freelist; otherwise
    /// the kernel's naive check, the head of its slab's freelist), and a
    /// pointer that appears twice in `objs` (found with a table of the
    /// addresses on the stack, or by sorting copies of them above 256;
    /// nothing is written before the checks pass).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk), for pointers that pass the checks.
    #[track_caller]
    pub unsafe fn try_free_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        self.mode();
        // A restartable checked cache validates an array up to DEDUP_MAX,
        // finds its copies by their free markers and marks it in one pass
        // (`mark_bulk`); every other array is checked here.
        if self.rcs() && self.bulk_sections() && objs.len() <= DEDUP_MAX {
            // Validated, checked for copies and marked in one pass.
            self.mark_bulk(objs)?;
            return self.free_bulk_rcs(objs);
        }
        self.check_bulk(objs)?;
        if self.flags.is_debug() {
            for p in objs {
                // SAFETY: forwarded; each object checked.
                unsafe { self.try_free(*p)? };
            }
            return Ok(());
        }
        if self.rcs() {
            if self.bulk_sections() {
                // (An array above DEDUP_MAX: checked above, marked here.)
                let r = self.random.load(CoreOrdering::Relaxed);
                for o in objs {
                    self.fp_word_fast::<true>(o.as_ptr().expose_provenance())
                        .store(r, CoreOrdering::Relaxed);
                }
                return self.free_bulk_rcs(objs);
            }
            // Restartable sheaves: one push (a section) per object.
            for p in objs {
                if self.hardened() {
                    self.free_rcs::<true>(*p)?;
                } else {
                    self.free_rcs::<false>(*p)?;
                }
            }
            return Ok(());
        }
        // SAFETY: forwarded; checked as a whole.
        unsafe {
            if self.sheaf_capacity != 0 {
                self.free_bulk_pcs(objs)
            } else {
                self.free_bulk_windows(objs)
            }
        }
    }

    /// Whether the bulk paths move a run of objects in one restartable
    /// section ([`alloc_bulk_rcs`](Self::alloc_bulk_rcs),
    /// [`free_bulk_rcs`](Self::free_bulk_rcs)): a hardened cache whose
    /// every free reads the marker (the page map names it: a pop only
    /// clears it) and whose sheaves are private (plain entries).
    #[inline(always)]
    fn bulk_sections(&self) -> bool {
        S::PRIVATE_META && self.hardened() && self.checked_frees() && !self.flags.is_debug()
    }

    /// `alloc_from_pcs_bulk` on restartable sheaves: up to [`BULK_RUN`]
    /// entries leave the main sheaf in one section
    /// (`this_cpu_sheaf_pop_many`), their markers cleared after it, and
    /// where the main sheaf runs dry one object comes through the slow
    /// path (barn, refill), which installs a full sheaf for the next run.
    /// One section per object before: `slub-prodcons`'s batches of 64.
    /// All or nothing, as [`alloc_bulk_each`](Self::alloc_bulk_each).
    fn alloc_bulk_rcs(&self, out: &mut [*mut u8]) -> usize {
        let p = self.cpu.platform();
        let mut buf = [0usize; BULK_RUN];
        let mut i = 0;
        while i < out.len() {
            let want = (out.len() - i).min(BULK_RUN);
            // SAFETY: `rcs()`: the platform's `restartable()` was true at
            // the cache's first use, and stays true.
            let k = unsafe { p.this_cpu_sheaf_pop_many(self.slots(), &mut buf[..want]) };
            for (o, &e) in out[i..i + k].iter_mut().zip(&buf[..k]) {
                // (Private sheaves: the entry is the object; every free
                // read the marker, so it only needs clearing.)
                self.fp_word_fast::<true>(e).store(0, CoreOrdering::Relaxed);
                *o = Self::obj_ptr(e).as_ptr();
                #[cfg(feature = "stats")]
                self.stat_here(SlubStat::ALLOC_PCS);
            }
            i += k;
            if k == want {
                continue;
            }
            match self.alloc_rcs_slow() {
                Some(o) => {
                    out[i] = o.as_ptr();
                    i += 1;
                }
                None => {
                    for o in &mut out[..i] {
                        // SAFETY: taken just above.
                        unsafe { self.free(NonNull::new_unchecked(*o)) };
                        *o = core::ptr::null_mut();
                    }
                    return 0;
                }
            }
        }
        out.len()
    }

    /// `free_to_pcs_bulk` on restartable sheaves, for an array validated
    /// and marked free (by [`mark_bulk`](Self::mark_bulk), or by
    /// [`check_bulk`](Self::check_bulk) and a marking pass): up to
    /// [`BULK_RUN`] entries onto the main sheaf in one section
    /// (`this_cpu_sheaf_push_many`), and where it is full one object
    /// through the slow path (spare, barn, flush), which installs a sheaf
    /// with room for the next run.
    fn free_bulk_rcs(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        let p = self.cpu.platform();
        let mut buf = [0usize; BULK_RUN];
        for chunk in objs.chunks(BULK_RUN) {
            for (e, o) in buf.iter_mut().zip(chunk) {
                *e = o.as_ptr().addr();
            }
            let mut rest = &buf[..chunk.len()];
            loop {
                // SAFETY: as in `alloc_bulk_rcs`.
                let k = unsafe { p.this_cpu_sheaf_push_many(self.slots(), rest) };
                #[cfg(feature = "stats")]
                for _ in 0..k {
                    self.stat_here(SlubStat::FREE_PCS);
                }
                let Some((&o, tail)) = rest[k..].split_first() else {
                    break;
                };
                // Validated (check_bulk) and marked: the entry is the
                // object (private sheaves).
                self.free_rcs_slow(o, o)?;
                rest = tail;
            }
        }
        Ok(())
    }

    /// [`check_bulk`](Self::check_bulk) and the marking in one pass, for
    /// a [`bulk_sections`](Self::bulk_sections) cache and an array of at
    /// most [`DEDUP_MAX`]: each pointer validated (an object start of one
    /// of this cache's slabs, looked up once per run of one slab), its
    /// word read once: the free marker there means already free (in a
    /// sheaf, or an earlier copy in this array, which this pass marked),
    /// a word that decodes as a link of its slab's freelist means free in
    /// its slab; else the word is kept and the marker stored. A refused
    /// array gets its words back: nothing freed, contents unchanged. One
    /// read of each object where the check, the table search for copies
    /// (`dedup_small`) and the marking took three passes.
    fn mark_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        debug_assert!(objs.len() <= DEDUP_MAX && self.lay.red_left_pad == 0);
        let r = self.random.load(CoreOrdering::Relaxed);
        let (size, off) = (self.lay.size, self.lay.offset);
        // (Not cleared: 2 KiB of stores per call; only the first `i`
        // words are ever read, each written before.)
        let mut old = [core::mem::MaybeUninit::<usize>::uninit(); DEDUP_MAX];
        // The last slab looked up (most arrays hold runs of one slab).
        let mut last = LastSlab::new();
        // Puts back the words of the first `n` objects (a refusal).
        let restore = |n: usize, old: &[core::mem::MaybeUninit<usize>]| {
            for (q, v) in objs[..n].iter().zip(&old[..n]) {
                // SAFETY: `old[j]` was written for every object `j < n`
                // the pass marked.
                let v = unsafe { v.assume_init() };
                self.fp_word_fast::<true>(q.as_ptr().addr())
                    .store(v, CoreOrdering::Relaxed);
            }
        };
        for (i, p) in objs.iter().enumerate() {
            let a = p.as_ptr().expose_provenance();
            if let Err(e) = self.bulk_slab_of(&mut last, *p, 0) {
                restore(i, &old);
                return Err(e);
            }
            let (base, span) = (last.base(), last.objects() * size);
            let w = self.fp_word_fast::<true>(a);
            let v = w.load(CoreOrdering::Relaxed);
            let d = v ^ r ^ (a + off).swap_bytes();
            if v == r || d == 0 || d.wrapping_sub(base) < span {
                restore(i, &old);
                return Err(FreeError::new(a, FreeErrorKind::DoubleFree));
            }
            old[i].write(v);
            w.store(r, CoreOrdering::Relaxed);
        }
        Ok(())
    }

    /// Validates a whole [`try_free_bulk`](Self::try_free_bulk) array
    /// before any change: every pointer an allocated object of this cache,
    /// none twice.
    fn check_bulk(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        let pad = self.lay.red_left_pad;
        let debug = self.flags.is_debug();
        // The last slab looked up (most arrays hold runs of one slab).
        let mut last = LastSlab::new();
        for p in objs {
            let slab = self.bulk_slab_of(&mut last, *p, pad)?;
            let (base, objects) = (last.base(), last.objects());
            // SAFETY: looked up just above; the caller holds its objects.
            let s = unsafe { Slab::from_addr(slab) };
            let obj = p.as_ptr().expose_provenance();
            let free = if debug {
                self.debug_on_freelist(s, obj - pad)
            } else if self.hardened() {
                self.looks_free(obj, base, objects * self.lay.size)
            } else {
                s.state().freelist == obj
            };
            if free {
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
        }
        if objs.len() <= DEDUP_MAX {
            return dedup_small(objs);
        }
        // Duplicates in a larger array: sorted runs of 256 addresses on
        // the stack (2 KiB), each searched for every later pointer (4
        // sorts and 6 run searches for 1024). Nothing is written, so a
        // refused array keeps its contents.
        const C: usize = 256;
        let mut buf = [0usize; C];
        for (ci, chunk) in objs.chunks(C).enumerate() {
            let run = &mut buf[..chunk.len()];
            for (d, p) in run.iter_mut().zip(chunk) {
                *d = p.as_ptr().addr();
            }
            run.sort_unstable();
            if let Some(w) = run.windows(2).find(|w| w[0] == w[1]) {
                return Err(FreeError::new(w[0], FreeErrorKind::DoubleFree));
            }
            for p in &objs[((ci + 1) * C).min(objs.len())..] {
                let a = p.as_ptr().addr();
                if run.binary_search(&a).is_ok() {
                    return Err(FreeError::new(a, FreeErrorKind::DoubleFree));
                }
            }
        }
        Ok(())
    }

    /// Whether object `obj` of slab `s` (headed at `head`, of `order`) is
    /// known to be free: on its slab's freelist (debug caches), its
    /// free-pointer word reads as free (hardened caches), or it heads its
    /// slab's freelist (others). `ksize` asks.
    pub(crate) fn known_free(
        &self,
        s: Slab<'_>,
        head: NonNull<u8>,
        order: Order,
        obj: usize,
    ) -> bool {
        if self.flags.is_debug() {
            self.debug_on_freelist(s, obj - self.lay.red_left_pad)
        } else if self.hardened() {
            self.looks_free(
                obj,
                head.as_ptr().addr(),
                self.objects_of(order) * self.lay.size,
            )
        } else {
            s.state().freelist == obj
        }
    }

    /// The bulk free of a sheaf cache: by windows of
    /// `BULK_WINDOW`, each validated as a
    /// whole and pushed onto the sheaves
    /// ([`free_window_to_pcs`](Self::free_window_to_pcs)), the rest of the
    /// window as detached freelists ([`free_detached`](Self::free_detached)).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_pcs(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        for window in objs.rchunks(BULK_WINDOW) {
            if !self.one_node() {
                // SAFETY: forwarded.
                unsafe { self.free_window_nodes(window)? };
                continue;
            }
            // Validated as a whole first, then onto the sheaves.
            let taken = self.free_window_to_pcs(window)?;
            if taken < window.len() {
                // SAFETY: forwarded; the sheaves took the first `taken`.
                unsafe { self.free_detached(&window[taken..])? };
            }
        }
        Ok(())
    }

    /// A window of a sheaf cache's bulk free with several nodes: objects
    /// of other nodes than the local one bypass the sheaves (6.18's
    /// `free_to_pcs_bulk` sets them aside as `remote_objects` for
    /// `__kmem_cache_free_bulk`) and go to their slabs first; the local
    /// ones onto the sheaves.
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_window_nodes(&self, window: &[NonNull<u8>]) -> Result<(), FreeError> {
        let node = self.local_node();
        let mut local = [NonNull::<u8>::dangling(); BULK_WINDOW];
        let mut remote = [NonNull::<u8>::dangling(); BULK_WINDOW];
        let (mut nl, mut nr) = (0, 0);
        for p in window {
            if self.block_nid(*p) == node {
                local[nl] = *p;
                nl += 1;
            } else {
                remote[nr] = *p;
                nr += 1;
            }
        }
        if nr != 0 {
            // SAFETY: forwarded.
            unsafe { self.free_detached(&remote[..nr])? };
        }
        let taken = self.free_window_to_pcs(&local[..nl])?;
        if taken < nl {
            // SAFETY: forwarded; the sheaves took the first `taken`.
            unsafe { self.free_detached(&local[taken..nl])? };
        }
        Ok(())
    }

    /// Frees `objs` by windows of
    /// `BULK_WINDOW` as detached freelists,
    /// each window validated before any change.
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_windows(&self, objs: &[NonNull<u8>]) -> Result<(), FreeError> {
        for window in objs.rchunks(BULK_WINDOW) {
            // SAFETY: forwarded.
            unsafe { self.free_detached(window)? };
        }
        Ok(())
    }

    /// One window (at most `BULK_WINDOW`
    /// objects) of a bulk free: validated as a whole, then grouped per slab
    /// into detached freelists, each freed by
    /// [`do_slab_free`](Self::do_slab_free).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    unsafe fn free_detached(&self, window: &[NonNull<u8>]) -> Result<(), FreeError> {
        debug_assert!(window.len() <= BULK_WINDOW);
        // Validate the whole window first.
        let mut slabs: [usize; BULK_WINDOW] = [0; BULK_WINDOW];
        // Nothing of the window is freed before the whole of it is
        // validated, so a slab cannot change in between (`LastSlab`).
        let mut last = LastSlab::new();
        for k in 0..window.len() {
            slabs[k] = self.slab_of_run(&mut last, window[k])?;
        }
        // build_detached_freelist, from the window's end (`Chains`).
        let mut chains = Chains::new();
        for k in (0..window.len()).rev() {
            self.chain_add(
                &mut chains,
                slabs[k],
                window[k].as_ptr().expose_provenance(),
            )?;
        }
        self.chains_free(&chains)?;
        Ok(())
    }

    /// The slab of object `p` (validated as an object start of a slab of
    /// this cache), found once per run of one slab's objects: a sheaf's
    /// objects come in such runs, and an object start of the last slab
    /// found (`obj_index` below its count: exactly the boundaries in
    /// `[head, head + objects * size)`) needs no second lookup (block,
    /// kind, owner cache and order are the same). The caller frees nothing
    /// between the calls, so the last slab is still that slab.
    #[inline(always)]
    pub(super) fn slab_of_run(
        &self,
        last: &mut LastSlab,
        p: NonNull<u8>,
    ) -> Result<usize, FreeError> {
        let a = p.as_ptr().addr();
        if self
            .obj_index(a.wrapping_sub(last.base), last.objects)
            .is_none()
        {
            self.find_slab(last, p)?;
        }
        Ok(last.slab)
    }

    /// [`slab_of_run`](Self::slab_of_run) for a pointer of a bulk free's
    /// array, whose object starts `pad` bytes before it (a debug cache's
    /// red zone): a refusal names the pointer as the caller passed it.
    #[inline(always)]
    fn bulk_slab_of(
        &self,
        last: &mut LastSlab,
        p: NonNull<u8>,
        pad: usize,
    ) -> Result<usize, FreeError> {
        let a = p.as_ptr().addr();
        let sp = if pad == 0 {
            p
        } else {
            NonNull::new(p.as_ptr().wrapping_sub(pad))
                .ok_or(FreeError::new(a, FreeErrorKind::NotAllocated))?
        };
        self.slab_of_run(last, sp).map_err(|e| match e.kind {
            FreeErrorKind::NotObjectStart(off) => {
                FreeError::new(a, FreeErrorKind::NotObjectStart(off))
            }
            _ => e,
        })
    }

    /// Looks up the slab of object `p` into `last` (for a caller that knows
    /// `p` is not an object of the slab `last` holds: the flush's run
    /// starts) and returns it.
    #[inline(always)]
    pub(super) fn find_slab(
        &self,
        last: &mut LastSlab,
        p: NonNull<u8>,
    ) -> Result<usize, FreeError> {
        let (s, _, b) = self.slab_block_of(p)?;
        *last = LastSlab {
            base: b.head.as_ptr().addr(),
            objects: self.objects_of(b.order),
            slab: s.addr(),
        };
        Ok(last.slab)
    }

    /// Adds object `o` of slab `slab` to the open chains (see [`Chains`]):
    /// the current chain takes it when it is of the same slab; otherwise
    /// the current chain is parked and the slab's own chain taken back (or
    /// a new one opened, the last parked one freed when all are in use).
    /// A chain's objects are linked through their free pointers as they
    /// join (`head` the latest); its first is the chain's tail, linked by
    /// [`do_slab_free`](Self::do_slab_free).
    #[inline(always)]
    pub(super) fn chain_add(&self, c: &mut Chains, slab: usize, o: usize) -> Result<(), FreeError> {
        if c.cur.count == 0 || c.cur.slab != slab {
            self.chain_switch(c, slab, o)?;
        }
        if c.cur.count != 0 {
            if o == c.cur.head {
                return Err(FreeError::new(o, FreeErrorKind::DoubleFree));
            }
            self.set_fp(o, c.cur.head);
        }
        c.cur.head = o;
        c.cur.count += 1;
        Ok(())
    }

    /// [`chain_add`](Self::chain_add)'s change of slab.
    #[inline(always)]
    fn chain_switch(&self, c: &mut Chains, slab: usize, o: usize) -> Result<(), FreeError> {
        let n = c.parked_len;
        let mut j = 0;
        while j < n && c.parked[j].slab != slab {
            j += 1;
        }
        let next = if j < n {
            c.parked[j]
        } else {
            Chain {
                slab,
                head: 0,
                tail: o,
                count: 0,
            }
        };
        if c.cur.count != 0 {
            if j == n && n == PARKED {
                j = PARKED - 1;
                let v = c.parked[j];
                // SAFETY: validated objects of that slab, linked by chain_add.
                unsafe { self.do_slab_free(Slab::from_addr(v.slab), v.head, v.tail, v.count)? };
            } else if j == n {
                c.parked_len += 1;
            }
            c.parked[j] = c.cur;
        }
        c.cur = next;
        Ok(())
    }

    /// Frees every open chain (the end of a bulk free).
    pub(super) fn chains_free(&self, c: &Chains) -> Result<(), FreeError> {
        for v in core::iter::once(&c.cur).chain(&c.parked[..c.parked_len]) {
            if v.count != 0 {
                // SAFETY: as in chain_switch.
                unsafe { self.do_slab_free(Slab::from_addr(v.slab), v.head, v.tail, v.count)? };
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod dedup_tests {
    use super::{dedup_small, DEDUP_MAX};
    use crate::error::{FreeError, FreeErrorKind};
    use core::ptr::NonNull;
    use std::vec::Vec;

    /// The table finds exactly the first repeated address (the one whose
    /// second copy comes first) that a quadratic search finds, for arrays
    /// of 0..=256 addresses of several strides (objects of one slab, of
    /// many, and addresses whose hashes collide), with and without a
    /// repeat at each distance.
    #[test]
    fn dedup_small_finds_exactly_the_repeats() {
        let naive = |v: &[NonNull<u8>]| {
            for j in 0..v.len() {
                if v[..j].contains(&v[j]) {
                    return Err(FreeError::new(
                        v[j].as_ptr().addr(),
                        FreeErrorKind::DoubleFree,
                    ));
                }
            }
            Ok(())
        };
        let ptr = |a: usize| NonNull::new(core::ptr::without_provenance_mut::<u8>(a)).unwrap();
        let lens: &[usize] = if cfg!(miri) {
            &[0, 1, 2, 3, 64, 65]
        } else {
            &[0, 1, 2, 3, 7, 64, 100, 255, 256]
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for &n in lens {
            assert!(n <= DEDUP_MAX);
            for stride in [8usize, 64, 4096, 1 << 20] {
                let base = 0x7f00_0000_0000usize;
                let v: Vec<_> = (0..n).map(|i| ptr(base + i * stride)).collect();
                assert_eq!(dedup_small(&v), Ok(()));
                assert_eq!(naive(&v), Ok(()));
                for _ in 0..if cfg!(miri) { 2 } else { 20 } {
                    if n < 2 {
                        break;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (i, j) = ((x % n as u64) as usize, ((x >> 20) % n as u64) as usize);
                    let mut w = v.clone();
                    w[j] = w[i];
                    assert_eq!(
                        dedup_small(&w),
                        naive(&w),
                        "n {n} stride {stride} copy {i} -> {j}"
                    );
                }
            }
        }
    }
}
