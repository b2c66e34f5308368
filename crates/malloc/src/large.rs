//! Blocks above the largest class: kmalloc's large path (`kmalloc_large`:
//! a block of whole pages from [`pages`](crate::pages::pages) tagged `TAG_LARGE`; beyond
//! the largest order, a recorded direct mapping), done here over the page
//! source directly, as slub's `Kmalloc` does it, so the library carries no
//! `Kmalloc` whose 13 caches would sit unused in its image (what a process
//! maps and faults in at start is its fixed cost in RSS).

use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use crate::pages::{heap, pages};
use buddy::{AllocFlags, Order, PageAlloc};
use slub::slab::TAG_LARGE;

/// `get_order`: the smallest order whose block holds `bytes`.
fn order_for(bytes: usize, page_size: usize) -> usize {
    let pages = bytes.div_ceil(page_size).max(1);
    pages.next_power_of_two().trailing_zeros() as usize
}

/// Requests of at least this many bytes are direct mappings (exact page
/// counts, unmapped when freed: glibc's `M_MMAP_THRESHOLD`) instead of
/// power-of-two blocks of the buddy; `MM_MMAP_THRESHOLD` sets it.
pub static MMAP_THRESHOLD: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(DEFAULT_MMAP_THRESHOLD);

/// [`MMAP_THRESHOLD`]'s default: 256 KiB.
pub const DEFAULT_MMAP_THRESHOLD: usize = 256 << 10;

#[inline]
fn mmap_threshold() -> usize {
    MMAP_THRESHOLD.load(Ordering::Relaxed)
}

/// `kmalloc_large(size, align)`: null when memory runs out. `zeroed`: a
/// block the page allocator knows to be zero is not cleared again.
pub fn alloc(size: usize, align: usize, zeroed: bool) -> *mut u8 {
    let src = pages();
    if size >= mmap_threshold() && align <= src.page_size() {
        if let Some(p) = PageAlloc::alloc_direct(heap(), size, align) {
            return p.as_ptr();
        }
    }
    let order = order_for(size.max(align), src.page_size());
    let Some(order) = u8::try_from(order)
        .ok()
        .and_then(Order::new)
        .filter(|o| *o <= src.max_order())
    else {
        // Fresh mappings: zero.
        return PageAlloc::alloc_direct(heap(), size, align)
            .map_or(core::ptr::null_mut(), NonNull::as_ptr);
    };
    let flags = if zeroed {
        AllocFlags::ZEROED
    } else {
        AllocFlags::NONE
    };
    let Some(b) = src.alloc_block(order, flags) else {
        return core::ptr::null_mut();
    };
    b.owner.data().store(size, Ordering::Relaxed);
    b.owner.tag().store(TAG_LARGE, Ordering::Relaxed);
    b.page.ptr.as_ptr()
}

/// Frees a large block or a direct mapping at `p` (not a slab object);
/// what is wrong with `p` otherwise.
///
/// # Safety
///
/// `p` is a live allocation of this library, not used afterwards.
pub unsafe fn free(p: NonNull<u8>) -> Result<(), &'static str> {
    let src = pages();
    let Some(b) = src.block_of(p.as_ptr()) else {
        // SAFETY: the caller's contract: if it is a direct mapping, it is
        // one of ours, given back.
        return match unsafe { heap().free_direct(p.as_ptr()) } {
            true => Ok(()),
            false => Err("not allocated by this library"),
        };
    };
    if b.owner.tag().load(Ordering::Relaxed) != TAG_LARGE {
        return Err("not the start of an allocation");
    }
    if b.head != p {
        return Err("inside a large block");
    }
    b.owner.tag().store(0, Ordering::Relaxed);
    // SAFETY: a large block we handed out, now returned.
    unsafe { src.free_block(b.head, b.order) };
    Ok(())
}

/// The usable size of a large block or a direct mapping starting at `p`.
pub fn size(p: *mut u8) -> Result<usize, &'static str> {
    let src = pages();
    match src.block_of(p) {
        Some(b) if b.owner.tag().load(Ordering::Relaxed) == TAG_LARGE && b.head.as_ptr() == p => {
            Ok(src.page_size() << b.order.get())
        }
        Some(_) => Err("not the start of an allocation"),
        None => heap().direct_size(p).ok_or("not allocated by this library"),
    }
}

/// `realloc` of a direct mapping to `size` bytes, at least the mmap
/// threshold: the mapping is resized with `mremap` (moved, not copied, as
/// glibc's `realloc` does with its mmapped chunks), so a buffer that grows
/// by doubling keeps only its touched pages resident instead of the old
/// and the new block at once (measured: sqlite3's sorter, 16 -> 32 MiB,
/// peak RSS 69.0 -> 60.8 MB, glibc 51.9). `None`: `p` is not a direct
/// mapping, `size` is below the threshold, or the OS refused; the caller
/// copies.
///
/// # Safety
///
/// `p` is a live allocation of this library; when `Some` is returned, only
/// the returned address is used afterwards.
pub unsafe fn remap(p: *mut u8, size: usize) -> Option<*mut u8> {
    let src = pages();
    if size < mmap_threshold() || src.block_of(p).is_some() {
        return None;
    }
    // SAFETY: forwarded contract (a direct mapping of ours, if one).
    unsafe { heap().remap_direct(p, size) }.map(NonNull::as_ptr)
}
