//! SLUB's use of the page source's page map
//! ([`PageAlloc::page_tag`](buddy::PageAlloc::page_tag)): each slab's
//! pages carry one byte naming its cache and its order (`tag << 3 |
//! order`), written when the slab is made and cleared before it is
//! discarded, so a free outside the CPU's validated ranges finds its slab
//! from one byte instead of the descriptor walk (tail page to head). The
//! byte is a hint: the object boundary is checked as before, and anything
//! the map does not vouch for takes the descriptor path, which reports
//! bad pointers precisely.
//!
//! Tags are handed out process-wide, first come first served, to caches
//! whose source keeps a map (`GlobalPages`: `GlobalSlub`'s kmalloc
//! caches get theirs at their first slab); 31 exist, later caches go
//! without (and lose only the shortcut).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use buddy::Order;
use local_lock::Platform;

use crate::error::FreeError;
use crate::source::SlabSource;

use super::KmemCache;

/// `map_tag` of a cache that has none.
pub(super) const NO_TAG: u8 = 1;
/// The next tag to hand out (1..=31).
static NEXT_TAG: AtomicU8 = AtomicU8::new(1);
/// Tags that exist (5 bits beside the 3-bit order).
const MAX_TAG: u8 = 31;
/// Largest slab order a map byte can carry.
const MAX_MAP_ORDER: u8 = 7;

/// What the inline free reads to validate an object by the page map
/// ([`KmemCache::mapped_object`]): the source's map, where it lives
/// ([`PageMapView`](buddy::PageMapView), kept here so the lookup is a
/// subtraction, a shift, a compare and a byte load, with no trip through
/// the source), this cache's tag and, for each slab order it uses, the
/// slab mask, object count and the stride's shift packed in one word. The
/// fast free is bound by how many loads it issues more than by its
/// instructions (`slub-pairs`: dropping this check's dozen loads saved a
/// quarter of a pair's time), hence the packing: seven loads in all, from
/// one cache line.
/// Filled at the cache's first tagged slab (`pages` last); until then
/// `pages` is 0 and every address misses. Only for a map of 4 KiB pages
/// ([`MAP_SHIFT`]: the shift is then an immediate); another page size
/// leaves it empty (every free takes the descriptor path).
#[repr(C, align(64))]
pub(super) struct MapCheck {
    map: AtomicPtr<u8>,
    base: AtomicUsize,
    /// Pages the map covers (a larger map is covered up to `u32::MAX`
    /// pages, 16 TiB: beyond, frees take the descriptor path).
    pages: AtomicU32,
    /// This cache's tag shifted left by 3 (a map byte's order bits 0):
    /// `byte ^ tag` is the byte's slab order if the byte is this cache's.
    tag: AtomicU8,
    /// The stride's divisibility multiplier, `ceil(2^64 / stride)`
    /// ([`stride_multiplier`]): an offset `off < 2^32` is a multiple of
    /// the stride exactly when `off * div` (mod 2^64) is below `div`.
    div: AtomicU64,
    /// By slab order (below [`GEOM_ORDERS`]): for this cache's two orders
    /// (`oo`, `min`), the slab mask and the objects' span ([`Geom`]); 0
    /// for the orders it does not use (no object passes: the span is 0).
    /// Indexed by the map byte's order, not chosen by comparing the byte
    /// with each order's: which order an object's slab has follows no
    /// pattern when sizes vary (a cache's first slab is of the minimum
    /// order, later ones of `oo`), and those compares' mispredictions
    /// were a tenth of the free's samples in `threads_churn` (issue #16).
    geom: [Geom; GEOM_ORDERS],
}

/// One slab order's geometry in [`MapCheck`]: two 32-bit fields of one
/// word, read one by one (each an operand of the instruction that uses
/// it: five instructions fewer than unpacking one word's bit fields).
#[repr(C, align(8))]
struct Geom {
    /// `slab bytes - 1`.
    mask: AtomicU32,
    /// The bytes a slab of this order gives its objects, `objects *
    /// stride` (0: an order the cache does not use; no object passes).
    span: AtomicU32,
}

/// `ceil(2^64 / stride)`: [`MapCheck::div`], for a stride of at least 2.
pub(crate) const fn stride_multiplier(stride: u64) -> u64 {
    u64::MAX / stride + 1
}

