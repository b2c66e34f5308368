//! `GlobalBitmap`'s large blocks (above [`MAX_ALLOC_SIZE`](crate::MAX_ALLOC_SIZE)
//! or aligned beyond a page): private anonymous mappings, and the record of
//! the live ones.
//!
//! * **Commit.** Blocks are mapped without `MAP_NORESERVE`, so the OS's
//!   overcommit accounting sees them: a request the machine cannot back
//!   (1 TiB on a machine with 23 GiB and the default heuristic) is refused
//!   by `mmap` and `alloc` returns null, as glibc's `malloc` does, instead
//!   of a mapping the process is killed for touching.
//! * **Record.** Every live block's address and mapped length sit in an
//!   open-addressing hash table (linear probing, tombstones) in memory of
//!   its own from `mmap` (never the global allocator, which may be this
//!   one), grown by doubling under the record's spin lock. A `dealloc` of
//!   an address that is not a live large block (a small block freed with a
//!   large layout, a second free, a foreign pointer) or with a size that
//!   does not match the block is reported (allocator, address, what was
//!   wrong) and aborts before anything is unmapped.

use core::ptr::{null_mut, NonNull};

use local_lock::os;
use local_lock::std_platform::die;
use local_lock::sync::{SpinLock, SpinLockGuard};

use crate::types::PAGE_SIZE;

/// Key of a never used table entry.
const EMPTY: usize = 0;
/// Key of a removed entry (probing goes on past it). Never a block
/// address: blocks are page-aligned.
const TOMB: usize = 1;
/// Entries of the first table (one page).
const FIRST_CAP: usize = PAGE_SIZE / core::mem::size_of::<Entry>();

/// One live block: its address and mapped length.
#[derive(Clone, Copy)]
#[repr(C)]
struct Entry {
    addr: usize,
    len: usize,
}

/// The table (under the record's lock).
struct Table {
    /// `cap` entries in a mapping of our own, or null before first use.
    slots: *mut Entry,
    /// A power of two (0 before first use).
    cap: usize,
    /// Live entries.
    live: usize,
    /// Tombstones.
    tombs: usize,
}

// SAFETY: the table's mapping belongs to the record and is only reached
// under its lock.
unsafe impl Send for Table {}

/// What a `dealloc` found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LargeError {
    /// The address is not a live large block of this allocator.
    NotLive,
    /// The block is live, but the layout's size maps to another length.
    WrongSize {
        /// The block's mapped length.
        mapped: usize,
    },
}

/// The live large blocks of one `GlobalBitmap`.
pub(crate) struct LargeBlocks {
    table: SpinLock<Table>,
}

