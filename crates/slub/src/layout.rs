//! Object layout and slab sizing: `calculate_sizes`, `calculate_order`,
//! `set_min_partial`, `set_cpu_partial` of mm/slub.c, as `const fn`s so a
//! cache can be built in a `static`.

use local_lock::bits::{align_up, fls, ilog2};

use crate::slab::MAX_OBJS_PER_SLAB;

/// Cache creation flags (`SLAB_*`).
///
/// ```
/// use slub::layout::calculate_layout;
/// use slub::{Geometry, SlabFlags};
///
/// let f = SlabFlags::HARDENED.union(SlabFlags::RED_ZONE);
/// assert!(f.contains(SlabFlags::HARDENED) && f.is_debug());
/// assert!(!SlabFlags::HARDENED.is_debug(), "hardening is not a debug option");
/// assert!(SlabFlags::DEBUG_ALL.contains(SlabFlags::POISON));
/// // Red zones widen the stride of 32-byte objects.
/// let g = Geometry::new(4);
/// let plain = calculate_layout(32, 8, SlabFlags::NONE, &g).unwrap();
/// let red = calculate_layout(32, 8, SlabFlags::RED_ZONE, &g).unwrap();
/// assert_eq!(plain.size, 32);
/// assert!(red.size > plain.size && red.red_left_pad > 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SlabFlags(u32);

impl SlabFlags {
    /// No flags.
    pub const NONE: SlabFlags = SlabFlags(0);
    /// `SLAB_HWCACHE_ALIGN`: align objects to the cache line (64 B), or to
    /// the largest power-of-two fraction of it the object fits in.
    pub const HWCACHE_ALIGN: SlabFlags = SlabFlags(1 << 0);
    /// No per-CPU partial slabs (`CONFIG_SLUB_CPU_PARTIAL=n` for this cache).
    pub const NO_CPU_PARTIAL: SlabFlags = SlabFlags(1 << 1);
    /// Always take the local lock on the fast path, even where the lockless
    /// (freelist, tid) compare-exchange is available (what PREEMPT_RT does;
    /// for comparisons and tests).
    pub const LOCKED_FASTPATH: SlabFlags = SlabFlags(1 << 2);

    /// `CONFIG_SLAB_FREELIST_HARDENED` for this cache, and more: free
    /// pointers are stored as `ptr ^ random ^ byteswap(address of the
    /// pointer)`, with a per-cache random value from the platform's seed,
    /// so a use-after-free write or a leak of a free object's contents
    /// neither forges nor reveals a freelist pointer. On top of the
    /// kernel's scheme (issue #14):
    ///
    /// * a decoded free pointer must be an object of its slab before it is
    ///   followed, and every freelist walk stops after the slab's object
    ///   count: a corrupted freelist is reported, never followed or looped;
    /// * sheaf entries are stored XORed with the secret, and one that
    ///   decodes outside the cache's slabs is reported, never returned;
    /// * a free object's free-pointer word reads as free (the secret in a
    ///   sheaf, an encoded pointer into its slab on a freelist) and every
    ///   allocation clears it, so a double free with other frees in
    ///   between (`a, b, a`) is refused.
    pub const HARDENED: SlabFlags = SlabFlags(1 << 3);

    /// `CONFIG_SLAB_FREELIST_RANDOM` for this cache: a new slab's objects
    /// are linked in a shuffled order (the cache's random sequence, a
    /// Fisher-Yates shuffle of a slab's object indices made at first use,
    /// walked from a random position per slab: `init_cache_random_seq`,
    /// `shuffle_freelist`), so the next object handed out cannot be
    /// predicted from the previous one's address. The sequence takes a
    /// page block of its own until the cache is destroyed.
    pub const RANDOM_FREELIST: SlabFlags = SlabFlags(1 << 4);