/// Whether `off` is an object boundary below `span` for the stride whose
/// [`stride_multiplier`] is `div`: Lemire, Kaser and Kurz's divisibility
/// test ("Faster remainder by direct computation", 2019: for a 32-bit
/// `off` and `div = ceil(2^64 / d)`, `d` divides `off` exactly when the
/// low 64 bits of `off * div` are below `div`), then one compare with the
/// span. One multiply and two compares with no shift: the odd inverse's
/// test (`CacheLayout::object_index`) also rotates by the stride's
/// trailing zero bits, whose count must sit in `cl` (three more
/// instructions in the inline frees, with the moves around it).
#[inline(always)]
pub(crate) const fn boundary_below(off: u32, div: u64, span: u32) -> bool {
    (off as u64).wrapping_mul(div) < div && off < span
}

/// Slab orders [`MapCheck`] validates inline (0..4: the kernel's
/// `slub_max_order` default is 3); a cache with a slab of a higher order
/// has no check (its objects are validated by their descriptors). With 4,
/// the whole check is one cache line.
const GEOM_ORDERS: usize = 4;

#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<MapCheck>() == 64);

/// The page shift [`MapCheck`] serves.
const MAP_SHIFT: u32 = 12;

impl MapCheck {
    /// Nothing mapped yet.
    pub(super) const fn new() -> Self {
        MapCheck {
            map: AtomicPtr::new(core::ptr::null_mut()),
            base: AtomicUsize::new(0),
            pages: AtomicU32::new(0),
            tag: AtomicU8::new(0),
            div: AtomicU64::new(0),
            geom: [const {
                Geom {
                    mask: AtomicU32::new(0),
                    span: AtomicU32::new(0),
                }
            }; GEOM_ORDERS],
        }
    }
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Whether the page map vouches for `a` as an object of this cache
    /// (the kernel's `virt_to_slab` and `check_valid_pointer` in one):
    /// its page's byte is this cache's tag and one of its two orders, and
    /// its offset in that slab is an object boundary below the slab's
    /// count ([`CacheLayout::object_index`](crate::layout::CacheLayout::object_index)'s
    /// test). `false` for anything else (null, a foreign or interior
    /// pointer, a cache without a map): the caller takes the descriptor
    /// path, which decides and reports.
    #[inline(always)]
    pub(super) fn mapped_object(&self, a: usize) -> bool {
        let m = &self.mcheck;
        // Relaxed: filled before the cache's first object existed, and a
        // freed object's allocation happened before its free.
        let i = a.wrapping_sub(m.base.load(Ordering::Relaxed)) >> MAP_SHIFT;
        if i >= m.pages.load(Ordering::Relaxed) as usize {
            return false;
        }
        // SAFETY: `i` is below the covered pages, whose map is mapped for
        // the rest of the process (`PageAlloc::page_map`); bytes are
        // only accessed atomically.
        let b = unsafe { AtomicU8::from_ptr(m.map.load(Ordering::Relaxed).add(i)) };
        self.mapped_object_byte(a, b.load(Ordering::Relaxed))
    }

    /// [`mapped_object`](Self::mapped_object) with `a`'s page-map byte
    /// `b` already read by the caller (from this cache's source's map,
    /// [`PageAlloc::page_map`](buddy::PageAlloc::page_map)). A cache
    /// whose map check is not filled has no geometry: `false`.
    #[inline(always)]
    pub(super) fn mapped_object_byte(&self, a: usize, b: u8) -> bool {
        let m = &self.mcheck;
        // Another cache's byte (or no slab's) leaves a high bit set.
        let o = usize::from(b ^ m.tag.load(Ordering::Relaxed));
        let Some(g) = m.geom.get(o) else {
            return false;
        };
        self.mapped_object_geom(a, g)
    }

    /// [`mapped_object_byte`](Self::mapped_object_byte) for a byte the
    /// caller knows to carry this cache's tag if it names any slab of
    /// this cache's (it found the cache from the byte's tag:
    /// [`free_fast_tag_in`](Self::free_fast_tag_in)): no compare with the
    /// tag, the byte's low bits are the slab's order. Exact because
    /// [`fill_map_check`](Self::fill_map_check) fills the check only for a
    /// cache whose slab orders are all below [`GEOM_ORDERS`] (4): a byte
    /// of this cache's slab carries one of them, and a cache without the
    /// check has no geometry (`false`).
    #[inline(always)]
    pub(super) fn mapped_object_own_byte(&self, a: usize, b: u8) -> bool {
        const _: () = assert!(GEOM_ORDERS == 4);
        self.mapped_object_geom(a, &self.mcheck.geom[usize::from(b & 3)])
    }

