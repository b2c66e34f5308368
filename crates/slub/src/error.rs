//! The errors of the cache paths: [`FreeError`] (a refused free) and
//! [`CacheBusy`] (a cache destroyed with objects still allocated). A base
//! module: the caches, kmalloc and the global allocator import it; the
//! crate root re-exports it. (Cache creation's [`CacheError`] lives with
//! the layout it validates.)
//!
//! [`CacheError`]: crate::layout::CacheError

use core::fmt;

/// Why a free was refused (the state is left untouched): the address and
/// what was wrong with it, the shape of `buddy::FreeError` and
/// `pcp::BadFree`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeError {
    /// The address whose free was refused.
    pub addr: usize,
    /// What was wrong.
    pub kind: FreeErrorKind,
}

/// What was wrong with a refused free ([`FreeError::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeErrorKind {
    /// No allocated block of the page allocator contains the address.
    NotAllocated,
    /// The block is not a slab (a page allocation or a large kmalloc).
    NotSlab,
    /// The slab belongs to another cache (its name).
    WrongCache(&'static str),
    /// Not the start of an object: its offset in the slab.
    NotObjectStart(usize),
    /// The object is already free (at the head of the freelist it would be
    /// pushed onto, the kernel's naive check; or, hardened, marked free).
    DoubleFree,
}

impl FreeError {
    /// The error for `addr`.
    pub const fn new(addr: usize, kind: FreeErrorKind) -> FreeError {
        FreeError { addr, kind }
    }

    /// The address whose free was refused.
    pub fn addr(&self) -> usize {
        self.addr
    }
}

impl fmt::Display for FreeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FreeErrorKind::NotAllocated => {
                f.write_str("not in any allocated block of this cache's page allocator")
            }
            FreeErrorKind::NotSlab => f.write_str("not in a slab"),
            FreeErrorKind::WrongCache(other) => write!(f, "an object of another cache ({other})"),
            FreeErrorKind::NotObjectStart(off) => {
                write!(f, "not the start of an object (offset {off} in its slab)")
            }
            FreeErrorKind::DoubleFree => f.write_str("a double free"),
        }
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.addr;
        match self.kind {
            // The wording tests and users match on ("double free of").
            FreeErrorKind::DoubleFree => write!(f, "slub: double free of {a:#x}"),
            kind => write!(f, "slub: {a:#x} is {kind}"),
        }
    }
}

impl core::error::Error for FreeError {}

/// A cache still held objects when it was destroyed (they and their slabs
/// are left alone, as `kmem_cache_destroy` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheBusy {
    /// The cache's name.
    pub name: &'static str,
    /// Slabs still allocated.
    pub slabs: usize,
    /// Objects still allocated.
    pub objects: usize,
}

impl fmt::Display for CacheBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slub: kmem_cache_destroy {}: slab cache still has objects ({} in {} slabs)",
            self.name, self.objects, self.slabs
        )
    }
}

impl core::error::Error for CacheBusy {}