    /// `SLAB_CONSISTENCY_CHECKS` (`slub_debug=F`): on free, the object must
    /// be inside a slab of this cache, on an object boundary, and not on
    /// the slab's freelist (a full walk); `validate()` walks every slab.
    pub const CONSISTENCY_CHECKS: SlabFlags = SlabFlags(1 << 8);
    /// `SLAB_RED_ZONE` (`Z`): a word-aligned zone before and after each
    /// object, 0xbb while free and 0xcc while allocated, checked on free and
    /// allocation.
    pub const RED_ZONE: SlabFlags = SlabFlags(1 << 9);
    /// `SLAB_POISON` (`P`): a free object's body reads 0x6b with a final
    /// 0xa5 (checked when it is allocated again: a write after free is
    /// caught), padding 0x5a. A cache with a constructor
    /// ([`KmemCache::with_ctor`](crate::KmemCache::with_ctor)) poisons only
    /// the padding: its free objects stay constructed.
    pub const POISON: SlabFlags = SlabFlags(1 << 10);
    /// `SLAB_STORE_USER` (`U`): each object records who allocated and who
    /// freed it last (call site, CPU, a counter as time), printed with any
    /// corruption report.
    pub const STORE_USER: SlabFlags = SlabFlags(1 << 11);
    /// Every debug flag (`slub_debug` with no options: `FZPU`).
    pub const DEBUG_ALL: SlabFlags = SlabFlags((1 << 8) | (1 << 9) | (1 << 10) | (1 << 11));

    /// Whether any debug flag is set (`kmem_cache_debug`): such caches take
    /// the locked path (no fast path, no CPU slabs or partial slabs).
    pub const fn is_debug(self) -> bool {
        self.0 & Self::DEBUG_ALL.0 != 0
    }

    /// Both sets.
    pub const fn union(self, o: SlabFlags) -> SlabFlags {
        SlabFlags(self.0 | o.0)
    }
    /// Whether every flag of `o` is set.
    pub const fn contains(self, o: SlabFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

static DEFAULT_FLAGS: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// `slub_debug=` (and hardening) as a global default: every cache made with
/// [`KmemCache::create`](crate::KmemCache::create) /
/// [`create_with`](crate::KmemCache::create_with) from now on gets `flags`
/// in addition to its own. Caches built at compile time with the `const`
/// constructors (`KmemCache::new`, `Kmalloc::new`, `GlobalSlub::new` in a
/// `static`) cannot see it: give those their flags directly
/// (`GlobalSlub::with_flags`).
pub fn set_default_flags(flags: SlabFlags) {
    DEFAULT_FLAGS.store(flags.0, core::sync::atomic::Ordering::Relaxed);
}

/// The flags [`set_default_flags`] set (none by default).
pub fn default_flags() -> SlabFlags {
    SlabFlags(DEFAULT_FLAGS.load(core::sync::atomic::Ordering::Relaxed))
}

/// Slab order and objects per slab (`struct kmem_cache_order_objects`).
///
/// ```
/// use slub::layout::calculate_layout;
/// use slub::{Geometry, OrderObjects, SlabFlags};
///
/// let l = calculate_layout(256, 8, SlabFlags::NONE, &Geometry::new(4)).unwrap();
/// // The preferred slab: as many 256-byte objects as its pages hold.
/// assert_eq!(l.oo.objects as usize, (4096 << l.oo.order) / 256);
/// // The fallback: one page.
/// assert_eq!(l.min, OrderObjects { order: 0, objects: 16 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderObjects {
    /// Page order of a slab.
    pub order: u8,
    /// Objects per slab.
    pub objects: u16,
}

/// What a cache is built for: the page size of its page allocator, the
/// possible CPUs (for `min_objects`) and `slub_max_order`.
///
/// ```
/// use slub::layout::calculate_layout;
/// use slub::{CacheError, Geometry, SlabFlags};
///
/// let g = Geometry::new(4);
/// assert_eq!((g.page_size, g.max_order, g.page_max_order), (4096, 3, 10));
/// // 16 KiB pages: slabs of 1000-byte objects are sized in those pages.
/// let big = Geometry { page_size: 16384, ..g };
/// let l = calculate_layout(1000, 8, SlabFlags::NONE, &big).unwrap();
/// assert_eq!(l.oo.objects as usize, (16384 << l.oo.order) / l.size);
/// let odd = Geometry { page_size: 1000, ..g };
/// assert_eq!(calculate_layout(8, 8, SlabFlags::NONE, &odd), Err(CacheError::BadPageSize(1000)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Page size in bytes (a power of two).
    pub page_size: usize,
    /// Possible CPUs.
    pub nr_cpus: usize,
    /// `slub_max_order` (default 3, `PAGE_ALLOC_COSTLY_ORDER`).
    pub max_order: u8,
    /// Largest order the page allocator serves at all (`MAX_ORDER`).
    pub page_max_order: u8,
}

