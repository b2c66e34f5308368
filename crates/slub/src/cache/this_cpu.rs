//! The sheaf paths of restartable platforms ([`Fast::Rseq`](super::Fast)):
//! the CPU's main and spare sheaves live in [`CpuSheaves`] records that
//! only the platform's `this_cpu` operations touch (rseq sections on std),
//! so the fast paths take no slot lock and any number of threads share
//! the CPUs' sheaves.
//!
//! * alloc: `this_cpu_sheaf_pop` (one section), then, hardened, the entry
//!   decoded and checked, and the object's free marker checked (gone: a
//!   double free with other frees between, reported) and cleared;
//! * free: the CPU's validated range read as one snapshot
//!   (`this_cpu_range`; a miss looks the slab up and records its range),
//!   then, hardened, the free marker stored without reading the object
//!   (the object is the caller's: nobody else writes it) and an immediate
//!   double free refused (the sheaf's top entry), then the push; hardened
//!   frees are one section, `this_cpu_free_push`; the inline free of a
//!   front end (`try_free_fast`) of a cache the page map names validates
//!   by the map instead (`free_mapped`: no range to miss), reads the
//!   marker (a double free while in a sheaf is refused), marks and pushes;
//! * the slow paths work as the kernel's do, on detached sheaves: the
//!   main (and spare) are taken out with `this_cpu_xchg`, so the caller
//!   owns them, and a sheaf is installed with `this_cpu_cmpxchg` from 0
//!   (a failure, because another thread installed one meanwhile or we
//!   now run on another CPU, retires ours to the barn or the slabs).
//!
//! A thread whose CPU has no record (beyond `N`, or an unregistered rseq
//! area) takes the slab path under the slot lock.

use core::ptr::NonNull;
use core::sync::atomic::Ordering as CoreOrdering;

use local_lock::this_cpu::{FreePush, SheafSlots, SheafWord};
use local_lock::Platform;

use crate::error::{FreeError, FreeErrorKind};
use crate::source::SlabSource;
use crate::stats::SlubStat;

use super::{KmemCache, Mode, Sheaf};

/// A `this_cpu` operation of the platform on this cache's records.
macro_rules! rcs_op {
    ($e:expr) => {{
        // SAFETY: only reached on `Fast::Rseq*` caches (or, for the flush
        // paths, when `rcs()` says so): the platform's `restartable()` was
        // true at first use, and stays true.
        unsafe { $e }
    }};
}

