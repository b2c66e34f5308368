//! `GlobalBuddy::remap_direct`: resizing a recorded direct mapping in
//! place or by moving its pages (`mremap`), as glibc's `realloc` resizes
//! its mmapped chunks (`mremap_chunk`) instead of copying them.

use super::*;

impl GlobalBuddy {
    /// Resizes the live direct mapping that starts at `ptr` to `size`
    /// bytes (rounded up to pages) with `mremap(MREMAP_MAYMOVE)`: the
    /// kernel moves the page tables, so nothing is copied and only the
    /// pages already touched stay resident (a copy into a fresh mapping
    /// keeps the old and the new block resident at once: a sorter growing
    /// its buffer 16 -> 32 MiB costs 32 MiB more, not 16). The record
    /// follows the mapping. Returns the (possibly moved) mapping, page
    /// aligned; `None` if `ptr` is not a live direct mapping of this
    /// allocator, or if the OS refused (the mapping is then unchanged).
    ///
    /// # Safety
    ///
    /// If `ptr` is such a mapping, the caller holds it; when `Some` is
    /// returned it uses only the returned address, within `size` bytes.
    #[cold]
    pub unsafe fn remap_direct(&self, ptr: *mut u8, size: usize) -> Option<NonNull<u8>> {
        let new_len = checked_align_up(size.max(1), os::page_size())?;
        let a = ptr as usize;
        // Held across `mremap`, so the mapping is never unrecorded.
        let mut t = self.lock_direct();
        let old_len = t.get(a)?;
        if new_len == old_len {
            return NonNull::new(ptr);
        }
        // Room for the new record first: once moved, it must be recorded.
        if (t.used + 1) * 2 > t.cap && !t.rehash() {
            return None;
        }
        // SAFETY: our own live direct mapping of `old_len` bytes (the
        // record), held by the caller; the kernel moves it whole or fails
        // and leaves it alone.
        let q = unsafe { libc::mremap(ptr.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
        if q == libc::MAP_FAILED {
            return None;
        }
        t.remove(a);
        let inserted = t.insert(q as usize, new_len);
        debug_assert!(inserted, "room was made above");
        NonNull::new(q.cast())
    }
}