impl Geometry {
    /// 4 KiB pages, `nr_cpus` CPUs, `slub_max_order` 3, `MAX_ORDER` 10.
    pub const fn new(nr_cpus: usize) -> Geometry {
        Geometry {
            page_size: 4096,
            nr_cpus,
            max_order: 3,
            page_max_order: 10,
        }
    }
}

/// Why a cache cannot be created.
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::layout::calculate_layout;
/// use slub::{CacheError, Geometry, GlobalPages, KmemCache, SlabFlags};
///
/// let g = Geometry::new(1);
/// assert_eq!(calculate_layout(0, 8, SlabFlags::NONE, &g), Err(CacheError::ZeroSize));
/// assert_eq!(calculate_layout(64, 3, SlabFlags::NONE, &g), Err(CacheError::BadAlign(3)));
/// let huge = KmemCache::<GlobalPages, PerThread>::create(
///     "huge", 1 << 30, 8, SlabFlags::NONE, GlobalPages, PerThread);
/// assert_eq!(huge.unwrap_err(), CacheError::TooLarge(1 << 30));
/// assert_eq!(CacheError::ZeroSize.to_string(), "slub: object size 0");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// Object size 0.
    ZeroSize,
    /// Alignment not a power of two, or above the page size.
    BadAlign(usize),
    /// No slab order up to `MAX_ORDER` holds one object (or the size is
    /// beyond what a slab can describe).
    TooLarge(usize),
    /// The page size is not a power of two of at least 16 bytes.
    BadPageSize(usize),
    /// The page allocator has more NUMA nodes (its `nr_node_ids()`) than
    /// a cache has node structures ([`MAX_NUMNODES`](crate::MAX_NUMNODES)),
    /// or none.
    TooManyNodes(usize),
}

impl core::fmt::Display for CacheError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CacheError::ZeroSize => write!(f, "slub: object size 0"),
            CacheError::BadAlign(a) => {
                write!(
                    f,
                    "slub: alignment {a} is not a power of two no larger than the page"
                )
            }
            CacheError::TooLarge(s) => write!(f, "slub: object size {s} fits no slab order"),
            CacheError::BadPageSize(p) => {
                write!(f, "slub: page size {p} is not a power of two >= 16")
            }
            CacheError::TooManyNodes(n) => write!(
                f,
                "slub: the page allocator has {n} nodes; a cache supports 1 to {}",
                crate::MAX_NUMNODES
            ),
        }
    }
}

impl core::error::Error for CacheError {}

