//! `kmalloc`, `kfree` and `ksize`: the 13 size classes over [`KmemCache`]
//! and large blocks straight from the page allocator.

use core::ptr::NonNull;

use buddy::{AllocFlags, Order};
use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use crate::cache::{KmemCache, NUMA_NO_NODE};
use crate::error::FreeError;
use crate::error::FreeErrorKind;
use crate::layout::{get_order, Geometry, SlabFlags};
use crate::slab::{tag_kmalloc_index, TAG_KIND, TAG_LARGE, TAG_SLAB};
use crate::source::SlabSource;
use crate::stats::SlubStats;

/// The kmalloc size classes (`kmalloc_info`).
pub const KMALLOC_SIZES: [usize; 13] = [
    8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
];
/// Their cache names.
pub const KMALLOC_NAMES: [&str; 13] = [
    "kmalloc-8",
    "kmalloc-16",
    "kmalloc-32",
    "kmalloc-64",
    "kmalloc-96",
    "kmalloc-128",
    "kmalloc-192",
    "kmalloc-256",
    "kmalloc-512",
    "kmalloc-1k",
    "kmalloc-2k",
    "kmalloc-4k",
    "kmalloc-8k",
];
/// Largest size served by a cache (`KMALLOC_MAX_CACHE_SIZE`, two pages).
pub const KMALLOC_MAX_CACHE_SIZE: usize = 8192;

/// `size_index[]`: class of sizes 1..=192 by `(size - 1) / 8`.
const SIZE_INDEX: [u8; 24] = [
    0, // 8
    1, // 16
    2, 2, // 24, 32
    3, 3, 3, 3, // 40..64
    4, 4, 4, 4, // 72..96
    5, 5, 5, 5, // 104..128
    6, 6, 6, 6, 6, 6, 6, 6, // 136..192
];

/// The class of each 8-byte step of size up to
/// [`KMALLOC_MAX_CACHE_SIZE`]: entry `(size + 7) >> 3` (jemalloc's
/// `sz_size2index_tab`; 1 KiB of read-only data, of which a program's
/// sizes touch a few lines). Built from [`kmalloc_index`].
pub(crate) const SIZE_CLASS: [u8; KMALLOC_MAX_CACHE_SIZE / 8 + 1] = {
    let mut t = [0u8; KMALLOC_MAX_CACHE_SIZE / 8 + 1];
    let mut i = 1;
    while i < t.len() {
        t[i] = kmalloc_index(i * 8) as u8;
        i += 1;
    }
    t
};

/// [`kmalloc_index`] without a branch, for sizes up to
/// [`KMALLOC_MAX_CACHE_SIZE`] (0 as 1): an add, a shift and one byte
/// load from [`SIZE_CLASS`]; a size known at compile time folds to its
/// class. (Session 11's form was pure arithmetic, about 15 instructions,
/// which a loop of one runtime size hoists while a table load is redone
/// each time, the restartable sections clobbering memory; but a call with
/// a size the compiler cannot see, as behind `__rust_alloc` or `malloc`,
/// pays all 15: `pair_count`'s `pairdyn` 149 -> 113 per pair, `churn`
/// 177 -> 144 per step, `pair` 79 -> 93.)
#[inline(always)]
pub(crate) const fn kmalloc_class_of(size: usize) -> usize {
    debug_assert!(size <= KMALLOC_MAX_CACHE_SIZE);
    SIZE_CLASS[(size + 7) >> 3] as usize
}

/// `kmalloc(0)`'s result: a non-null pointer that must not be dereferenced
/// and that `kfree` ignores (`ZERO_SIZE_PTR`).
pub const ZERO_SIZE_PTR: NonNull<u8> = {
    // SAFETY: 16 is not null.
    unsafe { NonNull::new_unchecked(core::ptr::without_provenance_mut(16)) }
};

/// `kmalloc_index`: the class of a size (1..=8192).
#[inline(always)]
pub const fn kmalloc_index(size: usize) -> usize {
    if size <= 192 {
        SIZE_INDEX[(size - 1) / 8] as usize
    } else {
        // 256 -> 7, 512 -> 8, ..., 8192 -> 12
        (usize::BITS - (size - 1).leading_zeros()) as usize - 1
    }
}

