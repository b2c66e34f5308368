//! Private pages: memory for the layers' own metadata (SLUB's sheaves)
//! that is never handed to a user, before or after ([`PageAlloc::alloc_private`]).
//! A pointer a program holds, dangling or not, can never reach it, so a
//! write after free cannot forge what it holds (issue #14, item 12: the
//! sheaves' object pointers are then stored plain, without the XOR that
//! otherwise lies on the allocation's path).
//!
//! Blocks of orders `0..=MAX_PRIVATE_ORDER` are carved from chunks of
//! [`CHUNK`] bytes mapped from the OS (anonymous, read-write; pages never
//! touched cost nothing) and kept on per-order free lists, linked through
//! their first word, when freed: never unmapped, never given to the buddy.
//! The high-water mark of the metadata stays mapped, as a kernel's
//! dedicated caches do.
//!
//! [`PageAlloc::alloc_private`]: crate::PageAlloc::alloc_private

use core::ptr::{self, NonNull};

use local_lock::os;
use local_lock::sync::SpinLock;

/// Largest order served (8 pages: a sheaf of about 4,000 entries).
pub(crate) const MAX_PRIVATE_ORDER: u8 = 3;
/// Bytes mapped at a time.
const CHUNK: usize = 256 << 10;

/// What the lock protects.
struct Pool {
    /// Free blocks per order (linked through their first word).
    free: [*mut u8; MAX_PRIVATE_ORDER as usize + 1],
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

impl PrivatePages {
    /// An empty pool (nothing mapped yet).
    pub(crate) const fn new() -> Self {
        PrivatePages {
            pool: SpinLock::new(Pool {
                free: [ptr::null_mut(); MAX_PRIVATE_ORDER as usize + 1],
                next: ptr::null_mut(),
                end: ptr::null_mut(),
            }),
        }
    }

    /// A block of `2^order` pages of `page` bytes, aligned to its size,
    /// contents unspecified; `None` above [`MAX_PRIVATE_ORDER`] or when the
    /// OS refuses memory.
    pub(crate) fn alloc(&self, order: u8, page: usize) -> Option<NonNull<u8>> {
        if order > MAX_PRIVATE_ORDER {
            return None;
        }
        let bytes = page << order;
        let mut p = self.pool.lock();
        let head = p.free[order as usize];
        if !head.is_null() {
            // SAFETY: a free block of ours: its first word links the list.
            p.free[order as usize] = unsafe { head.cast::<*mut u8>().read() };
            return NonNull::new(head);
        }
        let mut at = p.next.map_addr(|a| a.next_multiple_of(bytes));
        if p.next.is_null() || at.addr() + bytes > p.end.addr() {
            // The rest of the chunk is left unused (at most 7 pages).
            let m = os::map_aligned(CHUNK, CHUNK, libc::PROT_READ | libc::PROT_WRITE, 0);
            if m.is_null() {
                return None;
            }
            p.end = m.wrapping_add(CHUNK);
            at = m;
        }
        p.next = at.wrapping_add(bytes);
        NonNull::new(at)
    }

    /// Takes back a block from [`alloc`](Self::alloc).
    ///
    /// # Safety
    ///
    /// `ptr` came from `alloc(order, ..)` and is no longer used.
    pub(crate) unsafe fn free(&self, ptr: NonNull<u8>, order: u8) {
        let mut p = self.pool.lock();
        let o = order.min(MAX_PRIVATE_ORDER) as usize;
        // SAFETY: the caller's block, now ours: its first word links it.
        unsafe { ptr.as_ptr().cast::<*mut u8>().write(p.free[o]) };
        p.free[o] = ptr.as_ptr();
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