    /// The boundary test of [`mapped_object_byte`](Self::mapped_object_byte)
    /// with a [`geom`](MapCheck::geom) entry.
    #[inline(always)]
    fn mapped_object_geom(&self, a: usize, g: &Geom) -> bool {
        let off = (a as u32) & g.mask.load(Ordering::Relaxed);
        boundary_below(
            off,
            self.mcheck.div.load(Ordering::Relaxed),
            g.span.load(Ordering::Relaxed),
        )
    }

    /// Fills [`MapCheck`] at the cache's first tagged slab (tag `t`).
    #[cold]
    fn fill_map_check(&self, t: u8) {
        let (oo, min) = (self.lay.oo, self.lay.min);
        let Some(v) = self.source.page_map() else {
            return;
        };
        // (Orders from GEOM_ORDERS on: no check at all, not one for some
        // orders only, so that a byte of this cache's with its tag always
        // names its order's geometry: `mapped_object_own_byte`.)
        if usize::from(oo.order.max(min.order)) >= GEOM_ORDERS
            || v.shift != MAP_SHIFT
            || self.geometry.page_size != 1 << MAP_SHIFT
        {
            return;
        }
        let m = &self.mcheck;
        m.map.store(v.map.cast_mut(), Ordering::Relaxed);
        m.base.store(v.base, Ordering::Relaxed);
        m.tag.store(t, Ordering::Relaxed);
        let bytes = |order: u8| self.geometry.page_size << order;
        for l in [min, oo] {
            let g = &m.geom[usize::from(l.order)];
            g.mask.store((bytes(l.order) - 1) as u32, Ordering::Relaxed);
            // (Within the slab: at most its bytes, below 2^32 for the
            // orders checked here.)
            let span = usize::from(l.objects) * self.lay.size;
            g.span.store(span as u32, Ordering::Relaxed);
        }
        m.div
            .store(stride_multiplier(self.lay.size as u64), Ordering::Relaxed);
        // Published last (pairs with `map_slab`'s acquire, so a thread
        // that skips the fill sees it whole; see `mapped_object`).
        m.pages.store(
            u32::try_from(v.pages).unwrap_or(u32::MAX),
            Ordering::Release,
        );
    }

