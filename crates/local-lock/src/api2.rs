//! The `allocator_api2::alloc::Allocator` glue every crate of the family
//! shares (feature `allocator-api2`): [`allocator_via_global_alloc!`]
//! implements `Allocator` for `&T` where `T: GlobalAlloc`, which is what
//! the page allocators (`Buddy`, `GlobalBuddy`, `GlobalPcp`) and the
//! global heaps (`GlobalSlub`, `GlobalBitmap`) are: their `GlobalAlloc`
//! impls already round a layout to a block and find it again from the
//! layout.
//!
//! [`allocator_via_global_alloc!`]: crate::allocator_via_global_alloc

pub use allocator_api2;
pub use allocator_api2::alloc::{AllocError, Allocator};

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

/// A dangling pointer aligned for `layout`, as an empty slice (what a
/// zero-sized allocation gets; nothing is freed for it).
#[inline]
pub fn dangling(layout: Layout) -> NonNull<[u8]> {
    // `align` is a non-zero power of two: never null.
    let p = NonNull::new(core::ptr::without_provenance_mut::<u8>(layout.align()))
        .unwrap_or(NonNull::dangling());
    NonNull::slice_from_raw_parts(p, 0)
}

/// `Allocator::allocate` through `GlobalAlloc::alloc` (or `alloc_zeroed`).
#[inline]
pub fn allocate<A: GlobalAlloc + ?Sized>(
    a: &A,
    layout: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    if layout.size() == 0 {
        return Ok(dangling(layout));
    }
    // SAFETY: a non-zero layout.
    let p = unsafe {
        if zeroed {
            a.alloc_zeroed(layout)
        } else {
            a.alloc(layout)
        }
    };
    let p = NonNull::new(p).ok_or(AllocError)?;
    Ok(NonNull::slice_from_raw_parts(p, layout.size()))
}

/// `Allocator::deallocate` through `GlobalAlloc::dealloc`.
///
/// # Safety
///
/// `ptr` was allocated by [`allocate`] or [`resize`] on `a` with `layout`.
#[inline]
pub unsafe fn deallocate<A: GlobalAlloc + ?Sized>(a: &A, ptr: NonNull<u8>, layout: Layout) {
    if layout.size() != 0 {
        // SAFETY: the caller's contract.
        unsafe { a.dealloc(ptr.as_ptr(), layout) }
    }
}

/// `Allocator::grow`/`shrink` through `GlobalAlloc::realloc` (in place
/// when the block has room, as the heaps' `realloc` decide), or a move
/// when the alignment changes or either side is zero-sized.
///
/// # Safety
///
/// `ptr` was allocated on `a` with `old`; for a grow `new.size() >=
/// old.size()`, for a shrink `<=`.
pub unsafe fn resize<A: GlobalAlloc + ?Sized>(
    a: &A,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    if old.size() != 0 && new.size() != 0 && old.align() == new.align() {
        // SAFETY: allocated with `old`; a non-zero size, valid with the
        // same alignment (the `Allocator` caller's layouts are valid).
        let p = unsafe { a.realloc(ptr.as_ptr(), old, new.size()) };
        let p = NonNull::new(p).ok_or(AllocError)?;
        if zeroed && new.size() > old.size() {
            // SAFETY: the grown tail of the block, ours.
            unsafe {
                p.as_ptr()
                    .add(old.size())
                    .write_bytes(0, new.size() - old.size())
            };
        }
        return Ok(NonNull::slice_from_raw_parts(p, new.size()));
    }
    let n = allocate(a, new, zeroed)?;
    // SAFETY: both valid for the copied length and distinct (`n` is
    // fresh); `ptr` is freed once (the caller's contract).
    unsafe {
        core::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            n.cast::<u8>().as_ptr(),
            old.size().min(new.size()),
        );
        deallocate(a, ptr, old);
    }
    Ok(n)
}

/// Implements `allocator_api2::alloc::Allocator` for `&T` where `T:
/// GlobalAlloc` (through the functions of this module):
///
/// ```ignore
/// local_lock::allocator_via_global_alloc!(impl[] for GlobalBuddy);
/// local_lock::allocator_via_global_alloc!(impl[P: local_lock::Platform] for Buddy<P>);
/// ```
#[macro_export]
macro_rules! allocator_via_global_alloc {
    (impl[$($g:tt)*] for $t:ty) => {
        // SAFETY: every method forwards to `T`'s `GlobalAlloc`, whose
        // contract gives blocks of the layout or null, and takes back what
        // it gave with the same layout; zero-sized layouts never reach it;
        // copies of `&T` share one heap.
        unsafe impl<$($g)*> $crate::api2::Allocator for &$t {
            #[inline]
            fn allocate(
                &self,
                layout: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, $crate::api2::AllocError> {
                $crate::api2::allocate(*self, layout, false)
            }

            #[inline]
            fn allocate_zeroed(
                &self,
                layout: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, $crate::api2::AllocError> {
                $crate::api2::allocate(*self, layout, true)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: core::ptr::NonNull<u8>, layout: core::alloc::Layout) {
                // SAFETY: forwarded (the `Allocator` caller's contract).
                unsafe { $crate::api2::deallocate(*self, ptr, layout) }
            }

            unsafe fn grow(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, $crate::api2::AllocError> {
                // SAFETY: forwarded.
                unsafe { $crate::api2::resize(*self, ptr, old, new, false) }
            }

            unsafe fn grow_zeroed(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, $crate::api2::AllocError> {
                // SAFETY: forwarded.
                unsafe { $crate::api2::resize(*self, ptr, old, new, true) }
            }

            unsafe fn shrink(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, $crate::api2::AllocError> {
                // SAFETY: forwarded.
                unsafe { $crate::api2::resize(*self, ptr, old, new, false) }
            }
        }
    };
}
