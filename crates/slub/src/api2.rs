//! [`allocator_api2::alloc::Allocator`] for the caches (cargo feature
//! `allocator-api2`): a `KmemCache`, a `Kmalloc` or the `GlobalSlub` can
//! back an `allocator_api2::vec::Vec` or `boxed::Box` on stable Rust.
//!
//! - `&KmemCache` serves one object size: a layout that does not fit its
//!   objects (size or alignment) is an [`AllocError`], and `grow`/`shrink`
//!   stay in place while the new layout fits the object (`krealloc` within
//!   a class).
//! - `&Kmalloc` serves any layout through its classes and large blocks;
//!   `grow`/`shrink` stay in place while the new size fits the usable size
//!   (`ksize`) and the alignment is kept, as `krealloc` does;
//!   `allocate_zeroed` is `kzalloc` (large blocks the page allocator knows
//!   to be zero are not cleared again).
//! - `&GlobalSlub` is its [`GlobalAlloc`](core::alloc::GlobalAlloc) front
//!   end (kmalloc, then direct mappings for what the heap cannot hold),
//!   through `local_lock::allocator_via_global_alloc!`.
//!
//! ```
//! use allocator_api2::vec::Vec;
//! static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
//! let mut v: Vec<u32, _> = Vec::new_in(&HEAP);
//! v.extend(0..10_000);
//! assert_eq!(v[9_999], 9_999);
//! ```
//!
//! Zero-sized layouts get a dangling, aligned pointer and are never passed
//! to the caches (the `Allocator` contract allows it; nothing is freed).
//!
//! With the `nightly` feature (nightly Rust only), each of these types also
//! implements the standard library's unstable `core::alloc::Allocator`,
//! forwarding to the impls here, so `std`'s `Vec::new_in(&cache)` and
//! `Box::new_in` work too (`tests/nightly.rs`).

use core::alloc::Layout;
use core::ptr::NonNull;

use local_lock::api2::{dangling, AllocError, Allocator};
use local_lock::Platform;

use crate::cache::KmemCache;
use crate::source::SlabSource;

/// A resize that moves: a new block for `new`, the first `min(old, new)`
/// bytes copied, `ptr` freed.
///
/// # Safety
///
/// `ptr` was allocated by `a` with `old`, and is not used afterwards.
unsafe fn move_block<A: Allocator>(
    a: &A,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
) -> Result<NonNull<[u8]>, AllocError> {
    let n = a.allocate(new)?;
    // SAFETY: both blocks are valid for the copied length and distinct
    // (`n` is fresh); `ptr` is freed once (the caller's contract).
    unsafe {
        core::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            n.cast::<u8>().as_ptr(),
            old.size().min(new.size()),
        );
        a.deallocate(ptr, old);
    }
    Ok(n)
}

/// The allocation `p` of `len` usable bytes as a slice pointer.
#[inline]
fn slice(p: NonNull<u8>, len: usize) -> NonNull<[u8]> {
    NonNull::slice_from_raw_parts(p, len)
}

impl<S: SlabSource, P: Platform, const N: usize> KmemCache<S, P, N> {
    /// Whether an object of this cache can hold `layout`.
    #[inline]
    fn fits(&self, layout: Layout) -> bool {
        layout.size() <= self.object_size() && layout.align() <= self.object_align()
    }
}

/// One object per allocation: layouts the objects cannot hold are refused.
///
/// ```
/// use allocator_api2::{boxed::Box, vec::Vec};
/// use local_lock::std_platform::PerThread;
/// use slub::{GlobalPages, KmemCache, SlabFlags};
///
/// // 64-byte objects: a Vec of up to eight u64s lives in one.
/// let cache = KmemCache::<_, _>::create("u64x8", 64, 8, SlabFlags::HARDENED, GlobalPages, PerThread)
///     .unwrap();
/// let mut v: Vec<u64, _> = Vec::with_capacity_in(8, &cache);
/// v.extend(1..=8);
/// assert_eq!(v.iter().sum::<u64>(), 36);
/// // Growing past the object is refused rather than served elsewhere.
/// assert!(v.try_reserve(1).is_err());
/// let b = Box::new_in([7u32; 4], &cache);
/// assert_eq!(b[3], 7);
/// ```
// SAFETY: `allocate` hands out a live object of at least `layout.size()`
// bytes aligned to `layout.align()` (or a dangling pointer for size 0),
// each object once until it is deallocated; `deallocate` frees only what
// `allocate` gave (the caller's contract); copies of `&KmemCache` share the
// same cache, so memory from one can be freed through another.
unsafe impl<S: SlabSource, P: Platform, const N: usize> Allocator for &KmemCache<S, P, N> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        if !self.fits(layout) {
            return Err(AllocError);
        }
        let p = self.alloc().ok_or(AllocError)?;
        Ok(slice(p, self.object_size()))
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: an object `allocate` returned, freed once (the
            // caller's contract).
            unsafe { self.free(ptr) }
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() != 0 && self.fits(new) && ptr.as_ptr().addr().is_multiple_of(new.align()) {
            // In place: the object already holds the new size.
            return Ok(slice(ptr, self.object_size()));
        }
        if !self.fits(new) {
            return Err(AllocError);
        }
        // SAFETY: forwarded (the caller's contract).
        unsafe { move_block(self, ptr, old, new) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if new.size() == 0 {
            // SAFETY: forwarded (the caller's contract).
            unsafe { self.deallocate(ptr, old) };
            return Ok(dangling(new));
        }
        if ptr.as_ptr().addr().is_multiple_of(new.align()) {
            return Ok(slice(ptr, self.object_size()));
        }
        Err(AllocError)
    }
}

