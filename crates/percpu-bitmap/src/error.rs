//! Errors: refused requests ([`PcpuError`]) and refused frees
//! ([`FreeError`]: the address `addr` and a [`FreeErrorKind`], the shape of
//! buddy's `FreeError`). Both implement `Display` (naming "percpu") and
//! `core::error::Error`.

use crate::types::{MAX_ALLOC_SIZE, PAGE_SIZE};

/// Why a request was refused.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PcpuError, MAX_ALLOC_SIZE};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
/// assert_eq!(a.alloc(0, 8), Err(PcpuError::ZeroSize));
/// assert_eq!(a.alloc(MAX_ALLOC_SIZE + 1, 8), Err(PcpuError::TooLarge { size: MAX_ALLOC_SIZE + 1 }));
/// assert_eq!(a.alloc(8, 3), Err(PcpuError::BadAlign { align: 3 }));
/// assert_eq!(a.alloc(8, 3).unwrap_err().to_string(), "percpu: alignment 3 is not a power of two <= 4096");
/// // A unit that is not a whole number of pages.
/// let bad = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(40_000).units(2));
/// assert!(matches!(bad, Err(PcpuError::BadConfig(_))));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcpuError {
    /// A request for 0 bytes.
    ZeroSize,
    /// More than [`MAX_ALLOC_SIZE`] bytes.
    TooLarge {
        /// The requested size.
        size: usize,
    },
    /// An alignment that is not a power of two or exceeds a page.
    BadAlign {
        /// The requested alignment.
        align: usize,
    },
    /// No space: an atomic request found no populated fit, or the page
    /// source could not provide a chunk or its pages.
    NoMemory,
    /// The reserved chunk has no fit.
    ReservedExhausted,
    /// The configuration is invalid (what is wrong).
    BadConfig(&'static str),
}

impl core::fmt::Display for PcpuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PcpuError::ZeroSize => write!(f, "percpu: zero-sized request"),
            PcpuError::TooLarge { size } => {
                write!(
                    f,
                    "percpu: request of {size} bytes exceeds {MAX_ALLOC_SIZE}"
                )
            }
            PcpuError::BadAlign { align } => {
                write!(
                    f,
                    "percpu: alignment {align} is not a power of two <= {PAGE_SIZE}"
                )
            }
            PcpuError::NoMemory => write!(f, "percpu: out of memory"),
            PcpuError::ReservedExhausted => write!(f, "percpu: reserved chunk exhausted"),
            PcpuError::BadConfig(what) => write!(f, "percpu: bad configuration: {what}"),
        }
    }
}

impl core::error::Error for PcpuError {}

/// What is wrong with a pointer handed to free.
///
/// ```
/// use core::ptr::NonNull;
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, FreeErrorKind, HeapSource, PcpuAllocator, PcpuPtr};
///
/// let cfg = Config::new(64 << 10).units(2).first_chunk(64, 0, 8192);
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), cfg).unwrap();
/// let p = a.alloc(64, 8).unwrap();
/// let inside = PcpuPtr::from_raw(NonNull::new(p.addr().wrapping_add(8) as *mut u8).unwrap());
/// assert_eq!(a.try_free(inside).unwrap_err().kind, FreeErrorKind::Interior);
/// let (stat, _) = a.static_area().unwrap();
/// assert_eq!(a.try_free(stat).unwrap_err().kind, FreeErrorKind::Static);
/// let local = 0u64;
/// let foreign = PcpuPtr::from_raw(NonNull::from(&local).cast());
/// assert_eq!(a.try_free(foreign).unwrap_err().kind, FreeErrorKind::NotPercpu);
/// assert_eq!(a.try_free(p), Ok(64));
/// assert_eq!(a.try_free(p).unwrap_err().kind, FreeErrorKind::NotAllocated);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeErrorKind {
    /// Not inside any chunk of this allocator.
    NotPercpu,
    /// Inside the first chunk's static region, which is never freed.
    Static,
    /// Not a multiple of 4 bytes into its chunk.
    Misaligned,
    /// In a chunk but outside the region it serves.
    OutOfRange,
    /// Not allocated: already freed, or never handed out.
    NotAllocated,
    /// Inside a live allocation but not at its start.
    Interior,
}

/// A refused free: the address and the reason.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, FreeError, FreeErrorKind, HeapSource, PcpuAllocator};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
/// let p = a.alloc(32, 8).unwrap();
/// a.free(p);
/// // A double free is refused, and nothing changes.
/// let e: FreeError = a.try_free(p).unwrap_err();
/// assert_eq!(e, FreeError { addr: p.addr(), kind: FreeErrorKind::NotAllocated });
/// assert!(e.to_string().starts_with(&format!("percpu: bad free: {:#x} is not allocated", p.addr())));
/// assert_eq!(a.stats().nr_dealloc, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeError {
    /// The address passed in.
    pub addr: usize,
    /// What is wrong with it.
    pub kind: FreeErrorKind,
}

/// What is wrong, as the rest of a sentence whose subject is the address
/// ("0x1000 is not allocated ...").
impl core::fmt::Display for FreeErrorKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let what = match self {
            FreeErrorKind::NotPercpu => {
                "is not in any percpu chunk of this allocator (foreign pointer)"
            }
            FreeErrorKind::Static => "is in the static percpu region, which cannot be freed",
            FreeErrorKind::Misaligned => {
                "is not 4-byte aligned within its chunk (not an allocation start)"
            }
            FreeErrorKind::OutOfRange => "is outside the region its chunk serves",
            FreeErrorKind::NotAllocated => {
                "is not allocated (double free, or never allocated): its alloc_map bit is clear"
            }
            FreeErrorKind::Interior => {
                "points inside a live allocation, not at its start: no boundary bit there"
            }
        };
        f.write_str(what)
    }
}

/// `percpu: bad free: 0x... <what is wrong>`.
impl core::fmt::Display for FreeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "percpu: bad free: {:#x} {}", self.addr, self.kind)
    }
}

impl core::error::Error for FreeError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn display_names_percpu_the_address_and_the_fault() {
        let e = FreeError {
            addr: 0x1000,
            kind: FreeErrorKind::NotAllocated,
        };
        let s = e.to_string();
        assert!(
            s.starts_with("percpu: bad free: 0x1000 is not allocated"),
            "{s}"
        );
        let e: &dyn core::error::Error = &e;
        assert!(e.source().is_none());
        assert_eq!(
            PcpuError::ZeroSize.to_string(),
            "percpu: zero-sized request"
        );
    }
}
