//! Errors: refused requests ([`PcpuError`]) and refused frees
//! ([`FreeError`]: the address `addr` and a [`FreeErrorKind`], the shape of
//! buddy's `FreeError`). Both implement `Display` (naming "percpu") and
//! `core::error::Error`.

use crate::types::{MAX_ALLOC_SIZE, PAGE_SIZE};

/// Why a request was refused.
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