/// The class for `size` whose objects are aligned to at least `align`
/// (object addresses are slab base + k * class size, and slabs are aligned
/// to their size, so class `c` guarantees `c & -c`), or `None` for the page
/// allocator.
#[inline(always)]
pub const fn kmalloc_class(size: usize, align: usize) -> Option<usize> {
    if size > KMALLOC_MAX_CACHE_SIZE {
        return None;
    }
    // One byte load (jemalloc's `sz_size2index_tab`): the fast paths'
    // class without `kmalloc_index`'s two ranges.
    let i = kmalloc_class_of(size);
    if align <= KMALLOC_SIZES[0] {
        // Every class is a multiple of 8 (the common case: no search).
        return Some(i);
    }
    kmalloc_class_aligned(i, align)
}

/// [`kmalloc_class`] for alignments above 8: the first class from `i` on
/// whose objects are aligned enough.
#[inline(never)]
const fn kmalloc_class_aligned(mut i: usize, align: usize) -> Option<usize> {
    while i < KMALLOC_SIZES.len() {
        let c = KMALLOC_SIZES[i];
        if c & c.wrapping_neg() >= align {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The kmalloc caches over one page allocator.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{Geometry, GlobalPages, Kmalloc, KMALLOC_SIZES};
///
/// static K: Kmalloc<GlobalPages, PerThread> =
///     Kmalloc::new(GlobalPages, PerThread, Geometry::new(PerThread::OWNED_SLOTS + 1));
/// assert_eq!(K.caches().len(), KMALLOC_SIZES.len());
/// let p = K.kmalloc(100, 8).unwrap();
/// assert_eq!(K.ksize(p.as_ptr()), 128, "kmalloc-128");
/// let big = K.kmalloc(10_000, 8).unwrap();
/// assert_eq!(K.ksize(big.as_ptr()), 16384, "beyond 8 KiB: four whole pages");
/// // SAFETY: ours, each freed once.
/// unsafe {
///     K.kfree(p.as_ptr());
///     K.kfree(big.as_ptr());
/// }
/// K.validate();
/// ```
pub struct Kmalloc<S: SlabSource + Copy, P: Platform + Copy, const N: usize = 64> {
    caches: [KmemCache<S, P, N>; 13],
    source: S,
}

/// Bytes of objects one sheaf of a kmalloc cache holds at most: sheaves of
/// large classes hold fewer objects, so a CPU's two sheaves keep at most
/// 64 KiB per class (the kernel also sizes sheaves per cache).
pub const KMALLOC_SHEAF_BYTES: usize = 32 << 10;

/// The sheaf capacity of kmalloc class `i` when `capacity` is asked for
/// every class: `capacity`, but at most [`KMALLOC_SHEAF_BYTES`] of objects
/// (and at least 4 objects), trimmed to fill its private block
/// ([`fit_private_sheaf`]); 0 stays 0.
pub const fn kmalloc_sheaf_capacity(i: usize, capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let by_bytes = KMALLOC_SHEAF_BYTES / KMALLOC_SIZES[i];
    let by_bytes = if by_bytes < 4 { 4 } else { by_bytes };
    fit_private_sheaf(if capacity < by_bytes {
        capacity
    } else {
        by_bytes
    })
}

/// `cap` entries, or a few fewer (at most an eighth) when that halves the
/// sheaf's private block: a block is the power of two above the sheaf's
/// words (its two header words, its entries) and its color word
/// (`private_sheaf_bytes`), so the powers of two the classes' capacities
/// were (128 entries: 131 words) took blocks twice their use (2 KiB for
/// 1,048 bytes); 125 entries fill 1 KiB. A shell under mm-malloc held 68
/// KiB of sheaves (its fork loop's parent, about 12 classes on 2 CPUs).
pub const fn fit_private_sheaf(cap: usize) -> usize {
    // (Sheaf::HDR words, then one word of PRIVATE_SHEAF_COLOR.)
    const OVER: usize = 2 + 1;
    let words = cap + OVER;
    let half = words.next_power_of_two() / 2;
    if cap >= 16 && words > half && words - half <= cap / 8 {
        half - OVER
    } else {
        cap
    }
}

macro_rules! kcache {
    ($i:expr, $s:expr, $p:expr, $g:expr, $f:expr, $sheaves:expr) => {
        KmemCache::new(KMALLOC_NAMES[$i], KMALLOC_SIZES[$i], 8, $f, $g, $s, $p)
            .with_kmalloc_index($i)
            .with_sheaves(kmalloc_sheaf_capacity($i, $sheaves))
    };
}

impl<S: SlabSource + Copy, P: Platform + Copy, const N: usize> Kmalloc<S, P, N> {
    /// The caches, sized for `geometry` (usable in a `static`).
    #[cfg(not(loom))]
    pub const fn new(source: S, platform: P, geometry: Geometry) -> Self {
        Self::with_flags(source, platform, geometry, SlabFlags::NONE)
    }

    /// [`new`](Self::new) with `flags` on every cache (e.g.
    /// [`SlabFlags::HARDENED`]).
    #[cfg(not(loom))]
    pub const fn with_flags(source: S, platform: P, geometry: Geometry, flags: SlabFlags) -> Self {
        Self::with_config(source, platform, geometry, flags, 0)
    }

    /// [`with_flags`](Self::with_flags) plus per-CPU sheaves of
    /// `sheaf_capacity` objects on every cache (0: none), fewer for large
    /// classes ([`kmalloc_sheaf_capacity`]).
    #[cfg(not(loom))]
    pub const fn with_config(
        source: S,
        platform: P,
        geometry: Geometry,
        flags: SlabFlags,
        sheaf_capacity: usize,
    ) -> Self {
        Kmalloc {
            caches: [
                kcache!(0, source, platform, geometry, flags, sheaf_capacity),
                kcache!(1, source, platform, geometry, flags, sheaf_capacity),
                kcache!(2, source, platform, geometry, flags, sheaf_capacity),
                kcache!(3, source, platform, geometry, flags, sheaf_capacity),
                kcache!(4, source, platform, geometry, flags, sheaf_capacity),
                kcache!(5, source, platform, geometry, flags, sheaf_capacity),
                kcache!(6, source, platform, geometry, flags, sheaf_capacity),
                kcache!(7, source, platform, geometry, flags, sheaf_capacity),
                kcache!(8, source, platform, geometry, flags, sheaf_capacity),
                kcache!(9, source, platform, geometry, flags, sheaf_capacity),
                kcache!(10, source, platform, geometry, flags, sheaf_capacity),
                kcache!(11, source, platform, geometry, flags, sheaf_capacity),
                kcache!(12, source, platform, geometry, flags, sheaf_capacity),
            ],
            source,
        }
    }

    /// The class for `size` and `align` that these caches can serve (the
    /// class table, checked against each cache's real object alignment:
    /// debug caches have red zones and owner records in the stride), or
    /// `None` for whole pages.
    #[inline]
    pub fn class(&self, size: usize, align: usize) -> Option<usize> {
        let mut i = kmalloc_class(size, align)?;
        while i < self.caches.len() {
            if self.caches[i].object_align() >= align {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// The caches, smallest first.
    pub fn caches(&self) -> &[KmemCache<S, P, N>; 13] {
        &self.caches
    }

    /// The page allocator.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// `kmalloc(size)` with at least `align` alignment (a power of two):
    /// a size class whose objects are aligned enough, else whole pages.
    /// `None` when memory runs out, no order fits (any size or alignment
    /// beyond the largest block, up to `usize::MAX`, as Linux returns NULL,
    /// unless the source has recorded direct mappings:
    /// [`SlabSource::alloc_direct`], e.g. [`GlobalPages`](crate::GlobalPages)),
    /// or `align` is not a power of two (no address could honour it). Size
    /// 0 gives [`ZERO_SIZE_PTR`].
    #[inline]
    #[track_caller]
    pub fn kmalloc(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        if !align.is_power_of_two() {
            return None;
        }
        if size == 0 {
            return Some(ZERO_SIZE_PTR);
        }
        match self.class(size, align) {
            Some(i) => self.caches[i].alloc(),
            None => self.kmalloc_large(size, align, AllocFlags::NONE, NUMA_NO_NODE),
        }
    }

    /// `kzalloc`: [`kmalloc`](Self::kmalloc), zeroed. Large blocks the page
    /// allocator knows to be zero are not cleared again.
    #[inline]
    #[track_caller]
    pub fn kzalloc(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        self.kmalloc_flags(size, align, AllocFlags::ZEROED)
    }

    /// `kmalloc(size, gfp)`: [`kmalloc`](Self::kmalloc) with the request's
    /// gfp flags, which reach the page allocator: a size class's new slab
    /// ([`KmemCache::alloc_flags`]) or the large block itself. `ZEROED` is
    /// `kzalloc` (`__GFP_ZERO`); `NOWARN`, the retry flags (`NORETRY`,
    /// `RETRY_MAYFAIL`, `NOFAIL`), `MEMALLOC`/`NOMEMALLOC`, `HIGH`/`ATOMIC`,
    /// `THISNODE` and a zone limit act in the page allocator's slow path.
    ///
    /// ```
    /// use buddy::AllocFlags;
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let k = HEAP.kmalloc();
    /// let p = k.kmalloc_flags(100, 8, AllocFlags::NOWARN | AllocFlags::ZEROED).unwrap();
    /// assert_eq!(k.ksize(p.as_ptr()), 128);
    /// // SAFETY: from this kmalloc, freed once.
    /// unsafe { k.kfree(p.as_ptr()) };
    /// // Beyond the largest block without a direct mapping, or an
    /// // alignment no address has: `None`.
    /// assert!(k.kmalloc_flags(64, 3, AllocFlags::NOWARN).is_none());
    /// ```
    #[inline]
    #[track_caller]
    pub fn kmalloc_flags(&self, size: usize, align: usize, gfp: AllocFlags) -> Option<NonNull<u8>> {
        if !align.is_power_of_two() {
            return None;
        }
        if size == 0 {
            return Some(ZERO_SIZE_PTR);
        }
        match self.class(size, align) {
            Some(i) => {
                let p = self.caches[i].alloc_flags(gfp.difference(AllocFlags::ZEROED))?;
                if gfp.contains(AllocFlags::ZEROED) {
                    // SAFETY: a fresh object of at least `size` bytes.
                    unsafe { p.as_ptr().write_bytes(0, size) };
                }
                Some(p)
            }
            None => self.kmalloc_large(size, align, gfp, NUMA_NO_NODE),
        }
    }

    /// `kmalloc_node(size, gfp, nid)`: [`kmalloc_flags`](Self::kmalloc_flags)
    /// from node `nid` ([`NUMA_NO_NODE`]: any): a size class's object by
    /// [`KmemCache::alloc_node`], a large block by `alloc_pages_node`
    /// ([`alloc_block_node`](buddy::PageAlloc::alloc_block_node)); with
    /// [`THISNODE`](AllocFlags::THISNODE) nothing of another node.
    ///
    /// ```
    /// use buddy::AllocFlags;
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let k = HEAP.kmalloc();
    /// let p = k.kmalloc_node(100, 8, 0, AllocFlags::ZEROED).unwrap();
    /// // SAFETY: 100 fresh bytes of ours.
    /// assert!(unsafe { core::slice::from_raw_parts(p.as_ptr(), 100) }.iter().all(|&b| b == 0));
    /// // SAFETY: ours, freed once.
    /// unsafe { k.kfree(p.as_ptr()) };
    /// ```
    #[inline]
    #[track_caller]
    pub fn kmalloc_node(
        &self,
        size: usize,
        align: usize,
        nid: usize,
        gfp: AllocFlags,
    ) -> Option<NonNull<u8>> {
        if !align.is_power_of_two() {
            return None;
        }
        if size == 0 {
            return Some(ZERO_SIZE_PTR);
        }
        match self.class(size, align) {
            Some(i) => {
                let p = self.caches[i].alloc_node(nid, gfp.difference(AllocFlags::ZEROED))?;
                if gfp.contains(AllocFlags::ZEROED) {
                    // SAFETY: a fresh object of at least `size` bytes.
                    unsafe { p.as_ptr().write_bytes(0, size) };
                }
                Some(p)
            }
            None => self.kmalloc_large(size, align, gfp, nid),
        }
    }

    /// [`kmalloc`](Self::kmalloc) of a [`Layout`](core::alloc::Layout).
    ///
    /// ```
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let k = HEAP.kmalloc();
    /// let p = k.kmalloc_layout(core::alloc::Layout::new::<[u64; 3]>()).unwrap();
    /// assert_eq!(k.ksize(p.as_ptr()), 32, "kmalloc-32");
    /// // SAFETY: from this kmalloc, freed once.
    /// unsafe { k.kfree(p.as_ptr()) };
    /// ```
    #[inline]
    #[track_caller]
    pub fn kmalloc_layout(&self, layout: core::alloc::Layout) -> Option<NonNull<u8>> {
        self.kmalloc(layout.size(), layout.align())
    }

    /// [`kzalloc`](Self::kzalloc) of a [`Layout`](core::alloc::Layout).
    #[inline]
    #[track_caller]
    pub fn kzalloc_layout(&self, layout: core::alloc::Layout) -> Option<NonNull<u8>> {
        self.kzalloc(layout.size(), layout.align())
    }

    /// `krealloc`: `ptr` resized to `new_size` bytes aligned to `align`. In
    /// place while the allocation's usable size ([`ksize`](Self::ksize))
    /// holds `new_size` and `ptr` has the alignment; else a new allocation
    /// gets the first `min(ksize, new_size)` bytes and `ptr` is freed. A
    /// null `ptr` (or [`ZERO_SIZE_PTR`]) is a [`kmalloc`](Self::kmalloc);
    /// `new_size` 0 frees `ptr` and returns [`ZERO_SIZE_PTR`]. `None` when
    /// memory runs out, with `ptr` left as it was (as Linux returns NULL and
    /// keeps the old block).
    ///
    /// ```
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let k = HEAP.kmalloc();
    /// let p = k.kmalloc(20, 8).unwrap(); // kmalloc-32
    /// // SAFETY: `p` is ours; the old pointer is not used after a move.
    /// unsafe {
    ///     p.as_ptr().write_bytes(7, 20);
    ///     let q = k.krealloc(p.as_ptr(), 30, 8).unwrap();
    ///     assert_eq!(q, p, "kmalloc-32 holds 30 bytes: in place");
    ///     let r = k.krealloc(q.as_ptr(), 5000, 8).unwrap();
    ///     assert_eq!(*r.as_ptr().add(19), 7, "contents kept");
    ///     k.kfree(r.as_ptr());
    /// }
    /// ```
    ///
    /// # Safety
    ///
    /// `ptr` is null, [`ZERO_SIZE_PTR`] or a live allocation of this
    /// kmalloc; after a move (a result other than `ptr`) it is freed.
    #[track_caller]
    pub unsafe fn krealloc(
        &self,
        ptr: *mut u8,
        new_size: usize,
        align: usize,
    ) -> Option<NonNull<u8>> {
        let Some(p) = NonNull::new(ptr).filter(|p| *p != ZERO_SIZE_PTR) else {
            return self.kmalloc(new_size, align);
        };
        if new_size == 0 {
            // SAFETY: the caller's contract.
            unsafe { self.kfree(ptr) };
            return Some(ZERO_SIZE_PTR);
        }
        let old = self.ksize(ptr);
        if new_size <= old && align.is_power_of_two() && ptr.addr().is_multiple_of(align) {
            return Some(p);
        }
        let n = self.kmalloc(new_size, align)?;
        // SAFETY: both valid for the copied length (the old allocation's
        // usable size, the new one's request) and distinct; `ptr` is freed
        // once (the caller's contract).
        unsafe {
            core::ptr::copy_nonoverlapping(ptr, n.as_ptr(), old.min(new_size));
            self.kfree(ptr);
        }
        Some(n)
    }

    /// `kmalloc_large`: a block of pages tagged with its size; beyond the
    /// largest order, the source's recorded direct mapping
    /// ([`SlabSource::alloc_direct`]: fresh, so zero), if it has one.
    fn kmalloc_large(
        &self,
        size: usize,
        align: usize,
        flags: AllocFlags,
        nid: usize,
    ) -> Option<NonNull<u8>> {
        let ps = self.source.page_size();
        let order = get_order(size.max(align), ps);
        let Some(order) = Order::new(order).filter(|o| *o <= self.source.max_order()) else {
            return self.source.alloc_direct(size, align);
        };
        let b = if nid == NUMA_NO_NODE || nid >= self.source.nr_node_ids() {
            self.source.alloc_block(order, flags)?
        } else {
            self.source.alloc_block_node(nid, order, flags)?
        };
        b.owner.data().store(size, Ordering::Relaxed);
        b.owner.tag().store(TAG_LARGE, Ordering::Relaxed);
        Some(b.page.ptr)
    }

    /// The cache of a kmalloc slab from its tag (its id is checked by the
    /// cache).
    #[inline(always)]
    fn tagged_cache(&self, tag: u32) -> Option<&KmemCache<S, P, N>> {
        match tag_kmalloc_index(tag) {
            0 => None,
            i => self.caches.get(i - 1),
        }
    }

    /// `kfree` without the size: the block is found from the address.
    /// Ignores null and [`ZERO_SIZE_PTR`].
    ///
    /// # Panics
    ///
    /// If `ptr` is not from this kmalloc (foreign, inside an object or a
    /// large block, an object of a cache that is not one of ours, a double
    /// free the naive check sees), naming the problem; nothing changes.
    ///
    /// # Safety
    ///
    /// `ptr` came from this kmalloc and is not used afterwards.
    #[inline]
    #[track_caller]
    pub unsafe fn kfree(&self, ptr: *mut u8) {
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.try_kfree(ptr) } {
            panic!("kfree({ptr:p}): {e}")
        }
    }

    /// [`kfree`](Self::kfree) that reports bad input instead of panicking.
    ///
    /// # Safety
    ///
    /// As [`kfree`](Self::kfree), for a pointer that passes the checks.
    #[inline]
    #[track_caller]
    pub unsafe fn try_kfree(&self, ptr: *mut u8) -> Result<(), FreeError> {
        let Some(p) = NonNull::new(ptr) else {
            return Ok(());
        };
        if p == ZERO_SIZE_PTR {
            return Ok(());
        }
        let a = ptr.addr();
        let Some(b) = self.source.block_of(ptr) else {
            // SAFETY: the caller's contract: if it is a direct mapping,
            // it is one of ours, given back.
            return match unsafe { self.source.free_direct(p) } {
                true => Ok(()),
                false => Err(FreeError::new(a, FreeErrorKind::NotAllocated)),
            };
        };
        let tag = b.owner.tag().load(Ordering::Relaxed);
        if tag & TAG_KIND == TAG_SLAB {
            let cache = self.tagged_cache(tag).ok_or(FreeError::new(
                a,
                FreeErrorKind::WrongCache("a cache that is not kmalloc's"),
            ))?;
            if cache.is_debug() {
                // SAFETY: forwarded; the debug free validates everything.
                return unsafe { cache.try_free(p) };
            }
            let (s, obj) = cache.check_object(crate::slab::Slab(b.owner), b.head, b.order, p)?;
            // SAFETY: forwarded; validated.
            unsafe { cache.free_validated(s, obj) }
        } else if tag == TAG_LARGE {
            if b.head != p {
                return Err(FreeError::new(
                    a,
                    FreeErrorKind::NotObjectStart(a - b.head.as_ptr().addr()),
                ));
            }
            b.owner.tag().store(0, Ordering::Relaxed);
            // SAFETY: a large kmalloc block we handed out, now returned.
            unsafe { self.source.free_block(b.head, b.order) };
            Ok(())
        } else {
            Err(FreeError::new(a, FreeErrorKind::NotSlab))
        }
    }

    /// `ksize`: the usable size of an allocation (its class's object size,
    /// or the whole block for a large one); 0 for null and
    /// [`ZERO_SIZE_PTR`]. Takes the pointer type [`kfree`](Self::kfree)
    /// takes.
    ///
    /// # Panics
    ///
    /// If `ptr` is not a live kmalloc allocation's start, or is an object
    /// known to be free (on its slab's freelist in a debug cache; its
    /// free-pointer word reads as free in a hardened cache; the head of its
    /// slab's freelist otherwise).
    pub fn ksize(&self, ptr: *mut u8) -> usize {
        let Some(ptr) = NonNull::new(ptr).filter(|p| *p != ZERO_SIZE_PTR) else {
            return 0;
        };
        let a = ptr.as_ptr().addr();
        let Some(b) = self.source.block_of(ptr.as_ptr()) else {
            return self
                .source
                .direct_size(ptr.as_ptr())
                .unwrap_or_else(|| panic!("ksize({a:#x}): not memory of this allocator"));
        };
        let tag = b.owner.tag().load(Ordering::Relaxed);
        if tag & TAG_KIND == TAG_SLAB {
            let c = self
                .tagged_cache(tag)
                .filter(|c| {
                    // A debug object sits after its left red zone.
                    let slot = NonNull::new(ptr.as_ptr().wrapping_sub(c.layout().red_left_pad))
                        .unwrap_or(ptr);
                    c.check_object(crate::slab::Slab(b.owner), b.head, b.order, slot)
                        .is_ok()
                })
                .unwrap_or_else(|| panic!("ksize({a:#x}): not an object of this kmalloc"));
            let obj = ptr.as_ptr().expose_provenance();
            if c.known_free(crate::slab::Slab(b.owner), b.head, b.order, obj) {
                panic!("ksize({a:#x}): slub {}: the object is free", c.name());
            }
            c.object_size()
        } else if tag == TAG_LARGE && b.head == ptr {
            self.source.page_size() << b.order.get()
        } else {
            panic!("ksize({a:#x}): not a kmalloc allocation")
        }
    }

    /// Checks every cache's invariants ([`KmemCache::validate`]:
    /// through `&self`, so a `GlobalSlub`'s caches can be checked) on a
    /// quiescent allocator.
    pub fn validate(&self) {
        for c in &self.caches {
            c.validate();
        }
    }

    /// Flushes every cache (see [`KmemCache::flush_all`]).
    pub fn flush_all(&self) -> usize {
        self.caches.iter().map(|c| c.flush_all()).max().unwrap_or(0)
    }

    /// Flushes the calling CPU's slabs of every cache.
    pub fn flush_local(&self) {
        for c in &self.caches {
            c.flush_local();
        }
    }

    /// Shrinks every cache; returns the slabs freed.
    pub fn shrink(&self) -> usize {
        self.caches.iter().map(|c| c.shrink()).sum()
    }

    /// The idle shrink of every cache ([`KmemCache::shrink_if_idle`]: those
    /// that stopped allocating and discarding slabs since the last call
    /// are shrunk once); returns the slabs freed.
    pub fn shrink_idle(&self) -> usize {
        self.caches.iter().map(|c| c.shrink_if_idle()).sum()
    }

    /// Statistics summed over caches and CPUs.
    pub fn stats(&self) -> SlubStats {
        let mut s = SlubStats::default();
        for c in &self.caches {
            s.merge(&c.stats());
        }
        s
    }

    /// A `/proc/slabinfo`-style report of every cache, then the summed
    /// counters.
    pub fn report(&self) -> Report<'_, S, P, N> {
        Report(self)
    }
}

/// See [`Kmalloc::report`].
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{Geometry, GlobalPages, Kmalloc, SlabInfo};
///
/// static K: Kmalloc<GlobalPages, PerThread> =
///     Kmalloc::new(GlobalPages, PerThread, Geometry::new(PerThread::OWNED_SLOTS + 1));
/// let p = K.kmalloc(48, 8).unwrap();
/// let report = K.report().to_string();
/// let mut lines = report.lines();
/// assert_eq!(lines.next(), Some(SlabInfo::HEADER));
/// // One slabinfo line per cache, then the non-zero counters.
/// assert!(lines.any(|l| l.starts_with("kmalloc-64 ")));
/// assert!(report.contains("ALLOC_SLAB"));
/// // SAFETY: ours, freed once.
/// unsafe { K.kfree(p.as_ptr()) };
/// ```
pub struct Report<'a, S: SlabSource + Copy, P: Platform + Copy, const N: usize>(
    &'a Kmalloc<S, P, N>,
);

impl<S: SlabSource + Copy, P: Platform + Copy, const N: usize> core::fmt::Display
    for Report<'_, S, P, N>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(f, "{}", crate::cache::report::SlabInfo::HEADER)?;
        for c in &self.0.caches {
            writeln!(f, "{}", c.slabinfo())?;
        }
        write!(f, "{}", self.0.stats())
    }
}