/// Computed layout of a cache's objects and slabs.
///
/// ```
/// use slub::layout::calculate_layout;
/// use slub::{Geometry, SlabFlags};
///
/// let l = calculate_layout(100, 8, SlabFlags::NONE, &Geometry::new(4)).unwrap();
/// assert_eq!((l.object_size, l.size, l.align), (100, 104, 8));
/// assert!(l.offset + 8 <= l.size, "the free pointer lies in the stride");
/// // `reciprocal` divides an offset in the slab by the stride.
/// let off = 5 * l.size + 3;
/// assert_eq!(((off as u128 * l.reciprocal as u128) >> 64) as usize, 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLayout {
    /// The size the user asked for (`object_size`).
    pub object_size: usize,
    /// Stride between objects (`size`: object + metadata, aligned).
    pub size: usize,
    /// Object alignment (`align`).
    pub align: usize,
    /// Offset of the free pointer from the start of an object's slot
    /// (`offset`): inside the object, or after it (debug flags, a
    /// constructor).
    pub offset: usize,
    /// Preferred slab order and objects (`oo`).
    pub oo: OrderObjects,
    /// Minimum slab order and objects (`min`), the fallback.
    pub min: OrderObjects,
    /// Empty slabs kept on the node partial list (`min_partial`).
    pub min_partial: usize,
    /// Free objects kept on per-CPU partial slabs (`cpu_partial`); 0 disables
    /// CPU partial slabs.
    pub cpu_partial: usize,
    /// Slabs kept on a CPU partial list (`cpu_partial_slabs`).
    pub cpu_partial_slabs: usize,
    /// Debug: bytes of red zone before the object (`red_left_pad`); the
    /// object starts this far into its slot. 0 without `RED_ZONE`.
    pub red_left_pad: usize,
    /// Debug: end of the object and its right red zone, relative to the
    /// object (`inuse`).
    pub inuse: usize,
    /// Debug: offset of the two owner records (alloc, free) from the
    /// object, with `STORE_USER`.
    pub track_offset: usize,
    /// `floor((2^64 - 1) / size) + 1`: `(off * reciprocal) >> 64` is
    /// `off / size` exactly for every offset inside a slab
    /// (`reciprocal_divide`).
    pub reciprocal: u64,
    /// The inverse modulo 2^64 of the stride's odd part
    /// (`size >> stride_shift`), and
    pub odd_inverse: u64,
    /// the stride's trailing zero bits: `(off * odd_inverse)` rotated
    /// right by `stride_shift` is `off / size` when `size` divides `off`,
    /// and above `(2^64 - 1) / size` (so at or above any object count)
    /// when it does not: one test decides "an object boundary below
    /// `objects`" ([`object_index`](Self::object_index); Hacker's
    /// Delight 10-17).
    pub stride_shift: u32,
}

impl CacheLayout {
    /// The index of the object at offset `off` of a slab of `objects`
    /// objects, if `off` is an object boundary below `objects`
    /// (`obj_to_index`, with the boundary check folded in): a multiply, a
    /// rotate and a compare. `objects` is at most `(2^64 - 1) / size`
    /// (every real count is: the objects of a slab fit in it).
    ///
    /// ```
    /// use slub::layout::calculate_layout;
    /// use slub::{Geometry, SlabFlags};
    /// let l = calculate_layout(200, 8, SlabFlags::NONE, &Geometry::new(4)).unwrap();
    /// assert_eq!(l.object_index(3 * 200, 20), Some(3));
    /// assert_eq!(l.object_index(3 * 200 + 8, 20), None, "inside an object");
    /// assert_eq!(l.object_index(20 * 200, 20), None, "past the last object");
    /// ```
    #[inline(always)]
    pub const fn object_index(&self, off: usize, objects: usize) -> Option<usize> {
        debug_assert!(objects as u64 <= u64::MAX / self.size as u64);
        let q = (off as u64)
            .wrapping_mul(self.odd_inverse)
            .rotate_right(self.stride_shift);
        if q < objects as u64 {
            Some(q as usize)
        } else {
            None
        }
    }
}

/// The inverse of odd `d` modulo 2^64 (Newton's iteration: each step
/// doubles the correct low bits, from 3 for `x = d`).
const fn odd_inverse(d: u64) -> u64 {
    let mut x = d;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(x)));
        i += 1;
    }
    x
}