/// What [`KmemCache::free_fast_byte`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum FastFree {
    /// Freed: pushed onto the running CPU's main sheaf.
    Freed,
    /// Nothing changed: the full free decides (and reports).
    Slow,
    /// Validated and marked free, not pushed (the CPU's main sheaf full or
    /// missing): [`KmemCache::free_unpushed`] finishes it.
    Unpushed,
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// The CPUs' sheaf records, for the platform's `this_cpu` operations.
    #[inline(always)]
    pub(super) fn slots(&self) -> SheafSlots<'_, N> {
        self.slots_at(self.fcheck.area.load(CoreOrdering::Relaxed))
    }

    /// [`slots`](Self::slots) with the platform's per-thread area already
    /// read (the inline fast paths' [`fast_area`](Self::fast_area)).
    #[inline(always)]
    fn slots_at(&self, area: isize) -> SheafSlots<'_, N> {
        // SAFETY: N records one `SheafRecord` apart, living as long as the
        // cache; their sheaf words hold 0 or sheaves of `sheaf_capacity`
        // entries, touched only through these operations or by the
        // context that detached them.
        unsafe {
            SheafSlots::new(
                self.fast.sheaves_base(),
                local_lock::this_cpu::SHEAF_RECORD_STRIDE,
                self.sheaf_capacity,
            )
        }
        .with_area(self.cpu.platform().this_cpu_area_now(area))
    }

    /// `alloc_from_pcs` on a restartable platform.
    #[inline(always)]
    pub(super) fn alloc_rcs<const H: bool>(&self) -> Option<NonNull<u8>> {
        match self.pop_rcs::<H>() {
            Some(o) => {
                #[cfg(feature = "stats")]
                self.stat_here(SlubStat::ALLOC_PCS);
                Some(o)
            }
            None => self.alloc_rcs_slow(),
        }
    }

    /// The pop of [`alloc_rcs`](Self::alloc_rcs): `None` when the main
    /// sheaf is empty (or the CPU has none).
    #[inline(always)]
    fn pop_rcs<const H: bool>(&self) -> Option<NonNull<u8>> {
        let area = self.fcheck.area.load(CoreOrdering::Relaxed);
        if H && self.checked_frees() {
            self.pop_rcs_at::<H, true>(area)
        } else {
            self.pop_rcs_at::<H, false>(area)
        }
    }

    /// [`pop_rcs`](Self::pop_rcs) with the area already read.
    #[inline(always)]
    /// `CHECKED`: every free of the cache read the marker
    /// ([`checked_frees`](Self::checked_frees)), so the pop only clears
    /// it.
    fn pop_rcs_at<const H: bool, const CHECKED: bool>(&self, area: isize) -> Option<NonNull<u8>> {
        // The key, read once: the section's memory clobber would make
        // the compiler read it again after it.
        let key = if H { self.entry_key() } else { 0 };
        let marker = if H && S::PRIVATE_META && !CHECKED {
            self.random.load(CoreOrdering::Relaxed)
        } else {
            key
        };
        // Private sheaves (the source's own pages, which no user pointer
        // reaches) hold plain entries and sizes only these paths write:
        // the entry needs neither decoding nor the window check, and the
        // size no bound. Sheaves elsewhere (a kernel's pages) keep both.
        let o = if S::PRIVATE_META {
            rcs_op!(self
                .cpu
                .platform()
                .this_cpu_sheaf_pop_private(self.slots_at(area)))
        } else {
            rcs_op!(self.cpu.platform().this_cpu_sheaf_pop(self.slots_at(area)))
        };
        if o == 0 {
            return None;
        }
        let o = if H {
            let d = o ^ key;
            if !S::PRIVATE_META && !self.in_slabs(d) {
                self.bad_entry(d)
            }
            if CHECKED {
                // Every free read the marker before pushing: a second copy
                // of an object never entered a sheaf, so the marker needs
                // clearing only (a store: the object's line is not waited
                // for; the program is about to write it).
                self.fp_word_fast::<H>(d).store(0, CoreOrdering::Relaxed);
            } else {
                self.unmark_with::<H>(d, marker);
            }
            d
        } else {
            o
        };
        Some(Self::obj_ptr(o))
    }

    /// The inline part of `alloc` for a front end whose caches are
    /// restartable (`GlobalSlub`): the pop, or `None` (another kind of
    /// cache, first use, an empty sheaf) for the full
    /// [`alloc`](Self::alloc).
    #[inline(always)]
    /// `H`: the caller's caches are hardened (any other cache is sent
    /// to `alloc`).
    pub fn alloc_fast<const H: bool>(&self) -> Option<NonNull<u8>> {
        if H {
            if let Some(o) = self.alloc_fast_checked() {
                return Some(o);
            }
        }
        self.alloc_fast_slot::<H>()
    }

    /// [`alloc_fast`](Self::alloc_fast) on slot `H` of `fast_area` only
    /// (hardened: a cache whose frees may mark blind).
    #[inline(always)]
    pub(crate) fn alloc_fast_slot<const H: bool>(&self) -> Option<NonNull<u8>> {
        // (`fast_area[1]`: a hardened cache whose frees may mark blind.)
        self.alloc_fast_at::<H, false>(self.fast_area::<H>())
    }

    /// The pop of the inline allocations, from a dispatch slot's `area`
    /// (0: not this kind of cache, `None`).
    #[inline(always)]
    fn alloc_fast_at<const H: bool, const CHECKED: bool>(
        &self,
        area: isize,
    ) -> Option<NonNull<u8>> {
        if area == 0 {
            return None;
        }
        let o = self.pop_rcs_at::<H, CHECKED>(area);
        #[cfg(feature = "stats")]
        if o.is_some() {
            self.stat_here(SlubStat::ALLOC_PCS);
        }
        o
    }

    /// [`alloc_fast`](Self::alloc_fast)`::<true>` of a hardened cache
    /// whose every free reads the marker
    /// ([`checked_frees`](Self::checked_frees): the page map names it, as
    /// it names `GlobalSlub`'s caches): the pop only clears the marker.
    /// `None` for any other cache. Unlike [`alloc_fast`](Self::alloc_fast)
    /// it calls nothing (an object without its marker is the other
    /// slot's), so a front end whose other outcomes are tail calls keeps
    /// a fast path without a stack frame (mm-malloc's `malloc`).
    #[inline(always)]
    pub fn alloc_fast_checked(&self) -> Option<NonNull<u8>> {
        // SAFETY: a cache, written whole, living as long as `self`.
        unsafe { Self::alloc_fast_checked_in(self) }
    }

    /// [`alloc_fast_checked`](Self::alloc_fast_checked) of the cache
    /// stored at `c`, or of storage not yet written, all zero (a front
    /// end's slot whose cache is built at its first use, as mm-malloc's):
    /// its dispatch word then reads 0, `None`, and nothing else is read.
    /// The caller needs no check of its own that the cache exists (a
    /// flag word and a bit test less in mm-malloc's `malloc`): the word is
    /// non-zero only once the cache was written and first used, stored
    /// with release ordering after both (`init_mode`), loaded here with
    /// acquire.
    ///
    /// # Safety
    ///
    /// `c` is valid for reads during the call and holds a cache written
    /// whole or only zero bytes, which a cache may replace once (never the
    /// reverse); a cache written whole outlives the objects it hands out.
    #[inline(always)]
    pub unsafe fn alloc_fast_checked_in(c: *const Self) -> Option<NonNull<u8>> {
        // SAFETY: the caller's contract: the word is an `AtomicIsize` in
        // either state (zero is one), reached without a reference to the
        // cache, which zero bytes may not be.
        let area = unsafe { (*core::ptr::addr_of!((*c).fast_area))[2].load(CoreOrdering::Acquire) };
        if area == 0 {
            return None;
        }
        // SAFETY: a non-zero word was stored after the cache was written.
        unsafe { &*c }.alloc_fast_at::<true, true>(area)
    }

    /// [`try_free_fast`](Self::try_free_fast)`::<true>` of a cache of
    /// [`alloc_fast_checked`](Self::alloc_fast_checked) (validated by the
    /// page map, the marker read: [`free_mapped`](Self::free_mapped));
    /// `Ok(false)` for any other cache.
    ///
    /// # Safety
    ///
    /// As [`try_free_fast`](Self::try_free_fast), for an address that may
    /// be null.
    #[inline(always)]
    pub(crate) unsafe fn try_free_fast_checked(&self, obj: usize) -> Result<bool, FreeError> {
        let area = self.fast_area[2].load(CoreOrdering::Acquire);
        if area == 0 {
            return Ok(false);
        }
        self.free_mapped::<true>(obj, area)
    }

    /// The inline part of `try_free` for a front end whose caches are
    /// restartable (`GlobalSlub`): `Ok(true)` when freed; `Ok(false)`
    /// sends the caller to the full [`try_free`](Self::try_free) (another
    /// kind of cache, first use, a pointer outside the CPU's validated
    /// ranges, a pointer that reads as free: the full path decides and
    /// reports).
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free).
    #[inline(always)]
    /// `H`: the caller's caches are hardened (any other cache is sent
    /// to `try_free`).
    pub unsafe fn try_free_fast<const H: bool>(&self, ptr: NonNull<u8>) -> Result<bool, FreeError> {
        // SAFETY: forwarded.
        unsafe { self.try_free_fast_addr::<H>(ptr.as_ptr().expose_provenance()) }
    }

    /// [`try_free_fast`](Self::try_free_fast) of an address that may be
    /// null (which the fast path never validates: `Ok(false)`), for a
    /// front end that sends null to its slow path anyway.
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free), for a non-null `obj`.
    #[inline(always)]
    pub(crate) unsafe fn try_free_fast_addr<const H: bool>(
        &self,
        obj: usize,
    ) -> Result<bool, FreeError> {
        if H {
            // SAFETY: forwarded.
            if unsafe { self.try_free_fast_checked(obj) }? {
                return Ok(true);
            }
        }
        // SAFETY: forwarded.
        unsafe { self.try_free_fast_slot::<H>(obj) }
    }

    /// The inline free of a hardened cache the page map names, for a
    /// front end that has read `ptr`'s page-map byte itself (to find the
    /// cache, as a size-less `free` does: [`PageAlloc::page_tag`]): the
    /// map is not read twice, and nothing is called, so a caller whose
    /// other outcomes are tail calls keeps a fast path without a stack
    /// frame. The checks are [`try_free_fast`](Self::try_free_fast)'s
    /// (the byte and the object boundary, the free marker), then the mark
    /// and one push:
    /// - [`FastFree::Freed`] when freed;
    /// - [`FastFree::Slow`] when nothing changed (another kind of cache, first
    ///   use, a byte or offset the map does not vouch for, an object that
    ///   reads as free): finish with [`try_free_fast`](Self::try_free_fast)
    ///   and [`try_free`](Self::try_free), which decide and report;
    /// - [`FastFree::Unpushed`] when validated and marked free, the running
    ///   CPU's main sheaf full or missing: finish with
    ///   [`free_unpushed`](Self::free_unpushed), and with nothing else.
    ///
    /// # Safety
    ///
    /// As [`try_free`](Self::try_free); and `byte` is the byte of `ptr`'s
    /// page in this cache's source's page map
    /// ([`PageAlloc::page_map`]), read after `ptr` was allocated (a byte
    /// of another map, or a stale one, would vouch for what the map does
    /// not).
    ///
    /// [`PageAlloc::page_tag`]: buddy::PageAlloc::page_tag
    /// [`PageAlloc::page_map`]: buddy::PageAlloc::page_map
    #[inline(always)]
    pub unsafe fn free_fast_byte(&self, ptr: NonNull<u8>, byte: u8) -> FastFree {
        let obj = ptr.as_ptr().expose_provenance();
        // (Slot 2: hardened caches whose every free reads the marker.)
        let area = self.fast_area[2].load(CoreOrdering::Acquire);
        if area == 0 || !self.mapped_object_byte(obj, byte) {
            return FastFree::Slow;
        }
        self.check_mark_push(obj, area)
    }

    /// [`free_fast_byte`](Self::free_fast_byte) of the cache stored at
    /// `c`, or of storage not yet written, all zero (then
    /// [`FastFree::Slow`], nothing else read), for a front end that finds
    /// the cache from the byte's tag by arithmetic, with no range check (a
    /// slot for every tag, as mm-malloc's `free`): the byte is not
    /// compared with the cache's tag (its order bits index the geometry:
    /// three instructions less).
    ///
    /// # Safety
    ///
    /// As [`free_fast_byte`](Self::free_fast_byte) (`ptr` may be null: a
    /// null pointer's byte names no slab), `c` as
    /// [`alloc_fast_checked_in`](Self::alloc_fast_checked_in) requires;
    /// and the cache at `c`, once written, has map tag `byte >> 3`
    /// ([`set_map_tag`](Self::set_map_tag)) or none: the caller owns its
    /// source's tags and keeps each cache at the slot its tag names.
    #[inline(always)]
    pub unsafe fn free_fast_tag_in(c: *const Self, ptr: *mut u8, byte: u8) -> FastFree {
        // SAFETY: as in `alloc_fast_checked_in`.
        let area = unsafe { (*core::ptr::addr_of!((*c).fast_area))[2].load(CoreOrdering::Acquire) };
        if area == 0 {
            return FastFree::Slow;
        }
        // SAFETY: a non-zero word was stored after the cache was written.
        let c = unsafe { &*c };
        let obj = ptr.expose_provenance();
        if !c.mapped_object_own_byte(obj, byte) {
            return FastFree::Slow;
        }
        c.check_mark_push(obj, area)
    }

    /// The rest of the checked slot's inline free, for an object the page
    /// map vouched for: refused (`Slow`) if it holds the free marker,
    /// else marked and pushed (`Freed`), or only marked (`Unpushed`).
    #[inline(always)]
    fn check_mark_push(&self, obj: usize, area: isize) -> FastFree {
        let r = self.random.load(CoreOrdering::Relaxed);
        if Self::marked_free(self.fp_word_fast::<true>(obj), r) {
            return FastFree::Slow;
        }
        if self.mark_push_only::<true>(obj, r, self.slots_at(area)) {
            FastFree::Freed
        } else {
            FastFree::Unpushed
        }
    }

    /// [`try_free_fast_checked`](Self::try_free_fast_checked) calling
    /// nothing (for `GlobalSlub::dealloc`, whose calls made
    /// `__rust_dealloc` save registers): the cache's own page-map check,
    /// the free marker, the mark and the push; what it did not do goes
    /// back as a [`FastFree`] for the caller's out-of-line paths (`Slow`:
    /// no restartable area, an address the map does not vouch for, or an
    /// object that reads as free, which the full path decides and
    /// reports; `Unpushed`: validated and marked, the main sheaf full or
    /// missing: [`free_unpushed`](Self::free_unpushed)).
    ///
    /// # Safety
    ///
    /// As [`try_free_fast_checked`](Self::try_free_fast_checked).
    #[inline(always)]
    pub(crate) unsafe fn free_fast_mapped(&self, obj: usize) -> FastFree {
        let area = self.fast_area[2].load(CoreOrdering::Acquire);
        if area == 0 || !self.mapped_object(obj) {
            return FastFree::Slow;
        }
        self.check_mark_push(obj, area)
    }

    /// [`free_fast_mapped`](Self::free_fast_mapped) for a plain cache the
    /// page map names (slot 0: no marker), calling nothing.
    ///
    /// # Safety
    ///
    /// As [`try_free_fast_checked`](Self::try_free_fast_checked).
    #[inline(always)]
    pub(crate) unsafe fn free_fast_mapped_plain(&self, obj: usize) -> FastFree {
        let area = self.fast_area::<false>();
        if area == 0 || !self.checked_frees() || !self.mapped_object(obj) {
            return FastFree::Slow;
        }
        if self.mark_push_only::<false>(obj, 0, self.slots_at(area)) {
            FastFree::Freed
        } else {
            FastFree::Unpushed
        }
    }

    /// Whether fast-path slot `H` (`fast_area[H]`: hardened caches
    /// without a map tag, or plain caches) is in use.
    #[inline(always)]
    pub(crate) fn has_fast_slot<const H: bool>(&self) -> bool {
        self.fast_area::<H>() != 0
    }

    /// `ksize` by the page map: the object size if `byte`, the page-map
    /// byte of `ptr`'s page (read by the caller from this cache's
    /// source's map, [`PageAlloc::page_map`]), names a slab of this cache
    /// and `ptr` is the start of one of its objects (the check of
    /// [`free_fast_byte`](Self::free_fast_byte): no descriptor walk, no
    /// division); `None` for anything else, which the caller decides by
    /// the descriptor (`malloc_usable_size`'s and `realloc`'s fast path).
    ///
    /// [`PageAlloc::page_map`]: buddy::PageAlloc::page_map
    #[inline(always)]
    pub fn ksize_by_map_byte(&self, ptr: *const u8, byte: u8) -> Option<usize> {
        self.mapped_object_byte(ptr.expose_provenance(), byte)
            .then(|| self.object_size())
    }

    /// Finishes a free that [`free_fast_byte`](Self::free_fast_byte) left
    /// validated and marked ([`FastFree::Unpushed`]): the sheaf slow path
    /// (the main sheaf flushed or replaced, the entry pushed).
    ///
    /// # Safety
    ///
    /// `ptr` is the object of that `Unpushed` outcome, not freed since.
    #[cold]
    #[inline(never)]
    pub unsafe fn free_unpushed(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let obj = ptr.as_ptr().expose_provenance();
        self.free_rcs_slow(obj, self.entry_of(obj))
    }

    /// [`try_free_fast_addr`](Self::try_free_fast_addr) on slot `H` of
    /// `fast_area` only.
    ///
    /// # Safety
    ///
    /// As [`try_free_fast_addr`](Self::try_free_fast_addr).
    #[inline(always)]
    pub(crate) unsafe fn try_free_fast_slot<const H: bool>(
        &self,
        obj: usize,
    ) -> Result<bool, FreeError> {
        let p = self.cpu.platform();
        let area = self.fast_area::<H>();
        if area == 0 {
            return Ok(false);
        }
        // (A hardened cache the map names has `fast_area[2]`, not this
        // slot: `try_free_fast_checked`.)
        if !H && self.checked_frees() {
            return self.free_mapped::<H>(obj, area);
        }
        let pushed = if H {
            self.free_push_rcs_at(obj, area)
        } else {
            rcs_op!(p.this_cpu_free_push_unmarked(self.slots_at(area), &self.fcheck, obj))
        };
        match pushed {
            FreePush::Pushed => {
                #[cfg(feature = "stats")]
                self.stat_here(SlubStat::FREE_PCS);
                Ok(true)
            }
            FreePush::Miss => self.free_fast_miss::<H>(obj),
            FreePush::Marked => Ok(false),
            FreePush::Full => {
                let entry = if H { self.entry_of(obj) } else { obj };
                self.free_rcs_slow(obj, entry).map(|()| true)
            }
        }
    }

    /// Whether every free of this (hardened, restartable) cache reads the
    /// object's free marker before pushing it (the page map names the
    /// cache: its frees take [`free_mapped`](Self::free_mapped) and the
    /// miss path, never the restartable section that marks blind), so a
    /// double free is refused at the free and an allocation only clears
    /// the marker. Fixed before any object exists (the tag is claimed at
    /// the first slab).
    #[inline(always)]
    pub(super) fn checked_frees(&self) -> bool {
        self.map_tag_set().is_some()
    }

    /// The fast free of a cache whose slabs the page map names
    /// ([`mapped_object`](Self::mapped_object)): the object validated by
    /// its page's map byte (this cache's tag and one of its two slab
    /// orders, an object boundary of that slab), as the kernel's `kfree`
    /// finds the slab by `virt_to_slab`, instead of by the CPU's
    /// validated ranges, which a free far from the
    /// CPU's last slabs misses (most frees of `slub-larson`, 6-16% of
    /// `slub-threads`'); then, hardened, refused if it holds the free
    /// marker (a double free while in a sheaf: outside any section, the
    /// marker cannot be this free's own) and marked; then one push.
    /// Anything the map does not vouch for (null, a foreign pointer) takes
    /// the miss path, which looks the slab up by its descriptor and
    /// reports precisely.
    #[inline(always)]
    fn free_mapped<const H: bool>(&self, obj: usize, area: isize) -> Result<bool, FreeError> {
        if !self.mapped_object(obj) {
            return self.free_fast_miss::<H>(obj);
        }
        let r = if H {
            self.random.load(CoreOrdering::Relaxed)
        } else {
            0
        };
        // (Its first byte first: a byte the program stored just before the
        // free forwards to a byte load, not to a word load; see
        // `marked_free`.)
        if H && Self::marked_free(self.fp_word_fast::<H>(obj), r) {
            return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
        }
        self.mark_push::<H>(obj, r, self.slots_at(area))
    }

    /// Marks validated `obj` free with the secret `r` (hardened) and
    /// pushes its entry onto the running CPU's main sheaf (`s`); a full
    /// or missing main takes the sheaf slow path. `Ok(true)`: freed.
    #[inline(always)]
    fn mark_push<const H: bool>(
        &self,
        obj: usize,
        r: usize,
        s: SheafSlots<'_, N>,
    ) -> Result<bool, FreeError> {
        if self.mark_push_only::<H>(obj, r, s) {
            return Ok(true);
        }
        let enc = if H { self.entry_of(obj) } else { obj };
        self.free_rcs_slow(obj, enc).map(|()| true)
    }

    /// The mark and the push of [`mark_push`](Self::mark_push), calling
    /// nothing: `false` when the main sheaf is full or missing (`obj` is
    /// then marked, hardened, and not pushed).
    #[inline(always)]
    fn mark_push_only<const H: bool>(&self, obj: usize, r: usize, s: SheafSlots<'_, N>) -> bool {
        let enc = if H {
            self.fp_word_fast::<H>(obj).store(r, CoreOrdering::Relaxed);
            self.entry_of(obj)
        } else {
            obj
        };
        let p = self.cpu.platform();
        let pushed = rcs_op!(p.this_cpu_sheaf_push(s, enc));
        #[cfg(feature = "stats")]
        if pushed {
            self.stat_here(SlubStat::FREE_PCS);
        }
        pushed
    }

    /// A fast free outside the CPU's validated ranges, straight to the
    /// miss path (the page map or the descriptors, the range recorded,
    /// the push), without going back through the caller's slow path and
    /// `try_free`'s dispatch and section again; a null `obj` goes back
    /// (`Ok(false)`).
    #[cold]
    #[inline(never)]
    fn free_fast_miss<const H: bool>(&self, obj: usize) -> Result<bool, FreeError> {
        let Some(ptr) = NonNull::new(core::ptr::with_exposed_provenance_mut::<u8>(obj)) else {
            return Ok(false);
        };
        let gen = self.fcheck.gen.load(CoreOrdering::Relaxed);
        self.free_rcs_miss::<H>(ptr, gen).map(|()| true)
    }

    /// Reports a popped sheaf entry that decodes outside the cache's slabs.
    #[cold]
    #[inline(never)]
    fn bad_entry(&self, o: usize) -> ! {
        panic!(
            "slub {}: corrupted sheaf entry: decodes to {o:#x}, which is not an object of \
             the cache (slabs within {:#x}..{:#x}; a write after free)",
            self.name,
            self.slab_lo.load(CoreOrdering::Relaxed),
            self.slab_hi.load(CoreOrdering::Relaxed)
        )
    }

    /// Takes the last object of a detached, non-empty sheaf.
    fn take_from(&self, sh: Sheaf) -> usize {
        let n = sh.size();
        if n == 0 || n > self.sheaf_capacity {
            self.bad_sheaf_size(sh, n);
        }
        let o = match self.sheaf_get(sh, n - 1) {
            Ok(o) => o,
            Err(o) => self.bad_sheaf(sh, n - 1, o),
        };
        sh.set_size(n - 1);
        if self.hardened() {
            self.unmark::<false>(o);
        }
        o
    }

    /// Installs a detached sheaf as the running CPU's word `w` (which must
    /// be empty), else retires it.
    fn install(&self, w: SheafWord, sh: Sheaf) {
        let p = self.cpu.platform();
        if !rcs_op!(p.this_cpu_cmpxchg(self.slots(), w, 0, sh.0)) {
            if sh.size() == 0 {
                self.free_sheaf(sh);
            } else {
                self.retire_sheaf(sh);
            }
        }
    }

    /// The slab path under the slot lock (no record for this CPU, or no
    /// memory for a sheaf).
    fn alloc_rcs_fallback(&self) -> Option<NonNull<u8>> {
        if self.mode() == Mode::Lockless {
            self.alloc_lockless()
        } else {
            self.slab_alloc_slow(self.lock_cpu())
        }
    }

    /// The main sheaf was empty (or missing): detach main and spare; take
    /// from whichever holds objects, else trade an empty sheaf at the barn
    /// for a full one, else refill one from slabs; install the sheaves
    /// again.
    #[inline(never)]
    pub(super) fn alloc_rcs_slow(&self) -> Option<NonNull<u8>> {
        let p = self.cpu.platform();
        let s = self.slots();
        let Some(main) = rcs_op!(p.this_cpu_xchg(s, SheafWord::Main, 0)) else {
            return self.alloc_rcs_fallback();
        };
        if main != 0 && Sheaf(main).size() > 0 {
            // Refilled meanwhile by a free on this CPU.
            let o = self.take_from(Sheaf(main));
            self.install(SheafWord::Main, Sheaf(main));
            self.stat_here(SlubStat::ALLOC_PCS);
            return Some(Self::obj_ptr(o));
        }
        let spare = rcs_op!(p.this_cpu_xchg(s, SheafWord::Spare, 0)).unwrap_or(0);
        let (full, empty) = if spare != 0 && Sheaf(spare).size() > 0 {
            self.stat_here(SlubStat::SHEAF_SWAP);
            if main != 0 && self.half_main_after_alloc(Sheaf(main), Sheaf(spare)) {
                (Sheaf(main), spare)
            } else {
                (Sheaf(spare), main)
            }
        } else {
            // Up to two empty sheaves: one is traded, the other kept.
            let (e, keep) = match (main, spare) {
                (0, 0) => match self.new_sheaf() {
                    Some(e) => (e, 0),
                    None => return self.alloc_rcs_fallback(),
                },
                (0, x) | (x, 0) => (Sheaf(x), 0),
                (m, x) => (Sheaf(m), x),
            };
            match self.barn_get_full(e) {
                Some(f) => (f, keep),
                None => {
                    if !self.refill_sheaf(e) {
                        self.free_sheaf(e);
                        if keep != 0 {
                            self.install(SheafWord::Spare, Sheaf(keep));
                        }
                        return self.alloc_rcs_fallback();
                    }
                    (e, keep)
                }
            }
        };
        let o = self.take_from(full);
        self.install(SheafWord::Main, full);
        if empty != 0 {
            self.install(SheafWord::Spare, Sheaf(empty));
        }
        self.stat_here(SlubStat::ALLOC_PCS);
        Some(Self::obj_ptr(o))
    }

    /// The free path on a restartable platform: validates `ptr` (the CPU's
    /// validated range, else the descriptor lookup), marks it free
    /// (hardened) and pushes it onto the main sheaf.
    #[inline(always)]
    pub(super) fn free_rcs<const H: bool>(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let p = self.cpu.platform();
        let s = self.slots();
        let obj = ptr.as_ptr().expose_provenance();
        let gen = self.fcheck.gen.load(CoreOrdering::Relaxed);
        if H && self.checked_frees() {
            // Every free of a cache the map names reads the marker first
            // (see `checked_frees`).
            // (`Ok(false)` is only ever a null address: `ptr` is none.)
            let area = self.fcheck.area.load(CoreOrdering::Relaxed);
            return self
                .free_mapped::<H>(obj, area)
                .map(|freed| debug_assert!(freed));
        }
        if H {
            return match self.free_push_rcs(obj) {
                FreePush::Pushed => {
                    #[cfg(feature = "stats")]
                    self.stat_here(SlubStat::FREE_PCS);
                    Ok(())
                }
                FreePush::Miss => self.free_rcs_miss::<H>(ptr, gen),
                FreePush::Marked => Err(FreeError::new(obj, FreeErrorKind::DoubleFree)),
                FreePush::Full => self.free_rcs_slow(obj, self.entry_of(obj)),
            };
        }
        let way = self.range_way(obj);
        let (vbase, vspan, vgen) = rcs_op!(p.this_cpu_range(s, way)).unwrap_or((0, 0, 0));
        let off = obj.wrapping_sub(vbase);
        if !(off < vspan && vgen == gen && self.obj_index(off, vspan).is_some()) {
            return self.free_rcs_miss::<H>(ptr, gen);
        }
        if rcs_op!(p.this_cpu_sheaf_push(s, obj)) {
            #[cfg(feature = "stats")]
            self.stat_here(SlubStat::FREE_PCS);
            return Ok(());
        }
        self.free_rcs_slow(obj, obj)
    }

    /// The hardened free's section: entries plain where the sheaves are
    /// private ([`entry_key`](Self::entry_key)), else encoded.
    #[inline(always)]
    fn free_push_rcs(&self, obj: usize) -> FreePush {
        self.free_push_rcs_at(obj, self.fcheck.area.load(CoreOrdering::Relaxed))
    }

    /// [`free_push_rcs`](Self::free_push_rcs) with the area already read.
    #[inline(always)]
    fn free_push_rcs_at(&self, obj: usize, area: isize) -> FreePush {
        let p = self.cpu.platform();
        if S::PRIVATE_META {
            rcs_op!(p.this_cpu_free_push_plain(self.slots_at(area), &self.fcheck, obj))
        } else {
            rcs_op!(p.this_cpu_free_push(self.slots_at(area), &self.fcheck, obj))
        }
    }

    /// A free outside the CPU's validated range: the descriptor lookup,
    /// the double-free check, the range recorded, then the push.
    #[inline(never)]
    fn free_rcs_miss<const H: bool>(&self, ptr: NonNull<u8>, gen: usize) -> Result<(), FreeError> {
        let (base, objects) = self.validate_range_mapped(ptr)?;
        let obj = ptr.as_ptr().expose_provenance();
        let span = objects * self.lay.size;
        // Hardened: an object on its slab's freelist is refused; one that
        // holds the sheaf marker too where every free reads it first
        // (`checked_frees`); elsewhere not (the restartable free marks
        // before it knows whether the push succeeds, and a restart on
        // another CPU may miss its ranges: the marker may be this free's
        // own), and a second copy in a sheaf is found when it leaves it.
        if if H && !self.checked_frees() {
            self.on_slab_freelist(obj, base, span)
        } else {
            self.looks_free(obj, base, span)
        } {
            return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
        }
        let p = self.cpu.platform();
        let s = self.slots();
        rcs_op!(p.this_cpu_set_range(s, self.range_way(obj), base, span, gen));
        let r = if H {
            self.random.load(CoreOrdering::Relaxed)
        } else {
            0
        };
        self.mark_push::<H>(obj, r, s).map(|_| ())
    }

    /// The main sheaf was full (or missing): detach main and spare; push
    /// onto whichever has room, else trade the full main at the barn for
    /// an empty sheaf (or flush it to slabs); install the sheaves again.
    /// `obj` is validated and (hardened) marked free; `enc` is its entry.
    #[inline(never)]
    pub(super) fn free_rcs_slow(&self, obj: usize, enc: usize) -> Result<(), FreeError> {
        let p = self.cpu.platform();
        let s = self.slots();
        let cap = self.sheaf_capacity;
        let Some(main) = rcs_op!(p.this_cpu_xchg(s, SheafWord::Main, 0)) else {
            return self.free_rcs_to_slab(obj);
        };
        if main != 0 && Sheaf(main).size().wrapping_sub(1) < cap {
            let sh = Sheaf(main);
            if sh.get(sh.size() - 1) == enc {
                // The top entry of the full main sheaf (the free's check
                // stops at a full sheaf): an immediate double free.
                self.install(SheafWord::Main, sh);
                return Err(FreeError::new(obj, FreeErrorKind::DoubleFree));
            }
        }
        if main != 0 && Sheaf(main).size() < cap {
            // Emptied meanwhile by an allocation on this CPU.
            let sh = Sheaf(main);
            sh.set(sh.size(), enc);
            sh.set_size(sh.size() + 1);
            self.install(SheafWord::Main, sh);
            self.stat_here(SlubStat::FREE_PCS);
            return Ok(());
        }
        let spare = rcs_op!(p.this_cpu_xchg(s, SheafWord::Spare, 0)).unwrap_or(0);
        let (target, other) = if spare != 0 && Sheaf(spare).size() < cap {
            self.stat_here(SlubStat::SHEAF_SWAP);
            if main != 0 {
                self.half_main_after_free(Sheaf(main), Sheaf(spare));
            }
            (Sheaf(spare), main)
        } else if spare == 0 && main != 0 {
            // __pcs_replace_full_main with no spare: the full main becomes
            // the spare and an empty sheaf (the barn's, else a new one)
            // the main, so that two sheaves absorb the swings.
            match self.barn_get_empty().or_else(|| self.new_sheaf()) {
                Some(e) => {
                    self.half_main_after_free(Sheaf(main), e);
                    (e, main)
                }
                None => {
                    self.install(SheafWord::Main, Sheaf(main));
                    return self.free_rcs_to_slab(obj);
                }
            }
        } else {
            // main and spare are full (or missing): a full one goes to
            // the barn for an empty sheaf.
            let e = if main != 0 {
                match self.barn_put_full(Sheaf(main)) {
                    Ok(e) => e,
                    Err(f) => {
                        self.flush_sheaf(f);
                        f
                    }
                }
            } else {
                match self.new_sheaf() {
                    Some(e) => e,
                    None => return self.free_rcs_to_slab(obj),
                }
            };
            (e, spare)
        };
        target.set(target.size(), enc);
        target.set_size(target.size() + 1);
        self.install(SheafWord::Main, target);
        if other != 0 {
            self.install(SheafWord::Spare, Sheaf(other));
        }
        self.stat_here(SlubStat::FREE_PCS);
        Ok(())
    }

    /// A validated object that no sheaf takes goes to its slab (its free
    /// marker cleared first: the slab path's double-free check reads it).
    fn free_rcs_to_slab(&self, obj: usize) -> Result<(), FreeError> {
        self.clear_fp(obj);
        let (sl, o) = self.slab_of(Self::obj_ptr(obj))?;
        // SAFETY: validated by the caller's lookup; not on any freelist.
        unsafe { self.free_validated(sl, o) }
    }

    /// Detaches the running CPU's restartable sheaves (flush_local).
    pub(super) fn take_rcs_local(&self) -> [usize; 2] {
        let p = self.cpu.platform();
        let s = self.slots();
        [
            rcs_op!(p.this_cpu_xchg(s, SheafWord::Main, 0)).unwrap_or(0),
            rcs_op!(p.this_cpu_xchg(s, SheafWord::Spare, 0)).unwrap_or(0),
        ]
    }

    /// Detaches CPU `cpu`'s restartable sheaves from anywhere (`None`
    /// where the platform cannot fence that CPU).
    pub(super) fn take_rcs_remote(&self, cpu: usize) -> Option<[usize; 2]> {
        let p = self.cpu.platform();
        let s = self.slots();
        let m = p.remote_sheaf_xchg(s, cpu, SheafWord::Main, 0)?;
        let sp = p
            .remote_sheaf_xchg(s, cpu, SheafWord::Spare, 0)
            .unwrap_or(0);
        Some([m, sp])
    }

    /// The way of the CPUs' validated-range cache `obj` uses (by the slab
    /// window it lies in).
    #[inline(always)]
    fn range_way(&self, obj: usize) -> usize {
        local_lock::this_cpu::range_way(obj, self.fcheck.shift.load(CoreOrdering::Relaxed) as u32)
    }

    /// The inline fast paths' dispatch and area in one load: the
    /// platform's per-thread area when this cache's fast path is the
    /// restartable one of hardening `H` (`Fast::RseqHardened` /
    /// `Fast::Rseq`), else 0 (first use, another kind of cache, debug).
    /// Acquire, as the dispatch byte: a context that sees it sees the
    /// cache's first-use set-up.
    #[inline(always)]
    fn fast_area<const H: bool>(&self) -> isize {
        self.fast_area[H as usize].load(CoreOrdering::Acquire)
    }

    /// Whether this cache's sheaves are the restartable ones.
    #[inline(always)]
    pub(super) fn rcs(&self) -> bool {
        let f = self.dispatch.load(CoreOrdering::Acquire);
        f & super::Fast::Rseq as u8 != 0
    }
}