#[cfg(not(loom))]
mod kmalloc_impl {
    use super::*;
    use crate::kmalloc::{Kmalloc, ZERO_SIZE_PTR};

    /// Any layout: a kmalloc class, or a large block of pages.
    ///
    /// ```
    /// use allocator_api2::vec::Vec;
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let km = HEAP.kmalloc();
    /// let mut v: Vec<u8, _> = Vec::new_in(km);
    /// v.extend_from_slice(b"kmalloc-backed");
    /// // Grows in place within its class, then moves to larger classes.
    /// for _ in 0..1000 {
    ///     v.push(b'!');
    /// }
    /// assert_eq!(&v[..7], b"kmalloc");
    /// ```
    // SAFETY: as for `&KmemCache`: `kmalloc` returns a live block of at
    // least the size with the alignment (or `None`), `kfree` frees what it
    // returned; sizes of zero never reach kmalloc (ZERO_SIZE_PTR would
    // not be aligned for every layout).
    unsafe impl<S: SlabSource + Copy, P: Platform + Copy, const N: usize> Allocator
        for &Kmalloc<S, P, N>
    {
        #[inline]
        fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
            if layout.size() == 0 {
                return Ok(dangling(layout));
            }
            let p = self
                .kmalloc(layout.size(), layout.align())
                .ok_or(AllocError)?;
            Ok(slice(p, layout.size()))
        }

        #[inline]
        fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
            if layout.size() == 0 {
                return Ok(dangling(layout));
            }
            let p = self
                .kzalloc(layout.size(), layout.align())
                .ok_or(AllocError)?;
            // Only `layout.size()` bytes are known to be zero.
            Ok(slice(p, layout.size()))
        }

        #[inline]
        unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
            if layout.size() != 0 && ptr != ZERO_SIZE_PTR {
                // SAFETY: a block `allocate` returned, freed once.
                unsafe { self.kfree(ptr.as_ptr()) }
            }
        }

        unsafe fn grow(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            if old.size() != 0 && ptr.as_ptr().addr().is_multiple_of(new.align()) {
                let usable = self.ksize(ptr.as_ptr());
                if new.size() <= usable {
                    // `krealloc` within the class or block.
                    return Ok(slice(ptr, usable));
                }
            }
            // SAFETY: forwarded (the caller's contract).
            unsafe { move_block(self, ptr, old, new) }
        }

        unsafe fn shrink(
            &self,
            ptr: NonNull<u8>,
            old: Layout,
            new: Layout,
        ) -> Result<NonNull<[u8]>, AllocError> {
            if new.size() == 0 {
                // SAFETY: forwarded.
                unsafe { self.deallocate(ptr, old) };
                return Ok(dangling(new));
            }
            if ptr.as_ptr().addr().is_multiple_of(new.align()) {
                // Kept in place, as `krealloc` keeps a smaller size.
                return Ok(slice(ptr, self.ksize(ptr.as_ptr())));
            }
            // SAFETY: forwarded (the caller's contract).
            unsafe { move_block(self, ptr, old, new) }
        }
    }
}

// `&GlobalSlub`: its `GlobalAlloc` front end (example in the module docs).
#[cfg(all(feature = "std", not(loom)))]
local_lock::allocator_via_global_alloc!(impl[] for crate::global::GlobalSlub);

/// `core::alloc::Allocator` (nightly, feature `nightly`) for a type that
/// implements `allocator_api2`'s: every method forwards (the two traits
/// have the same methods and contract).
#[cfg(feature = "nightly")]
macro_rules! forward_core_allocator {
    (impl[$($g:tt)*] for $t:ty) => {
        // SAFETY: every method is the `allocator_api2` impl of the same
        // type, whose contract is `core::alloc::Allocator`'s word for word.
        unsafe impl<$($g)*> core::alloc::Allocator for $t {
            #[inline]
            fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                <$t as Allocator>::allocate(self, layout).map_err(|_| core::alloc::AllocError)
            }

            #[inline]
            fn allocate_zeroed(
                &self,
                layout: Layout,
            ) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                <$t as Allocator>::allocate_zeroed(self, layout)
                    .map_err(|_| core::alloc::AllocError)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { <$t as Allocator>::deallocate(self, ptr, layout) }
            }

            #[inline]
            unsafe fn grow(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                // SAFETY: forwarded (the caller's contract).
                unsafe { <$t as Allocator>::grow(self, ptr, old, new) }
                    .map_err(|_| core::alloc::AllocError)
            }

            #[inline]
            unsafe fn grow_zeroed(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                // SAFETY: forwarded (the caller's contract).
                unsafe { <$t as Allocator>::grow_zeroed(self, ptr, old, new) }
                    .map_err(|_| core::alloc::AllocError)
            }

            #[inline]
            unsafe fn shrink(
                &self,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, core::alloc::AllocError> {
                // SAFETY: forwarded (the caller's contract).
                unsafe { <$t as Allocator>::shrink(self, ptr, old, new) }
                    .map_err(|_| core::alloc::AllocError)
            }
        }
    };
}

#[cfg(feature = "nightly")]
forward_core_allocator!(impl[S: SlabSource, P: Platform, const N: usize] for &KmemCache<S, P, N>);
#[cfg(all(feature = "nightly", not(loom)))]
forward_core_allocator!(impl[S: SlabSource + Copy, P: Platform + Copy, const N: usize] for &crate::kmalloc::Kmalloc<S, P, N>);
#[cfg(all(feature = "nightly", feature = "std", not(loom)))]
forward_core_allocator!(impl[] for &crate::global::GlobalSlub);
