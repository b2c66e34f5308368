//! Vocabulary: the size constants, the area handle [`PcpuPtr`] and the
//! request flags [`AllocFlags`].

use core::fmt;
use core::ops::{BitOr, BitOrAssign};
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
/// every unit through [`PcpuAllocator::per_cpu_ptr`](crate::PcpuAllocator::per_cpu_ptr). Only the allocator
/// makes them; using one after freeing it is detected only as far as the
/// maps can tell (the area may have been handed out again).
///
/// ```
/// use core::ptr::NonNull;
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PcpuPtr};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
/// let p: PcpuPtr = a.alloc(16, 8).unwrap();
/// assert_eq!(a.per_cpu_ptr(p, 0), p.as_ptr(), "the handle is unit 0's copy");
/// assert_eq!(a.per_cpu_ptr(p, 1).as_ptr() as usize, p.addr() + a.unit_offset(1));
/// // Kept as an integer and turned back into a handle.
/// let q = PcpuPtr::from_raw(NonNull::new(p.addr() as *mut u8).unwrap());
/// assert_eq!(q, p);
/// assert_eq!(a.size_of(q), Ok(16));
/// a.free(q);
/// ```
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

/// Flags of a request (the kernel derives them from `gfp_t` and the
/// `reserved` argument of `pcpu_alloc`). Combine them with `|`; the empty
/// set is [`KERNEL`](Self::KERNEL).
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{AllocFlags, Config, HeapSource, PcpuAllocator, PcpuError};
///
/// let mut f = AllocFlags::ATOMIC | AllocFlags::RESERVED;
/// assert!(f.contains(AllocFlags::ATOMIC) && f.contains(AllocFlags::RESERVED));
/// f.set(AllocFlags::ATOMIC, false);
/// assert_eq!(f, AllocFlags::RESERVED);
/// assert_eq!(format!("{:?}", AllocFlags::default()), "AllocFlags(KERNEL)");
/// // A first chunk with 256 reserved bytes: reserved requests are served there.
/// let cfg = Config::new(64 << 10).units(2).first_chunk(0, 256, 8192);
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), cfg).unwrap();
/// let r = a.alloc_with(200, 8, AllocFlags::RESERVED).unwrap();
/// assert_eq!(a.alloc_with(200, 8, AllocFlags::RESERVED), Err(PcpuError::ReservedExhausted));
/// a.free(r);
/// // Atomic requests use populated pages (the first chunk's are).
/// let n = a.alloc_with(64, 8, AllocFlags::ATOMIC).unwrap();
/// a.free(n);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AllocFlags(u8);

impl AllocFlags {
    /// A blocking (`GFP_KERNEL`) request: may create a chunk and populate
    /// pages (no flag set).
    pub const KERNEL: AllocFlags = AllocFlags(0);
    /// Never sleep, populate or create chunks; use populated pages only
    /// (`GFP_ATOMIC`/`GFP_NOWAIT`). Requests made in interrupt context are
    /// atomic whatever the flags say.
    pub const ATOMIC: AllocFlags = AllocFlags(1 << 0);
    /// Serve from the reserved chunk (`__alloc_reserved_percpu`); without a
    /// reserved chunk the request is served normally, as in the kernel.
    /// Alone: a reserved, blocking request.
    pub const RESERVED: AllocFlags = AllocFlags(1 << 1);
    /// A failed atomic attempt is not counted as an atomic failure and does
    /// not ask the balance work for more pages (`GlobalBitmap`'s first,
    /// opportunistic attempt). Not for outside callers.
    pub(crate) const QUIET: AllocFlags = AllocFlags(1 << 2);

    /// Whether all of `other`'s flags are set.
    #[inline(always)]
    pub const fn contains(self, other: AllocFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of flags.
    #[inline(always)]
    pub const fn union(self, other: AllocFlags) -> AllocFlags {
        AllocFlags(self.0 | other.0)
    }

    /// Sets `other`'s flags if `value`, else clears them (as the
    /// `bitflags` crate's `set`).
    #[inline(always)]
    pub fn set(&mut self, other: AllocFlags, value: bool) {
        if value {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
}

impl BitOr for AllocFlags {
    type Output = AllocFlags;
    #[inline(always)]
    fn bitor(self, rhs: AllocFlags) -> AllocFlags {
        self.union(rhs)
    }
}

impl BitOrAssign for AllocFlags {
    #[inline(always)]
    fn bitor_assign(&mut self, rhs: AllocFlags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for AllocFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("AllocFlags(KERNEL)");
        }
        f.write_str("AllocFlags(")?;
        let mut sep = "";
        for (flag, name) in [
            (AllocFlags::ATOMIC, "ATOMIC"),
            (AllocFlags::RESERVED, "RESERVED"),
            (AllocFlags::QUIET, "QUIET"),
        ] {
            if self.contains(flag) {
                write!(f, "{sep}{name}")?;
                sep = " | ";
            }
        }
        f.write_str(")")
    }
}
