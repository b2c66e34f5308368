//! Private blocks: memory for the layers' own metadata (SLUB's sheaves)
//! that is never handed to a user, before or after ([`PageAlloc::alloc_private`]).
//! A pointer a program holds, dangling or not, can never reach it, so a
//! write after free cannot forge what it holds (issue #14, item 12: the
//! sheaves' object pointers are then stored plain, without the XOR that
//! otherwise lies on the allocation's path).
//!
//! Blocks are power-of-two sizes from [`MIN_PRIVATE`] (256 bytes: a
//! sheaf of 30 entries) to [`MAX_PRIVATE`] (32 KiB), aligned to their
//! size, carved from chunks of [`CHUNK`] bytes mapped from the OS
//! (anonymous, read-write; pages never touched cost nothing) and kept on
//! per-size free lists, linked through their first word, when freed:
//! never unmapped, never given to the buddy. (SLUB asks for a page per
//! sheaf all the same, see its `private_sheaf_bytes`.) The high-water mark of the
//! metadata stays mapped, as a kernel's dedicated caches do.
//!
//! [`PageAlloc::alloc_private`]: crate::PageAlloc::alloc_private

use core::ptr::{self, NonNull};

use local_lock::os;
use local_lock::sync::SpinLock;

/// Smallest block (log2 8).
pub(crate) const MIN_PRIVATE: usize = 1 << MIN_SHIFT;
/// Largest block (log2 15).
pub(crate) const MAX_PRIVATE: usize = 1 << MAX_SHIFT;
const MIN_SHIFT: u32 = 8;
const MAX_SHIFT: u32 = 15;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
/// Bytes mapped at a time.
const CHUNK: usize = 256 << 10;

/// What the lock protects.
struct Pool {
    /// Free blocks per size class (linked through their first word).
    free: [*mut u8; CLASSES],
    /// The unused rest of the current chunk.
    next: *mut u8,
    /// Its end.
    end: *mut u8,
}

// SAFETY: the pointers name the pool's own mappings, used under its lock.
unsafe impl Send for Pool {}

/// See the module docs.
pub(crate) struct PrivatePages {
    pool: SpinLock<Pool>,
}

/// The size class of a request of `bytes` (`None` above [`MAX_PRIVATE`]).
fn class(bytes: usize) -> Option<usize> {
    if bytes > MAX_PRIVATE {
        return None;
    }
    let shift = bytes.max(MIN_PRIVATE).next_power_of_two().trailing_zeros();
    Some((shift - MIN_SHIFT) as usize)
}

impl PrivatePages {
    /// An empty pool (nothing mapped yet).
    pub(crate) const fn new() -> Self {
        PrivatePages {
            pool: SpinLock::new(Pool {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                end: ptr::null_mut(),
            }),
        }
    }

    /// A block of at least `bytes` bytes (a power of two from
    /// [`MIN_PRIVATE`]), aligned to its size, contents unspecified; `None`
    /// above [`MAX_PRIVATE`] or when the OS refuses memory.
    pub(crate) fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let c = class(bytes)?;
        let size = MIN_PRIVATE << c;
        let mut p = self.pool.lock();
        let head = p.free[c];
        if !head.is_null() {
            // SAFETY: a free block of ours: its first word links the list.
            p.free[c] = unsafe { head.cast::<*mut u8>().read() };
            return NonNull::new(head);
        }
        let mut at = p.next.map_addr(|a| a.next_multiple_of(size));
        if p.next.is_null() || at.addr() + size > p.end.addr() {
            // The rest of the chunk is left unused (less than 32 KiB). The
            // chunk needs no alignment of its own (`at` is rounded up to the
            // block's size): one `mmap`, where an aligned chunk took an
            // oversized one and two `munmap`s of its ends, three system
            // calls of every process's start (about 4 us each here).
            // SAFETY: a fresh mapping anywhere (no MAP_FIXED).
            let m = unsafe {
                os::map(
                    ptr::null_mut(),
                    CHUNK,
                    libc::PROT_READ | libc::PROT_WRITE,
                    0,
                )
            };
            if m.is_null() {
                return None;
            }
            p.end = m.wrapping_add(CHUNK);
            // (Within the chunk: CHUNK holds a block and its alignment pad.)
            const _: () = assert!(CHUNK >= 2 * MAX_PRIVATE);
            at = m.map_addr(|a| a.next_multiple_of(size));
        }
        p.next = at.wrapping_add(size);
        NonNull::new(at)
    }

    /// Takes back a block from [`alloc`](Self::alloc).
    ///
    /// # Safety
    ///
    /// `ptr` came from `alloc(bytes)` and is no longer used.
    pub(crate) unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize) {
        let Some(c) = class(bytes) else { return };
        let mut p = self.pool.lock();
        // SAFETY: the caller's block, now ours: its first word links it.
        unsafe { ptr.as_ptr().cast::<*mut u8>().write(p.free[c]) };
        p.free[c] = ptr.as_ptr();
    }

    /// Takes the lock for `fork` (a leaf: nothing is taken under it).
    pub(crate) fn lock_for_fork(&self) {
        self.pool.lock_for_fork();
    }

    /// Releases [`lock_for_fork`](Self::lock_for_fork)'s lock.
    ///
    /// # Safety
    ///
    /// Taken by `lock_for_fork` on this thread (or, in a forked child, on
    /// the thread that forked).
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: caller's contract.
        unsafe { self.pool.force_unlock() }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    /// Blocks are aligned to their size in every chunk, the first block
    /// of a fresh chunk too (chunks are mapped without an alignment of
    /// their own; the block is rounded up within the chunk): 32 KiB
    /// blocks over several chunks, each one freshly mapped at a page
    /// boundary only.
    #[test]
    fn blocks_are_aligned_to_their_size_in_fresh_chunks() {
        let pool = PrivatePages::new();
        let mut chunks = std::collections::BTreeSet::new();
        for i in 0..40 {
            // A page mapped between the pool's chunks, so that a chunk
            // mapped next is rarely placed at a 32 KiB boundary (mappings
            // go top-down, one below the other).
            // SAFETY: a fresh mapping, kept for the test's life.
            let _ = unsafe { os::map(ptr::null_mut(), 4096, libc::PROT_READ, 0) };
            for bytes in [MAX_PRIVATE, MIN_PRIVATE, 4096] {
                let p = pool.alloc(bytes).expect("memory").as_ptr();
                assert_eq!(p.addr() % bytes, 0, "block {i} of {bytes} B at {p:p}");
                // SAFETY: the block is ours, `bytes` long.
                unsafe { p.write_bytes(0xa5, bytes) };
                chunks.insert(pool.pool.lock().end.addr());
            }
        }
        assert!(chunks.len() >= 3, "several chunks: {}", chunks.len());
    }
}