const WORD: usize = core::mem::size_of::<usize>();
/// Words of one owner record (`struct track`): call site, CPU, time.
pub(crate) const TRACK_WORDS: usize = 3;
/// Cache line size assumed for `SLAB_HWCACHE_ALIGN`.
pub const CACHE_LINE: usize = 64;
/// `MIN_PARTIAL`, `MAX_PARTIAL`.
const MIN_PARTIAL: usize = 5;
const MAX_PARTIAL: usize = 10;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}
const fn min(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}
/// `get_order`: the smallest order whose block holds `size` bytes.
///
/// Computed without shifting the page size (which wraps to 0 for sizes
/// above `usize::MAX / 2` and made the old loop spin forever): the order is
/// `ceil(log2(pages))` for `pages = ceil(size / page_size)`, at most
/// `usize::BITS`, so any size has an answer and callers reject orders
/// their allocator does not have.
pub(crate) const fn get_order(size: usize, page_size: usize) -> u8 {
    if size <= page_size {
        return 0;
    }
    let pages = (size - 1) / page_size + 1;
    (usize::BITS - (pages - 1).leading_zeros()) as u8
}
const fn order_objects(order: u8, size: usize, page_size: usize) -> usize {
    (page_size << order) / size
}

/// `calc_slab_order`.
const fn calc_slab_order(
    size: usize,
    min_objects: usize,
    max_order: u8,
    fract_leftover: usize,
    page_size: usize,
) -> u8 {
    let min_order = 0u8;
    if order_objects(min_order, size, page_size) > MAX_OBJS_PER_SLAB {
        return get_order(size * MAX_OBJS_PER_SLAB, page_size) - 1;
    }
    let mut order = get_order(min_objects * size, page_size);
    if order < min_order {
        order = min_order;
    }
    while order <= max_order {
        let slab_size = page_size << order;
        let rem = slab_size % size;
        if rem <= slab_size / fract_leftover {
            break;
        }
        order += 1;
    }
    order
}

/// `calculate_order`: the smallest waste fraction (1/16, 1/8, 1/4) at the
/// most objects (from `4 * (fls(nr_cpus) + 1)` down), up to `slub_max_order`;
/// then one object per slab, up to `slub_max_order`, then `MAX_ORDER`.
pub const fn calculate_order(size: usize, g: &Geometry) -> Option<u8> {
    let nr_cpus = if g.nr_cpus == 0 { 1 } else { g.nr_cpus };
    let mut min_objects = 4 * (fls(nr_cpus) + 1);
    let max_objects = order_objects(g.max_order, size, g.page_size);
    min_objects = min(min_objects, max_objects);
    while min_objects > 1 {
        let mut fraction = 16;
        while fraction >= 4 {
            let order = calc_slab_order(size, min_objects, g.max_order, fraction, g.page_size);
            if order <= g.max_order {
                return Some(order);
            }
            fraction /= 2;
        }
        min_objects -= 1;
    }
    let order = calc_slab_order(size, 1, g.max_order, 1, g.page_size);
    if order <= g.max_order {
        return Some(order);
    }
    let order = calc_slab_order(size, 1, g.page_max_order, 1, g.page_size);
    if order <= g.page_max_order {
        return Some(order);
    }
    None
}

/// `calculate_alignment`: the caller's alignment, raised to the cache line
/// (or the power-of-two fraction of it the object fits) with
/// `HWCACHE_ALIGN`, and at least a word.
const fn calculate_alignment(flags: SlabFlags, align: usize, size: usize) -> usize {
    let mut align = align;
    if flags.contains(SlabFlags::HWCACHE_ALIGN) {
        let mut ralign = CACHE_LINE;
        while size <= ralign / 2 {
            ralign /= 2;
        }
        align = max(align, ralign);
    }
    max(align, WORD)
}

/// Computes a cache's layout (`calculate_sizes` + the tunables
/// `kmem_cache_open` sets).
pub const fn calculate_layout(
    object_size: usize,
    align: usize,
    flags: SlabFlags,
    g: &Geometry,
) -> Result<CacheLayout, CacheError> {
    calculate_layout_ctor(object_size, align, flags, g, false)
}

