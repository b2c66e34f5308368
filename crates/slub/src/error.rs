//! The errors of the cache paths: [`FreeError`] (a refused free) and
//! [`CacheBusy`] (a cache destroyed with objects still allocated). A base
//! module: the caches, kmalloc and the global allocator import it; the
//! crate root re-exports it. (Cache creation's [`CacheError`] lives with
//! the layout it validates.)
//!
//! [`CacheError`]: crate::layout::CacheError

use core::fmt;

/// Why a free was refused (the state is left untouched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// No allocated block of the page allocator contains the address.
    NotAllocated(usize),
    /// The block is not a slab (a page allocation or a large kmalloc).
    NotSlab(usize),
    /// The slab belongs to another cache (its name).
    WrongCache(usize, &'static str),
    /// Not the start of an object: the address and its offset in the slab.
    NotObjectStart(usize, usize),
    /// The object is at the head of the freelist it would be pushed onto:
    /// freed twice (the kernel's naive check).
    DoubleFree(usize),
}

impl FreeError {
    /// The address whose free was refused.
    pub fn addr(&self) -> usize {
        match *self {
            FreeError::NotAllocated(a)
            | FreeError::NotSlab(a)
            | FreeError::WrongCache(a, _)
            | FreeError::NotObjectStart(a, _)
            | FreeError::DoubleFree(a) => a,
        }
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FreeError::NotAllocated(a) => {
                write!(
                    f,
                    "slub: {a:#x} is not in any allocated block of this cache's page allocator"
                )
            }
            FreeError::NotSlab(a) => write!(f, "slub: {a:#x} is not in a slab"),
            FreeError::WrongCache(a, other) => {
                write!(f, "slub: {a:#x} is an object of another cache ({other})")
            }
            FreeError::NotObjectStart(a, off) => {
                write!(
                    f,
                    "slub: {a:#x} is not the start of an object (offset {off} in its slab)"
                )
            }
            FreeError::DoubleFree(a) => write!(f, "slub: double free of {a:#x}"),
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