#[inline(always)]
fn hash(addr: usize, cap: usize) -> usize {
    ((addr >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7) & (cap - 1)
}

/// A fresh anonymous read-write mapping of `len` bytes aligned to `align`,
/// or null.
fn map(len: usize, align: usize) -> *mut u8 {
    os::map_aligned(len, align, libc::PROT_READ | libc::PROT_WRITE, 0)
}

/// Bytes mapped for a large block of `size` bytes (whole pages).
#[inline]
pub(crate) fn mapped_len(size: usize) -> Option<usize> {
    size.max(1).checked_next_multiple_of(PAGE_SIZE)
}

impl Table {
    /// The slot holding `addr`, if live.
    fn find(&self, addr: usize) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = hash(addr, self.cap);
        for _ in 0..self.cap {
            // SAFETY: `i < cap`, the table's length.
            let e = unsafe { *self.slots.add(i) };
            if e.addr == addr {
                return Some(i);
            }
            if e.addr == EMPTY {
                return None;
            }
            i = (i + 1) & (self.cap - 1);
        }
        None
    }

    /// Inserts into a table known to have a free slot.
    fn put(&mut self, e: Entry) {
        let mut i = hash(e.addr, self.cap);
        loop {
            // SAFETY: `i < cap`.
            let s = unsafe { &mut *self.slots.add(i) };
            if s.addr == EMPTY || s.addr == TOMB {
                if s.addr == TOMB {
                    self.tombs -= 1;
                }
                *s = e;
                self.live += 1;
                return;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    /// Makes room for one more entry (load at most 3/4, counting
    /// tombstones); false if the OS refuses a bigger table.
    fn reserve_one(&mut self) -> bool {
        if self.cap != 0 && (self.live + self.tombs + 1) * 4 <= self.cap * 3 {
            return true;
        }
        let cap = if self.cap == 0 {
            FIRST_CAP
        } else if (self.live + 1) * 2 <= self.cap {
            self.cap // mostly tombstones: rehash at the same size
        } else {
            self.cap * 2
        };
        let slots = map(cap * core::mem::size_of::<Entry>(), PAGE_SIZE).cast::<Entry>();
        if slots.is_null() {
            return false;
        }
        let old = core::mem::replace(
            self,
            Table {
                slots,
                cap,
                live: 0,
                tombs: 0,
            },
        );
        for i in 0..old.cap {
            // SAFETY: `i < old.cap`, the old table's length.
            let e = unsafe { *old.slots.add(i) };
            if e.addr != EMPTY && e.addr != TOMB {
                self.put(e);
            }
        }
        if old.cap != 0 {
            // SAFETY: the old table's own mapping, no longer referenced.
            unsafe { os::unmap(old.slots.cast(), old.cap * core::mem::size_of::<Entry>()) };
        }
        true
    }
}

impl LargeBlocks {
    /// An empty record (the table is mapped on first use).
    pub(crate) const fn new() -> Self {
        LargeBlocks {
            table: SpinLock::new(Table {
                slots: null_mut(),
                cap: 0,
                live: 0,
                tombs: 0,
            }),
        }
    }

    fn lock(&self) -> SpinLockGuard<'_, Table> {
        // Contended: a short spin, then a futex sleep (see `SpinLock`).
        self.table.lock()
    }

    /// Live large blocks.
    pub(crate) fn live(&self) -> usize {
        self.lock().live
    }

    /// A block of `size` bytes aligned to `align` (a power of two), mapped
    /// and recorded; null if the OS refuses (or the record cannot grow).
    pub(crate) fn alloc(&self, size: usize, align: usize) -> *mut u8 {
        let align = align.max(PAGE_SIZE);
        let Some(len) = mapped_len(size) else {
            return null_mut();
        };
        let block = map(len, align);
        if block.is_null() {
            return block;
        }
        let mut t = self.lock();
        if !t.reserve_one() {
            drop(t);
            // SAFETY: our block, never handed out.
            unsafe { os::unmap(block, len) };
            return null_mut();
        }
        t.put(Entry {
            addr: block as usize,
            len,
        });
        block
    }

    /// Unmaps the live block at `ptr` whose layout had `size` bytes, or
    /// says what is wrong (nothing is changed then).
    pub(crate) fn free(&self, ptr: NonNull<u8>, size: usize) -> Result<(), LargeError> {
        let addr = ptr.as_ptr() as usize;
        let mut t = self.lock();
        let i = t.find(addr).ok_or(LargeError::NotLive)?;
        // SAFETY: `find` returned a slot index below `cap`.
        let e = unsafe { &mut *t.slots.add(i) };
        if mapped_len(size) != Some(e.len) {
            return Err(LargeError::WrongSize { mapped: e.len });
        }
        let len = e.len;
        e.addr = TOMB;
        t.live -= 1;
        t.tombs += 1;
        drop(t);
        // SAFETY: a live block of ours of this length, now unrecorded: no
        // other free can reach it.
        unsafe { os::unmap(ptr.as_ptr(), len) };
        Ok(())
    }

    /// Takes the record's lock for `fork` (see `crate::fork`).
    pub(crate) fn fork_lock(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases the lock taken by [`fork_lock`](Self::fork_lock).
    ///
    /// # Safety
    ///
    /// The lock is held by a `fork_lock` of this thread (or of the thread
    /// that forked this child).
    pub(crate) unsafe fn fork_unlock(&self) {
        // SAFETY: caller's contract.
        unsafe { self.table.force_unlock() };
    }
}

impl Drop for LargeBlocks {
    /// Unmaps the table (live blocks belong to their holders).
    fn drop(&mut self) {
        let t = self.table.get_mut();
        if t.cap != 0 {
            // SAFETY: the table's own mapping; `&mut self` excludes users.
            unsafe { os::unmap(t.slots.cast(), t.cap * core::mem::size_of::<Entry>()) };
        }
    }
}

/// Reports a bad large `dealloc` without allocating, then aborts.
#[cold]
#[inline(never)]
pub(crate) fn bad_large_free(ptr: *mut u8, size: usize, align: usize, e: LargeError) -> ! {
    match e {
        LargeError::NotLive => die(format_args!(
            "GlobalBitmap: dealloc({ptr:p}, size {size}, align {align}): not a live large block \
             of GlobalBitmap (never mapped by it, or already freed); nothing unmapped"
        )),
        LargeError::WrongSize { mapped } => die(format_args!(
            "GlobalBitmap: dealloc({ptr:p}, size {size}, align {align}): the large block there \
             is a mapping of {mapped} bytes, not of this size; nothing unmapped"
        )),
    }
}
