//! Free pointers (`freeptr_t`): reading, writing, encoding (hardened
//! caches' `freelist_ptr_encode`), the hardened caches' free marker and its
//! checks, and the report of a corrupted freelist.

use super::*;

/// The cache's words its free-pointer accessors read (`fp_word`,
/// `fp_encode`, `get_fp`), copied once for a loop over many objects: the
/// loop's stores into the objects might alias the cache for the compiler,
/// which otherwise reads each word again for every object (the sheaf
/// flush: 51 -> 39 instructions per object in python's flushes; the
/// refill's marking 10 -> 5). From [`KmemCache::fp_keys`].
#[derive(Clone, Copy)]
pub(super) struct FpKeys {
    /// The free pointer's offset in an object.
    pub(super) offset: usize,
    /// The secret (hardened: the encoding's XOR and the free marker).
    pub(super) secret: usize,
    /// The cache is hardened.
    pub(super) hardened: bool,
}

impl FpKeys {
    /// The free-pointer word of object `obj` (as `fp_word`).
    #[inline(always)]
    pub(super) fn word(self, obj: usize) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(obj + self.offset);
        // SAFETY: as in `fp_word`: an object of the cache's slabs, word
        // aligned, accessed atomically.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }

    /// The word that links `obj` to `next` (as `fp_encode`).
    #[inline(always)]
    pub(super) fn encode(self, next: usize, obj: usize) -> usize {
        if self.hardened {
            next ^ self.secret ^ (obj + self.offset).swap_bytes()
        } else {
            next
        }
    }

    /// The free pointer of the free object `obj`, decoded (as `get_fp`).
    #[inline(always)]
    pub(super) fn next(self, obj: usize) -> usize {
        // (The encoding is an XOR: decoding is encoding the stored word.)
        self.encode(self.word(obj).load(CoreOrdering::Relaxed), obj)
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// The words of [`FpKeys`], read now.
    #[inline(always)]
    pub(super) fn fp_keys(&self) -> FpKeys {
        FpKeys {
            offset: self.lay.offset,
            secret: self.random.load(CoreOrdering::Relaxed),
            hardened: self.hardened(),
        }
    }

    /// The free pointer of the free object at `obj` (`get_freepointer`),
    /// decoded. Read atomically: the lockless fast path may read an object
    /// another context has just allocated (the value is then discarded by
    /// the failing compare-exchange, as `get_freepointer_safe` does).
    #[inline(always)]
    pub(super) fn get_fp(&self, obj: usize) -> usize {
        let slot = obj + self.lay.offset;
        let p = core::ptr::with_exposed_provenance_mut::<usize>(slot);
        // SAFETY: objects are word aligned inside slab memory, which stays
        // mapped; the read is atomic.
        let v = unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }.load(CoreOrdering::Relaxed);
        self.fp_decode(FreePtr(v), slot)
    }

    /// Sets the free pointer of an object the caller holds
    /// (`set_freepointer`): `next` (an object, or 0 for the end of the
    /// freelist) stored encoded.
    #[inline(always)]
    pub(super) fn set_fp(&self, obj: usize, next: usize) {
        let slot = obj + self.lay.offset;
        let p = core::ptr::with_exposed_provenance_mut::<usize>(slot);
        // SAFETY: as in `get_fp`; the caller holds the object.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
            .store(self.fp_encode(next, slot).0, CoreOrdering::Relaxed)
    }

    /// `freelist_ptr_encode`: the word that stores the free pointer `next`
    /// at `slot` (hardened caches: `next ^ secret ^ swab(slot)`; others:
    /// `next` itself).
    #[inline(always)]
    pub(crate) fn fp_encode(&self, next: usize, slot: usize) -> FreePtr {
        if self.flags.contains(SlabFlags::HARDENED) {
            FreePtr(next ^ self.random.load(CoreOrdering::Relaxed) ^ slot.swap_bytes())
        } else {
            FreePtr(next)
        }
    }