/// [`calculate_layout`] for a cache with a constructor (`ctor`: the
/// kernel's `s->ctor`): the free pointer goes after the object (and its
/// red zone), as `calculate_sizes` places it for `SLAB_TYPESAFE_BY_RCU`,
/// a ctor or poisoning, so a free object keeps every byte its constructor
/// (or its last user) left.
///
/// ```
/// use slub::layout::{calculate_layout, calculate_layout_ctor};
/// use slub::{Geometry, SlabFlags};
///
/// let g = Geometry::new(4);
/// let plain = calculate_layout(64, 8, SlabFlags::HARDENED, &g).unwrap();
/// let ctor = calculate_layout_ctor(64, 8, SlabFlags::HARDENED, &g, true).unwrap();
/// assert_eq!((plain.offset, plain.size), (0, 64), "inside the object");
/// assert_eq!((ctor.offset, ctor.size), (64, 72), "after the object");
/// ```
pub const fn calculate_layout_ctor(
    object_size: usize,
    align: usize,
    flags: SlabFlags,
    g: &Geometry,
    ctor: bool,
) -> Result<CacheLayout, CacheError> {
    if !g.page_size.is_power_of_two() || g.page_size < 16 {
        return Err(CacheError::BadPageSize(g.page_size));
    }
    if object_size == 0 {
        return Err(CacheError::ZeroSize);
    }
    if !align.is_power_of_two() || align > g.page_size {
        return Err(CacheError::BadAlign(align));
    }
    if object_size > (g.page_size << g.page_max_order) {
        return Err(CacheError::TooLarge(object_size));
    }
    // The free pointer sits inside the object, in the middle (away from
    // small overflows of the neighbour), word aligned; after the object (and
    // its red zone) when poisoning needs the whole object, a constructor's
    // state must survive the free, or a red-zoned object is smaller than a
    // word (calculate_sizes: red zoning alone keeps it inside).
    let align = calculate_alignment(flags, align, object_size);
    let mut size = align_up(object_size, WORD);
    if flags.contains(SlabFlags::RED_ZONE) && size == object_size {
        // Room for the right red zone: the kernel's padding word.
        size += WORD;
    }
    let inuse = size;
    // Hardened caches keep it at word 0 instead [Linux differs]: every
    // free pointer they decode is checked against its slab, so an overflow
    // that reaches it is reported rather than followed, and their hot paths
    // (the sheaf marker, the locked freelist) save the offset's load and
    // add on every allocation and free.
    let mut offset = if object_size >= WORD && !flags.contains(SlabFlags::HARDENED) {
        (object_size / 2) & !(WORD - 1)
    } else {
        0
    };
    if flags.contains(SlabFlags::POISON)
        || ctor
        || (flags.contains(SlabFlags::RED_ZONE) && object_size < WORD)
    {
        offset = size;
        size += WORD;
    }
    let track_offset = size;
    if flags.contains(SlabFlags::STORE_USER) {
        size += 2 * TRACK_WORDS * WORD;
    }
    let red_left_pad = if flags.contains(SlabFlags::RED_ZONE) {
        align_up(WORD, align)
    } else {
        0
    };
    // Offsets so far are from the object; the slot begins red_left_pad
    // earlier.
    let offset = offset + red_left_pad;
    size = align_up(size + red_left_pad, align);
    let order = match calculate_order(size, g) {
        Some(o) => o,
        None => return Err(CacheError::TooLarge(object_size)),
    };
    let objects = order_objects(order, size, g.page_size);
    if objects == 0 {
        return Err(CacheError::TooLarge(object_size));
    }
    let min_order = get_order(size, g.page_size);
    let min_objects = order_objects(min_order, size, g.page_size);
    let oo = OrderObjects {
        order,
        objects: objects as u16,
    };
    let minoo = OrderObjects {
        order: min_order,
        objects: min_objects as u16,
    };
    // set_min_partial
    let min_partial = max(MIN_PARTIAL, min(MAX_PARTIAL, ilog2(size) / 2));
    // set_cpu_partial (5.16 on)
    let cpu_partial = if flags.contains(SlabFlags::NO_CPU_PARTIAL) {
        0
    } else if size >= g.page_size {
        6
    } else if size >= 1024 {
        24
    } else if size >= 256 {
        52
    } else {
        120
    };
    let cpu_partial_slabs = (cpu_partial * 2usize).div_ceil(objects);
    Ok(CacheLayout {
        object_size,
        size,
        align,
        offset,
        oo,
        min: minoo,
        min_partial,
        cpu_partial,
        cpu_partial_slabs,
        red_left_pad,
        inuse,
        track_offset,
        reciprocal: (u64::MAX / size as u64).wrapping_add(1),
        odd_inverse: odd_inverse((size as u64) >> size.trailing_zeros()),
        stride_shift: size.trailing_zeros(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lay(size: usize, cpus: usize) -> CacheLayout {
        calculate_layout(size, 8, SlabFlags::NONE, &Geometry::new(cpus)).unwrap()
    }

    #[test]
    fn orders_match_the_kernel_on_small_machines() {
        // 2 CPUs: min_objects = 4 * (fls(2) + 1) = 12. Values as a 4 KiB-page
        // x86-64 kernel with 2 CPUs reports in /sys/kernel/slab/*/order.
        let want = [
            (8, 0, 512),
            (16, 0, 256),
            (32, 0, 128),
            (64, 0, 64),
            (96, 0, 42),
            (128, 0, 32),
            (192, 0, 21),
            (256, 0, 16),
            (512, 1, 16),
            (1024, 2, 16),
            (2048, 3, 16),
            (4096, 3, 8),
            (8192, 3, 4),
        ];
        for (size, order, objects) in want {
            let l = lay(size, 2);
            assert_eq!((l.oo.order, l.oo.objects), (order, objects), "size {size}");
            assert_eq!(l.size, size);
            assert_eq!(l.offset, (size / 2) & !7);
        }
        // More CPUs, more objects per slab: 64 CPUs -> min_objects 32.
        assert_eq!(lay(256, 64).oo.order, 1);
        assert_eq!(lay(256, 64).oo.objects, 32);
    }

    #[test]
    fn tunables_follow_the_kernel() {
        let l = lay(64, 2);
        assert_eq!(l.min_partial, 5);
        assert_eq!((l.cpu_partial, l.cpu_partial_slabs), (120, 4));
        let l = lay(8192, 2);
        assert_eq!(l.min_partial, 6);
        assert_eq!((l.cpu_partial, l.cpu_partial_slabs), (6, 3));
        let l = lay(1 << 20, 2);
        assert_eq!(l.min_partial, 10);
        assert_eq!(l.min.order, 8);
    }

    #[test]
    fn alignment_and_hwcache() {
        let g = Geometry::new(4);
        let l = calculate_layout(20, 4, SlabFlags::HWCACHE_ALIGN, &g).unwrap();
        assert_eq!((l.align, l.size), (32, 32));
        let l = calculate_layout(100, 4, SlabFlags::HWCACHE_ALIGN, &g).unwrap();
        assert_eq!((l.align, l.size), (64, 128));
        let l = calculate_layout(3, 1, SlabFlags::NONE, &g).unwrap();
        assert_eq!((l.align, l.size, l.offset), (8, 8, 0));
        let l = calculate_layout(24, 256, SlabFlags::NONE, &g).unwrap();
        assert_eq!(l.size, 256);
    }

    #[test]
    fn reciprocal_division_is_exact_inside_a_slab() {
        for size in [8usize, 24, 96, 192, 200, 1000, 3000, 4096, 8192, 12345] {
            let l = lay(size, 4);
            let slab = 4096 << l.oo.order.max(l.min.order);
            for off in (0..slab).step_by(7).chain([slab - 1]) {
                let q = ((off as u128 * l.reciprocal as u128) >> 64) as usize;
                assert_eq!(q, off / l.size, "size {size} off {off}");
            }
        }
    }

    #[test]
    fn object_index_finds_exactly_the_boundaries_below_the_count() {
        for want_size in [8usize, 24, 96, 192, 200, 1000, 3000, 4096, 8192, 12345] {
            let l = lay(want_size, 4);
            let size = l.size;
            assert_eq!(
                ((size as u64) >> l.stride_shift).wrapping_mul(l.odd_inverse),
                1
            );
            let slab = 4096 << l.oo.order.max(l.min.order);
            let objects = l.oo.objects as usize;
            let edges = (0..=objects + 1).flat_map(|i| {
                let b = i * size;
                [b.wrapping_sub(1), b, b + 1, b + 8]
            });
            for off in (0..slab)
                .step_by(7)
                .chain(edges)
                .chain([usize::MAX, 1 << 63])
            {
                let want = (off % size == 0 && off / size < objects).then(|| off / size);
                assert_eq!(
                    l.object_index(off, objects),
                    want,
                    "size {size} off {off:#x}"
                );
            }
        }
    }

    #[test]
    fn debug_layouts_follow_calculate_sizes() {
        let g = Geometry::new(4);
        let l = calculate_layout(64, 8, SlabFlags::DEBUG_ALL, &g).unwrap();
        // [8 left red zone][64 object][8 right red zone][8 free pointer][2 x 24 tracks]
        assert_eq!(l.red_left_pad, 8);
        assert_eq!(l.inuse, 72);
        assert_eq!(l.offset, 8 + 72);
        assert_eq!(l.track_offset, 80);
        assert_eq!(l.size, 8 + 80 + 48);
        let l = calculate_layout(20, 8, SlabFlags::POISON, &g).unwrap();
        assert_eq!((l.red_left_pad, l.inuse, l.offset, l.size), (0, 24, 24, 32));
    }

    #[test]
    fn red_zone_alone_keeps_the_free_pointer_inside_the_object() {
        // calculate_sizes: SLAB_RED_ZONE moves the free pointer after the
        // object only when the object is smaller than a word; the padding
        // word that makes room for the right red zone stays.
        let g = Geometry::new(4);
        let l = calculate_layout(64, 8, SlabFlags::RED_ZONE, &g).unwrap();
        // [8 left red zone][64 object, free pointer at 32][8 right red zone]
        assert_eq!((l.red_left_pad, l.inuse, l.offset), (8, 72, 8 + 32));
        assert_eq!((l.track_offset, l.size), (72, 8 + 72));
        // Not a multiple of a word: the rounding is the right red zone.
        let l = calculate_layout(20, 8, SlabFlags::RED_ZONE, &g).unwrap();
        assert_eq!((l.inuse, l.offset, l.size), (24, 8 + 8, 8 + 24));
        // Hardened: inside, at word 0.
        let f = SlabFlags::RED_ZONE.union(SlabFlags::HARDENED);
        assert_eq!(calculate_layout(64, 8, f, &g).unwrap().offset, 8);
        // Smaller than a word: after the object and its red zone.
        let l = calculate_layout(4, 4, SlabFlags::RED_ZONE, &g).unwrap();
        assert_eq!((l.inuse, l.offset, l.size), (8, 8 + 8, 8 + 16));
    }

    #[test]
    fn bad_specs_are_refused() {
        let g = Geometry::new(4);
        assert_eq!(
            calculate_layout(0, 8, SlabFlags::NONE, &g),
            Err(CacheError::ZeroSize)
        );
        assert_eq!(
            calculate_layout(8, 3, SlabFlags::NONE, &g),
            Err(CacheError::BadAlign(3))
        );
        assert_eq!(
            calculate_layout(8, 8192, SlabFlags::NONE, &g),
            Err(CacheError::BadAlign(8192))
        );
        assert!(matches!(
            calculate_layout(8 << 20, 8, SlabFlags::NONE, &g),
            Err(CacheError::TooLarge(_))
        ));
    }
}
