//! Vocabulary: the size constants, the area handle [`PcpuPtr`] and the
//! request flags.

use core::ptr::NonNull;

/// Page size (= metadata block size).
pub const PAGE_SIZE: usize = 4096;
/// `PCPU_MIN_ALLOC_SIZE`: bytes per bitmap bit, the smallest allocation and
/// alignment.
pub const MIN_ALLOC_SIZE: usize = 4;
/// `PCPU_BITMAP_BLOCK_BITS`: bits per metadata block (one page).
pub const BLOCK_BITS: usize = PAGE_SIZE / MIN_ALLOC_SIZE;
/// `PCPU_MIN_UNIT_SIZE`: the smallest unit, 32 KiB.
pub const MIN_UNIT_SIZE: usize = 32 << 10;
/// The largest request (the kernel's limit is the minimum unit size).
pub const MAX_ALLOC_SIZE: usize = MIN_UNIT_SIZE;
/// The largest unit this crate accepts (1 GiB).
pub const MAX_UNIT_SIZE: usize = 1 << 30;
/// `PCPU_SLOT_BASE_SHIFT`.
pub const SLOT_BASE_SHIFT: usize = 5;
/// `PCPU_SLOT_FAIL_THRESHOLD`: chunks failing in slots below this are
/// demoted to slot 0.
pub const SLOT_FAIL_THRESHOLD: usize = 3;
/// `PCPU_EMPTY_POP_PAGES_LOW`: below this many empty populated pages an
/// allocation schedules the balance work.
pub const EMPTY_POP_PAGES_LOW: isize = 2;
/// `PCPU_EMPTY_POP_PAGES_HIGH`: the balance work populates up to this many.
pub const EMPTY_POP_PAGES_HIGH: isize = 4;

/// A percpu area: unit 0's address of it (`void __percpu *`). Valid in
/// every unit through [`PcpuAllocator::per_cpu_ptr`]. Only the allocator
/// makes them; using one after freeing it is detected only as far as the
/// maps can tell (the area may have been handed out again).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PcpuPtr(pub(crate) NonNull<u8>);

// SAFETY: a handle; dereferencing what it designates is unsafe anyway.
unsafe impl Send for PcpuPtr {}
// SAFETY: as above.
unsafe impl Sync for PcpuPtr {}

impl PcpuPtr {
    /// Unit 0's copy of the area.
    #[inline(always)]
    pub fn as_ptr(self) -> NonNull<u8> {
        self.0
    }

    /// The address of unit 0's copy.
    #[inline(always)]
    pub fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// A handle from a raw pointer (e.g. one kept as an integer by a
    /// kernel). Freeing a pointer that is not a live allocation is
    /// detected and refused (`try_free`) or reported (`free`).
    #[inline(always)]
    pub fn from_raw(p: NonNull<u8>) -> Self {
        PcpuPtr(p)
    }
}

impl core::fmt::Debug for PcpuPtr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PcpuPtr({:p})", self.0)
    }
}