    /// The cache's tag (`tag << 3`), assigned at its first slab; `None`
    /// for a cache without one.
    pub(super) fn map_tag_now(&self) -> Option<u8> {
        let mut t = self.map_tag.load(Ordering::Relaxed);
        if t == 0 {
            let mine = if self.source.has_page_tags() {
                match NEXT_TAG.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n <= MAX_TAG).then_some(n + 1)
                }) {
                    Ok(n) => n << 3,
                    Err(_) => NO_TAG,
                }
            } else {
                NO_TAG
            };
            t = match self
                .map_tag
                .compare_exchange(0, mine, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => mine,
                Err(cur) => cur,
            };
        }
        (t != NO_TAG).then_some(t)
    }

    /// This cache's page-map tag (`1..=31`: the high 5 bits of its slabs'
    /// map bytes, [`PageAlloc::page_tag`](buddy::PageAlloc::page_tag)),
    /// claimed now if it has none yet; `None` when its source keeps no
    /// map or every tag is taken. A front end that frees by address alone
    /// (mm-malloc's `free`) maps tags back to its caches with it.
    ///
    /// ```
    /// # #[cfg(not(miri))] {
    /// use buddy::PageAlloc;
    /// use local_lock::std_platform::PerThread;
    /// use slub::{GlobalPages, KmemCache, SlabFlags};
    /// let c = KmemCache::<GlobalPages, PerThread>::create(
    ///     "tagged", 64, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
    /// let t = c.claim_map_tag().unwrap();
    /// let p = c.alloc().unwrap();
    /// assert_eq!(GlobalPages.page_tag(p.as_ptr()) >> 3, t);
    /// // SAFETY: ours, freed once.
    /// unsafe { c.free(p) };
    /// # }
    /// ```
    pub fn claim_map_tag(&self) -> Option<u8> {
        self.map_tag_now().map(|t| t >> 3)
    }

    /// Gives this cache page-map tag `t` (`1..=31`) instead of the next
    /// free one, before its first slab: for a front end whose caches
    /// share one source and which finds a cache from its tag by
    /// arithmetic (mm-malloc's `free`: cache `t - 1`), without a table
    /// load on the way. `false` (nothing changed) when the cache has a
    /// tag (or its "none") already, `t` is out of range, or the source
    /// keeps no map.
    ///
    /// # Safety
    ///
    /// No other cache whose slabs come from the same source has or will
    /// have tag `t`: the caller owns the tags of its source (it gives
    /// every cache on that source its tag this way, each a different
    /// one; caches on other sources, with other maps, may share `t`).
    pub unsafe fn set_map_tag(&self, t: u8) -> bool {
        if t == 0 || t > MAX_TAG || !self.source.has_page_tags() {
            return false;
        }
        self.map_tag
            .compare_exchange(0, t << 3, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Tags the pages of a new slab (headed at `base`, of `order`).
    pub(super) fn map_slab(&self, base: NonNull<u8>, order: Order) {
        if order.get() <= MAX_MAP_ORDER {
            if let Some(t) = self.map_tag_now() {
                if self.mcheck.pages.load(Ordering::Acquire) == 0 {
                    self.fill_map_check(t);
                }
                self.source.set_page_tags(base, order, t | order.get());
            }
        }
    }

    /// Clears the tags of a slab about to be discarded.
    pub(super) fn unmap_slab(&self, base: NonNull<u8>, order: Order) {
        let t = self.map_tag.load(Ordering::Relaxed);
        if t != 0 && t != NO_TAG {
            self.source.set_page_tags(base, order, 0);
        }
    }

    /// This cache's map tag (`tag << 3`), if it has one (claimed at its
    /// first slab, when its source keeps a map).
    #[inline(always)]
    pub(super) fn map_tag_set(&self) -> Option<u8> {
        let t = self.map_tag.load(Ordering::Relaxed);
        // 0: not claimed yet; NO_TAG: none; tags are multiples of 8.
        (t > NO_TAG).then_some(t)
    }

    /// The slab of `ptr` by the page map: its first byte and object count,
    /// if the map names this cache and `ptr` is an object boundary in it;
    /// `None` sends the caller to the descriptors.
    #[inline(always)]
    pub(super) fn slab_by_map(&self, ptr: NonNull<u8>) -> Option<(usize, usize)> {
        self.slab_by_map_addr(ptr.as_ptr().expose_provenance(), self.map_tag_set()?)
    }

    /// [`slab_by_map`](Self::slab_by_map) of an address (null or any
    /// other address the map does not name gives `None`) for the cache's
    /// tag `t` ([`map_tag_set`](Self::map_tag_set)).
    #[inline(always)]
    pub(super) fn slab_by_map_addr(&self, a: usize, t: u8) -> Option<(usize, usize)> {
        let b = self
            .source
            .page_tag(core::ptr::with_exposed_provenance::<u8>(a));
        if b & !MAX_MAP_ORDER != t {
            return None;
        }
        let order = Order::new(b & MAX_MAP_ORDER)?;
        let bytes = self.geometry.page_size << order.get();
        let base = a & !(bytes - 1);
        let objects = self.objects_of(order);
        self.obj_index(a - base, objects)?;
        Some((base, objects))
    }

    /// [`validate_range`](Self::validate_range) with the page map first.
    #[inline(always)]
    pub(super) fn validate_range_mapped(
        &self,
        ptr: NonNull<u8>,
    ) -> Result<(usize, usize), FreeError> {
        match self.slab_by_map(ptr) {
            Some(r) => Ok(r),
            None => self.validate_range(ptr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{boundary_below, stride_multiplier};

    /// The divisibility test agrees with `%` and `/` for every offset of
    /// slabs up to 32 KiB (the inline check's orders), and beyond, for
    /// every stride a cache can have (8-byte steps, the odd ones of debug
    /// layouts, powers of two) and offsets up to `u32::MAX`.
    #[test]
    fn boundary_below_is_exactly_the_object_starts_below_the_span() {
        let strides = (8..=8192u32)
            .step_by(8)
            .chain([24, 40, 72, 100, 3000, 4104, 12345, 65536]);
        for d in strides {
            let div = stride_multiplier(u64::from(d));
            for slab in [4096u32, 8192, 16384, 32768] {
                if d > slab {
                    continue;
                }
                let span = slab / d * d;
                let offs = if cfg!(miri) { 0..64 } else { 0..slab };
                for off in offs.chain([u32::MAX, u32::MAX - 1, u32::MAX / d * d, slab + d]) {
                    let want = off % d == 0 && off / d < span / d;
                    assert_eq!(
                        boundary_below(off, div, span),
                        want,
                        "stride {d} slab {slab} off {off}"
                    );
                }
            }
        }
    }
}