    /// `freelist_ptr_decode`: the free pointer (an object, or 0) that the
    /// word `fp` stored at `slot` encodes (the same XOR as
    /// [`fp_encode`](Self::fp_encode)).
    #[inline(always)]
    pub(crate) fn fp_decode(&self, fp: FreePtr, slot: usize) -> usize {
        if self.flags.contains(SlabFlags::HARDENED) {
            fp.0 ^ self.random.load(CoreOrdering::Relaxed) ^ slot.swap_bytes()
        } else {
            fp.0
        }
    }

    /// Whether the cache is hardened: free pointers and sheaf entries
    /// encoded with the cache's secret, free objects recognisable by their
    /// free-pointer word (double frees), decoded pointers checked.
    #[inline(always)]
    pub(super) fn hardened(&self) -> bool {
        self.flags.contains(SlabFlags::HARDENED)
    }

    /// The free-pointer word of object `obj`.
    #[inline(always)]
    pub(super) fn fp_word(&self, obj: usize) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(obj + self.lay.offset);
        // SAFETY: objects are word aligned inside slab memory, which stays
        // mapped while the cache holds the slab; accesses are atomic.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }

    /// The free-pointer word of `obj` on a fast path compiled for hardened
    /// (`H`) or plain caches: hardened caches keep it at offset 0 (see
    /// `cache_layout`; checked when the fast path is chosen), so `H` needs
    /// no offset.
    #[inline(always)]
    pub(super) fn fp_word_fast<const H: bool>(
        &self,
        obj: usize,
    ) -> &'static core::sync::atomic::AtomicUsize {
        let p = core::ptr::with_exposed_provenance_mut::<usize>(if H {
            obj
        } else {
            obj + self.lay.offset
        });
        // SAFETY: as for `fp_word`.
        unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
    }

    /// Hardened caches: the key of `obj`'s free-pointer word (`fp_encode`'s
    /// XOR: a free pointer is stored as `next ^ key`, so a free object in
    /// a sheaf, marked as encoding null, holds `key` itself). Only for the
    /// hardened fast paths, whose caches keep the free pointer at offset 0
    /// (the word's address is the object's; debug caches go through
    /// `fp_encode` with their own offset).
    #[inline(always)]
    pub(super) fn fp_key(&self, obj: usize) -> usize {
        self.random.load(CoreOrdering::Relaxed) ^ obj.swap_bytes()
    }

    /// Hardened caches: the key of sheaf entries (entries are stored as
    /// `object ^ key`; the key is the cache's secret, which is also the
    /// marker a free object in a sheaf holds, see
    /// [`looks_free`](Self::looks_free)). 0 when the source keeps the
    /// sheaves in memory no user can reach ([`SlabSource::PRIVATE_META`]:
    /// the entries are stored plain, and no XOR lies on the path of the
    /// pointer handed out); the marker stays the secret either way.
    ///
    /// [`SlabSource::PRIVATE_META`]: buddy::PageAlloc::PRIVATE_META
    #[inline(always)]
    pub(super) fn entry_key(&self) -> usize {
        if S::PRIVATE_META {
            0
        } else {
            self.random.load(CoreOrdering::Relaxed)
        }
    }

    /// Hardened caches: the sheaf entry of `obj` (`obj ^ entry_key()`).
    #[inline(always)]
    pub(super) fn entry_of(&self, obj: usize) -> usize {
        obj ^ self.entry_key()
    }

    /// Whether `o` is a word-aligned address within the span of this
    /// cache's slabs, rounded to the power-of-two window around them (one
    /// mask test; hardened sheaf entries must). A garbage value passes with
    /// a probability of about `window / 2^64 / 8`.
    #[inline(always)]
    pub(super) fn in_slabs(&self, o: usize) -> bool {
        (o ^ self.slab_ref.load(CoreOrdering::Relaxed)) & self.slab_mask.load(CoreOrdering::Relaxed)
            == 0
    }

    /// Hardened caches: clears the free-pointer word of an object being
    /// handed out, so that it no longer reads as free ([`looks_free`]):
    /// a raw 0 decodes to `secret ^ slot`, which is neither null nor an
    /// object of the slab unless the secret happens to be one of about
    /// `slab bytes` values out of 2^64.
    ///
    /// [`looks_free`]: Self::looks_free
    #[inline(always)]
    pub(super) fn clear_fp(&self, obj: usize) {
        if self.hardened() {
            let p = core::ptr::with_exposed_provenance_mut::<usize>(obj + self.lay.offset);
            // SAFETY: an object the caller just took; word aligned in slab
            // memory.
            unsafe { core::sync::atomic::AtomicUsize::from_ptr(p) }
                .store(FreePtr::NULL.0, CoreOrdering::Relaxed)
        }
    }

    /// Hardened caches: an object leaving a sheaf (handed out, or flushed
    /// to its slab) must still hold the free marker its free stored (the
    /// free stores it without reading the object, see
    /// `Platform::this_cpu_free_push`); its word is then cleared, so a
    /// second copy of it in a sheaf (`free a, free b, free a`) is found
    /// before it is handed out twice. `H`: the caller is a hardened fast
    /// path (marker at offset 0).
    #[inline(always)]
    pub(super) fn unmark<const H: bool>(&self, obj: usize) {
        self.unmark_with::<H>(obj, self.random.load(CoreOrdering::Relaxed))
    }

    /// [`unmark`](Self::unmark) with the secret `r` the caller already
    /// read.
    #[inline(always)]
    pub(super) fn unmark_with<const H: bool>(&self, obj: usize, r: usize) {
        let w = self.fp_word_fast::<H>(obj);
        let v = w.load(CoreOrdering::Relaxed);
        if v != r {
            self.bad_marker(obj, v)
        }
        w.store(0, CoreOrdering::Relaxed);
    }

    /// Reports an object that left a sheaf without its free marker.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_marker(&self, obj: usize, found: usize) -> ! {
        panic!(
            "slub {}: double free of {obj:#x}, found when it left a sheaf: its free marker is \
             gone (it was freed twice with other frees between, and handed out once already; \
             or written after free: word found {found:#x})",
            self.name
        )
    }

    /// Hardened caches: whether `obj` (an object of the slab whose objects
    /// span `[base, base + span)`) reads as free: every free object's
    /// free-pointer word holds the cache's secret (an object in a sheaf:
    /// [`mark_free`](Self::mark_free)) or decodes to null (the end of a
    /// freelist) or to an object of its own slab, and every allocation
    /// clears the word ([`clear_fp`](Self::clear_fp)).
    /// Without the secret, a live object's contents match with negligible
    /// probability. Always `false` for unhardened caches (a user's data
    /// may well hold a pointer into the slab).
    #[inline(always)]
    pub(super) fn looks_free(&self, obj: usize, base: usize, span: usize) -> bool {
        if !self.hardened() {
            return false;
        }
        self.fp_word(obj).load(CoreOrdering::Relaxed) == self.random.load(CoreOrdering::Relaxed)
            || self.on_slab_freelist(obj, base, span)
    }

    /// Hardened caches: whether `obj` (as in [`looks_free`](Self::looks_free))
    /// reads as an object on its slab's freelist: its free-pointer word
    /// decodes to null or to an object of its slab (the sheaf marker does
    /// not count).
    #[inline(always)]
    pub(super) fn on_slab_freelist(&self, obj: usize, base: usize, span: usize) -> bool {
        if !self.hardened() {
            return false;
        }
        let w = self.fp_word(obj).load(CoreOrdering::Relaxed);
        let d = w ^ self.random.load(CoreOrdering::Relaxed) ^ (obj + self.lay.offset).swap_bytes();
        d == 0 || d.wrapping_sub(base) < span
    }

    /// Hardened caches: whether `next`, read from a free object of the slab
    /// at `base` holding `objects`, is null or an object of that slab
    /// (one range and stride check); unhardened caches trust it.
    #[inline(always)]
    pub(super) fn fp_ok(&self, next: usize, base: usize, objects: usize) -> bool {
        !self.hardened() || next == 0 || self.obj_index(next.wrapping_sub(base), objects).is_some()
    }

    /// Reports a free pointer that is not an object of its slab (a write
    /// after free, or a freelist cycle) and panics.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_freelist(&self, base: usize, obj: usize, next: usize, what: &str) -> ! {
        panic!(
            "slub {}: corrupted freelist in slab {base:#x}: free object {obj:#x} {what} \
             (free pointer found: {next:#x}; a write after free or a double free)",
            self.name
        )
    }
}
