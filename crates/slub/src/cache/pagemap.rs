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
use core::sync::atomic::{AtomicU8, Ordering};

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

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
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

    /// Tags the pages of a new slab (headed at `base`, of `order`).
    pub(super) fn map_slab(&self, base: NonNull<u8>, order: Order) {
        if order.get() <= MAX_MAP_ORDER {
            if let Some(t) = self.map_tag_now() {
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
